//! The raw mode: every record of one partition from an offset to its end, markers included,
//! whatever became of its transaction, for logs where a record counts as soon as it is written
//! (the claims topic) and for looking at a log as it is.

use super::client::*;
use super::fetch::*;
use super::*;

/// How many answers that stop short of the high watermark a raw read asks again.
const SHORT_ANSWERS: usize = 50;

/// Every record of partition `partition` of `topic` (data and markers) from `from` to the end of
/// the log, and the offset after the last one. An answer that brings nothing while the high
/// watermark lies further on is asked again (a broker may answer before it has read its log,
/// [`crate::quirks::FETCH_ANSWERED_BEFORE_READ`]); the read fails rather than stop short of
/// the end.
pub(super) fn read(
    cluster: &mut Cluster,
    topic: &str,
    partition: i32,
    from: i64,
) -> Result<(Vec<RawRecord>, i64), RawLogError> {
    let addr = cluster.leader(topic, partition)?;
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
        let resp = cluster.fetch(&addr, &req)?;
        let mut high_watermark = -1;
        let before = offset;
        for p in fetched_partitions(resp, topic, partition, offset)? {
            high_watermark = high_watermark.max(p.high_watermark);
            let Some(bytes) = p.records else { continue };
            each_new_record(bytes, &mut offset, |r| {
                out.push(RawRecord::from_record(partition, r))
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
