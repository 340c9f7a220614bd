//! The Kafka clients' settings: the consumer of the pipeline's group, the transactional
//! producer, and what both share. (Decoding input records is [`crate::input`].)
//!
//! The consumer reads with `read_committed` isolation, never commits offsets itself (offsets are
//! committed only inside transactions by the coordinator), and uses the `range` assignor unless
//! `partition.assignment.strategy` is set (see [`crate::kafka::assignor`]). A configured `instance_id` is also its `group.instance.id` (static membership).
//! User properties from `[kafka.properties]` come last, except the ones tidemark owns.

use crate::config::{ClientSettings, KafkaSpec, OffsetReset};
use crate::kafka::secure::{Brokers, Secret};
use rdkafka::{ClientConfig, Offset};
use std::collections::BTreeMap;

/// The position `auto.offset.reset` names, used for a partition on which no transaction has
/// ever committed; `None` for a value tidemark does not accept (see [`OffsetReset::parse`]).
///
/// The earliest position is offset 0, not librdkafka's `Beginning`: that asks the broker with
/// ListOffsets, which may answer past records still in the log
/// ([`crate::kafka::quirks::EARLIEST_OFFSET_PAST_RECORDS`]). Where offset 0 is gone (a retention
/// removed it), the consumer's `auto.offset.reset = earliest` moves it to where the log begins.
pub fn reset_position(value: &str) -> Option<Offset> {
    OffsetReset::parse(value).map(|r| match r {
        OffsetReset::Earliest => Offset::Offset(0),
        OffsetReset::Latest => Offset::End,
    })
}

/// Settings common to every client tidemark creates.
pub fn base_config(k: &KafkaSpec) -> ClientConfig {
    let mut c = ClientConfig::new();
    user_settings(&mut c, k, |_| true);
    c
}

/// The configuration of a client of a command outside a pipeline (`produce`): the bootstrap
/// servers and every property of `s`, secrets included.
pub fn command_config(s: &ClientSettings) -> ClientConfig {
    let mut c = ClientConfig::new();
    apply(&mut c, &s.brokers, &s.properties, &s.secrets, |_| true);
    c
}

/// Sets the bootstrap servers and the user's properties that `keep` keeps, secrets included, on
/// `c`.
fn user_settings(c: &mut ClientConfig, k: &KafkaSpec, keep: impl Fn(&str) -> bool) {
    apply(c, &k.brokers, &k.properties, &k.secrets, keep);
}

/// Sets `brokers`' bootstrap servers, and the `properties` and `secrets` that `keep` keeps, on
/// `c`. (Never copied from another configuration: `ClientConfig::config_map` hides secrets'
/// values behind a placeholder.)
fn apply(
    c: &mut ClientConfig,
    brokers: &Brokers,
    properties: &BTreeMap<String, String>,
    secrets: &BTreeMap<String, Secret>,
    keep: impl Fn(&str) -> bool,
) {
    c.set("bootstrap.servers", brokers.bootstrap());
    for (key, value) in properties {
        if keep(key) {
            c.set(key, value);
        }
    }
    for (key, value) in secrets {
        if keep(key) {
            c.set(key, value.expose());
        }
    }
}

/// The consumer configuration.
pub fn consumer_config(k: &KafkaSpec) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set(
        "partition.assignment.strategy",
        crate::kafka::assignor::DEFAULT_STRATEGY,
    );
    c.set("auto.offset.reset", "earliest");
    // Statistics feed the consumer-lag gauge (see `metrics`).
    c.set("statistics.interval.ms", "5000");
    // A broker that does not answer a waiting fetch as soon as data arrives
    // (`kafka::quirks::FETCH_HELD_PAST_DATA`) would add up to this wait to every record's
    // latency; a fifth of the commit
    // interval keeps it small next to the commit cycle (measured: p99 append -> pane commit went
    // from 484 ms to 199 ms at 100 ms commits, scripts/bench-kafka.sh).
    c.set(
        "fetch.wait.max.ms",
        (k.commit_interval / 5).clamp(5, 500).to_string(),
    );
    if k.static_membership {
        c.set("group.instance.id", &k.instance_id);
    }
    user_settings(&mut c, k, |_| true);
    c.set("group.id", &k.application_id);
    c.set("enable.auto.commit", "false");
    c.set("enable.auto.offset.store", "false");
    c.set("isolation.level", "read_committed");
    c
}

/// The transactional producer configuration.
pub fn producer_config(k: &KafkaSpec) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("linger.ms", "5");
    // Consumer-only properties would make librdkafka warn on the producer.
    const CONSUMER_ONLY: [&str; 8] = [
        "session.",
        "max.poll",
        "group.",
        "heartbeat.",
        "auto.offset.reset",
        "fetch.",
        "isolation.level",
        "partition.assignment.strategy",
    ];
    user_settings(&mut c, k, |key| {
        !CONSUMER_ONLY.iter().any(|p| key.starts_with(p))
    });
    c.set(
        "transactional.id",
        format!("{}-{}", k.application_id, k.instance_id),
    );
    c.set("transaction.timeout.ms", k.transaction_timeout.to_string());
    c.set("enable.idempotence", "true");
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_raw;

    fn kafka(extra: &str) -> KafkaSpec {
        let text = format!(
            "name = \"p\"\n[input]\nkey = \"k\"\ntimestamp = \"t\"\n[window]\ntype = \"tumbling\"\nsize = \"1s\"\n[[aggregations]]\nname = \"n\"\nop = \"count\"\n[kafka]\nbootstrap_servers = \"b:9092\"\ninput_topic = \"in\"\noutput_topic = \"out\"\ndead_letter_topic = \"dead\"\n{extra}"
        );
        let (spec, _) = parse_raw(&text, Vec::new()).unwrap().validate().unwrap();
        spec.kafka.unwrap()
    }

    #[test]
    fn a_static_member_sends_its_instance_id_and_a_dynamic_one_does_not() {
        let k = kafka("instance_id = \"host-1\"\nstatic_membership = true\n");
        assert_eq!(consumer_config(&k).get("group.instance.id"), Some("host-1"));
        let k = kafka("instance_id = \"host-1\"\n");
        assert_eq!(consumer_config(&k).get("group.instance.id"), None);
    }

    #[test]
    fn reset_names_map_to_positions() {
        assert_eq!(reset_position("smallest"), Some(Offset::Offset(0)));
        assert_eq!(reset_position("end"), Some(Offset::End));
        assert_eq!(reset_position("error"), None);
    }

    #[test]
    fn consumer_only_properties_stay_off_the_producer() {
        let k = kafka("[kafka.properties]\n\"auto.offset.reset\" = \"latest\"\n\"session.timeout.ms\" = \"6000\"\n\"linger.ms\" = \"7\"\n");
        let p = producer_config(&k);
        assert_eq!(p.get("auto.offset.reset"), None);
        assert_eq!(p.get("session.timeout.ms"), None);
        assert_eq!(p.get("linger.ms"), Some("7"));
        assert_eq!(consumer_config(&k).get("auto.offset.reset"), Some("latest"));
    }

    #[test]
    fn the_consumer_never_commits_and_reads_committed() {
        let k = kafka("");
        let c = consumer_config(&k);
        assert_eq!(c.get("isolation.level"), Some("read_committed"));
        assert_eq!(c.get("enable.auto.commit"), Some("false"));
    }

    #[test]
    fn secrets_reach_every_client_as_they_are() {
        let k = kafka("[kafka.properties]\n\"security.protocol\" = \"SASL_SSL\"\n\"sasl.mechanism\" = \"PLAIN\"\n\"sasl.username\" = \"u\"\n\"sasl.password\" = \"p4ss\"\n");
        for c in [base_config(&k), consumer_config(&k), producer_config(&k)] {
            assert_eq!(c.get("sasl.password"), Some("p4ss"));
            assert_eq!(c.get("security.protocol"), Some("SASL_SSL"));
        }
    }
}
