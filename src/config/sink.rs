//! The sinks' sections: `[sink.NAME]`, and `[postgres]` as the PostgreSQL sink's earlier name.
//!
//! The configuration does not know any sink: each sink checks its own section through
//! [`SinkSection`], and the sink module lists them. Validation takes that list, so a section's
//! problems are reported with every other problem of the file.

use super::checker::Checker;
use super::RawConfig;
use std::collections::BTreeMap;

/// A sink's section of the pipeline file, checked by the sink.
pub trait SinkSection: Sync {
    /// The sink's name: its section is `[sink.NAME]`.
    fn name(&self) -> &'static str;
    /// Checks the section, recording every violation in `c`, each under `field` (the section's
    /// dotted name as written) and the key.
    fn check(&self, section: &toml::Table, field: &str, c: &mut Checker);
}

/// The sinks' sections by name, with the dotted name each was written under; checked by the
/// matching entry of `sinks` (a name none of them has is a violation, unless `sinks` is
/// empty: then the sections are kept unchecked, for callers that run no sink).
pub(super) fn validate_sinks(
    cfg: &RawConfig,
    sinks: &[&dyn SinkSection],
    c: &mut Checker,
) -> BTreeMap<String, toml::Table> {
    let mut out: BTreeMap<String, (String, toml::Table)> = BTreeMap::new();
    for (name, value) in cfg.sink.iter().flatten() {
        match value.as_table() {
            Some(t) => {
                out.insert(name.clone(), (format!("sink.{name}"), t.clone()));
            }
            None => c.fail(&format!("sink.{name}"), "must be a table"),
        }
    }
    if let Some(t) = &cfg.postgres {
        if out.contains_key("postgres") {
            c.fail(
                "postgres",
                "the same sink as [sink.postgres]: keep one of the two",
            );
        } else {
            out.insert("postgres".into(), ("postgres".into(), t.clone()));
        }
    }
    if !sinks.is_empty() {
        for (name, (field, table)) in &out {
            match sinks.iter().find(|s| s.name() == name) {
                Some(s) => s.check(table, field, c),
                None => c.fail(
                    field,
                    format!(
                        "no sink is called {name:?} (there are: {})",
                        sinks
                            .iter()
                            .map(|s| s.name())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ),
            }
        }
    }
    out.into_iter().map(|(n, (_, t))| (n, t)).collect()
}
