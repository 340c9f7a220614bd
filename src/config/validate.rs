//! `RawConfig::validate`: runs every section's checks in the order the file reads, collects every
//! violation, and assembles the typed [`PipelineSpec`] only when there are none.

use super::checker::Checker;
use super::{ConfigError, PipelineSpec, RawConfig};
use crate::format::OutputFormat;

impl RawConfig {
    /// Checks every rule and returns the typed pipeline with warnings, or every violation.
    pub fn validate(&self) -> Result<(PipelineSpec, Vec<String>), ConfigError> {
        let mut c = Checker::default();
        if self.name.trim().is_empty() {
            c.fail("name", "must not be empty");
        }
        let window = self.validate_window(&mut c);
        let timing = self.validate_timing(&mut c);
        let (aggregations, fields) = self.validate_aggregations(&mut c);
        self.validate_trigger_for_window(window, timing.as_ref(), &mut c);
        let kafka = self.kafka.as_ref().map(|k| self.validate_kafka(k, &mut c));
        let input = self.validate_input(&fields, &mut c);
        let avro_input = self.validate_avro_input(input.as_ref(), &mut c);
        let output_format = self.validate_output(&mut c);
        let schema_registry = self.validate_registry(&mut c);
        let metrics_address = self.validate_metrics(&mut c);
        let mut postgres = self.validate_postgres(&mut c);
        if let (Some(pg), Some(input)) = (postgres.as_mut(), input.as_ref()) {
            pg.key_columns = self.key_columns(input, &mut c);
        }
        if !c.violations.is_empty() {
            return Err(ConfigError::Invalid(c.violations));
        }
        let (Some(window), Some(timing), Some(input)) = (window, timing, input) else {
            unreachable!("every None above recorded a violation")
        };
        let engine = timing.into_engine(self.name.clone(), window, aggregations);
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
                kafka: kafka.flatten(),
                metrics_address,
                avro_input: avro_input.flatten(),
                output_format: output_format.unwrap_or(OutputFormat::Json),
                schema_registry,
                postgres,
            },
            c.warnings,
        ))
    }
}
