//! `tidemark produce`: a load generator for the demo, benchmarks and smoke tests.
//!
//! It writes synthetic events of one of three kinds — clickstream (`user_id`, `ts`, `page`,
//! `price`), payments (`account_id`, `ts`, `amount`, `currency`, `merchant`) or sensor readings
//! (`sensor_id`, `ts` in microseconds for Avro, `temperature`, `humidity`) — keyed by their id,
//! as JSON or as Avro (the schemas in `schemas/`, plain or Confluent-framed with a given schema
//! id), at a given rate (or as fast as possible), over a number of keys, with bounded disorder and
//! a share of late and malformed records. The topic is created when missing.

use crate::clock::wall_ms;
use apache_avro::types::Value;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use std::time::{Duration, Instant};

/// What to produce.
#[derive(Debug, Clone)]
pub struct ProduceOptions {
    /// The cluster and its clients' settings.
    pub client: crate::config::ClientSettings,
    /// Target topic.
    pub topic: String,
    /// Partitions when the topic is created.
    pub partitions: i32,
    /// Number of events.
    pub events: u64,
    /// Events per second (0 = as fast as possible).
    pub rate: u64,
    /// Distinct keys.
    pub keys: u64,
    /// Maximum disorder in ms (a random delay subtracted from 10% of events).
    pub disorder_ms: i64,
    /// Share of records stamped an hour in the past (late).
    pub late_share: f64,
    /// Share of records that are not valid events.
    pub malformed_share: f64,
    /// Write records without a key, as round-robin producers do (the key field stays in the
    /// value).
    pub no_key: bool,
    /// What the events describe.
    pub kind: Kind,
    /// How they are encoded.
    pub format: Format,
}

/// Kinds of synthetic events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// Page views keyed by `user_id` (`schemas/clickstream.avsc`).
    Clickstream,
    /// Card payments keyed by `account_id` (`schemas/payment.avsc`).
    Payment,
    /// Sensor readings keyed by `sensor_id` (`schemas/sensor_reading.avsc`).
    Sensor,
}

/// Encodings of synthetic events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per record.
    Json,
    /// Plain Avro binary.
    Avro,
    /// Avro in the Confluent wire format with this schema id.
    AvroConfluent(u32),
}

impl Kind {
    /// The event's Avro schema text.
    pub fn schema(self) -> &'static str {
        match self {
            Kind::Clickstream => include_str!("../schemas/clickstream.avsc"),
            Kind::Payment => include_str!("../schemas/payment.avsc"),
            Kind::Sensor => include_str!("../schemas/sensor_reading.avsc"),
        }
    }

    fn key(self, n: u64) -> String {
        match self {
            Kind::Clickstream => format!("user-{n}"),
            Kind::Payment => format!("acct-{n}"),
            Kind::Sensor => format!("sensor-{n}"),
        }
    }

    /// One event as JSON and as an Avro value; `x` is a random 64-bit word.
    fn event(self, key: &str, ts: i64, x: u64) -> (String, Value) {
        let pick = |shift: u32, n: usize| (x >> shift) as usize % n;
        match self {
            Kind::Clickstream => {
                let pages = ["/", "/cart", "/checkout", "/item/42", "/item/7"];
                let price = [0.0, 0.0, 5.0, 12.5, 30.0][pick(40, 5)];
                let page = pages[pick(48, pages.len())];
                (
                    format!(r#"{{"user_id":"{key}","ts":{ts},"page":"{page}","price":{price}}}"#),
                    Value::Record(vec![
                        ("user_id".into(), Value::String(key.into())),
                        ("ts".into(), Value::TimestampMillis(ts)),
                        ("page".into(), Value::String(page.into())),
                        ("price".into(), Value::Double(price)),
                    ]),
                )
            }
            Kind::Payment => {
                let amount = ((x >> 20) % 50_000) as f64 / 100.0;
                let currency = ["EUR", "USD", "GBP"][pick(40, 3)];
                let merchant = ["shop-1", "shop-2", "cafe"][pick(48, 3)];
                (
                    format!(
                        r#"{{"account_id":"{key}","ts":{ts},"amount":{amount},"currency":"{currency}","merchant":"{merchant}"}}"#
                    ),
                    Value::Record(vec![
                        ("account_id".into(), Value::String(key.into())),
                        ("ts".into(), Value::TimestampMillis(ts)),
                        ("amount".into(), Value::Double(amount)),
                        ("currency".into(), Value::String(currency.into())),
                        (
                            "merchant".into(),
                            Value::Union(1, Box::new(Value::String(merchant.into()))),
                        ),
                    ]),
                )
            }
            Kind::Sensor => {
                let temperature = 15.0 + ((x >> 20) % 1_500) as f64 / 100.0;
                let humidity = 30.0 + ((x >> 36) % 600) as f64 / 10.0;
                (
                    format!(
                        r#"{{"sensor_id":"{key}","ts":{ts},"temperature":{temperature},"humidity":{humidity}}}"#
                    ),
                    Value::Record(vec![
                        ("sensor_id".into(), Value::String(key.into())),
                        ("ts".into(), Value::TimestampMicros(ts * 1000)),
                        ("temperature".into(), Value::Double(temperature)),
                        (
                            "humidity".into(),
                            Value::Union(1, Box::new(Value::Double(humidity))),
                        ),
                    ]),
                )
            }
        }
    }
}

/// Errors of `produce`.
#[derive(Debug, thiserror::Error)]
pub enum ProduceError {
    /// A Kafka client error.
    #[error("kafka: {0}")]
    Kafka(#[from] KafkaError),
    /// Creating the topic failed.
    #[error("creating topic {0}: {1}")]
    CreateTopic(String, String),
    /// Encoding an Avro event failed.
    #[error("avro: {0}")]
    Avro(#[from] crate::input::avro::AvroError),
}

/// Creates `topic` with `partitions` partitions unless it exists.
pub fn ensure_topic(
    client: &crate::config::ClientSettings,
    topic: &str,
    partitions: i32,
) -> Result<(), ProduceError> {
    let admin: AdminClient<DefaultClientContext> =
        crate::clients::command_config(client).create()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ProduceError::CreateTopic(topic.into(), e.to_string()))?;
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let res = rt.block_on(admin.create_topics(
        [&new],
        &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
    ))?;
    for r in res {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((t, e)) => return Err(ProduceError::CreateTopic(t, e.to_string())),
        }
    }
    Ok(())
}

/// Produces the events; returns how many were sent.
pub fn run(o: &ProduceOptions) -> Result<u64, ProduceError> {
    ensure_topic(&o.client, &o.topic, o.partitions)?;
    let producer: BaseProducer = crate::clients::command_config(&o.client)
        .set("linger.ms", "5")
        .create()?;
    let schema = crate::input::avro::parse_schema("event schema", o.kind.schema())?;
    let mut x: u64 = 0x2545_F491_4F6C_DD1D ^ wall_ms() as u64;
    let start = Instant::now();
    for i in 0..o.events {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let user = o.kind.key(x % o.keys.max(1));
        let mut ts = wall_ms();
        if x % 10 == 0 && o.disorder_ms > 0 {
            ts -= ((x >> 16) % o.disorder_ms as u64) as i64;
        }
        let roll = ((x >> 32) % 1_000_000) as f64 / 1_000_000.0;
        let value: Vec<u8> = if roll < o.malformed_share {
            // Truncated JSON, or Avro bytes cut short: both fail to decode.
            match o.format {
                Format::Json => format!(r#"{{"id": "{user}", "ts": "not a time""#).into_bytes(),
                Format::Avro => vec![0x02, 0xff],
                Format::AvroConfluent(id) => {
                    [&crate::input::avro::confluent_header(id)[..], &[0x02, 0xff]].concat()
                }
            }
        } else {
            if roll < o.malformed_share + o.late_share {
                ts -= 3_600_000;
            }
            let (json, avro) = o.kind.event(&user, ts, x);
            match o.format {
                Format::Json => json.into_bytes(),
                Format::Avro => crate::input::avro::encode_value(&schema, None, avro)?,
                Format::AvroConfluent(id) => {
                    crate::input::avro::encode_value(&schema, Some(id), avro)?
                }
            }
        };
        let mut record = BaseRecord::to(&o.topic).payload(&value);
        if !o.no_key {
            record = record.key(&user);
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    producer.poll(Duration::from_millis(5));
                }
                Err((e, _)) => return Err(e.into()),
            }
        }
        producer.poll(Duration::ZERO);
        if o.rate > 0 {
            let due = Duration::from_secs_f64((i + 1) as f64 / o.rate as f64);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
        }
    }
    producer.flush(Duration::from_secs(30))?;
    Ok(o.events)
}
