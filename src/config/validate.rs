//! `RawConfig::validate`: runs every section's checks in the order the file reads, collects every
//! violation, and assembles the typed [`PipelineSpec`] only when there are none.

use super::checker::Checker;
use super::{ConfigError, PipelineSpec, RawConfig, SinkSection};
use crate::format::OutputFormat;

impl RawConfig {
    /// Checks every rule and returns the typed pipeline with warnings, or every violation; the
    /// sinks' sections are kept unchecked (see [`RawConfig::validate_with`]).
    pub fn validate(&self) -> Result<(PipelineSpec, Vec<String>), ConfigError> {
        self.validate_with(&[])
    }

    /// As [`RawConfig::validate`], with each sink section checked by the entry of `sinks` of its
    /// name, and a section of any other name a violation.
    pub fn validate_with(
        &self,
        sinks: &[&dyn SinkSection],
    ) -> Result<(PipelineSpec, Vec<String>), ConfigError> {
        let mut c = Checker::default();
        if self.name.trim().is_empty() {
            c.fail("name", "must not be empty");
        }
        let window = super::engine::validate_window(self, &mut c);
        let timing = super::engine::validate_timing(self, &mut c);
        let record_bytes = super::kafka::record_bytes(self, &mut c);
        let (mut aggregations, mut fields) =
            super::engine::validate_aggregations(self, record_bytes, &mut c);
        let (rows, row_fields) = super::rows::validate_rows(self, &mut c);
        if rows.is_some() {
            (aggregations, fields) = (Vec::new(), row_fields);
        }
        super::engine::validate_trigger_for_window(self, window, timing.as_ref(), &mut c);
        let having = super::engine::validate_having(self, &aggregations, &mut c);
        let kafka = self
            .kafka
            .as_ref()
            .map(|k| super::kafka::validate_kafka(self, k, &mut c));
        let input = super::input::validate_input(self, &fields, &mut c);
        let avro_input = super::io::validate_avro_input(self, input.as_ref(), &mut c);
        let output_format = super::io::validate_output(self, &mut c);
        let schema_registry = super::io::validate_registry(self, &mut c);
        let metrics_address = super::io::validate_metrics(self, &mut c);
        let sink_sections = super::sink::validate_sinks(self, sinks, &mut c);
        // The key's columns in a table of panes; a name that collides with another column is a
        // violation only when a sink writes such a table.
        let key_columns = match input.as_ref() {
            Some(input) if !sink_sections.is_empty() => {
                super::input::key_columns(self, input, &mut c)
            }
            Some(input) => super::input::key_columns(self, input, &mut Checker::default()),
            None => Vec::new(),
        };
        if !c.violations.is_empty() {
            return Err(ConfigError::Invalid(c.violations));
        }
        let (Some(window), Some(timing), Some(input)) = (window, timing, input) else {
            unreachable!("every None above recorded a violation")
        };
        let mut engine = timing.into_engine(self.name.clone(), window, aggregations);
        engine.having = having;
        let kafka = kafka.flatten();
        if let Some(k) = &kafka {
            engine.cache.bytes = k.cache_memory;
        }
        if self.kafka.as_ref().and_then(|k| k.combine) == Some(true) {
            if let Some(why) = crate::windowing::fold::unsupported(&engine) {
                c.warnings.push(format!(
                    "kafka.combine: {why}, so records cross the repartition hop one by one, not as partial aggregates"
                ));
            }
        }
        Ok((
            PipelineSpec {
                input,
                engine,
                rows,
                kafka,
                metrics_address,
                avro_input: avro_input.flatten(),
                output_format: output_format.unwrap_or(OutputFormat::Json),
                schema_registry,
                sinks: sink_sections,
                key_columns,
                record_bytes,
            },
            c.warnings,
        ))
    }
}
