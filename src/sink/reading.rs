//! What a sink reads: its assigned partitions of the pipeline's output topics, followed in their
//! raw logs from the offsets the sink stored, each committed record once.

use super::{Offsets, TopicPartition};
use crate::kafka::raw_log::{Following, LogReader, RawRecord};
use crate::kafka::secure::Brokers;
use std::collections::BTreeMap;

/// The sink's reader of the raw log and, per topic, the partitions it follows.
#[derive(Debug)]
pub(super) struct Reading {
    /// Connected on first use, and again after a read fails.
    reader: LogReader,
    topics: BTreeMap<String, Following>,
}

impl Reading {
    /// Reads nothing yet of `topics`, on the brokers `brokers`. Transactions older than
    /// `transaction_timeout` (ms, the pipeline's) without a marker are given up as aborted.
    pub(super) fn new(brokers: &Brokers, topics: &[String], transaction_timeout: i64) -> Reading {
        Reading {
            reader: LogReader::lazy(brokers),
            topics: topics
                .iter()
                .map(|t| {
                    let following = Following::new(t).giving_up_after(transaction_timeout);
                    (t.clone(), following)
                })
                .collect(),
        }
    }

    /// Whether partition `tp` is followed.
    pub(super) fn follows(&self, tp: &TopicPartition) -> bool {
        self.topics
            .get(&tp.0)
            .is_some_and(|f| f.resume_at(tp.1).is_some())
    }

    /// Follows partition `tp` from offset `from`.
    pub(super) fn follow(&mut self, tp: &TopicPartition, from: i64) {
        if let Some(f) = self.topics.get_mut(&tp.0) {
            f.follow(tp.1, from);
        }
    }

    /// Stops following every partition `keep` refuses.
    pub(super) fn retain(&mut self, keep: impl Fn(&TopicPartition) -> bool) {
        for (topic, f) in &mut self.topics {
            let gone: Vec<i32> = f
                .partitions()
                .filter(|&p| !keep(&(topic.clone(), p)))
                .collect();
            gone.into_iter().for_each(|p| f.unfollow(p));
        }
    }

    /// Where each followed partition's reading stands: every committed record before it has
    /// been handed on. What the sink stores with a batch.
    pub(super) fn positions(&self) -> Offsets {
        let mut out = Offsets::new();
        for (topic, f) in &self.topics {
            for p in f.partitions() {
                let at = f.resume_at(p).expect("followed");
                out.insert((topic.clone(), p), at);
            }
        }
        out
    }

    /// Per followed partition, how far its end lay past its position at the last read.
    pub(super) fn lags(&self) -> Vec<(TopicPartition, i64)> {
        let mut out = Vec::new();
        for (topic, f) in &self.topics {
            for p in f.partitions() {
                let (end, at) = (f.end(p), f.resume_at(p));
                let lag = end.zip(at).map_or(0, |(e, a)| (e - a).max(0));
                out.push(((topic.clone(), p), lag));
            }
        }
        out
    }

    /// Reads once what committed on every followed partition since the last read: the records,
    /// with their topics, in offset order per partition. A read that fails is logged and
    /// reconnects next time; what it handed on before failing is kept.
    pub(super) fn read(&mut self) -> Vec<(String, RawRecord)> {
        let mut fresh = Vec::new();
        if self.topics.values().all(|f| f.is_idle()) {
            return fresh;
        }
        for (topic, f) in &mut self.topics {
            if f.is_idle() {
                continue;
            }
            if let Err(e) = self.reader.poll(f, 0, |r| fresh.push((topic.clone(), r))) {
                tracing::warn!("reading {topic}: {e}");
                break;
            }
        }
        fresh
    }
}
