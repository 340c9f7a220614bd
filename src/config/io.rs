//! Validation of the input and output sections: field paths, Avro input with its reader schema,
//! the output format, and the Schema Registry.

use super::checker::Checker;
use super::{InputSpec, RawConfig};
use std::collections::BTreeMap;
use std::path::Path;

/// returns its text and the parsed schema.
pub(super) fn schema_file(
    cfg: &RawConfig,
    field: &str,
    path: &str,
    c: &mut Checker,
) -> Option<(String, apache_avro::Schema)> {
    let full = match &cfg.base_dir {
        Some(dir) if Path::new(path).is_relative() => dir.join(path),
        _ => Path::new(path).to_path_buf(),
    };
    match std::fs::read_to_string(&full) {
        Err(e) => {
            c.fail(field, format!("cannot read {}: {e}", full.display()));
            None
        }
        Ok(text) => match crate::input::avro::parse_schema(path, &text) {
            Ok(schema) => Some((text, schema)),
            Err(e) => {
                c.fail(field, e.to_string());
                None
            }
        },
    }
}

/// `Some(None)` for JSON input, `Some(Some(_))` for valid Avro input, `None` after violations.
pub(super) fn validate_avro_input(
    cfg: &RawConfig,
    spec: Option<&InputSpec>,
    c: &mut Checker,
) -> Option<Option<crate::input::avro::AvroInputSpec>> {
    use crate::input::avro::{AvroInputSpec, Framing};
    let i = &cfg.input;
    match i.format.as_str() {
        "json" => {
            for (field, set) in [
                ("input.schema", i.schema.is_some()),
                ("input.writer_schema", i.writer_schema.is_some()),
                ("input.framing", i.framing.is_some()),
                ("input.schema_ids", !i.schema_ids.is_empty()),
            ] {
                if set {
                    c.fail(field, "applies to format = \"avro\" only");
                }
            }
            return Some(None);
        }
        "avro" => {}
        other => {
            c.fail(
                "input.format",
                format!("unsupported format {other:?}: \"json\" or \"avro\""),
            );
            return None;
        }
    }
    let before = c.violations.len();
    let framing = match i.framing.as_deref() {
        None => Some(Framing::Plain),
        Some(f) => Framing::parse(f).or_else(|| {
            c.fail(
                "input.framing",
                format!("must be \"plain\" or \"confluent\", got {f:?}"),
            );
            None
        }),
    };
    let reader = match &i.schema {
        None => {
            c.fail(
                "input.schema",
                "format = \"avro\" needs a reader schema file",
            );
            None
        }
        Some(p) => schema_file(cfg, "input.schema", p, c),
    };
    let reader = reader.map(|(text, schema)| {
        for problem in spec.map_or(Vec::new(), |s| crate::input::avro::check_paths(&schema, s)) {
            c.fail("input.schema", problem);
        }
        text
    });
    let writer = i
        .writer_schema
        .as_ref()
        .and_then(|p| schema_file(cfg, "input.writer_schema", p, c))
        .map(|(text, _)| text);
    let mut ids = BTreeMap::new();
    for (id, path) in &i.schema_ids {
        let field = format!("input.schema_ids.{id}");
        match id.parse::<u32>() {
            Err(_) => c.fail(&field, "schema ids are unsigned 32-bit integers"),
            Ok(n) => {
                if let Some((text, _)) = schema_file(cfg, &field, path, c) {
                    ids.insert(n, text);
                }
            }
        }
    }
    if framing == Some(Framing::Confluent)
        && cfg.schema_registry.is_none()
        && i.schema_ids.is_empty()
    {
        c.fail(
            "input.framing",
            "confluent framing needs [schema_registry] url or input.schema_ids",
        );
    }
    if framing == Some(Framing::Plain) && !i.schema_ids.is_empty() {
        c.fail(
            "input.schema_ids",
            "applies to framing = \"confluent\" only",
        );
    }
    if c.violations.len() > before {
        return None;
    }
    Some(Some(AvroInputSpec {
        reader: reader?,
        writer,
        framing: framing?,
        ids,
    }))
}

pub(super) fn validate_output(
    cfg: &RawConfig,
    c: &mut Checker,
) -> Option<crate::format::OutputFormat> {
    use crate::format::OutputFormat;
    use crate::input::avro::Framing;
    let Some(o) = &cfg.output else {
        return Some(OutputFormat::Json);
    };
    match o.format.as_deref() {
        None | Some("json") => {
            if o.framing.is_some() || o.pane_schema_id.is_some() {
                c.fail("output.framing", "applies to format = \"avro\" only");
            }
            Some(OutputFormat::Json)
        }
        Some("avro") => {
            let framing = match o.framing.as_deref() {
                None => Framing::Plain,
                Some(f) => match Framing::parse(f) {
                    Some(f) => f,
                    None => {
                        c.fail(
                            "output.framing",
                            format!("must be \"plain\" or \"confluent\", got {f:?}"),
                        );
                        return None;
                    }
                },
            };
            if framing == Framing::Confluent
                && cfg.schema_registry.is_none()
                && (o.pane_schema_id.is_none() || o.dead_letter_schema_id.is_none())
            {
                c.fail(
                    "output.framing",
                    "confluent framing needs [schema_registry] url, or both output.pane_schema_id and output.dead_letter_schema_id",
                );
                return None;
            }
            Some(OutputFormat::Avro {
                framing,
                pane_schema_id: o.pane_schema_id,
                dead_letter_schema_id: o.dead_letter_schema_id,
            })
        }
        Some(other) => {
            c.fail(
                "output.format",
                format!("unsupported format {other:?}: \"json\" or \"avro\""),
            );
            None
        }
    }
}

/// `[schema_registry]`: its base URL, TLS and basic authentication.
pub(super) fn validate_registry(cfg: &RawConfig, c: &mut Checker) -> Option<super::RegistrySpec> {
    let r = cfg.schema_registry.as_ref()?;
    let https = r.url.starts_with("https://");
    if !https && !r.url.starts_with("http://") {
        c.fail(
            "schema_registry.url",
            format!("{:?} must be an http:// or https:// URL", r.url),
        );
    }
    let ca_location = r.ca_location.as_ref().map(std::path::PathBuf::from);
    match &ca_location {
        Some(ca) if !https => c.fail(
            "schema_registry.ca_location",
            format!("{} is given but the URL is not https://", ca.display()),
        ),
        Some(ca) if !ca.is_file() => c.fail(
            "schema_registry.ca_location",
            format!("{} is not a readable file", ca.display()),
        ),
        _ => {}
    }
    let password = r
        .password
        .as_deref()
        .and_then(|p| super::kafka::resolve_value("schema_registry.password", p, c));
    let basic = match (&r.username, password) {
        (Some(user), Some(password)) => {
            Some((user.clone(), crate::kafka::secure::Secret::new(password)))
        }
        (None, None) => None,
        (Some(_), None) if r.password.is_none() => {
            c.fail("schema_registry.password", "is needed with a username");
            None
        }
        (None, Some(_)) => {
            c.fail("schema_registry.username", "is needed with a password");
            None
        }
        (Some(_), None) => None,
    };
    Some(super::RegistrySpec {
        url: r.url.clone(),
        access: crate::http::Access { ca_location, basic },
    })
}

/// `[metrics]`: the address `tidemark run` serves metrics and health on.
pub(super) fn validate_metrics(cfg: &RawConfig, c: &mut Checker) -> Option<std::net::SocketAddr> {
    cfg.metrics.as_ref().and_then(|m| {
        m.address
            .parse::<std::net::SocketAddr>()
            .map_err(|_| {
                c.fail(
                    "metrics.address",
                    format!("{:?} is not an IP:port address", m.address),
                )
            })
            .ok()
    })
}
