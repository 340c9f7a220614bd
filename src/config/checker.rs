//! The violation collector every section's validation writes into.

use super::Violation;
use crate::windowing::time::parse_duration;

/// Collects violations while validating; a sink's section is checked into the same one
/// ([`super::SinkSection`]).
#[derive(Debug, Default)]
pub struct Checker {
    pub(super) violations: Vec<Violation>,
    pub(super) warnings: Vec<String>,
}

impl Checker {
    /// Whether no violation has been recorded.
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty()
    }

    /// Records that `field` breaks a rule.
    pub fn fail(&mut self, field: &str, message: impl Into<String>) {
        self.violations.push(Violation {
            field: field.to_string(),
            message: message.into(),
        });
    }

    /// Parses a duration, recording a violation; `positive` also rejects zero.
    pub fn duration(
        &mut self,
        field: &str,
        raw: Option<&str>,
        default: i64,
        positive: bool,
    ) -> Option<i64> {
        let Some(raw) = raw else { return Some(default) };
        match parse_duration(raw) {
            Ok(0) if positive => {
                self.fail(field, format!("must be longer than zero, got {raw:?}"));
                None
            }
            Ok(ms) => Some(ms),
            Err(e) => {
                self.fail(field, e.to_string());
                None
            }
        }
    }

    /// Parses a size in bytes (`"256MiB"`, `"1GB"`, `"65536"`; KB/MB/GB are powers of 1000,
    /// KiB/MiB/GiB of 1024), recording a violation when it is not one or is below `min`.
    pub(super) fn size(
        &mut self,
        field: &str,
        raw: Option<&str>,
        default: usize,
        min: usize,
    ) -> Option<usize> {
        let Some(raw) = raw else {
            return Some(default);
        };
        match parse_size(raw) {
            Some(n) if n >= min => Some(n),
            Some(_) => {
                self.fail(
                    field,
                    format!("{raw:?} is below the minimum of {min} bytes"),
                );
                None
            }
            None => {
                self.fail(
                    field,
                    format!("{raw:?} is not a size: write e.g. \"256MiB\", \"1GB\" or bytes"),
                );
                None
            }
        }
    }
}

/// A size in bytes: digits, then optionally B, KB, MB, GB (powers of 1000) or KiB, MiB, GiB
/// (powers of 1024), case-insensitive, spaces allowed between.
pub(super) fn parse_size(raw: &str) -> Option<usize> {
    let raw = raw.trim();
    let digits = raw.find(|c: char| !c.is_ascii_digit()).unwrap_or(raw.len());
    let n: usize = raw[..digits].parse().ok()?;
    let unit: usize = match raw[digits..].trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(unit)
}

impl std::fmt::Display for Checker {
    /// The violations, one per line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for v in &self.violations {
            writeln!(f, "{v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_in_decimal_and_binary_units() {
        assert_eq!(parse_size("256MiB"), Some(256 << 20));
        assert_eq!(parse_size("1 GB"), Some(1_000_000_000));
        assert_eq!(parse_size("64kib"), Some(65_536));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("12b"), Some(12));
        for bad in ["", "MB", "1.5GB", "-1MB", "10 TB", "99999999999999999999GB"] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
    }
}
