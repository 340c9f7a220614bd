//! The runtime of membership from the log: a process's heartbeats into a topic of one partition,
//! its reading of everyone's, and the partitions that are its own by the rules of
//! [`super::roster`]. The pipeline's members keep their roster in the claims topic
//! (`coordinator::roster` follows it); a sink's members keep theirs in a topic of their own
//! (`sink`).

use super::raw_log::{Following, LogReader};
use super::roster::{
    parts_of, share, token_of, Liveness, TopicPartition, HEARTBEAT_KEY, LEAVE_KEY, MOVE_KEY,
    MOVE_VALUE,
};
use super::secure::Brokers;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;
use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Why a roster could not start or write.
#[derive(Debug, thiserror::Error)]
pub enum MembersError {
    /// The producer that writes heartbeats and claims could not be created.
    #[error("creating the membership producer: {0}")]
    Producer(#[source] rdkafka::error::KafkaError),
    /// The membership topic could not be read.
    #[error("reading {topic}: {source}")]
    Read {
        /// The topic.
        topic: String,
        /// Why.
        #[source]
        source: crate::raw_log::RawLogError,
    },
    /// A record could not be written to the membership topic.
    #[error("writing to {topic}: {source}")]
    Write {
        /// The topic.
        topic: String,
        /// Why.
        #[source]
        source: rdkafka::error::KafkaError,
    },
}

/// How often a member writes its heartbeat.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// How often a member reads the claims topic and follows the assignment.
pub const LOOK_EVERY: Duration = Duration::from_millis(250);

/// This member's part in membership from the log: its heartbeat producer, its reader of the
/// claims topic, and what it has heard.
pub struct Roster {
    token: String,
    topic: String,
    producer: BaseProducer,
    reader: LogReader,
    next: i64,
    heard: Liveness,
    session: Duration,
    last_beat: Option<Instant>,
    last_look: Option<Instant>,
    /// Every partition the group shares.
    parts: Vec<TopicPartition>,
}

impl Roster {
    /// Starts the roster of the process named `token` over `parts`, in `topic` (one partition)
    /// on the cluster `brokers`: reads the topic to its end (processes heard from before are
    /// judged by their records' timestamps) and writes the first heartbeat. `producer` is the
    /// client's configuration (not transactional); `session` is how long a silent process stays
    /// live.
    pub fn start(
        mut producer: ClientConfig,
        brokers: &Brokers,
        topic: &str,
        token: String,
        parts: Vec<TopicPartition>,
        session: Duration,
    ) -> Result<Roster, MembersError> {
        producer.set("acks", "all");
        producer.set("linger.ms", "0");
        let producer: BaseProducer = producer.create().map_err(MembersError::Producer)?;
        let read = |source| MembersError::Read {
            topic: topic.to_string(),
            source,
        };
        let mut reader = LogReader::connect(brokers).map_err(read)?;
        let (mut records, next) = reader.raw(topic, 0, 0).map_err(read)?;
        records.retain(|r| r.is_data());
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let heard = Liveness::from_records(records.iter().map(parts_of), wall);
        let mut roster = Roster {
            token,
            topic: topic.to_string(),
            producer,
            reader,
            next,
            heard,
            session,
            last_beat: None,
            last_look: None,
            parts,
        };
        roster.beat()?;
        Ok(roster)
    }

    /// Writes a record with `key` and this process's token, and waits for it.
    fn write(&mut self, key: &[u8]) -> Result<(), MembersError> {
        let token = self.token.clone();
        self.write_record(key, token.as_bytes())
    }

    /// Writes a record with `key` and `value`, and waits for it.
    fn write_record(&mut self, key: &[u8], value: &[u8]) -> Result<(), MembersError> {
        let record = BaseRecord::<[u8], [u8]>::to(&self.topic)
            .partition(0)
            .key(key)
            .payload(value);
        let write = |source| MembersError::Write {
            topic: self.topic.clone(),
            source,
        };
        self.producer.send(record).map_err(|(e, _)| write(e))?;
        self.producer.flush(Duration::from_secs(10)).map_err(write)
    }

    /// Writes this process's heartbeat.
    fn beat(&mut self) -> Result<(), MembersError> {
        self.write(HEARTBEAT_KEY)?;
        self.heard.note(&self.token, Instant::now(), false);
        self.last_beat = Some(Instant::now());
        Ok(())
    }

    /// Replaces the partitions the group shares (a topic that was created, or grew, since).
    pub fn set_parts(&mut self, parts: Vec<TopicPartition>) {
        self.parts = parts;
    }

    /// Beats when it is time, and when it is time to look: reads the claims topic and returns the
    /// partitions that are this member's now. A failed write or read is logged and decides
    /// nothing (the broker may be away; a member not heard from for a session loses its share).
    pub fn tick(&mut self) -> Option<BTreeSet<TopicPartition>> {
        if self
            .last_beat
            .is_none_or(|t| t.elapsed() >= HEARTBEAT_EVERY)
        {
            if let Err(e) = self.beat() {
                tracing::warn!("membership from the log: heartbeat: {e}");
                self.last_beat = Some(Instant::now());
            }
        }
        if self.last_look.is_some_and(|t| t.elapsed() < LOOK_EVERY) {
            return None;
        }
        self.last_look = Some(Instant::now());
        match self.reader.raw(&self.topic, 0, self.next) {
            Ok((records, next)) => {
                let now = Instant::now();
                let data = records.iter().filter(|r| r.is_data());
                for (key, value, _) in data.map(parts_of) {
                    if let Some((t, left)) = token_of(key, value) {
                        self.heard.note(&t, now, left);
                    }
                }
                self.next = next;
            }
            Err(e) => {
                tracing::warn!("membership from the log: reading the claims topic: {e}");
                return None;
            }
        }
        let live = self.heard.live(Instant::now(), self.session);
        Some(share(&self.parts, &live, &self.token))
    }

    /// Writes the record that moves the group of this roster's topic to membership from the log
    /// ([`super::roster::MOVE_KEY`]), for the members still in a consumer group to read.
    pub fn announce_move(&mut self) -> Result<(), MembersError> {
        self.write_record(MOVE_KEY, MOVE_VALUE)
    }

    /// Writes the record that says this process left, so the others take its partitions at once.
    pub fn leave(&mut self) {
        if let Err(e) = self.write(LEAVE_KEY) {
            tracing::warn!("membership from the log: leaving: {e}");
        }
    }
}

/// What a pipeline's group decided for every member, as its claims topic records it: the eager
/// rebalance protocol ([`super::assignor::FALLBACK_KEY`]), membership from the log
/// ([`super::roster::MOVE_KEY`]). A sink of the pipeline follows the same decisions: it runs
/// against the same broker, whose group coordinator the pipeline's members found wanting.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct GroupDecisions {
    /// The group gave up the cooperative rebalance protocol.
    pub eager: bool,
    /// The group left the broker's consumer group for membership from the log.
    pub log_membership: bool,
}

impl GroupDecisions {
    /// Reads the decisions from partition 0 of `claims_topic` (where members write them), from
    /// its start. A topic that cannot be read (it may not exist yet) has decided nothing.
    pub fn read(brokers: impl Into<Brokers>, claims_topic: &str) -> GroupDecisions {
        DecisionsWatch::new(brokers, claims_topic).look()
    }

    /// The decisions with those of one more claims record.
    fn with(self, key: &[u8], value: &[u8]) -> GroupDecisions {
        GroupDecisions {
            eager: self.eager || super::assignor::is_fallback(key, value),
            log_membership: self.log_membership || super::roster::is_move_to_log(key, value),
        }
    }
}

/// How many reads one look at a group's decisions makes at most.
const LOOK_READS: usize = 100;

/// Watches a group's decisions ([`GroupDecisions`]): each look reads partition 0 of the claims
/// topic on from where the last one stopped, each committed record once (a claims topic under
/// membership from the log grows by every member's heartbeats, so reading it whole at every look
/// would cost more as it grows).
#[derive(Debug)]
pub struct DecisionsWatch {
    /// The reader, connected on the first look and again after a read fails.
    reader: LogReader,
    following: Following,
    decided: GroupDecisions,
}

impl DecisionsWatch {
    /// A watch over `claims_topic` that has read nothing yet.
    pub fn new(brokers: impl Into<Brokers>, claims_topic: &str) -> DecisionsWatch {
        DecisionsWatch {
            reader: LogReader::lazy(brokers),
            following: {
                let mut f = Following::new(claims_topic);
                f.follow(0, 0);
                f
            },
            decided: GroupDecisions::default(),
        }
    }

    /// The decisions recorded so far, reading what committed since the last look (a read that
    /// fails, as of a topic that does not exist yet, adds nothing; the next look tries again).
    pub fn look(&mut self) -> GroupDecisions {
        let mut fresh = Vec::new();
        // Reads on while the log holds more, a bounded number of times: a look must not hang on
        // a partition whose end stays out of reach.
        for _ in 0..LOOK_READS {
            match self.reader.poll(&mut self.following, 0, |r| fresh.push(r)) {
                Ok(_) if self.following.is_behind() => continue,
                _ => break,
            }
        }
        // Records handed on before a read failed count: the next look reads on after them.
        for (key, value, _) in fresh.iter().map(parts_of) {
            self.decided = self.decided.with(key, value);
        }
        self.decided
    }
}
