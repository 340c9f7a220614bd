//! `tidemark audit` against a real broker: committed, aborted and open transactions are resolved
//! from the raw log, duplicates of (dedup_id, pane_index) and pane-index gaps are found.

use crate::common;

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;
use std::time::Duration;
use tidemark::audit::check_panes;
use tidemark::kafka::raw_log::read_topic;

fn pane_headers(id: &str, idx: u32) -> OwnedHeaders {
    OwnedHeaders::new()
        .insert(Header {
            key: "tidemark.dedup_id",
            value: Some(id),
        })
        .insert(Header {
            key: "tidemark.pane_index",
            value: Some(&idx.to_string()),
        })
}

#[test]
fn audit_resolves_transactions_from_the_raw_log() {
    let broker = common::Broker::start();
    broker.create_topic("panes", 2);
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &broker.addr)
        .set("transactional.id", "audit-test")
        .create()
        .unwrap();
    let t = Duration::from_secs(10);
    producer.init_transactions(t).unwrap();
    let send = |id: &str, idx: u32, partition: i32| {
        let headers = pane_headers(id, idx);
        producer
            .send(
                BaseRecord::to("panes")
                    .key(id)
                    .payload("{}")
                    .partition(partition)
                    .headers(headers),
            )
            .unwrap();
    };
    // Committed: windows w0..w9, panes 0 and 1, on two partitions.
    producer.begin_transaction().unwrap();
    for w in 0..10 {
        send(&format!("w{w}"), 0, w % 2);
        send(&format!("w{w}"), 1, w % 2);
    }
    producer.flush(t).unwrap();
    producer.commit_transaction(t).unwrap();
    // Aborted: 7 records that must not count.
    producer.begin_transaction().unwrap();
    for w in 0..7 {
        send(&format!("w{w}"), 2, w % 2);
    }
    producer.flush(t).unwrap();
    producer.abort_transaction(t).unwrap();
    // Committed again: a duplicate of (w3, 1) and a gap for w5 (pane 3 without pane 2).
    producer.begin_transaction().unwrap();
    send("w3", 1, 1);
    send("w5", 3, 1);
    producer.flush(t).unwrap();
    producer.commit_transaction(t).unwrap();
    // Open: never committed.
    producer.begin_transaction().unwrap();
    send("w9", 2, 1);
    producer.flush(t).unwrap();

    let log = read_topic(&broker.addr, "panes").unwrap();
    assert_eq!(log.committed.len(), 22, "committed records");
    assert_eq!(log.aborted, 7);
    assert_eq!(log.open, 1);
    assert!(log.aborted_served_to_read_committed <= 7);
    eprintln!(
        "aborted records served to read_committed by this broker: {}",
        log.aborted_served_to_read_committed
    );
    let report = check_panes(&log.committed);
    assert_eq!(report.panes, 22);
    assert_eq!(report.windows, 10);
    assert_eq!(report.duplicates, vec![("w3".to_string(), 0, 1, 2)]);
    assert_eq!(report.gaps, vec![("w5".to_string(), 0)]);
    assert_eq!(report.not_panes, 0);
}

/// The peek that tells an input partition caught up: data after an offset is found, the commit
/// marker after the last record is not data, an open transaction's records are (they may
/// commit) until the transaction aborts, and an empty partition has none.
#[test]
fn a_peek_tells_data_from_markers() {
    use tidemark::kafka::raw_log::LogReader;
    let broker = common::Broker::start();
    broker.create_topic("peeked", 3);
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &broker.addr)
        .set("transactional.id", "peek-test")
        .create()
        .unwrap();
    let t = Duration::from_secs(10);
    producer.init_transactions(t).unwrap();
    // Partition 0: records 0..5 committed (the marker takes offset 5).
    producer.begin_transaction().unwrap();
    for i in 0..5 {
        producer
            .send(
                BaseRecord::to("peeked")
                    .key("k")
                    .payload(&format!("{i}"))
                    .partition(0),
            )
            .unwrap();
    }
    producer.flush(t).unwrap();
    producer.commit_transaction(t).unwrap();
    // Partition 1: one record of a transaction still open.
    producer.begin_transaction().unwrap();
    producer
        .send(
            BaseRecord::to("peeked")
                .key("k")
                .payload("open")
                .partition(1),
        )
        .unwrap();
    producer.flush(t).unwrap();
    let mut reader = LogReader::connect(&broker.addr).unwrap();
    let mut ask = |p: i32, offset: i64| reader.peek("peeked", &[(p, offset)]).unwrap()[&p];
    assert!(ask(0, 0), "records from offset 0");
    assert!(ask(0, 4), "the last record");
    assert!(!ask(0, 5), "only the commit marker after the last record");
    assert!(!ask(0, 6), "the end of the log");
    assert!(
        ask(1, 0),
        "a record of an open transaction may still commit"
    );
    assert!(!ask(2, 0), "an empty partition");
    let all = reader.peek("peeked", &[(0, 5), (1, 0), (2, 0)]).unwrap();
    assert_eq!(
        all.into_iter().collect::<Vec<_>>(),
        [(0, false), (1, true), (2, false)]
    );
    producer.abort_transaction(t).unwrap();
    // Once aborted, the open record and its ABORT marker are no data: an input whose last
    // records were aborted is caught up, and a partition that holds nothing else is no stall.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while reader.peek("peeked", &[(1, 0)]).unwrap()[&1] {
        assert!(
            std::time::Instant::now() < deadline,
            "records of an aborted transaction count as data"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The follow mode holds committed records back behind a transaction with no marker yet, and
/// gives that transaction up as aborted once it is older than the transaction timeout (its
/// producer is gone for good, as far as the reader can tell): the records after it come out, the
/// open transaction's never do. While it waits, a read would resume at the open transaction's
/// first record; once it gave up, after the last record.
#[test]
fn following_gives_up_a_transaction_older_than_the_timeout() {
    use tidemark::kafka::raw_log::{Following, LogReader};
    let broker = common::Broker::start();
    broker.create_topic("tailed", 1);
    let t = Duration::from_secs(10);
    let transactional = |id: &str| -> BaseProducer {
        let p: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &broker.addr)
            .set("transactional.id", id)
            .create()
            .unwrap();
        p.init_transactions(t).unwrap();
        p
    };
    let stuck = transactional("tail-stuck");
    stuck.begin_transaction().unwrap();
    stuck
        .send(
            BaseRecord::to("tailed")
                .key("k")
                .payload("stuck")
                .partition(0),
        )
        .unwrap();
    stuck.flush(t).unwrap();
    let other = transactional("tail-other");
    other.begin_transaction().unwrap();
    other
        .send(
            BaseRecord::to("tailed")
                .key("k")
                .payload("after")
                .partition(0),
        )
        .unwrap();
    other.flush(t).unwrap();
    other.commit_transaction(t).unwrap();

    let timeout_ms = 3_000;
    let mut reader = LogReader::connect(&broker.addr).unwrap();
    let mut following = Following::new("tailed").giving_up_after(timeout_ms);
    following.follow(0, 0);
    let started = std::time::Instant::now();
    let mut seen: Vec<(String, Duration)> = Vec::new();
    let mut waited_at = None;
    while started.elapsed() < Duration::from_secs(15) && seen.is_empty() {
        reader
            .poll(&mut following, 10, |r| {
                let v = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).to_string();
                seen.push((v, started.elapsed()));
            })
            .unwrap();
        if seen.is_empty() {
            waited_at = following.resume_at(0);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(waited_at, Some(0), "held at the open transaction's record");
    let values: Vec<&str> = seen.iter().map(|(v, _)| v.as_str()).collect();
    assert_eq!(values, ["after"], "only the committed record comes out");
    assert!(
        seen[0].1 >= Duration::from_millis(1_000),
        "held back behind the open transaction at first (out after {:?})",
        seen[0].1
    );
    // The stuck record (0), the other's record (1) and its COMMIT marker (2) are behind.
    assert_eq!(
        following.resume_at(0),
        Some(3),
        "resumes after the last record"
    );
    stuck.abort_transaction(t).unwrap();
}
