//! What a member runs with and never changes while it runs: the pipeline, its Kafka settings,
//! the topology, and what was decided at startup from the topics.

use crate::changelog::OpenPolicy;
use crate::config::{KafkaSpec, PipelineSpec};
use rdkafka::Offset;
use std::time::Duration;

/// How records reach the windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Topology {
    /// The input is partitioned by the grouping key: each input partition is a `Part`.
    Direct,
    /// The repartition hop, into this many repartition partitions.
    Hop {
        /// Partitions of the repartition topic.
        partitions: i32,
    },
    /// `--passthrough`: input records are copied to the output topic.
    Passthrough,
    /// A pipeline of rows: each input record becomes a row on the output topic.
    Rows,
}

/// The member's fixed settings.
pub(super) struct Settings {
    /// The pipeline.
    pub(super) spec: PipelineSpec,
    /// Its `[kafka]` section.
    pub(super) k: KafkaSpec,
    pub(super) topology: Topology,
    /// The names of every input partition: the watermark sources of each repartition partition.
    pub(super) source_names: Vec<String>,
    /// Partitions of the offsets topic (the first stage's offset markers).
    pub(super) offsets_partitions: i32,
    /// The fingerprint of what shapes this pipeline's state ([`PipelineSpec::fingerprint`]).
    pub(super) fingerprint: String,
    /// Where a partition on which nothing has ever committed starts (`auto.offset.reset`).
    pub(super) reset: Offset,
}

impl Settings {
    /// The input topic of index `i` (the hop names source topics by index).
    pub(super) fn input_topic(&self, i: u16) -> &str {
        &self.k.input_topics[usize::from(i)]
    }

    /// The index of input topic `topic`, if it is one.
    pub(super) fn input_index(&self, topic: &str) -> Option<u16> {
        self.k
            .input_topics
            .iter()
            .position(|t| t == topic)
            .map(|i| i as u16)
    }

    /// The topic whose partitions are the windowing partitions (`Part`s): the repartition topic
    /// behind the hop, else the input topic.
    pub(super) fn parts_topic(&self) -> &str {
        match self.topology {
            Topology::Hop { .. } => &self.k.repartition_topic,
            _ => &self.k.input_topics[0],
        }
    }

    /// Whether partition-holding topic `topic` holds windowing partitions (else input
    /// partitions of the first stage).
    pub(super) fn is_parts_topic(&self, topic: &str) -> bool {
        match self.topology {
            Topology::Direct => true,
            Topology::Hop { .. } => topic == self.k.repartition_topic,
            Topology::Passthrough | Topology::Rows => false,
        }
    }

    /// How restores treat open transactions.
    pub(super) fn open_policy(&self) -> OpenPolicy {
        OpenPolicy {
            transaction_timeout: self.transaction_timeout(),
            poll: Duration::from_millis(100),
        }
    }

    /// `transaction.timeout.ms`.
    pub(super) fn transaction_timeout(&self) -> Duration {
        Duration::from_millis(self.k.transaction_timeout as u64)
    }

    /// How long an idle claim is written again after: half the idle timeout, so the second stage
    /// never sees it run out while the source stays idle.
    pub(super) fn idle_refresh(&self) -> i64 {
        self.spec
            .engine
            .watermark
            .idle_timeout
            .map_or(i64::MAX, |t| (t / 2).max(1))
    }
}
