//! Fault injection with librdkafka's mock cluster (3 brokers, in this test process; `tidemark run`
//! connects to it over TCP as a child process): errors on Produce, AddPartitionsToTxn, EndTxn and
//! TxnOffsetCommit, and a broker outage, while input keeps arriving.
//!
//! The judge. The mock cluster writes no COMMIT/ABORT markers and serves aborted records to every
//! consumer, so the raw-log audit of the other tests cannot tell an aborted transaction from a
//! committed one here. What can be judged: after every fault the member either recovered (it keeps
//! running and exits 0 on SIGTERM) or stopped with a non-zero exit; every expected pane and dead
//! letter is in the log; and every extra copy of a (dedup_id, pane_index) or of a dead letter is
//! byte-identical to the first, i.e. a replay of an aborted transaction, which a real broker's
//! markers hide (the abort-and-replay path itself is judged exactly-once on Tansu by the crash and
//! fencing tests). Wrong rewinding (state counted twice, offsets skipped) shows up as a value that
//! differs from `simulate` or a missing pane.

use crate::common;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::mocking::MockCluster;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 3;

/// Injects one fault into the mock cluster.
type Injection<'a> = Box<dyn Fn() + 'a>;

/// Every record of `topic` (read_uncommitted, from the beginning): (headers, value).
fn all_records(bootstrap: &str, topic: &str) -> Vec<(BTreeMap<String, String>, Vec<u8>)> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "judge")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_uncommitted")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut eof = BTreeSet::new();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while eof.len() < PARTITIONS as usize {
        assert!(Instant::now() < deadline, "reading {topic} timed out");
        match c.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let mut h = BTreeMap::new();
                if let Some(hs) = m.headers() {
                    for x in hs.iter() {
                        let v = x.value.map(|v| String::from_utf8_lossy(v).into_owned());
                        h.insert(x.key.to_string(), v.unwrap_or_default());
                    }
                }
                out.push((h, m.payload().unwrap_or_default().to_vec()));
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                eof.insert(p);
            }
            _ => {}
        }
    }
    out
}

/// Produces input records, failing the test if any is not delivered.
struct InputProducer(rdkafka::producer::BaseProducer<Failures>);

struct Failures(std::sync::atomic::AtomicUsize);

impl rdkafka::ClientContext for Failures {}

impl rdkafka::producer::ProducerContext for Failures {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &rdkafka::producer::DeliveryResult<'_>, _: ()) {
        if r.is_err() {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

impl InputProducer {
    fn new(bootstrap: &str) -> InputProducer {
        let p = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("enable.idempotence", "true")
            // After the broker outage the producer must find broker 2 again soon: librdkafka's
            // reconnect backoff grows to 10 s by default.
            .set("reconnect.backoff.max.ms", "1000")
            .create_with_context(Failures(Default::default()))
            .unwrap();
        InputProducer(p)
    }

    fn send(&self, records: &[(i32, String, String)]) {
        use rdkafka::producer::{BaseRecord, Producer};
        for (p, k, v) in records {
            self.0
                .send(BaseRecord::to("events").partition(*p).key(k).payload(v))
                .unwrap();
        }
        // The test's own producer shares the mock cluster with the member: after an injected
        // outage its delivery can take more than 30 s. Its records are the input, not what is
        // judged, so it gets two minutes before the test gives up.
        let started = Instant::now();
        while let Err(e) = self.0.flush(Duration::from_secs(10)) {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "the test's input producer could not deliver its records in 120 s: {e}"
            );
            eprintln!("input not yet delivered after {:?}: {e}", started.elapsed());
        }
        let failed = self.0.context().0.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(failed, 0, "input records were not delivered");
    }
}

fn wait_ready(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if common::http_get(port, "/readyz").is_some_and(|(code, _)| code == 200) {
            return;
        }
        assert!(Instant::now() < deadline, "the member never became ready");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn scrape_aborted(port: u16) -> Option<f64> {
    let (_, text) = common::http_get(port, "/metrics")?;
    Some(
        text.lines()
            .find_map(|l| l.strip_prefix(r#"tidemark_transactions_total{outcome="aborted"} "#))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0),
    )
}

#[test]
fn injected_faults_never_lose_or_change_a_result() {
    let mock = MockCluster::new(3).unwrap();
    let bootstrap = mock.bootstrap_servers();
    for t in ["events", "panes", "dead", "scn-changelog"] {
        mock.create_topic(t, PARTITIONS, 1).unwrap();
    }
    mock.create_topic("scn-claims", 1, 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let cfg = dir.path().join("pipeline.toml");
    let text = common::pipeline(
        &bootstrap,
        &dir.path().join("state"),
        Some("faults"),
        &format!("[metrics]\naddress = \"127.0.0.1:{port}\"\n"),
    );
    std::fs::write(&cfg, &text).unwrap();
    let scenario = common::Scenario::generate_for(&text, PARTITIONS, 4_000, 7);

    let child = common::start_member(&cfg);
    wait_ready(port);
    let faults: Vec<(&str, Injection)> = vec![
        (
            "produce: not leader (retriable)",
            Box::new(|| {
                mock.request_errors(
                    RDKafkaApiKey::Produce,
                    &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION; 3],
                )
            }),
        ),
        (
            "AddPartitionsToTxn: coordinator not available",
            Box::new(|| {
                mock.request_errors(
                    RDKafkaApiKey::AddPartitionsToTxn,
                    &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE; 2],
                )
            }),
        ),
        (
            "EndTxn: not coordinator, load in progress",
            Box::new(|| {
                mock.request_errors(
                    RDKafkaApiKey::EndTxn,
                    &[
                        RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_COORDINATOR,
                        RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS,
                    ],
                )
            }),
        ),
        (
            "TxnOffsetCommit: coordinator load in progress",
            Box::new(|| {
                mock.request_errors(
                    RDKafkaApiKey::TxnOffsetCommit,
                    &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS; 2],
                )
            }),
        ),
        (
            "produce: invalid record (the transaction must abort)",
            Box::new(|| {
                mock.request_errors(
                    RDKafkaApiKey::Produce,
                    &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_RECORD],
                )
            }),
        ),
        (
            "AddPartitionsToTxn: topic authorization failed (abortable)",
            Box::new(|| {
                mock.request_errors(
                    RDKafkaApiKey::AddPartitionsToTxn,
                    &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED],
                )
            }),
        ),
        (
            "broker 2 down for 1.5 s",
            Box::new(|| {
                mock.broker_down(2).unwrap();
                std::thread::sleep(Duration::from_millis(1500));
                mock.broker_up(2).unwrap();
            }),
        ),
    ];
    // Input arrives in batches; after each batch (flushed, so the test's own producer is idle and
    // the injected errors hit the member's requests, not the input) one fault is injected while
    // the member works on that batch. Injected Produce errors would otherwise be able to fail the
    // test's input records, which changes the input, not the processor.
    let input = InputProducer::new(&bootstrap);
    let chunks: Vec<_> = scenario.records.chunks(400).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        input.send(chunk);
        if let Some((what, inject)) = faults.get(i) {
            eprintln!("injecting: {what}");
            inject();
        }
        std::thread::sleep(Duration::from_millis(700));
    }
    assert!(chunks.len() > faults.len(), "every fault meets work");

    // Wait until every expected pane and dead letter is in the log (copies allowed, see above).
    let expected: BTreeSet<String> = scenario.expected.iter().cloned().collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    let (panes, dead) = loop {
        let panes = all_records(&bootstrap, "panes");
        let dead = all_records(&bootstrap, "dead");
        let distinct: BTreeSet<String> = panes
            .iter()
            .map(|(_, v)| String::from_utf8(v.clone()).unwrap())
            .collect();
        if expected.is_subset(&distinct) || Instant::now() > deadline {
            break (panes, dead);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let aborted = scrape_aborted(port);
    let status = common::stop_member(child);
    assert!(
        status.success(),
        "tidemark run did not recover from the injected faults: {status}"
    );

    // Every copy of a pane id is byte-identical; the distinct panes are exactly simulate's.
    let mut by_id: BTreeMap<(String, String), BTreeSet<Vec<u8>>> = BTreeMap::new();
    for (h, v) in &panes {
        let id = (
            h["tidemark.dedup_id"].clone(),
            h["tidemark.pane_index"].clone(),
        );
        by_id.entry(id).or_default().insert(v.clone());
    }
    for (id, values) in &by_id {
        assert_eq!(values.len(), 1, "{id:?} was written with different values");
    }
    let distinct: BTreeSet<String> = by_id
        .values()
        .map(|v| String::from_utf8(v.iter().next().unwrap().clone()).unwrap())
        .collect();
    let missing: Vec<&String> = expected.difference(&distinct).collect();
    let extra: Vec<&String> = distinct.difference(&expected).collect();
    assert!(missing.is_empty(), "missing panes: {missing:?}");
    assert!(
        extra.is_empty(),
        "panes simulate does not compute: {extra:?}"
    );

    // Dead letters: every source record once, copies identical.
    let mut dead_by_source: BTreeMap<(String, String), BTreeSet<Vec<u8>>> = BTreeMap::new();
    for (h, v) in &dead {
        let id = (
            h["tidemark.source_partition"].clone(),
            h["tidemark.source_offset"].clone(),
        );
        dead_by_source.entry(id).or_default().insert(v.clone());
    }
    assert!(dead_by_source.values().all(|v| v.len() == 1));
    assert_eq!(dead_by_source.len(), scenario.expected_dead, "dead letters");

    // The faults did happen: aborted transactions were replayed (copies exist) and counted.
    let copies = panes.len() + dead.len() - by_id.len() - dead_by_source.len();
    eprintln!(
        "{} pane records for {} panes, {copies} replayed copies, aborted transactions: {aborted:?}",
        panes.len(),
        by_id.len()
    );
    assert!(
        aborted.unwrap_or(0.0) >= 1.0,
        "no transaction was aborted: the abortable faults did not reach the member"
    );
}
