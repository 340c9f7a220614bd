//! Test support: a real Kafka-protocol broker started on a free loopback port for the life of a
//! test, and Kafka helpers. `TIDEMARK_TEST_BROKER` picks the broker: `tansu` (default; memory
//! storage) or `noida` (noida-db, a data directory of its own, so it can be killed and restarted
//! with its data). Both are installed into `.venv/` by `scripts/install-broker.sh`.

#![allow(dead_code)]

pub mod chaos;
pub mod hop;
pub mod reference;
pub mod registry;
pub mod rogue;
pub mod secured;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Which Kafka-protocol broker the tests run against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerKind {
    /// Tansu 0.6.0 with memory storage.
    Tansu,
    /// noida-db 0.2.3, keeping its data in a directory.
    Noida,
}

impl BrokerKind {
    /// The broker `TIDEMARK_TEST_BROKER` names (`tansu` when unset).
    pub fn from_env() -> BrokerKind {
        match std::env::var("TIDEMARK_TEST_BROKER").as_deref() {
            Ok("noida") => BrokerKind::Noida,
            Ok("tansu") | Err(_) => BrokerKind::Tansu,
            Ok(other) => panic!("TIDEMARK_TEST_BROKER={other:?}: expected tansu or noida"),
        }
    }

    /// The broker's name as `TIDEMARK_TEST_BROKER` spells it.
    pub fn name(self) -> &'static str {
        match self {
            BrokerKind::Tansu => "tansu",
            BrokerKind::Noida => "noida",
        }
    }
}

/// A running broker; stopped when dropped.
pub struct Broker {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// Which broker this is.
    pub kind: BrokerKind,
    port: u16,
    /// noida-db's data directory, kept across restarts.
    pub data: Option<tempfile::TempDir>,
    /// The TLS and SASL fronts of a secured broker ([`Broker::start_secured`]).
    pub bed: Option<secured::Bed>,
}

/// Where the broker's output goes: the file `TIDEMARK_BROKER_LOG` names, or nowhere.
fn broker_log() -> Stdio {
    match std::env::var_os("TIDEMARK_BROKER_LOG") {
        Some(path) => std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_or_else(|_| Stdio::null(), Stdio::from),
        None => Stdio::null(),
    }
}

/// A program installed into the project's `.venv/bin`.
fn venv_bin(name: &str) -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(".venv/bin")
        .join(name);
    assert!(
        bin.exists(),
        "{} is missing: run scripts/install-deps.sh (scripts/test.sh does)",
        bin.display()
    );
    bin
}

impl Broker {
    /// Starts the broker `TIDEMARK_TEST_BROKER` names on a free port and waits until it accepts
    /// connections. With `TIDEMARK_BROKER_LOG=FILE` set, the broker's output is appended to FILE
    /// (Tansu's level set by `RUST_LOG`, e.g. `tansu_broker::coordinator::group=debug` to follow
    /// its group coordinator); otherwise it is discarded.
    pub fn start() -> Broker {
        Broker::start_kind(BrokerKind::from_env())
    }

    /// Starts a broker of `kind`.
    pub fn start_kind(kind: BrokerKind) -> Broker {
        let port = free_port();
        let data = match kind {
            BrokerKind::Tansu => None,
            BrokerKind::Noida => Some(tempfile::tempdir().unwrap()),
        };
        let child = spawn_broker(kind, port, port, data.as_ref().map(|d| d.path()));
        let addr = format!("127.0.0.1:{port}");
        wait_for_port(&addr);
        Broker {
            child,
            addr,
            kind,
            port,
            data,
            bed: None,
        }
    }

    /// Starts Tansu behind a TLS front and a SASL front ([`secured`]): `addr` is the TLS port,
    /// which the broker advertises, so every client speaks SASL_SSL (SCRAM-SHA-512) to it.
    pub fn start_secured() -> Broker {
        Broker::start_fronted(secured::Bed::start)
    }

    /// Starts Tansu behind a TLS front that admits only clients with a certificate the test CA
    /// signed (mutual TLS, `security.protocol = SSL`).
    pub fn start_mtls() -> Broker {
        Broker::start_fronted(secured::Bed::start_mtls)
    }

    /// Starts Tansu advertising a port where `bed` (given the broker's plaintext address and that
    /// port) puts its fronts.
    fn start_fronted(bed: impl FnOnce(&str, u16) -> secured::Bed) -> Broker {
        let (port, tls_port) = (free_port(), free_port());
        let child = spawn_broker(BrokerKind::Tansu, port, tls_port, None);
        let plain = format!("127.0.0.1:{port}");
        wait_for_port(&plain);
        let bed = bed(&plain, tls_port);
        Broker {
            child,
            addr: format!("127.0.0.1:{tls_port}"),
            kind: BrokerKind::Tansu,
            port,
            data: None,
            bed: Some(bed),
        }
    }

    /// Kills the broker with SIGKILL and waits for it to be gone.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops the broker with SIGTERM (its clean shutdown) and waits for it, at most 30 s.
    pub fn terminate(&mut self) {
        signal(self.child.id(), "TERM");
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                self.kill9();
                panic!("the broker did not stop within 30 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts the broker again on the same port (and, for noida-db, the same data directory)
    /// after [`Broker::kill9`] or [`Broker::terminate`].
    pub fn restart(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        // The port may linger a moment after the old process is gone.
        while TcpListener::bind(&self.addr).is_err() {
            assert!(Instant::now() < deadline, "port {} stays taken", self.addr);
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(self.bed.is_none(), "a secured broker is not restarted");
        self.child = spawn_broker(
            self.kind,
            self.port,
            self.port,
            self.data.as_ref().map(|d| d.path()),
        );
        wait_for_port(&self.addr);
    }

    /// Whether this broker's group descriptions carry no members' assignments (Tansu's never do),
    /// so that the group watchdog judges ownership from the log: tests of that judgement assert
    /// it (saying, with `what` they would show, why it does not hold elsewhere), and
    /// `scripts/test.sh` runs them only on such a broker.
    pub fn reports_no_assignments(&self, what: &str) -> bool {
        let blind = self.kind == BrokerKind::Tansu;
        if !blind {
            eprintln!(
                "{}'s group descriptions carry assignments, so the watchdog reads ownership from \
                 them and does not judge {what} from the log",
                self.kind.name()
            );
        }
        blind
    }

    /// Creates a topic explicitly (auto-created topics lose writes on Tansu).
    pub fn create_topic(&self, name: &str, partitions: i32) {
        let admin: AdminClient<DefaultClientContext> =
            secured::client_config(&self.addr).create().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
        let res = rt
            .block_on(admin.create_topics(
                [&topic],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
            ))
            .unwrap();
        for r in res {
            r.unwrap_or_else(|(t, e)| panic!("create topic {t}: {e:?}"));
        }
    }
}

/// Starts the broker process of `kind` on `port`, advertising `advertised` (Tansu only; another
/// port where a front stands before it).
fn spawn_broker(
    kind: BrokerKind,
    port: u16,
    advertised: u16,
    data: Option<&std::path::Path>,
) -> Child {
    let addr = format!("127.0.0.1:{port}");
    let mut c = match kind {
        BrokerKind::Tansu => {
            let url = format!("tcp://{addr}");
            let advertised = format!("tcp://127.0.0.1:{advertised}");
            let mut c = Command::new(venv_bin("tansu"));
            c.args(["broker", "--listener-url", &url])
                .args(["--advertised-listener-url", &advertised])
                .args(["--storage-engine", "memory://tansu/"]);
            c
        }
        BrokerKind::Noida => {
            let mut c = Command::new(venv_bin("noida-db-bin"));
            c.args(["start", "--data-dir"])
                .arg(data.expect("noida-db needs a data directory"))
                .args(["--only", "kafka", "--kafka-port", &port.to_string()]);
            c
        }
    };
    c.stdin(Stdio::null())
        .stdout(broker_log())
        .stderr(broker_log())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", kind.name()))
}

/// Waits until `addr` accepts connections (at most 20 s).
pub fn wait_for_port(addr: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "broker did not start on {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends signal `sig` (`TERM`, `INT`, ...) to process `pid`.
pub fn signal(pid: u32, sig: &str) {
    Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .unwrap();
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A generated input and the panes `tidemark simulate` computes for it, per partition.
pub struct Scenario {
    /// (partition, key, value) in production order.
    pub records: Vec<(i32, String, String)>,
    /// Expected committed pane JSON lines (windows ending by the cutoff), sorted.
    pub expected: Vec<String>,
    /// Expected number of dead letters.
    pub expected_dead: usize,
    /// Expected dead letters as (partition, offset, reason): `simulate`'s, at the offsets the
    /// records are produced at (one partition's records in order, from offset 0).
    pub expected_dead_letters: std::collections::BTreeSet<(i32, i64, String)>,
    /// Event time of the last record of each partition: windows ending by it are expected.
    pub cutoff: i64,
}

/// A pipeline file for `tidemark run` with a [kafka] section, for the scenario's input: one topic
/// keyed by the grouping field, so records are windowed where they are (`repartition = false`).
/// The tumbling pipeline the Kafka tests run (1 s windows of `count` and `sum` grouped by
/// `user`, out-of-orderness 300 ms, lateness 1 s), written as SQL with dynamic membership: the
/// pipeline (and application) `name`, reading `topics` (declared keyed by `user` when `keyed`),
/// writing to `panes` and `dead`, committing every 100 ms or `max_batch` records.
pub struct SqlTwin<'a> {
    pub name: &'a str,
    pub topics: &'a [&'a str],
    pub keyed: bool,
    pub max_batch: u32,
}

impl SqlTwin<'_> {
    /// The SQL text for member `instance` against `broker`, with state under `state`.
    pub fn text(&self, broker: &str, state: &std::path::Path, instance: &str) -> String {
        let SqlTwin {
            name,
            topics,
            keyed,
            max_batch,
        } = self;
        format!(
            r#"SET 'name' = '{name}';
SET 'kafka.application_id' = '{name}';
SET 'kafka.instance_id' = '{instance}';
SET 'kafka.static_membership' = 'false';
SET 'kafka.state_dir' = '{}';
SET 'kafka.commit_interval' = '100ms';
SET 'kafka.max_batch_records' = '{max_batch}';
SET 'kafka.properties.session.timeout.ms' = '6000';
SET 'kafka.properties.max.poll.interval.ms' = '10000';
CREATE TABLE clicks (
  `user` STRING,
  amount DOUBLE,
  ts BIGINT,
  WATERMARK FOR ts AS ts - INTERVAL '300' MILLISECOND
) WITH (
  'connector' = 'kafka',
  'topic' = '{}',
  'properties.bootstrap.servers' = '{broker}',
  'partitioned-by-key' = '{keyed}',
  'format' = 'json'
);
CREATE TABLE panes WITH ('connector' = 'kafka', 'topic' = 'panes', 'dead-letter-topic' = 'dead');
INSERT INTO panes
SELECT window_start, window_end, `user`, COUNT(*) AS n, SUM(amount) AS total
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' SECOND))
GROUP BY window_start, window_end, `user`
EMIT ALLOWED LATENESS INTERVAL '1' SECOND;
"#,
            state.display(),
            topics.join(";")
        )
    }
}

/// [`pipeline`] written as SQL, on input keyed by the grouping key: the same plan, fingerprint
/// and panes.
pub fn sql_pipeline(broker: &str, state: &std::path::Path, instance: &str) -> String {
    SqlTwin {
        name: "scn",
        topics: &["events"],
        keyed: true,
        max_batch: 200,
    }
    .text(broker, state, instance)
}

pub fn pipeline(
    broker: &str,
    state: &std::path::Path,
    instance: Option<&str>,
    extra_props: &str,
) -> String {
    let instance = instance
        .map(|i| format!("instance_id = \"{i}\"\n"))
        .unwrap_or_default();
    format!(
        r#"
name = "scn"
allowed_lateness = "1s"
[input]
key = "user"
timestamp = "ts"
[window]
type = "tumbling"
size = "1s"
[watermark]
max_out_of_orderness = "300ms"
[[aggregations]]
name = "n"
op = "count"
[[aggregations]]
name = "total"
op = "sum"
field = "amount"
[kafka]
bootstrap_servers = "{broker}"
application_id = "scn"
repartition = false
{instance}input_topic = "events"
output_topic = "panes"
dead_letter_topic = "dead"
state_dir = "{}"
commit_interval = "100ms"
max_batch_records = 200
[kafka.properties]
"session.timeout.ms" = "6000"
"max.poll.interval.ms" = "10000"
{extra_props}
"#,
        state.display()
    )
}

/// The pipeline `text` with static membership turned off explicitly (it is off by default):
/// members with an `instance_id` join as dynamic members. Tansu wedges a group whose static
/// members restart or leave while others join (restarted members were never assigned again).
pub fn dynamic(text: String) -> String {
    text.replacen("[kafka]\n", "[kafka]\nstatic_membership = false\n", 1)
}

/// The keys and disorder of a generated scenario.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Distinct keys (`u0`, `u1`, ...); key `uK` goes to partition `K % partitions`.
    pub users: u64,
    /// One event in this many is moved back in time...
    pub jitter_one_in: u64,
    /// ...by up to this many milliseconds.
    pub max_jitter_ms: u64,
}

impl Default for Shape {
    fn default() -> Shape {
        Shape {
            users: 30,
            jitter_one_in: 10,
            max_jitter_ms: 300,
        }
    }
}

impl Scenario {
    /// `n` events over `partitions` partitions, an hour in the past, 30 keys, with disorder, one late
    /// and one malformed record every 1,000 events, and a far-ahead record per partition.
    pub fn generate(partitions: i32, n: i64, seed: u64) -> Scenario {
        let text = pipeline(
            "127.0.0.1:1",
            std::path::Path::new("/nonexistent"),
            None,
            "",
        );
        Scenario::generate_for(&text, partitions, n, seed)
    }

    /// Like [`Scenario::generate`], with the expected panes computed for the pipeline `text`.
    pub fn generate_for(text: &str, partitions: i32, n: i64, seed: u64) -> Scenario {
        Scenario::generate_shaped(text, partitions, n, seed, Shape::default())
    }

    /// Like [`Scenario::generate_for`], with the keys and disorder of `shape`.
    pub fn generate_shaped(
        text: &str,
        partitions: i32,
        n: i64,
        seed: u64,
        shape: Shape,
    ) -> Scenario {
        use serde_json::json;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let base = (now - 3_600_000) / 1000 * 1000;
        let mut records = Vec::new();
        let mut x = seed | 1;
        for i in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let user = format!("u{}", x % shape.users);
            let p = (x % shape.users) as i32 % partitions;
            let jitter = if x % shape.jitter_one_in == 0 {
                -(((x >> 8) % shape.max_jitter_ms) as i64)
            } else {
                0
            };
            let ts = base + i * 5 + jitter;
            records.push((
                p,
                user.clone(),
                json!({"user": user, "ts": ts, "amount": (x % 50) as i64}).to_string(),
            ));
            if i % 1000 == 999 {
                let p = (i / 1000) as i32 % partitions;
                // One key per partition, as a keyed topic has it (a global window fires panes for
                // it, under a dedup id of its own).
                let user = format!("late{p}");
                records.push((
                    p,
                    user.clone(),
                    json!({"user": user, "ts": base - 60_000, "amount": 1}).to_string(),
                ));
                records.push((p, "bad".into(), "not json at all".to_string()));
            }
        }
        let cutoff = base + n * 5 + 60_000;
        for p in 0..partitions {
            let user = format!("end{p}");
            records.push((
                p,
                user.clone(),
                json!({"user": user, "ts": cutoff, "amount": 0}).to_string(),
            ));
        }
        let (expected, expected_dead_letters) = simulate_expected(text, &records, cutoff);
        let expected_dead = expected_dead_letters.len();
        Scenario {
            records,
            expected,
            expected_dead,
            expected_dead_letters,
            cutoff,
        }
    }

    /// The records as (partition, offset, value), offsets counted per partition from 0 in
    /// production order (what a fresh topic written by one producer holds).
    pub fn with_offsets(&self) -> Vec<(i32, i64, String)> {
        let mut next: std::collections::BTreeMap<i32, i64> = Default::default();
        self.records
            .iter()
            .map(|(p, _, v)| {
                let o = next.entry(*p).or_default();
                *o += 1;
                (*p, *o - 1, v.clone())
            })
            .collect()
    }

    /// The independent reference for the default pipeline (tumbling 1 s, out-of-orderness
    /// 300 ms, allowed lateness 1 s): per window the count and sum of `amount`, and which records
    /// are late or malformed.
    pub fn reference(&self) -> reference::Expected {
        reference::tumbling(&self.with_offsets(), 1_000, 300, 1_000, self.cutoff)
    }

    /// Produces the records in a background thread, `batch` at a time with `pause` between.
    pub fn produce(
        &self,
        broker: &str,
        batch: usize,
        pause: Duration,
    ) -> std::thread::JoinHandle<()> {
        use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
        let records = self.records.clone();
        let addr = broker.to_string();
        std::thread::spawn(move || {
            let producer: BaseProducer = secured::client_config(&addr).create().unwrap();
            for chunk in records.chunks(batch) {
                for (p, k, v) in chunk {
                    producer
                        .send(BaseRecord::to("events").partition(*p).key(k).payload(v))
                        .unwrap();
                }
                producer.flush(Duration::from_secs(10)).unwrap();
                std::thread::sleep(pause);
            }
        })
    }
}

/// What `tidemark simulate` commits for `records` under pipeline `text`, run on each partition's
/// records separately: the sorted pane lines of windows ending by `cutoff`, and the dead letters
/// as (partition, offset, reason), a record's offset being its position in its partition.
pub fn simulate_expected(
    text: &str,
    records: &[(i32, String, String)],
    cutoff: i64,
) -> (Vec<String>, std::collections::BTreeSet<(i32, i64, String)>) {
    let (spec, _) = raw_of(text).validate().unwrap();
    let mut per_partition: std::collections::BTreeMap<i32, Vec<String>> = Default::default();
    for (p, _, v) in records {
        per_partition.entry(*p).or_default().push(v.clone());
    }
    let (mut expected, mut expected_dead) = (Vec::new(), std::collections::BTreeSet::new());
    for (p, lines) in &per_partition {
        let (panes, dead) = simulate_partition(&spec, lines);
        for d in dead {
            let offset = d["line"].as_i64().expect("a dead letter's line") - 1;
            let reason = d["reason"].as_str().expect("a reason").to_string();
            assert!(
                expected_dead.insert((*p, offset, reason)),
                "one dead letter per record"
            );
        }
        for l in panes {
            let v: serde_json::Value = serde_json::from_str(&l).unwrap();
            let end = v["window_end"].as_i64().unwrap();
            // A global window's panes, but not those of the far-ahead records' keys, which only
            // the end of simulate's input fires.
            let global_kept = end == i64::MAX && !v["key"].as_str().unwrap().starts_with("end");
            if end <= cutoff || global_kept {
                expected.push(l);
            }
        }
    }
    expected.sort();
    (expected, expected_dead)
}

/// Runs `tidemark simulate` over one partition's record values, in offset order: the pane lines
/// and the dead letters (each with its `reason` and 1-based `line`, the record's position).
pub fn simulate_partition(
    spec: &tidemark::config::PipelineSpec,
    lines: &[String],
) -> (Vec<String>, Vec<serde_json::Value>) {
    simulate_bytes(spec, lines.join("\n").as_bytes())
}

/// Runs `tidemark simulate` over `input` (lines of records, any bytes): the pane lines and the
/// dead letters as JSON. Fails the test if the input stops simulate.
pub fn simulate_bytes(
    spec: &tidemark::config::PipelineSpec,
    input: &[u8],
) -> (Vec<String>, Vec<serde_json::Value>) {
    let tmp = tempfile::tempdir().unwrap();
    let store = tidemark::state::store::StateStore::open(tmp.path()).unwrap();
    let (mut panes, mut dead) = (Vec::new(), Vec::new());
    tidemark::simulate::run(spec, &store, input, &mut panes, &mut dead)
        .expect("no input line may stop simulate");
    let panes = String::from_utf8(panes)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let dead = String::from_utf8(dead)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (panes, dead)
}

/// Starts `tidemark run` on a pipeline file.
pub fn start_member(cfg: &std::path::Path) -> Child {
    start_tidemark("run", cfg)
}

/// The `tidemark` binary the tests start: `TIDEMARK_BIN` when it is set (`scripts/chaos.sh` runs
/// a series on a frozen copy, so a rebuild during the series changes nothing), else the one cargo
/// built for this test.
pub fn tidemark_bin() -> std::path::PathBuf {
    std::env::var_os("TIDEMARK_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_tidemark").into())
}

/// `tidemark COMMAND --config CFG ARGS...`, logging at `TIDEMARK_TEST_LOG` (default warn); a
/// command of several words (`sink postgres`) is split on spaces.
fn tidemark_command(command: &str, cfg: &std::path::Path, args: &[&str]) -> Command {
    let mut c = Command::new(tidemark_bin());
    c.args(command.split(' '))
        .arg("--config")
        .arg(cfg)
        .args(args)
        .env(
            "TIDEMARK_LOG",
            std::env::var("TIDEMARK_TEST_LOG").unwrap_or_else(|_| "warn".into()),
        );
    c
}

/// The `tidemark` processes each test thread started, by process id: a test that panics kills
/// its own (left running, one holds the test binary's output open and keeps working against a
/// broker that is gone). A process stopped or killed by its test may stay listed; the hook
/// checks that a listed process id still runs `tidemark` before it kills it.
static CHILDREN: std::sync::Mutex<Vec<(std::thread::ThreadId, u32)>> =
    std::sync::Mutex::new(Vec::new());

/// Lists `child` under the current test thread (see [`CHILDREN`]), installing the panic hook
/// that kills a panicking thread's children the first time.
pub fn adopt(child: Child) -> Child {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let me = std::thread::current().id();
            let mine: Vec<u32> = CHILDREN
                .lock()
                .map(|mut c| {
                    let (mine, others) = c.drain(..).partition(|(t, _)| *t == me);
                    *c = others;
                    mine.into_iter().map(|(_, pid)| pid).collect()
                })
                .unwrap_or_default();
            for pid in mine {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                if String::from_utf8_lossy(&cmdline).contains("tidemark") {
                    let _ = Command::new("kill")
                        .args(["-KILL", &pid.to_string()])
                        .status();
                }
            }
            previous(info);
        }));
    });
    if let Ok(mut c) = CHILDREN.lock() {
        c.push((std::thread::current().id(), child.id()));
    }
    child
}

/// Starts `tidemark COMMAND --config CFG`.
pub fn start_tidemark(command: &str, cfg: &std::path::Path) -> Child {
    adopt(tidemark_command(command, cfg, &[]).spawn().unwrap())
}

/// Starts `tidemark run --config CFG` logging at info level into `log`.
pub fn start_member_logged(cfg: &std::path::Path, log: &std::path::Path) -> Child {
    adopt(logged("run", cfg, log).spawn().unwrap())
}

/// Starts `tidemark COMMAND --config CFG` logging at info level into `log`.
pub fn start_logged(command: &str, cfg: &std::path::Path, log: &std::path::Path) -> Child {
    adopt(logged(command, cfg, log).spawn().unwrap())
}

/// Starts `tidemark COMMAND --config CFG` logging at info level into `log`, in the broker's
/// consumer group whatever `TIDEMARK__KAFKA__MEMBERSHIP` says (for tests of leaving it).
pub fn start_logged_in_group(command: &str, cfg: &std::path::Path, log: &std::path::Path) -> Child {
    adopt(
        logged(command, cfg, log)
            .env_remove("TIDEMARK__KAFKA__MEMBERSHIP")
            .spawn()
            .unwrap(),
    )
}

/// `tidemark COMMAND --config CFG` logging at info level into `log`.
fn logged(command: &str, cfg: &std::path::Path, log: &std::path::Path) -> Command {
    let file = std::fs::File::create(log).unwrap();
    let mut c = tidemark_command(command, cfg, &[]);
    c.env("TIDEMARK_LOG", "info").stderr(file);
    c
}

/// Waits until the log file `log` has at least `n` lines containing `needle`; panics after
/// `secs`.
pub fn wait_for_log(log: &std::path::Path, needle: &str, n: usize, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let got = text.lines().filter(|l| l.contains(needle)).count();
        if got >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{got} of {n} log lines with {needle:?} after {secs} s:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What a member's log file says, for a test that failed: its warnings and errors (at most
/// `n`, the last ones) and its last `n` lines.
pub fn log_summary(log: &std::path::Path, n: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let warnings: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .collect();
    format!(
        "== {} ({} lines): last {n} warnings and errors\n{}\n== last {n} lines\n{}",
        log.display(),
        lines.len(),
        warnings[warnings.len().saturating_sub(n)..].join("\n"),
        lines[lines.len().saturating_sub(n)..].join("\n"),
    )
}

/// Runs `tidemark COMMAND --config CFG ARGS...` to its end.
pub fn run_tidemark(command: &str, cfg: &std::path::Path, args: &[&str]) -> std::process::Output {
    tidemark_command(command, cfg, args).output().unwrap()
}

/// Sends SIGTERM and waits (at most 30 s) for the exit status.
pub fn stop_member(mut child: Child) -> std::process::ExitStatus {
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "tidemark run did not stop within 30 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Committed record values of a topic, judged from the raw log.
pub fn committed_values(broker: &str, topic: &str) -> Vec<String> {
    tidemark::kafka::raw_log::read_topic(secured::brokers(broker), topic)
        .unwrap()
        .committed
        .iter()
        .map(|r| String::from_utf8(r.value.clone().unwrap_or_default().to_vec()).unwrap())
        .collect()
}

/// Every record of every partition of `topic`, markers included, with what the resolver made of
/// each: "committed", "aborted" or "open" for a data record, "marker" for a transaction marker.
/// The raw read comes first, so every record it shows was there for the committed read.
pub fn dump_topic(
    broker: &str,
    topic: &str,
) -> Result<
    Vec<(tidemark::kafka::raw_log::RawRecord, &'static str)>,
    tidemark::kafka::raw_log::RawLogError,
> {
    let mut reader = tidemark::kafka::raw_log::LogReader::connect(secured::brokers(broker))?;
    let mut out = Vec::new();
    for p in reader.partitions(topic)? {
        let (records, _) = reader.raw(topic, p, 0)?;
        let log = reader
            .committed(topic, |q| q == p, |_| 0)?
            .remove(&p)
            .unwrap_or_default();
        let committed: std::collections::BTreeSet<i64> =
            log.committed.iter().map(|r| r.offset).collect();
        for r in records {
            let fate = if !r.is_data() {
                "marker"
            } else if committed.contains(&r.offset) {
                "committed"
            } else if log.aborted_offsets.binary_search(&r.offset).is_ok() {
                "aborted"
            } else {
                "open"
            };
            out.push((r, fate));
        }
    }
    Ok(out)
}

/// Waits until `topic` holds at least `n` committed records or `secs` pass; returns the count.
pub fn wait_for(broker: &str, topic: &str, n: usize, secs: u64) -> usize {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let got = committed_values(broker, topic).len();
        if got >= n || Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Asserts the output is exactly the expected panes, once each, and the dead letters likewise.
pub fn assert_exactly_once(broker: &str, s: &Scenario) {
    let log = tidemark::kafka::raw_log::read_topic(secured::brokers(broker), "panes").unwrap();
    let report = tidemark::audit::check_panes(&log.committed);
    assert!(
        report.duplicates.is_empty(),
        "duplicates: {:?}",
        report.duplicates
    );
    assert!(report.gaps.is_empty(), "gaps: {:?}", report.gaps);
    let mut got = committed_values(broker, "panes");
    got.sort();
    if got != s.expected {
        let missing: Vec<_> = s.expected.iter().filter(|p| !got.contains(p)).collect();
        let extra: Vec<_> = got.iter().filter(|p| !s.expected.contains(p)).collect();
        panic!(
            "committed panes differ from simulate's: {} committed, {} expected; {} missing, \
             for example {:?}; {} not expected, for example {:?}",
            got.len(),
            s.expected.len(),
            missing.len(),
            missing.iter().take(3).collect::<Vec<_>>(),
            extra.len(),
            extra.iter().take(3).collect::<Vec<_>>()
        );
    }
    // Each expected dead letter once, with its reason, and no other.
    let dead = tidemark::kafka::raw_log::read_topic(secured::brokers(broker), "dead").unwrap();
    let mut got_dead = std::collections::BTreeMap::new();
    for r in &dead.committed {
        let d = tidemark::format::dead_letter::DeadLetter::from_record(r).expect("a dead letter");
        *got_dead
            .entry((d.partition, d.offset, d.reason))
            .or_insert(0) += 1;
    }
    let repeated: Vec<_> = got_dead.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        repeated.is_empty(),
        "dead-lettered more than once: {repeated:?}"
    );
    let got_dead: std::collections::BTreeSet<_> = got_dead.into_keys().collect();
    assert_eq!(
        got_dead, s.expected_dead_letters,
        "dead letters as (partition, offset, reason)"
    );
    // A member killed and not started again leaves its last transaction without a marker
    // until the broker aborts it, which a broker need not do before the test ends: what such a
    // transaction holds is not committed, and is judged so above; it is only reported here.
    if log.open + dead.open > 0 {
        eprintln!(
            "records of transactions without a marker yet: {} in the output, {} in the dead letters",
            log.open, dead.open
        );
    }
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// GET `path` from a member's metrics endpoint on `port`: (status, body), or None when nothing
/// answers yet.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    tidemark::http::request(&format!("http://127.0.0.1:{port}"), "GET", path, "", "").ok()
}

/// Parses Prometheus text into `name{labels}` → value.
pub fn parse_metrics(body: &str) -> std::collections::BTreeMap<String, f64> {
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// A private PostgreSQL cluster (Debian's server packages, installed by scripts/install-deps.sh):
/// `initdb` + `pg_ctl` on a free loopback port in a temporary directory, removed on drop. As root
/// the server runs as the `postgres` user (it refuses to run as root).
pub struct Postgres {
    /// Where the cluster lives (removed on drop).
    _dir: tempfile::TempDir,
    data: std::path::PathBuf,
    bin: std::path::PathBuf,
    /// The port it listens on.
    pub port: u16,
    /// Server settings given at start (`-c name=value ...`).
    settings: String,
}

impl Postgres {
    fn bin_dir() -> std::path::PathBuf {
        let mut found: Vec<std::path::PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL server packages (run scripts/install-deps.sh)")
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .filter(|b| b.join("initdb").exists())
            .collect();
        found.sort();
        found.pop().expect("initdb under /usr/lib/postgresql/*/bin")
    }

    fn as_server_user(&self, program: &str) -> Command {
        let exe = self.bin.join(program);
        if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(exe);
            c
        } else {
            Command::new(exe)
        }
    }

    /// Creates and starts a cluster.
    pub fn start() -> Postgres {
        Postgres::start_with(None)
    }

    /// Creates and starts a cluster that also accepts TLS, with the certificate and key
    /// `secured::make_certificates` made in `certs`.
    pub fn start_tls(certs: &std::path::Path) -> Postgres {
        Postgres::start_with(Some(certs))
    }

    fn start_with(certs: Option<&std::path::Path>) -> Postgres {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        if is_root() {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
            let ok = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&data)
                .status()
                .unwrap();
            assert!(ok.success());
        }
        let mut settings = String::new();
        if let Some(certs) = certs {
            // The server reads its key only if no one else may (and, as root, it runs as
            // postgres).
            for f in ["server.pem", "server.key"] {
                let to = dir.path().join(f);
                std::fs::copy(certs.join(f), &to).unwrap();
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600)).unwrap();
                if is_root() {
                    let ok = Command::new("chown")
                        .arg("postgres:postgres")
                        .arg(&to)
                        .status()
                        .unwrap();
                    assert!(ok.success());
                }
            }
            settings = format!(
                " -c ssl=on -c ssl_cert_file={} -c ssl_key_file={}",
                dir.path().join("server.pem").display(),
                dir.path().join("server.key").display()
            );
        }
        let pg = Postgres {
            _dir: dir,
            data,
            bin: Self::bin_dir(),
            port: free_port(),
            settings,
        };
        let out = pg
            .as_server_user("initdb")
            .arg("-D")
            .arg(&pg.data)
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        pg.pg_ctl("start");
        pg
    }

    fn pg_ctl(&self, action: &str) {
        let mut c = self.as_server_user("pg_ctl");
        c.arg("-D").arg(&self.data).args(["-w", "-m", "fast"]);
        if action != "stop" {
            c.arg("-o").arg(format!(
                "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off{}",
                self.port,
                self.data.display(),
                self.settings
            ));
            c.arg("-l").arg(self.data.join("server.log"));
        }
        let out = c.arg(action).output().unwrap();
        assert!(
            out.status.success(),
            "pg_ctl {action}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Stops and starts the server again (fast shutdown: open connections are cut).
    pub fn restart(&self) {
        self.pg_ctl("stop");
        self.pg_ctl("start");
    }

    /// The libpq connection string.
    pub fn url(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }

    /// A client.
    pub fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.url(), postgres::NoTls).unwrap()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self
            .as_server_user("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "stop"])
            .output();
    }
}

/// Whether this process runs as root (the server must then run as another user).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// Whether a pipeline text is SQL statements rather than a TOML file.
/// Rows (lines of JSON objects) as sorted lines of JSON with every number a double (Flink
/// writes `30.0` where tidemark writes `30`), rounded to 9 decimals: how rows are compared with
/// Flink's.
pub fn sorted_rows(text: &str) -> Vec<String> {
    use serde_json::Value;
    use std::collections::BTreeMap;
    let mut out: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: BTreeMap<String, Value> = serde_json::from_str(l).expect("a row is JSON");
            let v: BTreeMap<String, Value> = v
                .into_iter()
                .map(|(k, v)| match v.as_f64() {
                    Some(f) => (k, Value::from((f * 1e9).round() / 1e9)),
                    None => (k, v),
                })
                .collect();
            serde_json::to_string(&v).unwrap()
        })
        .collect();
    out.sort();
    out
}

/// The pipeline document of `text`, TOML or SQL, before validation.
pub fn raw_of(text: &str) -> tidemark::config::RawConfig {
    if is_sql(text) {
        tidemark::config::parse_sql(text, Vec::new()).unwrap().0
    } else {
        tidemark::config::parse_raw(text, Vec::new()).unwrap()
    }
}

pub fn is_sql(text: &str) -> bool {
    let t = text.trim_start();
    t.starts_with("SET ") || t.starts_with("CREATE ") || t.starts_with("--")
}
