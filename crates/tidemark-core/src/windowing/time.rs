//! Event-time arithmetic: millisecond timestamps, fixed-length durations and floor alignment.
//!
//! Every time in tidemark is an `i64` count of milliseconds since the Unix epoch. Durations are fixed
//! lengths written like `"250ms"`, `"30s"`, `"10m"`, `"2h"`, `"1d"` or a sum such as `"1h30m"`. Calendar
//! units (months, years) have no fixed length and are rejected.

use std::fmt;

/// Milliseconds since the Unix epoch (event time) or on the processing-time clock.
pub type Millis = i64;

/// The largest duration tidemark accepts: 10,000 days. Bounding durations (and timestamps, see
/// [`MAX_ABS_TIMESTAMP`]) keeps every window computation far away from `i64` overflow.
pub const MAX_DURATION_MS: i64 = 10_000 * 86_400_000;

/// Timestamps further than this from the epoch (about ±31,700 years) are rejected as malformed.
pub const MAX_ABS_TIMESTAMP: i64 = 1_000_000_000_000_000;

/// Why a duration string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The string was empty.
    #[error("empty duration")]
    Empty,
    /// The duration was negative.
    #[error("negative duration {0:?}: durations are never negative")]
    Negative(String),
    /// A calendar unit with no fixed length was used.
    #[error(
        "calendar unit in {0:?}: months and years have no fixed length; use days (e.g. \"30d\")"
    )]
    Calendar(String),
    /// `M`, which means minutes to some and months to others (Spark, Java's patterns).
    #[error(
        "ambiguous unit \"M\" in {0:?}: write \"m\" or \"min\" for minutes; months have no fixed length (use days, e.g. \"30d\")"
    )]
    Ambiguous(String),
    /// A unit that tidemark does not know.
    #[error("unknown unit {unit:?} in {input:?}: use ms, s, m (or min), h or d, or their names (seconds, minutes, ...)")]
    UnknownUnit {
        /// The whole input string.
        input: String,
        /// The unit that was not understood.
        unit: String,
    },
    /// A number was missing, malformed or the unit was missing.
    #[error(
        "malformed duration {0:?}: write a number and a unit, e.g. \"250ms\", \"30s\", \"1h30m\""
    )]
    Malformed(String),
    /// The duration exceeds [`MAX_DURATION_MS`].
    #[error("duration {0:?} is longer than the maximum of 10000d")]
    TooLong(String),
}

/// Parses a fixed-length duration such as `"250ms"`, `"10m"`, `"1h30m"` or `"10 minutes"` into
/// milliseconds. Units are case-insensitive, except `M`, which is refused as ambiguous (minutes
/// or months); months and years are refused as calendar units.
pub fn parse_duration(input: &str) -> Result<i64, DurationError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    if s.starts_with('-') {
        return Err(DurationError::Negative(input.to_string()));
    }
    let s = s.strip_prefix('+').unwrap_or(s);
    let bytes = s.as_bytes();
    let mut i = 0;
    let mut total: i64 = 0;
    while i < bytes.len() {
        let num_start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if i == num_start {
            return Err(DurationError::Malformed(input.to_string()));
        }
        let number: i64 = s[num_start..i]
            .parse()
            .map_err(|_| DurationError::TooLong(input.to_string()))?;
        while i < bytes.len() && bytes[i] == b' ' {
            i += 1;
        }
        let unit_start = i;
        while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
            i += 1;
        }
        let unit = &s[unit_start..i];
        while i < bytes.len() && bytes[i] == b' ' {
            i += 1;
        }
        if unit == "M" {
            return Err(DurationError::Ambiguous(input.to_string()));
        }
        let factor: i64 = match unit.to_ascii_lowercase().as_str() {
            "ms" | "millisecond" | "milliseconds" => 1,
            "s" | "sec" | "secs" | "second" | "seconds" => 1_000,
            "m" | "min" | "mins" | "minute" | "minutes" => 60_000,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3_600_000,
            "d" | "day" | "days" => 86_400_000,
            "" => return Err(DurationError::Malformed(input.to_string())),
            "mo" | "mon" | "month" | "months" | "y" | "yr" | "year" | "years" => {
                return Err(DurationError::Calendar(input.to_string()))
            }
            _ => {
                return Err(DurationError::UnknownUnit {
                    input: input.to_string(),
                    unit: unit.to_string(),
                })
            }
        };
        total = number
            .checked_mul(factor)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(|| DurationError::TooLong(input.to_string()))?;
        if total > MAX_DURATION_MS {
            return Err(DurationError::TooLong(input.to_string()));
        }
    }
    Ok(total)
}

/// Formats milliseconds the way [`parse_duration`] reads them, using the largest exact unit.
pub fn format_duration(ms: i64) -> String {
    const UNITS: [(i64, &str); 4] = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
    ];
    for (factor, unit) in UNITS {
        if ms != 0 && ms % factor == 0 {
            return format!("{}{unit}", ms / factor);
        }
    }
    format!("{ms}ms")
}

/// Rounds `t` down to the grid `k * step + offset`, correctly for negative values.
///
/// `step` must be positive.
pub fn floor_align(t: Millis, step: i64, offset: i64) -> Millis {
    (t - offset).div_euclid(step) * step + offset
}

/// Rounds `t` up to the grid `k * step + offset`.
pub fn ceil_align(t: Millis, step: i64, offset: i64) -> Millis {
    let f = floor_align(t, step, offset);
    if f == t {
        f
    } else {
        f + step
    }
}

/// Greatest common divisor of two positive numbers.
pub fn gcd(mut a: i64, mut b: i64) -> i64 {
    while b != 0 {
        let r = a % b;
        a = b;
        b = r;
    }
    a.abs()
}

/// A watermark or clock value printed for people: `-inf`, `+inf` or the number.
pub struct DisplayTime(pub Millis);

impl fmt::Display for DisplayTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            i64::MIN => f.write_str("-inf"),
            i64::MAX => f.write_str("+inf"),
            t => write!(f, "{t}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_sums() {
        assert_eq!(parse_duration("250ms"), Ok(250));
        assert_eq!(parse_duration("30s"), Ok(30_000));
        assert_eq!(parse_duration("10m"), Ok(600_000));
        assert_eq!(parse_duration("2h"), Ok(7_200_000));
        assert_eq!(parse_duration("1d"), Ok(86_400_000));
        assert_eq!(parse_duration("1h30m"), Ok(5_400_000));
        assert_eq!(parse_duration("0s"), Ok(0));
        assert_eq!(parse_duration("10 minutes"), Ok(600_000));
        assert_eq!(parse_duration("1 hour 30 mins"), Ok(5_400_000));
        assert_eq!(parse_duration("6 hours"), Ok(21_600_000));
        assert_eq!(parse_duration("2 Seconds"), Ok(2_000));
        assert_eq!(parse_duration("1MIN"), Ok(60_000));
    }

    #[test]
    fn refuses_m_in_capitals_and_calendar_units_written_in_words() {
        let e = parse_duration("1M").unwrap_err();
        assert_eq!(e, DurationError::Ambiguous("1M".into()));
        assert!(e.to_string().contains("\"min\" for minutes"), "{e}");
        assert_eq!(
            parse_duration("1 month"),
            Err(DurationError::Calendar("1 month".into()))
        );
        assert_eq!(
            parse_duration("2 years"),
            Err(DurationError::Calendar("2 years".into()))
        );
    }

    #[test]
    fn rejects_bad_durations() {
        assert!(matches!(
            parse_duration("-5s"),
            Err(DurationError::Negative(_))
        ));
        assert!(matches!(
            parse_duration("1mo"),
            Err(DurationError::Calendar(_))
        ));
        assert!(matches!(
            parse_duration("2years"),
            Err(DurationError::Calendar(_))
        ));
        assert!(matches!(
            parse_duration("5w"),
            Err(DurationError::UnknownUnit { .. })
        ));
        assert!(matches!(
            parse_duration("10"),
            Err(DurationError::Malformed(_))
        ));
        assert!(matches!(
            parse_duration("s"),
            Err(DurationError::Malformed(_))
        ));
        assert!(matches!(parse_duration(""), Err(DurationError::Empty)));
        assert!(matches!(
            parse_duration("99999999d"),
            Err(DurationError::TooLong(_))
        ));
        assert!(matches!(
            parse_duration("99999999999999999999ms"),
            Err(DurationError::TooLong(_))
        ));
    }

    #[test]
    fn floor_alignment_handles_negative_times() {
        assert_eq!(floor_align(-1, 10, 0), -10);
        assert_eq!(floor_align(-10, 10, 0), -10);
        assert_eq!(floor_align(9, 10, 0), 0);
        assert_eq!(floor_align(12, 10, 5), 5);
        assert_eq!(floor_align(4, 10, 5), -5);
        assert_eq!(ceil_align(11, 10, 0), 20);
        assert_eq!(ceil_align(10, 10, 0), 10);
    }

    #[test]
    fn formats_round_trip() {
        for ms in [1, 250, 1000, 60_000, 5_400_000, 86_400_000] {
            assert_eq!(parse_duration(&format_duration(ms)), Ok(ms));
        }
    }
}
