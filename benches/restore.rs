//! Changelog restore throughput: a changelog partition of N state records (default 1,000,000,
//! `TIDEMARK_BENCH_RECORDS`) is written to a local Tansu broker in committed transactions of
//! 10,000 records, each with its offset marker, as `tidemark run` writes them; then
//! `changelog::restore` rebuilds an empty local store from it three times. Prints records/s
//! and MB/s (keys + values) per restore and the median.
//!
//!   cargo bench --bench restore

#[path = "../tests/common/mod.rs"]
mod common;

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;
use std::time::{Duration, Instant};
use tidemark::changelog::{restore, OpenPolicy, OFFSET_MARKER_KEY, STAMP_HEADER};
use tidemark::state::store::StateStore;

const TXN: usize = 10_000;

fn main() {
    let n: usize = std::env::var("TIDEMARK_BENCH_RECORDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let broker = common::Broker::start();
    broker.create_topic("bench-changelog", 1);
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &broker.addr)
        .set("transactional.id", "bench-restore")
        .set("linger.ms", "20")
        .set("batch.num.messages", "10000")
        .create()
        .unwrap();
    producer.init_transactions(Duration::from_secs(30)).unwrap();
    let started = Instant::now();
    let mut bytes = 0usize;
    let value = [7u8; 40];
    for (t, chunk) in (0..n).collect::<Vec<_>>().chunks(TXN).enumerate() {
        producer.begin_transaction().unwrap();
        let stamp = ((t + 1) * TXN).to_string();
        for &i in chunk {
            // A window entry's key: tag 1, then an order-preserving key and window.
            let mut key = vec![1u8];
            key.extend_from_slice(format!("user-{:06}", i % 100_000).as_bytes());
            key.extend_from_slice(&(i as u64 / 100_000).to_be_bytes());
            bytes += key.len() + value.len();
            let headers = OwnedHeaders::new().insert(Header {
                key: STAMP_HEADER,
                value: Some(&stamp),
            });
            let mut record = BaseRecord::<[u8], [u8]>::to("bench-changelog")
                .partition(0)
                .key(&key[..])
                .payload(&value[..])
                .headers(headers);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((_, r)) => {
                        record = r;
                        producer.poll(Duration::from_millis(5));
                    }
                }
            }
        }
        let headers = OwnedHeaders::new().insert(Header {
            key: STAMP_HEADER,
            value: Some(&stamp),
        });
        producer
            .send(
                BaseRecord::<[u8], [u8]>::to("bench-changelog")
                    .partition(0)
                    .key(OFFSET_MARKER_KEY)
                    .payload(stamp.as_bytes())
                    .headers(headers),
            )
            .map_err(|(e, _)| e)
            .unwrap();
        producer
            .commit_transaction(Duration::from_secs(60))
            .unwrap();
    }
    println!(
        "wrote {n} changelog records ({:.1} MB) in {:.1} s",
        bytes as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    let policy = OpenPolicy {
        transaction_timeout: Duration::from_secs(10),
        poll: Duration::from_millis(100),
    };
    let mut rates = Vec::new();
    for round in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path()).unwrap();
        let started = Instant::now();
        let stats = restore(
            &store,
            "window.p0",
            &broker.addr.as_str().into(),
            "bench-changelog",
            0,
            policy,
        )
        .unwrap();
        let secs = started.elapsed().as_secs_f64();
        assert_eq!(stats.applied, n, "every record applied");
        assert_eq!(stats.committed, Some(n.div_ceil(TXN) as i64 * TXN as i64));
        let rate = n as f64 / secs;
        println!(
            "restore {round}: {n} records in {secs:.2} s: {rate:.0} records/s, {:.1} MB/s",
            bytes as f64 / 1e6 / secs
        );
        rates.push(rate);
    }
    rates.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "restore: median {:.0} records/s over 3 restores of {n} records (target >= 1,000,000)",
        rates[1]
    );
}
