//! The PostgreSQL sink's section, `[sink.postgres]` (or `[postgres]`): what is written, checked
//! with the rest of the pipeline file ([`SECTION`]), and read again at start
//! ([`PostgresSpec::of`]).

use crate::config::{Checker, PipelineSpec, SinkSection};
use serde::Deserialize;

/// The section as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPostgres {
    /// A libpq connection string, e.g. `host=127.0.0.1 port=5432 user=tidemark dbname=results`;
    /// TLS as its `sslmode` and `sslrootcert` say (libpq's meanings).
    pub url: String,
    /// The table of panes (`name` or `schema.name`).
    pub table: String,
    /// The table of dead letters; without one, dead letters are not read.
    #[serde(default)]
    pub dead_letter_table: Option<String>,
    /// Create missing tables (default true).
    #[serde(default)]
    pub create_tables: Option<bool>,
    /// How often a batch is written (default `"1s"`).
    #[serde(default)]
    pub commit_interval: Option<String>,
    /// A batch is written early once it holds this many records (default 10,000).
    #[serde(default)]
    pub max_batch_records: Option<usize>,
}

/// The PostgreSQL sink's settings, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresSpec {
    /// The libpq connection string.
    pub url: String,
    /// The panes table.
    pub table: String,
    /// The dead-letter table, if dead letters are sunk.
    pub dead_letter_table: Option<String>,
    /// Whether missing tables are created.
    pub create_tables: bool,
    /// Batch interval in milliseconds.
    pub commit_interval: i64,
    /// Records that end a batch early.
    pub max_batch_records: usize,
    /// The panes table's key columns: `key` for a key of one part, one column per part (named
    /// after its alias or text) for several, none for no key.
    pub key_columns: Vec<String>,
}

/// The section's checks, for [`crate::config::RawConfig::validate_with`].
pub struct Section;

/// The entry the sink module registers.
pub const SECTION: Section = Section;

impl SinkSection for Section {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn check(&self, section: &toml::Table, field: &str, c: &mut Checker) {
        validate(section, field, Vec::new(), c);
    }
}

impl PostgresSpec {
    /// The sink's settings in a validated pipeline, if it has the section.
    pub fn of(spec: &PipelineSpec) -> Result<Option<PostgresSpec>, String> {
        let Some(section) = spec.sinks.get("postgres") else {
            return Ok(None);
        };
        let mut c = Checker::default();
        match validate(section, "sink.postgres", spec.key_columns.clone(), &mut c) {
            Some(pg) if c.is_clean() => Ok(Some(pg)),
            _ => Err(c.to_string()),
        }
    }
}

/// Checks the section, recording every violation under `field`; the settings, with the panes
/// table's `key_columns`, when it parses.
fn validate(
    section: &toml::Table,
    field: &str,
    key_columns: Vec<String>,
    c: &mut Checker,
) -> Option<PostgresSpec> {
    let p = match RawPostgres::deserialize(toml::Value::Table(section.clone())) {
        Ok(p) => p,
        Err(e) => {
            c.fail(field, e.to_string().trim().to_string());
            return None;
        }
    };
    let at = |key: &str| format!("{field}.{key}");
    if p.url.trim().is_empty() {
        c.fail(&at("url"), "must not be empty");
    } else if let Err(e) = super::tls::Target::parse(&p.url) {
        c.fail(&at("url"), e.to_string());
    }
    let ident = |key: &str, name: &str, c: &mut Checker| {
        let ok = !name.is_empty()
            && name.split('.').count() <= 2
            && name.split('.').all(|part| {
                part.chars()
                    .next()
                    .is_some_and(|ch| ch.is_ascii_alphabetic() || ch == '_')
                    && part
                        .chars()
                        .all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
                    && part.len() <= 63
            });
        if !ok {
            c.fail(
                &at(key),
                format!(
                    "{name:?} is not a table name: letters, digits and _, as name or schema.name"
                ),
            );
        }
    };
    ident("table", &p.table, c);
    if let Some(d) = &p.dead_letter_table {
        ident("dead_letter_table", d, c);
        if *d == p.table {
            c.fail(
                &at("dead_letter_table"),
                format!("must differ from {}", at("table")),
            );
        }
    }
    let interval = c.duration(
        &at("commit_interval"),
        p.commit_interval.as_deref(),
        1_000,
        true,
    );
    let max = p.max_batch_records.unwrap_or(10_000);
    if max == 0 {
        c.fail(&at("max_batch_records"), "must be at least 1");
    }
    Some(PostgresSpec {
        url: p.url,
        table: p.table,
        dead_letter_table: p.dead_letter_table,
        create_tables: p.create_tables.unwrap_or(true),
        commit_interval: interval.unwrap_or(1_000),
        max_batch_records: max,
        key_columns,
    })
}

#[cfg(test)]
mod tests {
    use super::PostgresSpec;
    use crate::config::{parse_raw, ConfigError, PipelineSpec};

    const BASE: &str = "name = \"p\"\n[input]\nkey = \"k\"\ntimestamp = \"t\"\n[window]\ntype = \"tumbling\"\nsize = \"1m\"\n[[aggregations]]\nname = \"n\"\nop = \"count\"\n";

    fn validate(text: &str) -> Result<PipelineSpec, Vec<String>> {
        let raw = parse_raw(text, Vec::new()).expect("parses");
        match raw.validate_with(&crate::sink::sections()) {
            Ok((spec, _)) => Ok(spec),
            Err(ConfigError::Invalid(v)) => Err(v.iter().map(|v| v.to_string()).collect()),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn the_section_and_its_earlier_name_give_the_same_settings() {
        let body = "url = \"host=db\"\ntable = \"panes\"\ncommit_interval = \"250ms\"\n";
        let new = validate(&format!("{BASE}[sink.postgres]\n{body}")).unwrap();
        let old = validate(&format!("{BASE}[postgres]\n{body}")).unwrap();
        let pg = PostgresSpec::of(&new).unwrap().unwrap();
        assert_eq!(pg, PostgresSpec::of(&old).unwrap().unwrap());
        assert_eq!(pg.commit_interval, 250);
        assert_eq!(pg.key_columns, ["key"]);
        let both =
            validate(&format!("{BASE}[postgres]\n{body}[sink.postgres]\n{body}")).unwrap_err();
        assert!(both.iter().any(|v| v.starts_with("postgres: ")), "{both:?}");
    }

    #[test]
    fn a_sinks_problems_come_with_every_other_problem_of_the_file() {
        let text = format!(
            "{}[sink.postgres]\nurl = \"\"\ntable = \"a b\"\ncommit_interval = \"soon\"\nmax_batch_records = 0\n[sink.elastic]\nurl = \"x\"\n",
            BASE.replace("size = \"1m\"", "size = \"0s\"")
        );
        let problems = validate(&text).unwrap_err();
        for field in [
            "window.size",
            "sink.postgres.url",
            "sink.postgres.table",
            "sink.postgres.commit_interval",
            "sink.postgres.max_batch_records",
            "sink.elastic",
        ] {
            assert!(
                problems
                    .iter()
                    .any(|p| p.starts_with(&format!("{field}: "))),
                "{field} not in {problems:?}"
            );
        }
        let unknown = validate(&format!(
            "{BASE}[sink.postgres]\nurl = \"x\"\ntable = \"t\"\nbogus = 1\n"
        ))
        .unwrap_err();
        assert!(
            unknown[0].starts_with("sink.postgres: unknown field `bogus`"),
            "{unknown:?}"
        );
    }

    #[test]
    fn a_key_of_several_parts_names_its_columns() {
        let text = BASE.replace(
            "key = \"k\"",
            "key = [\"page\", {expr = \"lower(country)\", alias = \"country\"}]",
        );
        let spec = validate(&format!(
            "{text}[sink.postgres]\nurl = \"x\"\ntable = \"t\"\n"
        ))
        .unwrap();
        let pg = PostgresSpec::of(&spec).unwrap().unwrap();
        assert_eq!(pg.key_columns, ["page", "country"]);
    }
}
