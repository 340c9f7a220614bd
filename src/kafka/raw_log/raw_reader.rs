//! Reads one partition from where it last stopped, for a member's regular looks at a topic of one
//! partition (the claims topic).

use super::client::*;
use super::fetch::*;
use super::*;

/// Reads one partition's raw log from an offset to its end, again and again, on kept
/// connections: every data record, whatever became of its transaction (committed, aborted or
/// still open). For logs where a record counts as soon as it is written, such as the claims
/// topic's.
pub struct RawPartitionReader {
    topic: String,
    partition: i32,
    cluster: Cluster,
}

impl std::fmt::Debug for RawPartitionReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawPartitionReader")
            .field("topic", &self.topic)
            .field("partition", &self.partition)
            .finish_non_exhaustive()
    }
}

/// How many answers that stop short of the high watermark a [`RawPartitionReader`] asks again.
pub(super) const SHORT_ANSWERS: usize = 50;

impl RawPartitionReader {
    /// Connects to the first bootstrap server.
    pub fn connect(
        bootstrap: &str,
        topic: &str,
        partition: i32,
    ) -> Result<RawPartitionReader, RawLogError> {
        Ok(RawPartitionReader {
            topic: topic.to_string(),
            partition,
            cluster: Cluster::connect(bootstrap)?,
        })
    }

    /// Every data record from `from` to the end of the log, and the offset after the last record
    /// (control records included). An answer that brings nothing while the high watermark lies
    /// further on is asked again (a broker may answer before it has read its log,
    /// [`crate::kafka::quirks::FETCH_ANSWERED_BEFORE_READ`]); the read fails rather than stop short of
    /// the end.
    pub fn read_from(&mut self, from: i64) -> Result<(Vec<RawRecord>, i64), RawLogError> {
        let result = self.read_inner(from);
        if result.is_err() {
            self.cluster.forget_leaders();
        }
        result
    }

    pub(super) fn read_inner(&mut self, from: i64) -> Result<(Vec<RawRecord>, i64), RawLogError> {
        let addr = self.cluster.leader(&self.topic, self.partition)?;
        let (topic, partition) = (self.topic.as_str(), self.partition);
        let mut out = Vec::new();
        let mut offset = from;
        let mut short = 0;
        loop {
            // A fetch that may not wait at all may get nothing, not even the high watermark
            // (quirks::FETCH_ANSWERED_BEFORE_READ): this one may wait 1 ms for one byte.
            let req = fetch_request(
                topic,
                &[(partition, offset)],
                FetchLimits {
                    isolation: 0,
                    max_wait_ms: 1,
                    min_bytes: 1,
                    max_bytes: 4 << 20,
                    partition_max_bytes: 4 << 20,
                },
            );
            let resp = self.cluster.fetch(&addr, &req)?;
            let mut high_watermark = -1;
            let before = offset;
            for p in fetched_partitions(resp, topic, partition, offset)? {
                high_watermark = high_watermark.max(p.high_watermark);
                let Some(bytes) = p.records else { continue };
                each_new_record(bytes, &mut offset, |r| {
                    if !r.control {
                        out.push(RawRecord::from_record(partition, r));
                    }
                })?;
            }
            if offset > before {
                short = 0;
                continue;
            }
            if offset >= high_watermark {
                return Ok((out, offset));
            }
            short += 1;
            if short > SHORT_ANSWERS {
                return Err(RawLogError::Protocol(format!(
                    "{topic}/{partition}: the broker answers nothing at offset {offset}, below its high watermark {high_watermark}"
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
}
