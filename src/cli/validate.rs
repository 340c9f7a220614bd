//! `tidemark validate`: checks a pipeline file and prints every problem found.

use super::PipelineArgs;
use clap::Args;

/// Check a pipeline file and print every problem found.
#[derive(Debug, Args)]
pub struct Validate {
    #[command(flatten)]
    pipeline: PipelineArgs,
}

impl Validate {
    /// Prints the warnings and `ok` (exit status 0), or every violation (exit status 2).
    pub fn execute(self) -> anyhow::Result<i32> {
        let path = self.pipeline.path().display();
        match self.pipeline.load() {
            Ok(crate::config::Loaded { spec, warnings, .. }) => {
                for w in &warnings {
                    println!("warning: {w}");
                }
                if let Some(k) = &spec.kafka {
                    let key = spec.input.key_text();
                    if spec.input.key.is_empty() {
                        println!(
                            "note: the pipeline has no key: tidemark run sends every record of {} to one partition of the repartition topic {:?}, so one member windows them all",
                            k.input_topics.join(", "),
                            k.repartition_topic,
                        );
                    } else if k.repartition {
                        println!(
                            "note: tidemark run groups {} by {key} through the repartition topic {:?} ({} partitions: kafka.repartition_partitions, or the largest input's count)",
                            k.input_topics.join(", "),
                            k.repartition_topic,
                            k.repartition_partitions
                                .map_or("as many".to_string(), |n| n.to_string())
                        );
                    } else {
                        println!(
                            "note: tidemark run groups {} by {key} where the records are: each record's Kafka key must equal it (kafka.repartition = false), or the record is dead-lettered as key_mismatch",
                            k.input_topics.join(", ")
                        );
                    }
                }
                println!("{path}: ok (pipeline {:?})", spec.engine.name);
                Ok(0)
            }
            Err(e) => {
                eprintln!("{path}: {e}");
                Ok(2)
            }
        }
    }
}
