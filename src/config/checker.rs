//! The violation collector every section's validation writes into.

use super::Violation;
use crate::windowing::time::parse_duration;

/// Collects violations while validating.
#[derive(Debug, Default)]
pub(super) struct Checker {
    pub(super) violations: Vec<Violation>,
    pub(super) warnings: Vec<String>,
}

impl Checker {
    pub(super) fn fail(&mut self, field: &str, message: impl Into<String>) {
        self.violations.push(Violation {
            field: field.to_string(),
            message: message.into(),
        });
    }

    /// Parses a duration, recording a violation; `positive` also rejects zero.
    pub(super) fn duration(
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

    pub(super) fn path(&mut self, field: &str, raw: &str) -> Vec<String> {
        let segs: Vec<String> = raw.split('.').map(str::to_string).collect();
        if raw.is_empty() || segs.iter().any(|s| s.is_empty()) {
            self.fail(field, format!("field path {raw:?} has an empty segment"));
        }
        segs
    }
}
