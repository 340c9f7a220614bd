//! Secured Kafka: a pipeline, `audit` and the test's own clients over SASL_SSL with
//! SCRAM-SHA-512 (`common::secured`: TLS and SASL fronts before a plaintext Tansu), settings
//! that cannot work ending `tidemark run` at once with what to fix, and no secret in any output.
//! The chaos run over SASL_SSL is in `chaos_hop`.

use crate::common;

use common::secured;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 3;

/// The scenario pipeline (`common::pipeline`) with `props` as its librdkafka properties and
/// metrics served on `metrics`.
fn config(broker: &str, state: &Path, props: &BTreeMap<String, String>, metrics: u16) -> String {
    let mut extra: String = props
        .iter()
        .map(|(k, v)| format!("{k:?} = {v:?}\n"))
        .collect();
    extra.push_str(&format!("[metrics]\naddress = \"127.0.0.1:{metrics}\"\n"));
    common::pipeline(broker, state, None, &extra)
}

/// Starts `tidemark ARGS...` with debug logging, its standard output and error into `out`.
fn spawn(args: &[&str], out: &Path) -> std::process::Child {
    let file = std::fs::File::create(out).unwrap();
    let child = Command::new(common::tidemark_bin())
        .args(args)
        .env("TIDEMARK_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap();
    common::adopt(child)
}

/// `tidemark ARGS...` (see [`spawn`]) to the end or for at most `limit`; its exit status
/// (`None`: still running at the limit, then killed) and everything it printed.
fn tidemark(args: &[&str], limit: Duration) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut child = spawn(args, &out);
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    (status, std::fs::read_to_string(&out).unwrap())
}

/// Whether `topic` holds no committed record (or does not exist).
fn untouched(broker: &str, topic: &str) -> bool {
    tidemark::kafka::raw_log::read_topic(secured::brokers(broker), topic)
        .map_or(true, |log| log.committed.is_empty() && log.open == 0)
}

#[test]
fn a_pipeline_over_sasl_ssl_commits_what_simulate_computes_and_no_output_shows_the_password() {
    let broker = common::Broker::start_secured();
    let bed = broker.bed.as_ref().unwrap();
    broker.create_topic("events", PARTITIONS);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("pipeline.toml");
    let metrics = common::free_port();
    let text = config(
        &broker.addr,
        &dir.path().join("state"),
        &secured::properties(&broker.addr),
        metrics,
    );
    std::fs::write(&cfg, &text).unwrap();
    let scenario = common::Scenario::generate_for(&text, PARTITIONS, 1_500, 11);
    scenario
        .produce(&broker.addr, 10_000, Duration::ZERO)
        .join()
        .unwrap();

    let log = dir.path().join("member.log");
    let cfg_arg = cfg.display().to_string();
    let member = spawn(&["run", "--config", &cfg_arg], &log);
    let got = common::wait_for(&broker.addr, "panes", scenario.expected.len(), 120);
    let scraped = common::http_get(metrics, "/metrics").map(|(_, body)| body);
    let status = common::stop_member(member);
    assert!(
        got >= scenario.expected.len(),
        "{got} panes of {}: {}",
        scenario.expected.len(),
        common::log_summary(&log, 30)
    );
    assert!(status.success(), "tidemark run exited with {status}");
    common::assert_exactly_once(&broker.addr, &scenario);

    // audit reaches the same broker with a properties file, as Kafka's tools take one.
    let client = dir.path().join("client.properties");
    let lines: String = secured::properties(&broker.addr)
        .iter()
        .map(|(k, v)| format!("{k}={v}\n"))
        .collect();
    std::fs::write(&client, lines).unwrap();
    let audit = [
        "audit",
        "--bootstrap-servers",
        &broker.addr,
        "--topic",
        "panes",
    ];
    let mut args = audit.to_vec();
    let client_arg = client.display().to_string();
    args.extend(["--command-config", &client_arg]);
    let (code, audited) = tidemark(&args, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{audited}");
    assert!(
        audited.contains(&format!("{} committed records", scenario.expected.len())),
        "{audited}"
    );

    // No output of the run shows the password: the member's log (debug), its metrics, and what
    // validate, explain and audit print.
    let (_, validated) = tidemark(&["validate", "--config", &cfg_arg], Duration::from_secs(30));
    let (_, explained) = tidemark(&["explain", "--config", &cfg_arg], Duration::from_secs(30));
    let outputs = [
        ("member log", std::fs::read_to_string(&log).unwrap()),
        ("metrics", scraped.expect("the member served /metrics")),
        ("validate", validated),
        ("explain", explained),
        ("audit", audited),
    ];
    for (what, text) in &outputs {
        assert!(!text.is_empty(), "{what} printed nothing");
        assert!(
            !text.contains(&bed.password),
            "the password appears in the {what}"
        );
    }
}

#[test]
fn settings_that_cannot_work_stop_run_at_once_with_what_to_fix_and_write_nothing() {
    let broker = common::Broker::start_secured();
    let bed = broker.bed.as_ref().unwrap();
    broker.create_topic("events", PARTITIONS);
    let wrong = bed.dir.path().join("wrong-password");
    std::fs::write(&wrong, "not-the-password").unwrap();
    let other_ca = bed.other_ca().display().to_string();
    type Change = Box<dyn Fn(&mut BTreeMap<String, String>)>;
    let cases: Vec<(&str, Change, &str)> = vec![
        (
            "a wrong password",
            Box::new(move |p| {
                p.insert(
                    "sasl.password".into(),
                    format!("${{file:{}}}", wrong.display()),
                );
            }),
            "authentication failed for user \"tidemark-test\" with SCRAM-SHA-512",
        ),
        (
            "a CA that did not sign the broker's certificate",
            Box::new(move |p| {
                p.insert("ssl.ca.location".into(), other_ca.clone());
            }),
            "the broker's certificate is not trusted",
        ),
        (
            "a plaintext client on the TLS port",
            Box::new(|p| p.clear()),
            "the broker closed the connection without answering",
        ),
    ];
    for (what, change, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        let mut props = secured::properties(&broker.addr);
        change(&mut props);
        let cfg = dir.path().join("pipeline.toml");
        std::fs::write(
            &cfg,
            config(
                &broker.addr,
                &dir.path().join("state"),
                &props,
                common::free_port(),
            ),
        )
        .unwrap();
        let started = Instant::now();
        let cfg_arg = cfg.display().to_string();
        let (code, out) = tidemark(&["run", "--config", &cfg_arg], Duration::from_secs(60));
        let took = started.elapsed();
        assert!(
            code.is_some_and(|c| c != 0),
            "{what}: run did not stop with an error within 60 s: {out}"
        );
        assert!(
            out.contains(expected),
            "{what}: expected {expected:?} in: {out}"
        );
        assert!(
            took < Duration::from_secs(30),
            "{what}: run took {took:?} to stop"
        );
        assert!(
            !out.contains(&bed.password),
            "{what}: the password was printed"
        );
        // The same settings for audit, from a properties file.
        let client = dir.path().join("client.properties");
        let lines: String = props.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        std::fs::write(&client, lines).unwrap();
        let client_arg = client.display().to_string();
        let (code, out) = tidemark(
            &[
                "audit",
                "--bootstrap-servers",
                &broker.addr,
                "--topic",
                "events",
                "--command-config",
                &client_arg,
            ],
            Duration::from_secs(60),
        );
        assert!(
            code.is_some_and(|c| c != 0) && out.contains(expected),
            "{what}: audit: {out}"
        );
    }
    for topic in [
        "panes",
        "dead",
        "scn-changelog",
        "scn-claims",
        "scn-offsets",
    ] {
        assert!(untouched(&broker.addr, topic), "{topic} was written");
    }
}

/// The rows of the scenario's final panes: one per dedup id.
fn final_rows(expected: &[String]) -> usize {
    expected
        .iter()
        .map(|p| serde_json::from_str::<serde_json::Value>(p).unwrap()["dedup_id"].to_string())
        .collect::<std::collections::BTreeSet<_>>()
        .len()
}

#[test]
fn the_postgres_sink_reads_over_sasl_ssl_and_writes_over_verified_tls() {
    let broker = common::Broker::start_secured();
    broker.create_topic("events", PARTITIONS);
    let certs = tempfile::tempdir().unwrap();
    secured::make_certificates(certs.path());
    let pg = common::Postgres::start_tls(certs.path());
    let dir = tempfile::tempdir().unwrap();
    let sink_section = |ca: &Path| {
        format!(
            "[sink.postgres]\nurl = \"{} sslmode=verify-full sslrootcert={}\"\ntable = \"panes_pg\"\ncommit_interval = \"200ms\"\n",
            pg.url(),
            ca.display()
        )
    };
    let text = config(
        &broker.addr,
        &dir.path().join("state"),
        &secured::properties(&broker.addr),
        common::free_port(),
    );
    let cfg = dir.path().join("pipeline.toml");
    std::fs::write(
        &cfg,
        format!("{text}{}", sink_section(&certs.path().join("ca.pem"))),
    )
    .unwrap();
    let scenario = common::Scenario::generate_for(&text, PARTITIONS, 1_000, 5);
    scenario
        .produce(&broker.addr, 10_000, Duration::ZERO)
        .join()
        .unwrap();
    let cfg_arg = cfg.display().to_string();
    let member = spawn(
        &["run", "--config", &cfg_arg],
        &dir.path().join("member.log"),
    );
    let sink_log = dir.path().join("sink.log");
    let sink = spawn(&["sink", "postgres", "--config", &cfg_arg], &sink_log);
    let want = final_rows(&scenario.expected) as i64;
    let mut db = pg.client();
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut rows, mut tls_sessions) = (0i64, 0i64);
    while Instant::now() < deadline && (rows < want || tls_sessions == 0) {
        std::thread::sleep(Duration::from_millis(300));
        rows = db
            .query_one("SELECT count(*) FROM panes_pg", &[])
            .map(|r| r.get(0))
            .unwrap_or(0);
        // The sink's connection, seen from the server: encrypted (this client's is not).
        tls_sessions = db
            .query_one(
                "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
                 WHERE s.ssl AND a.pid <> pg_backend_pid()",
                &[],
            )
            .map(|r| r.get(0))
            .unwrap();
    }
    let sink_status = common::stop_member(sink);
    let member_status = common::stop_member(member);
    assert_eq!(
        rows,
        want,
        "rows in PostgreSQL: {}",
        common::log_summary(&sink_log, 20)
    );
    assert!(tls_sessions > 0, "the sink's connection is not encrypted");
    assert!(sink_status.success() && member_status.success());

    // A sink that does not trust the server's certificate stops at once, saying so.
    let other = dir.path().join("other.toml");
    std::fs::write(
        &other,
        format!("{text}{}", sink_section(&certs.path().join("other-ca.pem"))),
    )
    .unwrap();
    let other_arg = other.display().to_string();
    let (code, out) = tidemark(
        &["sink", "postgres", "--config", &other_arg],
        Duration::from_secs(60),
    );
    assert!(
        code.is_some_and(|c| c != 0) && out.contains("certificate is not trusted"),
        "{code:?}: {out}"
    );
}

#[test]
fn probe_reports_the_connection_and_what_the_pipeline_may_do() {
    let broker = common::Broker::start_secured();
    broker.create_topic("events", PARTITIONS);
    let bed = broker.bed.as_ref().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, props: &BTreeMap<String, String>, input: &str| {
        let cfg = dir.path().join(name);
        let text = config(&broker.addr, &dir.path().join("state"), props, 0).replace(
            "input_topic = \"events\"",
            &format!("input_topic = \"{input}\""),
        );
        std::fs::write(&cfg, text).unwrap();
        cfg.display().to_string()
    };
    let props = secured::properties(&broker.addr);
    let cfg = write("ok.toml", &props, "events");
    let (code, out) = tidemark(&["probe", "--config", &cfg], Duration::from_secs(60));
    assert!(
        out.contains(&format!(
            "connect {}: ok, SASL_SSL as {} (SCRAM-SHA-512)",
            broker.addr,
            secured::USER
        )),
        "{out}"
    );
    for topic in ["events", "panes", "dead", "scn-changelog", "scn-claims"] {
        assert!(out.contains(&format!("topic {topic}: ")), "{topic}: {out}");
    }
    assert_eq!(code, Some(0), "{out}");
    // An input that does not exist fails the probe; so does a wrong password, before anything.
    let cfg = write("no-input.toml", &props, "nothing-here");
    let (code, out) = tidemark(&["probe", "--config", &cfg], Duration::from_secs(60));
    assert!(
        code == Some(1) && out.contains("topic nothing-here: MISSING"),
        "{out}"
    );
    let wrong = bed.dir.path().join("wrong-password");
    std::fs::write(&wrong, "nope").unwrap();
    let mut bad = props.clone();
    bad.insert(
        "sasl.password".into(),
        format!("${{file:{}}}", wrong.display()),
    );
    let cfg = write("wrong.toml", &bad, "events");
    let (code, out) = tidemark(&["probe", "--config", &cfg], Duration::from_secs(60));
    assert!(
        code == Some(1) && out.contains("FAILED") && out.contains("authentication failed"),
        "{out}"
    );
}

#[test]
fn mutual_tls_admits_a_client_with_its_certificate_and_refuses_one_without() {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let broker = common::Broker::start_mtls();
    // librdkafka with the client's certificate: create a topic, write to it.
    broker.create_topic("events", 1);
    let producer: BaseProducer = secured::client_config(&broker.addr).create().unwrap();
    for i in 0..10 {
        producer
            .send(
                BaseRecord::<str, str>::to("events")
                    .key("k")
                    .payload(&i.to_string()),
            )
            .unwrap();
    }
    producer.flush(Duration::from_secs(10)).unwrap();
    // The raw-log reader with the same properties reads them.
    let log =
        tidemark::kafka::raw_log::read_topic(secured::brokers(&broker.addr), "events").unwrap();
    assert_eq!(log.committed.len(), 10);
    // Without a client certificate the connection is refused, with what to set.
    let without = secured::security_with(&broker.addr, |p| {
        p.remove("ssl.certificate.location");
        p.remove("ssl.key.location");
    });
    let err = tidemark::kafka::raw_log::RawClient::open(&broker.addr, &without)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains("ssl.certificate.location"),
        "no hint at the client certificate: {err}"
    );
}
