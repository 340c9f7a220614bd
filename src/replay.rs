//! `tidemark replay`: moves a stopped pipeline back to earlier input offsets, exactly once.
//!
//! 1. **Refuse while members run.** The pipeline's consumer group must have no members: a replay
//!    is done with the pipeline stopped. The refusal names the registered members and when a
//!    stopped one leaves; `--wait D` waits up to D for the group to empty instead.
//! 2. **Plan.** For every input partition: the committed offset now (read from the committed
//!    offset markers, as a restore reads it: the changelog's, or with the repartition hop the
//!    offsets topic's), the target offset (the partition's first offset; the first offset whose
//!    timestamp is at or after a time; or one given), and how many records will be processed
//!    again. `--dry-run` prints the plan and stops there.
//! 3. **Commit the reset in one transaction**, under the transactional id `<application_id>-replay`:
//!    a reset marker and an offset marker (stamped with the target offset) for every input
//!    partition that moves, an epoch marker for the others, and the new group offsets. With the
//!    repartition hop, every repartition partition is reset too: a reset and an offset marker in
//!    its changelog partition stamped with the repartition topic's end, so the second stage
//!    starts from empty state past everything written before, and reads only what the first
//!    stage writes again. Every marker carries the new epoch (one more than the highest in the
//!    log) and the pipeline's fingerprint. A replay killed before the commit leaves the old
//!    position (its transaction never commits); after it, the new one. A restore ignores every
//!    record before the latest committed reset marker, so members that start afterwards begin
//!    from empty state (local state written before the reset is dropped) at the target offsets,
//!    with watermarks that restart with the replayed data, and stamp their panes and dead letters
//!    with the new epoch.

use crate::changelog::{
    committed_now, marker_headers, marker_partition, source_marker_key, source_markers,
    EPOCH_MARKER_KEY, MARKER_PARTITIONS_HEADER, OFFSET_MARKER_KEY, RESET_MARKER_KEY,
};
use crate::config::{KafkaSpec, PipelineSpec};
use crate::kafka::raw_log::RawLogError;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Header;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

/// Environment variable that makes `replay` pause this many milliseconds after producing its
/// markers and before committing them: the tests kill it there.
pub const PAUSE_ENV: &str = "TIDEMARK_REPLAY_PAUSE_MS";

/// An input partition: (topic, partition).
pub type InputPartition = (String, i32);

/// Where the replay moves the input to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Every partition's first offset.
    Earliest,
    /// The first offset whose timestamp is at or after this time (epoch ms), per partition.
    Time(i64),
    /// Explicit offsets by (topic, partition), the topic `None` for the only input topic;
    /// partitions not named keep their position and state (not with the repartition hop, which
    /// needs every partition named).
    Offsets(BTreeMap<(Option<String>, i32), i64>),
}

impl Target {
    /// Parses `--to-offsets [TOPIC/]PARTITION:OFFSET[,...]`.
    pub fn parse_offsets(text: &str) -> Result<Target, ReplayError> {
        let mut out = BTreeMap::new();
        for item in text.split(',').filter(|s| !s.trim().is_empty()) {
            let parsed = item.split_once(':').and_then(|(tp, o)| {
                let (topic, p) = match tp.trim().rsplit_once('/') {
                    Some((t, p)) if !t.is_empty() => (Some(t.to_string()), p),
                    Some(_) => return None,
                    None => (None, tp.trim()),
                };
                Some((topic, p.parse::<i32>().ok()?, o.trim().parse::<i64>().ok()?))
            });
            match parsed {
                Some((topic, p, o)) if p >= 0 && o >= 0 => {
                    if out.insert((topic, p), o).is_some() {
                        return Err(ReplayError::Target(format!("partition {p} is named twice")));
                    }
                }
                _ => {
                    return Err(ReplayError::Target(format!(
                        "{item:?} is not [TOPIC/]PARTITION:OFFSET (both non-negative integers)"
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
    #[error(
        "the consumer group {group} has active members: stop the pipeline before replaying (or \
         pass --wait D to wait for the group to empty).\n{members}\n{why}"
    )]
    Running {
        /// The group.
        group: String,
        /// Who is in it, one member a line.
        members: String,
        /// When stopped members leave the group, for this pipeline's membership settings.
        why: String,
    },
    /// The target cannot be applied.
    #[error("{0}")]
    Target(String),
    /// Reading the log failed.
    #[error("reading the log: {0}")]
    Read(#[from] RawLogError),
    /// A Kafka call failed.
    #[error("{what}: {source}")]
    Kafka {
        /// The call.
        what: String,
        /// The client's error.
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// The group's metadata, needed to commit its offsets, is missing.
    #[error("no consumer group metadata")]
    NoGroupMetadata,
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
    /// The input topic.
    pub topic: String,
    /// The input partition.
    pub partition: i32,
    /// The committed offset now, from the log (`None`: nothing committed yet).
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
    /// With the repartition hop: the repartition topic's end per partition, where the second
    /// stage starts again.
    pub repartition_ends: BTreeMap<i32, i64>,
    /// The epoch the replay starts (one more than the highest in the log).
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
            "{:<24} {:>14} {:>14} {:>12} {:>12}",
            "input partition", "committed now", "target", "reprocess", "log end"
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
                "{:<24} {:>14} {:>14} {:>12} {:>12}",
                format!("{}/{}", r.topic, r.partition),
                committed,
                target,
                r.reprocess(),
                r.end
            );
        }
        if !self.repartition_ends.is_empty() {
            let _ = writeln!(
                out,
                "the second stage restarts empty on all {} repartition partitions, past what they hold",
                self.repartition_ends.len()
            );
        }
        out
    }
}

fn kafka_err(what: &str) -> impl Fn(rdkafka::error::KafkaError) -> ReplayError + '_ {
    move |source| ReplayError::Kafka {
        what: what.to_string(),
        source,
    }
}

/// The members registered in `group`: member id, client id and host of each.
fn group_members(consumer: &BaseConsumer, group: &str) -> Result<Vec<String>, ReplayError> {
    let list = consumer
        .fetch_group_list(Some(group), Duration::from_secs(10))
        .map_err(kafka_err("listing the consumer group's members"))?;
    Ok(list
        .groups()
        .iter()
        .filter(|g| g.name() == group)
        .flat_map(|g| g.members())
        .map(|m| {
            format!(
                "  member {} (client {}, host {})",
                m.id(),
                m.client_id(),
                m.client_host()
            )
        })
        .collect())
}

/// With membership from the log: the processes the claims topic shows live (heard from within
/// the session timeout, and not gone since).
fn log_members(k: &KafkaSpec) -> Result<Vec<String>, ReplayError> {
    let mut logs = crate::kafka::raw_log::LogReader::connect(&k.brokers)
        .and_then(|mut reader| reader.committed(&k.claims_topic, |p| p == 0, |_| 0))
        .map_err(ReplayError::Read)?;
    let log = logs.remove(&0).unwrap_or_default();
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let records = log.committed.iter().map(crate::kafka::roster::parts_of);
    let session = crate::kafka::roster::session(&k.properties);
    Ok(crate::kafka::roster::Liveness::from_records(records, wall)
        .live(std::time::Instant::now(), session)
        .into_iter()
        .map(|t| format!("  process {t} (membership from the log)"))
        .collect())
}

/// When stopped members of a pipeline with these settings leave its group.
fn why_members_stay(k: &KafkaSpec) -> String {
    let session = k
        .properties
        .get("session.timeout.ms")
        .map_or("45000 (librdkafka's default)".to_string(), |v| v.clone());
    let leave = if k.static_membership {
        "This pipeline's members are static (static_membership = true): a stopped member stays \
         registered"
    } else {
        "This pipeline's members are dynamic: a member stopped with SIGTERM leaves at once; one \
         that was killed stays registered"
    };
    format!("{leave} until session.timeout.ms = {session} ms after its last heartbeat.")
}

/// Refuses while the group has members; with `wait`, waits up to that long for it to empty,
/// saying on stderr who it waits for whenever that changes.
fn check_group_is_empty(
    consumer: &BaseConsumer,
    k: &KafkaSpec,
    wait: Option<Duration>,
) -> Result<(), ReplayError> {
    let group = &k.application_id;
    let started = std::time::Instant::now();
    let mut said: Option<Vec<String>> = None;
    loop {
        // A group that moved to membership from the log by itself (its consumer group stopped
        // assigning) has its members in the claims topic.
        let members = if k.log_membership
            || crate::kafka::members::GroupDecisions::read(&k.brokers, &k.claims_topic)
                .log_membership
        {
            log_members(k)?
        } else {
            group_members(consumer, group)?
        };
        if members.is_empty() {
            return Ok(());
        }
        match wait {
            Some(w) if started.elapsed() < w => {
                if said.as_ref() != Some(&members) {
                    eprintln!(
                        "tidemark replay: waiting up to {} s for the consumer group {group} to \
                         empty; registered:\n{}",
                        w.as_secs(),
                        members.join("\n")
                    );
                    said = Some(members);
                }
                std::thread::sleep(Duration::from_secs(1));
            }
            _ => {
                let mut why = why_members_stay(k);
                if let Some(w) = wait {
                    why = format!("Waited {} s. {why}", w.as_secs());
                }
                return Err(ReplayError::Running {
                    group: group.to_string(),
                    members: members.join("\n"),
                    why,
                });
            }
        }
    }
}

/// The partitions of `topic`, or a refusal when it does not exist.
fn partitions_of(consumer: &BaseConsumer, topic: &str) -> Result<Vec<i32>, ReplayError> {
    let meta = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(kafka_err("reading topic metadata"))?;
    let partitions: Vec<i32> = meta
        .topics()
        .first()
        .filter(|t| t.error().is_none())
        .map(|t| t.partitions().iter().map(|p| p.id()).collect())
        .unwrap_or_default();
    if partitions.is_empty() {
        return Err(ReplayError::Target(format!("topic {topic} does not exist")));
    }
    Ok(partitions)
}

/// The committed offset and lineage of input partition `topic`/`p` now, from its offset markers.
fn committed_input(
    k: &KafkaSpec,
    offsets_partitions: i32,
    topic: &str,
    p: i32,
) -> Result<(Option<i64>, crate::state::store::Lineage), RawLogError> {
    if k.repartition {
        let (m, _) = source_markers(
            &k.brokers,
            &k.offsets_topic,
            marker_partition(p, offsets_partitions),
            offsets_partitions,
            topic,
            p,
        )?;
        Ok((m.committed, m.lineage))
    } else {
        committed_now(&k.brokers, &k.changelog_topic, p)
    }
}

/// Works out the plan: refuses while the group has members, reads the committed offsets and
/// epochs from the log, and resolves the target of every input partition.
///
/// With `wait`, a group that still has members is waited for, up to that long.
pub fn plan(
    spec: &PipelineSpec,
    target: &Target,
    wait: Option<Duration>,
) -> Result<Plan, ReplayError> {
    let k = spec.kafka.as_ref().ok_or(ReplayError::NoKafka)?;
    let consumer: BaseConsumer = crate::clients::base_config(k)
        .set("group.id", &k.application_id)
        .set("isolation.level", "read_uncommitted")
        .create()
        .map_err(kafka_err("creating a client"))?;
    check_group_is_empty(&consumer, k, wait)?;
    let timeout = Duration::from_secs(10);
    let mut inputs: Vec<InputPartition> = Vec::new();
    for t in &k.input_topics {
        for p in partitions_of(&consumer, t)? {
            inputs.push((t.clone(), p));
        }
    }
    // Offsets named: resolve each to an input partition.
    let mut named: BTreeMap<InputPartition, i64> = BTreeMap::new();
    if let Target::Offsets(offsets) = target {
        for ((topic, p), o) in offsets {
            let topic = match topic {
                Some(t) => t.clone(),
                None if k.input_topics.len() == 1 => k.input_topics[0].clone(),
                None => {
                    return Err(ReplayError::Target(format!(
                        "partition {p}: name its topic (TOPIC/{p}:{o}); the pipeline reads {}",
                        k.input_topics.join(", ")
                    )))
                }
            };
            if !inputs.contains(&(topic.clone(), *p)) {
                return Err(ReplayError::Target(format!(
                    "{topic}/{p} is not an input partition of this pipeline"
                )));
            }
            named.insert((topic, *p), *o);
        }
        if k.repartition && named.len() < inputs.len() {
            return Err(ReplayError::Target(
                "with the repartition hop every input partition feeds every window, so a replay \
                 resets all of them: name every input partition in --to-offsets, or use \
                 --to-earliest, --to-datetime or --by-duration"
                    .into(),
            ));
        }
    }
    // Timestamps to offsets, in one request.
    let by_time: BTreeMap<InputPartition, Offset> = match target {
        Target::Time(ms) => {
            let mut tpl = TopicPartitionList::new();
            for (t, p) in &inputs {
                tpl.add_partition_offset(t, *p, Offset::Offset(*ms))
                    .map_err(kafka_err("building the request"))?;
            }
            let found = consumer
                .offsets_for_times(tpl, timeout)
                .map_err(kafka_err("looking up offsets by time"))?;
            found
                .elements()
                .iter()
                .map(|e| ((e.topic().to_string(), e.partition()), e.offset()))
                .collect()
        }
        _ => BTreeMap::new(),
    };
    let offsets_partitions = if k.repartition {
        partitions_of(&consumer, &k.offsets_topic)
            .map(|ps| ps.len() as i32)
            .unwrap_or(1)
    } else {
        0
    };
    let fingerprint = spec.fingerprint();
    let mut rows = Vec::new();
    let mut epoch = 0;
    let mut other_definition = false;
    // Where each input begins is read from the log itself, not from the broker's earliest offset
    // (see kafka::quirks::EARLIEST_OFFSET_PAST_RECORDS).
    let mut logs = crate::kafka::raw_log::LogReader::connect(&k.brokers)?;
    for (topic, p) in &inputs {
        let p = *p;
        let (_, high) = consumer
            .fetch_watermarks(topic, p, timeout)
            .map_err(kafka_err("reading the input's offsets"))?;
        let low = logs.log_start(topic, p)?.min(high);
        let (committed, lineage) = committed_input(k, offsets_partitions, topic, p)?;
        epoch = epoch.max(lineage.epoch);
        other_definition |= lineage
            .fingerprint
            .as_ref()
            .is_some_and(|f| *f != fingerprint);
        let key = (topic.clone(), p);
        let (target, moves) = match target {
            Target::Earliest => (low, true),
            Target::Time(_) => match by_time.get(&key) {
                Some(Offset::Offset(o)) => (*o, true),
                // No record at or after the time: nothing to read again.
                _ => (high, true),
            },
            Target::Offsets(_) => match named.get(&key) {
                Some(&o) if o < low || o > high => {
                    return Err(ReplayError::Target(format!(
                        "offset {o} of {topic}/{p} is outside the log ({low}..{high})"
                    )))
                }
                Some(&o) => (o, true),
                None => (committed.unwrap_or(low), false),
            },
        };
        rows.push(PlanRow {
            topic: topic.clone(),
            partition: p,
            committed,
            target,
            end: high,
            moves,
        });
    }
    // With the hop, the second stage restarts empty past everything the repartition topic holds.
    let mut repartition_ends = BTreeMap::new();
    if k.repartition {
        if let Ok(parts) = partitions_of(&consumer, &k.repartition_topic) {
            for r in parts {
                let (_, high) = consumer
                    .fetch_watermarks(&k.repartition_topic, r, timeout)
                    .map_err(kafka_err("reading the repartition topic's end"))?;
                let (_, lineage) = committed_now(&k.brokers, &k.changelog_topic, r)?;
                epoch = epoch.max(lineage.epoch);
                repartition_ends.insert(r, high);
            }
        }
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
        repartition_ends,
        epoch: epoch + 1,
        fingerprint,
    })
}

/// Commits the plan in one transaction (see the module docs).
pub fn commit(spec: &PipelineSpec, plan: &Plan) -> Result<(), ReplayError> {
    let k = spec.kafka.as_ref().ok_or(ReplayError::NoKafka)?;
    let timeout = Duration::from_millis(k.transaction_timeout as u64).max(Duration::from_secs(30));
    let producer: BaseProducer = crate::clients::producer_config(k)
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
    let offsets_partitions = if k.repartition {
        let consumer: BaseConsumer = crate::clients::base_config(k)
            .create()
            .map_err(kafka_err("creating a client"))?;
        partitions_of(&consumer, &k.offsets_topic)
            .map(|ps| ps.len() as i32)
            .unwrap_or(1)
    } else {
        0
    };
    // One marker: into the changelog partition of the input partition (no hop), or into the
    // offsets topic under the input partition's own key (the hop).
    let send_marker = |marker: &[u8], topic: &str, p: i32, value: &[u8], stamp: Option<i64>| {
        let headers = marker_headers(stamp, plan.epoch, &plan.fingerprint);
        let (target_topic, partition, key) = if k.repartition {
            (
                k.offsets_topic.as_str(),
                marker_partition(p, offsets_partitions),
                source_marker_key(marker, topic, p),
            )
        } else {
            (k.changelog_topic.as_str(), p, marker.to_vec())
        };
        let headers = if k.repartition {
            headers.insert(Header {
                key: MARKER_PARTITIONS_HEADER,
                value: Some(&offsets_partitions.to_string()),
            })
        } else {
            headers
        };
        let record = BaseRecord::<[u8], [u8]>::to(target_topic)
            .partition(partition)
            .key(key.as_slice())
            .payload(value)
            .headers(headers);
        producer
            .send(record)
            .map_err(|(e, _)| kafka_err("producing a marker")(e))
    };
    let mut offsets = TopicPartitionList::new();
    for r in &plan.rows {
        if r.moves {
            let about = format!(
                "{{\"epoch\":{},\"target\":{},\"fingerprint\":\"{}\"}}",
                plan.epoch, r.target, plan.fingerprint
            );
            let stamp = Some(r.target);
            send_marker(
                RESET_MARKER_KEY,
                &r.topic,
                r.partition,
                about.as_bytes(),
                stamp,
            )?;
            let target = r.target.to_string();
            send_marker(
                OFFSET_MARKER_KEY,
                &r.topic,
                r.partition,
                target.as_bytes(),
                stamp,
            )?;
            offsets
                .add_partition_offset(&r.topic, r.partition, Offset::Offset(r.target))
                .map_err(kafka_err("building the group offsets"))?;
        } else {
            let epoch = plan.epoch.to_string();
            send_marker(
                EPOCH_MARKER_KEY,
                &r.topic,
                r.partition,
                epoch.as_bytes(),
                r.committed,
            )?;
        }
    }
    // The hop's second stage: every repartition partition starts again, empty, at its end.
    for (&r, &end) in &plan.repartition_ends {
        let about = format!(
            "{{\"epoch\":{},\"target\":{end},\"fingerprint\":\"{}\"}}",
            plan.epoch, plan.fingerprint
        );
        for (key, value) in [
            (RESET_MARKER_KEY, about),
            (OFFSET_MARKER_KEY, end.to_string()),
        ] {
            let record = BaseRecord::<[u8], [u8]>::to(&k.changelog_topic)
                .partition(r)
                .key(key)
                .payload(value.as_bytes())
                .headers(marker_headers(Some(end), plan.epoch, &plan.fingerprint));
            producer
                .send(record)
                .map_err(|(e, _)| kafka_err("producing a marker")(e))?;
        }
        offsets
            .add_partition_offset(&k.repartition_topic, r, Offset::Offset(end))
            .map_err(kafka_err("building the group offsets"))?;
    }
    producer
        .flush(timeout)
        .map_err(kafka_err("delivering the markers"))?;
    if offsets.count() > 0 {
        // The group offsets too (a hint for tools; the log's markers rule).
        let consumer: BaseConsumer = crate::clients::base_config(k)
            .set("group.id", &k.application_id)
            .create()
            .map_err(kafka_err("creating a client"))?;
        let cgm = consumer
            .group_metadata()
            .ok_or(ReplayError::NoGroupMetadata)?;
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
