//! `tidemark explain`: prints the plan a pipeline file builds, stage by stage, as `simulate` and
//! `run` execute it.

use crate::config::{self, PipelineSpec};
use crate::input::TimeSpec;
use crate::windowing::assigner::WindowKind;
use crate::windowing::trigger::{Accumulation, LateFiring};
use clap::Args;
use std::fmt::Write as _;

/// Print the plan a pipeline file builds.
#[derive(Debug, Args)]
pub struct Explain {
    #[command(flatten)]
    pipeline: super::PipelineArgs,
}

impl Explain {
    /// Prints the plan (exit status 0), or every violation (exit status 2). For a SQL file it
    /// also prints the query's columns and the pipeline file the query compiles into.
    pub fn execute(self) -> anyhow::Result<i32> {
        match self.pipeline.load() {
            Ok(config::Loaded {
                spec,
                warnings,
                sql,
            }) => {
                print!("{}", plan(&spec));
                for w in &warnings {
                    println!("warning: {w}");
                }
                if let Some(sql) = sql {
                    print!("{}", sql_part(&sql));
                }
                Ok(0)
            }
            Err(e) => {
                eprintln!("{}: {e}", self.pipeline.path().display());
                Ok(2)
            }
        }
    }
}

/// What a SQL file adds to the plan: its rows' columns, and the pipeline file it means.
fn sql_part(sql: &tidemark_sql::Compiled) -> String {
    use tidemark_sql::OutColumn;
    let columns: Vec<String> = sql
        .columns
        .iter()
        .map(|c| match c {
            OutColumn::WindowStart(n) => format!("{n} (window_start)"),
            OutColumn::WindowEnd(n) => format!("{n} (window_end)"),
            OutColumn::WindowTime(n) => format!("{n} (window_time)"),
            OutColumn::Key { name, part, .. } => format!("{name} (key part {part})"),
            OutColumn::Aggregate(n) => n.clone(),
            OutColumn::IntegerMean(n) => format!("{n} (truncated to an integer)"),
        })
        .collect();
    // A query without a window has its columns on the `row` line already.
    let rows = if columns.is_empty() {
        String::new()
    } else {
        format!("  rows:        {}\n", columns.join(", "))
    };
    format!(
        "{rows}\nAs a pipeline file:\n{}",
        toml::to_string(&sql.pipeline).unwrap_or_default()
    )
}

/// A duration in milliseconds as the pipeline file would write it.
fn dur(ms: i64) -> String {
    for (unit, n) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms != 0 && ms % n == 0 {
            return format!("{}{unit}", ms / n);
        }
    }
    format!("{ms}ms")
}

/// The plan of `spec`, one stage per line: sources, decode, filter, key, time, watermark,
/// window, trigger, aggregates, topology and outputs.
pub fn plan(spec: &PipelineSpec) -> String {
    let mut out = String::new();
    let e = &spec.engine;
    let input = &spec.input;
    let mut line = |stage: &str, text: String| {
        let _ = writeln!(out, "{stage:<11} {text}");
    };
    line(
        "pipeline",
        format!("{} (state fingerprint {})", e.name, spec.fingerprint()),
    );
    line(
        "sources",
        match &spec.kafka {
            Some(k) => format!("Kafka topics {}", k.input_topics.join(", ")),
            None => "files (simulate); no [kafka] section for run".to_string(),
        },
    );
    let format = if spec.avro_input.is_some() {
        "Avro"
    } else {
        "JSON"
    };
    let fields: Vec<String> = input.paths.all().iter().map(|p| p.join(".")).collect();
    line(
        "decode",
        format!(
            "{format}, reading {}",
            if fields.is_empty() {
                "no fields".to_string()
            } else {
                fields.join(", ")
            }
        ),
    );
    line(
        "filter",
        match &input.filter {
            Some(f) => format!("keep records where {}", f.text),
            None => "none: every record".to_string(),
        },
    );
    if let Some(rows) = &spec.rows {
        // A pipeline of rows: no key, time, window or state.
        let columns: Vec<String> = rows
            .columns
            .iter()
            .zip(&input.fields)
            .map(|(c, f)| {
                let t = if c.timestamp { " (as a timestamp)" } else { "" };
                format!("{} = {}{t}", c.name, f.value.text)
            })
            .collect();
        line(
            "row",
            format!(
                "one per record, at once, keeping its Kafka key: {}",
                columns.join("; ")
            ),
        );
        line(
            "outputs",
            match &spec.kafka {
                Some(k) => format!(
                    "rows to {}, dead letters to {}; each input partition's rows commit with its offsets, exactly once (dedup id: pipeline/topic/partition/offset)",
                    k.output_topic, k.dead_letter_topic
                ),
                None => "rows and dead letters as JSON lines (simulate)".to_string(),
            },
        );
        return out;
    }
    line(
        "key",
        if input.key.is_empty() {
            "none: one group per window".to_string()
        } else {
            input
                .key
                .iter()
                .map(|p| {
                    if p.name == p.value.text {
                        p.value.text.clone()
                    } else {
                        format!("{} AS {}", p.value.text, p.name)
                    }
                })
                .collect::<Vec<_>>()
                .join(", ")
        },
    );
    line(
        "time",
        match &input.time {
            TimeSpec::Field(c) => {
                format!(
                    "event time from {} (epoch {} or RFC 3339)",
                    c.text,
                    input.time_unit.name()
                )
            }
            TimeSpec::RecordTimestamp => "event time from the Kafka record's timestamp".into(),
            TimeSpec::Processing => "processing time: when the record is read".into(),
        },
    );
    let w = &e.watermark;
    line(
        "watermark",
        if w.processing_time {
            "the processing-time clock".to_string()
        } else {
            format!(
                "max event time - {}{}",
                dur(w.max_out_of_orderness),
                w.idle_timeout.map_or(String::new(), |t| format!(
                    "; an input silent for {} is idle",
                    dur(t)
                ))
            )
        },
    );
    line(
        "window",
        format!(
            "{}, allowed lateness {}",
            match e.window {
                WindowKind::Tumbling { size, offset } => format!(
                    "tumbling {}{}",
                    dur(size),
                    if offset != 0 {
                        format!(" offset {}", dur(offset))
                    } else {
                        String::new()
                    }
                ),
                WindowKind::Sliding {
                    size,
                    slide,
                    offset,
                } => format!(
                    "sliding {} every {}{}",
                    dur(size),
                    dur(slide),
                    if offset != 0 {
                        format!(" offset {}", dur(offset))
                    } else {
                        String::new()
                    }
                ),
                WindowKind::Cumulate { size, step, offset } => format!(
                    "cumulative: periods of {}, a window ending every {}{}",
                    dur(size),
                    dur(step),
                    if offset != 0 {
                        format!(" offset {}", dur(offset))
                    } else {
                        String::new()
                    }
                ),
                WindowKind::Session {
                    gap,
                    merge_touching,
                } => format!(
                    "session, gap {}{}",
                    dur(gap),
                    if merge_touching {
                        "; sessions that touch merge (Flink's rule)"
                    } else {
                        ""
                    }
                ),
                WindowKind::Global { idle_expiry } => format!(
                    "global{}",
                    idle_expiry.map_or(String::new(), |t| format!(
                        ", a key's state dropped {} after its latest element",
                        dur(t)
                    ))
                ),
            },
            dur(e.allowed_lateness)
        ),
    );
    let t = &e.trigger;
    let mut firing = Vec::new();
    if let Some(every) = t.early_every {
        firing.push(format!("early every {}", dur(every)));
    }
    if let Some(n) = t.early_count {
        firing.push(format!("early every {n} elements"));
    }
    firing.push("on time".to_string());
    firing.push(match t.late {
        LateFiring::EveryElement => "late every element".to_string(),
        LateFiring::Count(n) => format!("late every {n} elements"),
        LateFiring::None => "no late panes (late records are dead-lettered)".to_string(),
    });
    firing.push(
        match t.accumulation {
            Accumulation::Accumulating => "accumulating",
            Accumulation::Discarding => "discarding",
        }
        .to_string(),
    );
    line("trigger", firing.join("; "));
    let aggs: Vec<String> = e
        .aggregations
        .iter()
        .map(|a| {
            let op = a.op.name();
            let mut arg = a
                .field
                .map_or("*".to_string(), |i| input.fields[i].value.text.clone());
            let params = a.op.params();
            if !params.is_empty() {
                arg = format!("{arg}; {params}");
            }
            format!("{} = {op}({arg})", a.name)
        })
        .collect();
    line("aggregates", aggs.join("; "));
    if let Some(h) = &e.having {
        line(
            "having",
            format!(
                "panes where {} (a pane that fails it is written as a RETRACT)",
                h.text()
            ),
        );
    }
    if let Some(k) = &spec.kafka {
        line(
            "topology",
            if k.repartition {
                format!(
                    "hop: decode, filter and key by input partition, then {} ({}) to the windows; {}{}",
                    k.repartition_topic,
                    k.repartition_partitions
                        .map_or("as many partitions as the largest input".to_string(), |n| {
                            format!("{n} partitions")
                        }),
                    match crate::windowing::fold::unsupported(e) {
                        _ if !k.combine => "records cross it one by one (combine = false)".to_string(),
                        Some(why) => format!("records cross it one by one ({why})"),
                        None => "partial aggregates cross it: one per key, window and input partition each commit".to_string(),
                    },
                    if input.key.is_empty() && (!k.combine || crate::windowing::fold::unsupported(e).is_some()) {
                        "; without a key every record goes to one partition"
                    } else if input.key.is_empty() {
                        "; without a key every partial goes to one partition"
                    } else {
                        ""
                    }
                )
            } else {
                "direct: windows where the records are (the Kafka record key is the key)"
                    .to_string()
            },
        );
        line(
            "outputs",
            format!(
                "panes to {}, dead letters to {}{}",
                k.output_topic,
                k.dead_letter_topic,
                spec.sinks
                    .keys()
                    .map(|name| format!("; the {name} sink (tidemark sink {name})"))
                    .collect::<String>()
            ),
        );
    } else {
        line(
            "outputs",
            "panes and dead letters as JSON lines (simulate)".to_string(),
        );
    }
    out
}
