//! The broker quirks catalogue (`tidemark::kafka::quirks`) checked against the broker the tests
//! run on: each test makes the situation a quirk describes with plain clients (librdkafka, or raw
//! requests) and asserts what the catalogue says of this broker: a quirk listed for it shows, a
//! quirk not listed does not (the broker behaves as Apache Kafka does). CI runs this binary on
//! every test broker, so the catalogue is checked both ways.

use crate::common;

use bytes::Bytes;
use common::{Broker, BrokerKind};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiKey, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::RecordBatchDecoder;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use std::time::{Duration, Instant};
use tidemark::kafka::quirks::{self, Quirk};
use tidemark::kafka::raw_log::RawClient;

/// Whether the catalogue says the broker under test has `quirk`; printed for the reader.
fn expected(broker: &Broker, quirk: &Quirk) -> bool {
    let has = quirk.seen_on(broker.kind.name());
    eprintln!(
        "{}: {} expected on {}",
        quirk.name,
        if has { "quirk" } else { "Kafka's behaviour" },
        broker.kind.name()
    );
    has
}

fn producer(broker: &Broker, extra: &[(&str, &str)]) -> BaseProducer {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &broker.addr);
    for (k, v) in extra {
        c.set(*k, *v);
    }
    c.create().unwrap()
}

fn consumer(broker: &Broker, group: &str, extra: &[(&str, &str)]) -> BaseConsumer {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &broker.addr)
        .set("group.id", group)
        .set("session.timeout.ms", "6000")
        .set("max.poll.interval.ms", "10000")
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false");
    for (k, v) in extra {
        c.set(*k, *v);
    }
    c.create().unwrap()
}

/// Polls `c` until `done` says so (given whether the poll brought an assignment) or `secs` pass.
fn poll_until(c: &BaseConsumer, secs: u64, mut done: impl FnMut(&BaseConsumer) -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if let Some(Err(e)) = c.poll(Duration::from_millis(100)) {
            eprintln!("consumer: {e}");
        }
        if done(c) {
            return true;
        }
    }
    false
}

/// One Fetch (version 11, no session) of partition 0 of `topic` at `offset`, read uncommitted:
/// the number of data records in the answer and its high watermark.
fn raw_fetch(client: &mut RawClient, topic: &str, offset: i64, max_wait_ms: i32) -> (usize, i64) {
    let req = FetchRequest::default()
        .with_replica_id((-1).into())
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_isolation_level(0)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])]);
    let resp: FetchResponse = client.request(ApiKey::Fetch, 11, &req).unwrap();
    // An answer may leave the partition out altogether.
    let Some(p) = resp.responses.first().and_then(|t| t.partitions.first()) else {
        return (0, -1);
    };
    let mut records = 0;
    if let Some(bytes) = &p.records {
        let mut b: Bytes = bytes.clone();
        while !b.is_empty() {
            let Ok(set) = RecordBatchDecoder::decode(&mut b) else {
                break;
            };
            records += set.records.iter().filter(|r| !r.control).count();
        }
    }
    (records, p.high_watermark)
}

/// Sends `n` records to partition 0 of `topic` in one batch (one flush).
fn produce_batch(broker: &Broker, topic: &str, n: usize) {
    let p = producer(broker, &[("linger.ms", "200")]);
    for i in 0..n {
        p.send(
            BaseRecord::to(topic)
                .partition(0)
                .key("k")
                .payload(&format!("v{i}")),
        )
        .unwrap();
    }
    p.flush(Duration::from_secs(10)).unwrap();
}

#[test]
fn read_committed_hides_aborted_records_or_not() {
    let broker = Broker::start();
    broker.create_topic("q", 1);
    let p = producer(&broker, &[("transactional.id", "quirks")]);
    p.init_transactions(Duration::from_secs(30)).unwrap();
    for (n, commit) in [(10, false), (5, true)] {
        p.begin_transaction().unwrap();
        for i in 0..n {
            p.send(
                BaseRecord::to("q")
                    .partition(0)
                    .key("k")
                    .payload(&format!("{i}")),
            )
            .unwrap();
        }
        p.flush(Duration::from_secs(10)).unwrap();
        if commit {
            p.commit_transaction(Duration::from_secs(30)).unwrap();
        } else {
            p.abort_transaction(Duration::from_secs(30)).unwrap();
        }
    }
    let c = consumer(
        &broker,
        "quirks-rc",
        &[("isolation.level", "read_committed")],
    );
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("q", 0, Offset::Beginning).unwrap();
    c.assign(&tpl).unwrap();
    let mut seen = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        match c.poll(Duration::from_millis(200)) {
            Some(Ok(m)) if m.payload().is_some() => seen += 1,
            _ if seen >= 15 => break,
            _ => {}
        }
    }
    let want = if expected(&broker, &quirks::ABORTED_RECORDS_SERVED) {
        15
    } else {
        5
    };
    assert_eq!(seen, want, "records a read_committed consumer was handed");
}

#[test]
fn a_stable_groups_description_carries_assignments_or_not() {
    let broker = Broker::start();
    broker.create_topic("q", 2);
    let c = consumer(&broker, "quirks-describe", &[]);
    c.subscribe(&["q"]).unwrap();
    assert!(
        poll_until(&c, 30, |c| c.assignment().map(|a| a.count()).unwrap_or(0)
            == 2),
        "the consumer was never assigned both partitions"
    );
    let watcher = consumer(&broker, "quirks-describe", &[]);
    // Looked at for a few seconds while the member keeps polling: a description may lag a
    // rebalance.
    let carried = poll_until(&c, 10, |_| {
        let list = watcher
            .fetch_group_list(Some("quirks-describe"), Duration::from_secs(5))
            .unwrap();
        let members: Vec<_> = list.groups().iter().flat_map(|g| g.members()).collect();
        members.len() == 1 && members[0].assignment().is_some_and(|a| !a.is_empty())
    });
    assert_eq!(
        !carried,
        expected(&broker, &quirks::DESCRIPTIONS_WITHOUT_ASSIGNMENTS),
        "the stable group's description carries the member's assignment: {carried}"
    );
}

#[test]
fn a_static_member_is_removed_by_its_instance_id_or_not() {
    let broker = Broker::start();
    broker.create_topic("q", 1);
    let group = "quirks-static";
    {
        let c = consumer(&broker, group, &[("group.instance.id", "static-1")]);
        c.subscribe(&["q"]).unwrap();
        assert!(
            poll_until(&c, 30, |c| c.assignment().map(|a| a.count()).unwrap_or(0)
                == 1),
            "the static member was never assigned"
        );
        // Closing a static member does not leave the group.
    }
    let removed =
        tidemark::kafka::group::remove_static_members(&broker.addr, group, &["static-1"]).unwrap();
    assert_eq!(
        removed == 0,
        expected(&broker, &quirks::LEAVE_BY_INSTANCE_ID_IGNORED),
        "static members the broker says it removed: {removed}"
    );
}

#[test]
fn a_stale_generation_commits_offsets_or_not() {
    let broker = Broker::start();
    broker.create_topic("q", 1);
    let group = "quirks-generation";
    let old = consumer(&broker, group, &[]);
    old.subscribe(&["q"]).unwrap();
    assert!(poll_until(&old, 30, |c| c
        .assignment()
        .map(|a| a.count())
        .unwrap_or(0)
        == 1));
    let stale = old.group_metadata().expect("group metadata");
    drop(old); // leaves the group
    let new = consumer(&broker, group, &[]);
    new.subscribe(&["q"]).unwrap();
    assert!(poll_until(&new, 30, |c| c
        .assignment()
        .map(|a| a.count())
        .unwrap_or(0)
        == 1));
    let p = producer(&broker, &[("transactional.id", "quirks-generation")]);
    p.init_transactions(Duration::from_secs(30)).unwrap();
    p.begin_transaction().unwrap();
    let mut offsets = TopicPartitionList::new();
    offsets
        .add_partition_offset("q", 0, Offset::Offset(0))
        .unwrap();
    let accepted = p
        .send_offsets_to_transaction(&offsets, &stale, Duration::from_secs(30))
        .and_then(|()| p.commit_transaction(Duration::from_secs(30)));
    eprintln!("offsets sent with the old generation: {accepted:?}");
    assert_eq!(
        accepted.is_ok(),
        expected(&broker, &quirks::NO_GENERATION_FENCING),
        "a commit of the old generation's offsets was accepted"
    );
}

#[test]
fn the_high_watermark_after_a_batch_is_its_end_or_not() {
    let broker = Broker::start();
    broker.create_topic("q", 1);
    produce_batch(&broker, "q", 10);
    let c = consumer(&broker, "quirks-hw", &[]);
    let (_, high) = c.fetch_watermarks("q", 0, Duration::from_secs(10)).unwrap();
    let want = if expected(&broker, &quirks::HIGH_WATERMARK_AFTER_BATCH) {
        1
    } else {
        10
    };
    assert_eq!(high, want, "high watermark after one batch of 10");
}

#[test]
fn a_fetch_that_may_not_wait_returns_data_or_not() {
    let broker = Broker::start();
    broker.create_topic("q", 1);
    produce_batch(&broker, "q", 10);
    let mut client = RawClient::connect(&broker.addr).unwrap();
    // Asked several times: a broker that answers before its read does so each time.
    let found: Vec<usize> = (0..5)
        .map(|_| raw_fetch(&mut client, "q", 0, 0).0)
        .collect();
    let empty = found.iter().all(|n| *n == 0);
    assert_eq!(
        empty,
        expected(&broker, &quirks::FETCH_ANSWERED_BEFORE_READ),
        "records in five zero-wait fetches of a partition holding 10: {found:?}"
    );
}

#[test]
fn a_waiting_fetch_waits_and_returns_when_data_arrives_or_not() {
    let broker = Broker::start();
    broker.create_topic("q", 1);
    produce_batch(&broker, "q", 1);
    let mut client = RawClient::connect(&broker.addr).unwrap();
    let (_, end) = {
        let c = consumer(&broker, "quirks-wait", &[]);
        (
            0,
            c.fetch_watermarks("q", 0, Duration::from_secs(10))
                .unwrap()
                .1,
        )
    };
    // Nothing arrives: a fetch that may wait 1.5 s for one byte waits.
    let started = Instant::now();
    raw_fetch(&mut client, "q", end, 1_500);
    let idle = started.elapsed();
    eprintln!("a 1.5 s fetch at the end, no data: answered after {idle:?}");
    assert_eq!(
        idle < Duration::from_millis(500),
        expected(&broker, &quirks::FETCH_NOT_HELD),
        "an empty fetch that may wait 1.5 s was answered after {idle:?}"
    );
    if idle < Duration::from_millis(500) {
        return;
    }
    // Data arrives during the wait: the fetch is answered then.
    let addr = broker.addr.clone();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let p: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &addr)
            .create()
            .unwrap();
        p.send(BaseRecord::to("q").partition(0).key("k").payload("late"))
            .unwrap();
        p.flush(Duration::from_secs(10)).unwrap();
    });
    let started = Instant::now();
    let (records, _) = raw_fetch(&mut client, "q", end, 3_000);
    let took = started.elapsed();
    writer.join().unwrap();
    eprintln!("a 3 s fetch at the end, data written after 0.3 s: {records} records after {took:?}");
    if expected(&broker, &quirks::FETCH_HELD_PAST_DATA) {
        assert!(
            took >= Duration::from_millis(1_000),
            "answered after {took:?}"
        );
    } else {
        assert!(records > 0, "the data written during the wait");
        assert!(
            took < Duration::from_millis(1_000),
            "answered after {took:?}"
        );
    }
}

#[test]
fn an_empty_group_takes_another_protocol_or_not() {
    let broker = Broker::start();
    broker.create_topic("q", 2);
    let group = "quirks-protocol";
    {
        let c = consumer(
            &broker,
            group,
            &[("partition.assignment.strategy", "cooperative-sticky")],
        );
        c.subscribe(&["q"]).unwrap();
        assert!(poll_until(&c, 30, |c| c
            .assignment()
            .map(|a| a.count())
            .unwrap_or(0)
            == 2));
        c.unsubscribe();
        poll_until(&c, 1, |_| false);
    }
    // The group is empty now (the member left); on Kafka it takes any protocol.
    std::thread::sleep(Duration::from_secs(1));
    let c = consumer(
        &broker,
        group,
        &[("partition.assignment.strategy", "range")],
    );
    c.subscribe(&["q"]).unwrap();
    let assigned = poll_until(&c, 20, |c| {
        c.assignment().map(|a| a.count()).unwrap_or(0) == 2
    });
    assert_eq!(
        !assigned,
        expected(&broker, &quirks::GROUP_KEEPS_ITS_PROTOCOL),
        "a range member joined the group its cooperative member had left: assigned {assigned}"
    );
}

#[test]
fn the_fixture_knows_every_broker_of_the_catalogue() {
    for name in quirks::TEST_BROKERS {
        let kind = match *name {
            "tansu" => BrokerKind::Tansu,
            "noida" => BrokerKind::Noida,
            other => panic!("the test fixture cannot start {other}"),
        };
        assert_eq!(kind.name(), *name);
    }
}

#[test]
fn a_member_that_dies_is_evicted_after_its_session_or_not() {
    // A member of a formed group goes silent without leaving (as under SIGKILL; its session is
    // 10 s): Apache Kafka evicts it when its session lapses and gives its partitions to the
    // member that is left.
    let broker = Broker::start();
    broker.create_topic("t", 4);
    let a = consumer(&broker, "g", &[]);
    a.subscribe(&["t"]).unwrap();
    assert!(
        poll_until(&a, 30, |c| c.assignment().unwrap().count() == 4),
        "a lone member is assigned every partition"
    );
    let rogue = common::rogue::Rogue::keeping(&broker.addr, "g", &["t"], 4, &[0]);
    assert!(
        poll_until(&a, 40, |c| {
            let n = c.assignment().unwrap().count();
            n > 0 && n < 4
        }),
        "the second member joins and takes a share"
    );
    rogue.die();
    let died = Instant::now();
    let evicted = poll_until(&a, 40, |c| c.assignment().unwrap().count() == 4);
    eprintln!(
        "the dead member's partitions reached the live one: {evicted} ({:?} after it died)",
        died.elapsed()
    );
    assert_eq!(
        !evicted,
        expected(&broker, &quirks::DEAD_MEMBERS_NOT_EVICTED),
        "whether a dead member is never evicted"
    );
}

#[test]
fn the_earliest_offset_is_the_lowest_in_the_log_or_not() {
    // Ten transactional producers append one record each to a fresh partition at once, round
    // after round, until the broker's earliest offset is past offset 0 (the quirk; about 1 round
    // in 15 on a broker that has it) or 150 rounds pass. The raw-log reader must read all ten
    // records every round, wherever ListOffsets says the log begins.
    let broker = Broker::start();
    let writers = 10;
    let producers: Vec<BaseProducer> = (0..writers)
        .map(|i| {
            let id = format!("quirks-earliest-{i}");
            let p = producer(&broker, &[("linger.ms", "0"), ("transactional.id", &id)]);
            p.init_transactions(Duration::from_secs(30)).unwrap();
            p
        })
        .collect();
    let c = consumer(&broker, "quirks-earliest", &[]);
    let quirk = expected(&broker, &quirks::EARLIEST_OFFSET_PAST_RECORDS);
    let mut past = None;
    for round in 0..150 {
        let topic = format!("q{round}");
        broker.create_topic(&topic, 1);
        std::thread::scope(|s| {
            for p in &producers {
                let topic = &topic;
                s.spawn(move || {
                    p.begin_transaction().unwrap();
                    p.send(BaseRecord::to(topic).partition(0).key("k").payload("v"))
                        .unwrap();
                    p.commit_transaction(Duration::from_secs(30)).unwrap();
                });
            }
        });
        let (earliest, _) = c
            .fetch_watermarks(&topic, 0, Duration::from_secs(10))
            .unwrap();
        let read = tidemark::kafka::raw_log::read_topic(&broker.addr, &topic).unwrap();
        assert_eq!(
            read.committed.len(),
            writers,
            "round {round}: the raw-log reader read {} of {writers} committed records (the \
             broker's earliest offset: {earliest})",
            read.committed.len()
        );
        assert_eq!(
            read.starts.get(&0),
            Some(&0),
            "round {round}: where the log begins"
        );
        if earliest != 0 {
            past = Some((round, earliest));
            break;
        }
    }
    eprintln!("earliest offset past offset 0: {past:?}");
    assert_eq!(
        past.is_some(),
        quirk,
        "whether the earliest offset was ever past offset 0 in up to 150 rounds"
    );
}
