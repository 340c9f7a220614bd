//! `tidemark audit` against a real broker: committed, aborted and open transactions are resolved
//! from the raw log, duplicates of (dedup_id, pane_index) and pane-index gaps are found.

mod common;

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
