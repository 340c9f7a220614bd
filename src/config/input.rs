//! Validation of `[input]`'s expressions: the filter, the key parts, the event time, and the
//! aggregations' inputs, compiled into one [`InputSpec`] that shares its field slots.

use super::checker::Checker;
use super::{RawConfig, RawKey, RawKeyPart};
use crate::expr::{self, Paths};
use crate::input::{
    Compiled, FieldInput, InputSpec, KeyPart, TimeSpec, TimeUnit, RECORD_TIMESTAMP,
};

/// `[input]` filter, key, timestamp and time, with the aggregations' input texts `fields`:
/// the compiled [`InputSpec`], or `None` after recording every problem.
pub(super) fn validate_input(
    cfg: &RawConfig,
    fields: &[super::engine::FieldRead],
    c: &mut Checker,
) -> Option<InputSpec> {
    let mut paths = Paths::default();
    let mut ok = true;
    let mut compile = |field: &str, text: &str, c: &mut Checker| -> Option<Compiled> {
        if text.trim().is_empty() {
            c.fail(field, "must not be empty");
            ok = false;
            return None;
        }
        match expr::parse(text, &mut paths) {
            Ok(e) => Some(Compiled {
                text: text.trim().to_string(),
                expr: e,
            }),
            Err(e) => {
                c.fail(field, e.to_string());
                ok = false;
                None
            }
        }
    };
    let input = &cfg.input;
    let filter = input
        .filter
        .as_ref()
        .and_then(|f| compile("input.filter", f, c));
    let no_key = RawKey::Parts(Vec::new());
    let raw_key = match &input.key {
        Some(k) if !cfg.columns.is_empty() && !matches!(k, RawKey::Parts(p) if p.is_empty()) => {
            c.fail(
                "input.key",
                "a pipeline of [[columns]] groups nothing: each row keeps its record's Kafka key; remove the key",
            );
            &no_key
        }
        Some(k) => k,
        None if cfg.columns.is_empty() => {
            c.fail(
                "input.key",
                "required: an expression, a list of them, or [] for one group per window",
            );
            &no_key
        }
        None => &no_key,
    };
    let raw_parts: Vec<(String, &str, Option<&str>)> = match raw_key {
        RawKey::One(text) => vec![("input.key".to_string(), text.as_str(), None)],
        RawKey::Parts(parts) => parts
            .iter()
            .enumerate()
            .map(|(i, p)| match p {
                RawKeyPart::Expr(t) => (format!("input.key[{i}]"), t.as_str(), None),
                RawKeyPart::Aliased { expr, alias } => (
                    format!("input.key[{i}]"),
                    expr.as_str(),
                    Some(alias.as_str()),
                ),
            })
            .collect(),
    };
    let mut key = Vec::new();
    for (field, text, alias) in &raw_parts {
        if let Some(a) = alias {
            if a.trim().is_empty() {
                c.fail(&format!("{field}.alias"), "must not be empty");
            }
        }
        if let Some(value) = compile(field, text, c) {
            let name = alias.map_or_else(|| value.text.clone(), str::to_string);
            if key.iter().any(|p: &KeyPart| p.name == name) {
                c.fail(field, format!("duplicate key part {name:?}"));
            }
            key.push(KeyPart { name, value });
        }
    }
    let repartition = cfg
        .kafka
        .as_ref()
        .is_none_or(|k| k.repartition.unwrap_or(true));
    if !repartition && raw_parts.len() != 1 && cfg.columns.is_empty() {
        c.fail(
            "input.key",
            "kafka.repartition = false needs a key of exactly one part: the Kafka record key must equal it",
        );
    }
    let processing = match input.time.as_deref() {
        None | Some("event") => false,
        Some("processing") => true,
        Some(other) => {
            c.fail(
                "input.time",
                format!("unknown time {other:?}: use \"event\" or \"processing\""),
            );
            false
        }
    };
    let time = match (processing, input.timestamp.as_deref()) {
        (true, None) => Some(TimeSpec::Processing),
        (true, Some(_)) => {
            c.fail(
                "input.timestamp",
                "time = \"processing\" windows records by arrival: remove the timestamp",
            );
            None
        }
        // A pipeline of rows needs no event time: it waits for no watermark.
        (false, None) if !cfg.columns.is_empty() => Some(TimeSpec::Processing),
        (false, None) => {
            c.fail(
                "input.timestamp",
                format!("required: a field or expression, or {RECORD_TIMESTAMP:?} (or set time = \"processing\")"),
            );
            None
        }
        (false, Some(t)) if t.trim() == RECORD_TIMESTAMP => Some(TimeSpec::RecordTimestamp),
        (false, Some(t)) => compile("input.timestamp", t, c).map(TimeSpec::Field),
    };
    let time_unit = match input.timestamp_unit.as_deref().map(str::trim) {
        None => TimeUnit::Millis,
        Some(name) => match TimeUnit::parse(name) {
            Some(unit) if matches!(time, Some(TimeSpec::Field(_))) => unit,
            Some(_) => {
                c.fail(
                    "input.timestamp_unit",
                    "applies to a timestamp field or expression only: remove it",
                );
                TimeUnit::Millis
            }
            None => {
                c.fail(
                    "input.timestamp_unit",
                    format!("unknown unit {name:?}: use \"s\", \"ms\", \"us\" or \"ns\""),
                );
                TimeUnit::Millis
            }
        },
    };
    let mut compiled_fields = Vec::new();
    for (i, read) in fields.iter().enumerate() {
        let text = &read.text;
        let field = if cfg.columns.is_empty() {
            cfg.aggregations
                .iter()
                .position(|a| a.field.as_deref().map(str::trim) == Some(text.as_str()))
                .map_or(format!("aggregations.field[{i}]"), |j| {
                    format!("aggregations[{j}].field")
                })
        } else {
            format!("columns[{i}].expr")
        };
        if let Some(value) = compile(&field, text, c) {
            compiled_fields.push(FieldInput {
                value,
                numeric: read.numeric,
                longest: read.longest,
            });
        }
    }
    if !ok {
        return None;
    }
    Some(InputSpec {
        paths,
        filter,
        key,
        time: time?,
        time_unit,
        fields: compiled_fields,
    })
}

/// The PostgreSQL panes table's key columns for `input`'s key: `key` for one part (the
/// column it always had), one per part for several (named after its alias or text), none
/// for no key. A name that is taken by a pane column or an aggregation is a violation.
pub(super) fn key_columns(cfg: &RawConfig, input: &InputSpec, c: &mut Checker) -> Vec<String> {
    match input.key.as_slice() {
        [] => Vec::new(),
        [_] => vec!["key".to_string()],
        parts => {
            let taken = |n: &str| {
                crate::format::pane::RESERVED_FIELDS.contains(&n)
                    || n == "updated_at"
                    || cfg.aggregations.iter().any(|a| a.name == n)
            };
            for (i, p) in parts.iter().enumerate() {
                if taken(&p.name) {
                    c.fail(
                        &format!("input.key[{i}]"),
                        format!(
                            "{:?} is a column of the PostgreSQL panes table already: give the part an alias",
                            p.name
                        ),
                    );
                }
            }
            parts.iter().map(|p| p.name.clone()).collect()
        }
    }
}
