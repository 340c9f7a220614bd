//! `tidemark replay`: moves a stopped pipeline back to earlier input offsets, exactly once.
//!
//! 1. **Refuse while members run.** The pipeline's consumer group must have no members: a replay
//!    is done with the pipeline stopped.
//! 2. **Plan.** For every input partition: the committed offset now (read from the changelog's
//!    committed transactions, as a restore reads it), the target offset (the partition's first
//!    offset; the first offset whose timestamp is at or after a time; or one given), and how many
//!    records will be processed again. `--dry-run` prints the plan and stops there.
//! 3. **Commit the reset in one transaction**, under the transactional id `<application_id>-replay`:
//!    a reset marker and an offset marker (stamped with the target offset) in the changelog
//!    partition of every partition that moves, an epoch marker in the others, and the new group
//!    offsets. Every marker carries the new epoch (one more than the highest in the changelog) and
//!    the pipeline's fingerprint. A replay killed before the commit leaves the old position (its
//!    transaction never commits); after it, the new one. A restore ignores every changelog record
//!    before the latest committed reset marker, so members that start afterwards begin from empty
//!    state (local state written before the reset is dropped) at the target offsets, and stamp
//!    their panes and dead letters with the new epoch.

use crate::config::PipelineSpec;
use crate::kafka::raw_log::RawLogError;
use crate::state::changelog::{
    committed_now, marker_headers, EPOCH_MARKER_KEY, OFFSET_MARKER_KEY, RESET_MARKER_KEY,
};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

/// Environment variable that makes `replay` pause this many milliseconds after producing its
/// markers and before committing them: the tests kill it there.
pub const PAUSE_ENV: &str = "TIDEMARK_REPLAY_PAUSE_MS";

/// Where the replay moves the input to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Every partition's first offset.
    Earliest,
    /// The first offset whose timestamp is at or after this time (epoch ms), per partition.
    Time(i64),
    /// Explicit offsets; partitions not named keep their position and state.
    Offsets(BTreeMap<i32, i64>),
}

impl Target {
    /// Parses `--to-offsets P:O[,P:O...]`.
    pub fn parse_offsets(text: &str) -> Result<Target, ReplayError> {
        let mut out = BTreeMap::new();
        for item in text.split(',').filter(|s| !s.trim().is_empty()) {
            let parsed = item.split_once(':').and_then(|(p, o)| {
                Some((p.trim().parse::<i32>().ok()?, o.trim().parse::<i64>().ok()?))
            });
            match parsed {
                Some((p, o)) if p >= 0 && o >= 0 => {
                    if out.insert(p, o).is_some() {
                        return Err(ReplayError::Target(format!("partition {p} is named twice")));
                    }
                }
                _ => {
                    return Err(ReplayError::Target(format!(
                        "{item:?} is not PARTITION:OFFSET (both non-negative integers)"
                    )))
                }
            }
        }
        if out.is_empty() {
            return Err(ReplayError::Target(
                "--to-offsets names no partition".into(),
            ));
        }
        Ok(Target::Offsets(out))
    }
}

/// Errors of a replay.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The pipeline file has no `[kafka]` section.
    #[error("the pipeline has no [kafka] section")]
    NoKafka,
    /// Members of the group are running.
    #[error("the consumer group {group} has active members ({members}): stop the pipeline before replaying")]
    Running {
        /// The group.
        group: String,
        /// Who is in it.
        members: String,
    },
    /// The target cannot be applied.
    #[error("{0}")]
    Target(String),
    /// Reading the changelog failed.
    #[error("reading the changelog: {0}")]
    Read(#[from] RawLogError),
    /// A Kafka call failed.
    #[error("{0}")]
    Kafka(String),
}

impl ReplayError {
    /// Whether the error is the user's to fix (exit status 2) rather than a failure (1).
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            ReplayError::NoKafka | ReplayError::Running { .. } | ReplayError::Target(_)
        )
    }
}

/// One input partition in the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanRow {
    /// The input partition.
    pub partition: i32,
    /// The committed offset now, from the changelog (`None`: nothing committed yet).
    pub committed: Option<i64>,
    /// Where the partition will be read from (its committed offset when it does not move).
    pub target: i64,
    /// The partition's end offset now.
    pub end: i64,
    /// Whether the partition moves (its state is reset).
    pub moves: bool,
}

impl PlanRow {
    /// Records that will be processed again: from the target up to what had been committed.
    pub fn reprocess(&self) -> i64 {
        if self.moves {
            (self.committed.unwrap_or(self.target) - self.target).max(0)
        } else {
            0
        }
    }
}

/// What a replay will do.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The consumer group (the pipeline's application id).
    pub group: String,
    /// One row per input partition.
    pub rows: Vec<PlanRow>,
    /// The epoch the replay starts (one more than the highest in the changelog).
    pub epoch: u64,
    /// The fingerprint of the pipeline file the replay runs with.
    pub fingerprint: String,
}

impl Plan {
    /// The plan as an aligned table.
    pub fn table(&self) -> String {
        let mut out = format!(
            "replay of {} into epoch {} (pipeline fingerprint {})\n",
            self.group, self.epoch, self.fingerprint
        );
        let _ = writeln!(
            out,
            "{:>9} {:>14} {:>14} {:>12} {:>12}",
            "partition", "committed now", "target", "reprocess", "log end"
        );
        for r in &self.rows {
            let committed = r.committed.map_or("-".to_string(), |c| c.to_string());
            let target = if r.moves {
                r.target.to_string()
            } else {
                format!("{} (stays)", r.target)
            };
            let _ = writeln!(
                out,
                "{:>9} {:>14} {:>14} {:>12} {:>12}",
                r.partition,
                committed,
                target,
                r.reprocess(),
                r.end
            );
        }
        out
    }
}

fn kafka_err(what: &str) -> impl Fn(rdkafka::error::KafkaError) -> ReplayError + '_ {
    move |e| ReplayError::Kafka(format!("{what}: {e}"))
}

/// Refuses while the group has members.
fn check_group_is_empty(consumer: &BaseConsumer, group: &str) -> Result<(), ReplayError> {
    let list = consumer
        .fetch_group_list(Some(group), Duration::from_secs(10))
        .map_err(kafka_err("listing the consumer group's members"))?;
    let members: Vec<String> = list
        .groups()
        .iter()
        .filter(|g| g.name() == group)
        .flat_map(|g| g.members())
        .map(|m| format!("{} ({} on {})", m.id(), m.client_id(), m.client_host()))
        .collect();
    if members.is_empty() {
        Ok(())
    } else {
        Err(ReplayError::Running {
            group: group.to_string(),
            members: members.join(", "),
        })
    }
}

/// Works out the plan: refuses while the group has members, reads the committed offsets and
/// epochs from the changelog, and resolves the target of every input partition.
pub fn plan(spec: &PipelineSpec, target: &Target) -> Result<Plan, ReplayError> {
    let k = spec.kafka.as_ref().ok_or(ReplayError::NoKafka)?;
    let consumer: BaseConsumer = crate::source::base_config(k)
        .set("group.id", &k.application_id)
        .create()
        .map_err(kafka_err("creating a client"))?;
    check_group_is_empty(&consumer, &k.application_id)?;
    let timeout = Duration::from_secs(10);
    let meta = consumer
        .fetch_metadata(Some(&k.input_topic), timeout)
        .map_err(kafka_err("reading the input topic's metadata"))?;
    let partitions: Vec<i32> = meta
        .topics()
        .first()
        .filter(|t| t.error().is_none())
        .map(|t| t.partitions().iter().map(|p| p.id()).collect())
        .unwrap_or_default();
    if partitions.is_empty() {
        return Err(ReplayError::Target(format!(
            "input topic {} does not exist",
            k.input_topic
        )));
    }
    if let Target::Offsets(offsets) = target {
        let unknown: Vec<String> = offsets
            .keys()
            .filter(|p| !partitions.contains(p))
            .map(|p| p.to_string())
            .collect();
        if !unknown.is_empty() {
            return Err(ReplayError::Target(format!(
                "input topic {} has no partition {}",
                k.input_topic,
                unknown.join(", ")
            )));
        }
    }
    // Timestamps to offsets, in one request.
    let by_time = match target {
        Target::Time(ms) => {
            let mut tpl = TopicPartitionList::new();
            for &p in &partitions {
                tpl.add_partition_offset(&k.input_topic, p, Offset::Offset(*ms))
                    .map_err(kafka_err("building the request"))?;
            }
            let found = consumer
                .offsets_for_times(tpl, timeout)
                .map_err(kafka_err("looking up offsets by time"))?;
            found
                .elements()
                .iter()
                .map(|e| (e.partition(), e.offset()))
                .collect::<BTreeMap<i32, Offset>>()
        }
        _ => BTreeMap::new(),
    };
    let fingerprint = spec.fingerprint();
    let mut rows = Vec::new();
    let mut epoch = 0;
    let mut other_definition = false;
    for &p in &partitions {
        let (low, high) = consumer
            .fetch_watermarks(&k.input_topic, p, timeout)
            .map_err(kafka_err("reading the input's offsets"))?;
        let (committed, lineage) = committed_now(&k.bootstrap_servers, &k.changelog_topic, p)?;
        epoch = epoch.max(lineage.epoch);
        other_definition |= lineage
            .fingerprint
            .as_ref()
            .is_some_and(|f| *f != fingerprint);
        let (target, moves) = match target {
            Target::Earliest => (low, true),
            Target::Time(_) => match by_time.get(&p) {
                Some(Offset::Offset(o)) => (*o, true),
                // No record at or after the time: nothing to read again.
                _ => (high, true),
            },
            Target::Offsets(offsets) => match offsets.get(&p) {
                Some(&o) if o < low || o > high => {
                    return Err(ReplayError::Target(format!(
                        "offset {o} of partition {p} is outside the log ({low}..{high})"
                    )))
                }
                Some(&o) => (o, true),
                None => (committed.unwrap_or(low), false),
            },
        };
        rows.push(PlanRow {
            partition: p,
            committed,
            target,
            end: high,
            moves,
        });
    }
    if other_definition && rows.iter().any(|r| !r.moves) {
        return Err(ReplayError::Target(
            "the pipeline definition changed (another fingerprint), so every partition's state \
             must be recomputed: name every partition in --to-offsets, or use --to-earliest or \
             --to-datetime"
                .into(),
        ));
    }
    Ok(Plan {
        group: k.application_id.clone(),
        rows,
        epoch: epoch + 1,
        fingerprint,
    })
}

/// Commits the plan in one transaction (see the module docs).
pub fn commit(spec: &PipelineSpec, plan: &Plan) -> Result<(), ReplayError> {
    let k = spec.kafka.as_ref().ok_or(ReplayError::NoKafka)?;
    let timeout = Duration::from_millis(k.transaction_timeout as u64).max(Duration::from_secs(30));
    let producer: BaseProducer = crate::source::producer_config(k)
        .set("transactional.id", format!("{}-replay", k.application_id))
        .create()
        .map_err(kafka_err("creating the producer"))?;
    // Fences an earlier replay that died, aborting its transaction.
    producer
        .init_transactions(timeout)
        .map_err(kafka_err("init_transactions"))?;
    producer
        .begin_transaction()
        .map_err(kafka_err("begin_transaction"))?;
    let mut offsets = TopicPartitionList::new();
    for r in &plan.rows {
        let send = |key: &[u8], value: &[u8], stamp: Option<i64>| {
            let record = BaseRecord::<[u8], [u8]>::to(&k.changelog_topic)
                .partition(r.partition)
                .key(key)
                .payload(value)
                .headers(marker_headers(stamp, plan.epoch, &plan.fingerprint));
            producer
                .send(record)
                .map_err(|(e, _)| ReplayError::Kafka(format!("producing a marker: {e}")))
        };
        if r.moves {
            let about = format!(
                "{{\"epoch\":{},\"target\":{},\"fingerprint\":\"{}\"}}",
                plan.epoch, r.target, plan.fingerprint
            );
            send(RESET_MARKER_KEY, about.as_bytes(), Some(r.target))?;
            send(
                OFFSET_MARKER_KEY,
                r.target.to_string().as_bytes(),
                Some(r.target),
            )?;
            offsets
                .add_partition_offset(&k.input_topic, r.partition, Offset::Offset(r.target))
                .map_err(kafka_err("building the group offsets"))?;
        } else {
            send(
                EPOCH_MARKER_KEY,
                plan.epoch.to_string().as_bytes(),
                r.committed,
            )?;
        }
    }
    producer
        .flush(timeout)
        .map_err(kafka_err("delivering the markers"))?;
    if offsets.count() > 0 {
        // The group offsets too (a hint for tools; the changelog's markers rule).
        let consumer: BaseConsumer = crate::source::base_config(k)
            .set("group.id", &k.application_id)
            .create()
            .map_err(kafka_err("creating a client"))?;
        let cgm = consumer
            .group_metadata()
            .ok_or_else(|| ReplayError::Kafka("no consumer group metadata".into()))?;
        producer
            .send_offsets_to_transaction(&offsets, &cgm, timeout)
            .map_err(kafka_err("send_offsets_to_transaction"))?;
    }
    if let Some(ms) = std::env::var(PAUSE_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        eprintln!("replay: markers produced; pausing {ms} ms before the commit");
        std::thread::sleep(Duration::from_millis(ms));
    }
    producer
        .commit_transaction(timeout)
        .map_err(kafka_err("commit_transaction"))?;
    Ok(())
}
