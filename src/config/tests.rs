//! Tests of loading, overriding and validating pipeline files.

use super::*;
use crate::input::TimeSpec;
use crate::windowing::assigner::WindowKind;
use crate::windowing::trigger::LateFiring;

const GOOD: &str = r#"
name = "clicks"
allowed_lateness = "1m"
[input]
key = "user.id"
timestamp = "ts"
[window]
type = "sliding"
size = "10m"
slide = "1m"
[watermark]
max_out_of_orderness = "5s"
idle_timeout = "30s"
[trigger]
early_every = "10s"
late = "none"
accumulation = "discarding"
[[aggregations]]
name = "n"
op = "count"
[[aggregations]]
name = "revenue"
op = "sum"
field = "amount"
[[aggregations]]
name = "avg"
op = "mean"
field = "amount"
"#;

fn no_env() -> Vec<(String, String)> {
    Vec::new()
}

#[test]
fn a_full_config_validates() {
    let (spec, warnings) = parse_raw(GOOD, no_env()).unwrap().validate().unwrap();
    assert_eq!(
        spec.engine.window,
        WindowKind::Sliding {
            size: 600_000,
            slide: 60_000,
            offset: 0
        }
    );
    assert_eq!(spec.engine.allowed_lateness, 60_000);
    assert_eq!(spec.input.key_text(), "user.id");
    assert_eq!(spec.input.key[0].value.expr.as_field(), Some("user.id"));
    let fields: Vec<&str> = spec
        .input
        .fields
        .iter()
        .map(|f| f.value.text.as_str())
        .collect();
    assert_eq!(fields, ["amount"]);
    assert_eq!(spec.engine.aggregations[2].field, Some(0));
    assert_eq!(spec.engine.trigger.late, LateFiring::None);
    assert_eq!(spec.engine.watermark.idle_timeout, Some(30_000));
    assert_eq!(
        warnings.len(),
        1,
        "sliding + early firings warns: {warnings:?}"
    );
}

#[test]
fn unknown_keys_are_rejected_with_their_name() {
    let text = GOOD.replace("[window]\n", "[window]\nsizee = \"1m\"\n");
    let err = parse_raw(&text, no_env()).unwrap_err().to_string();
    assert!(err.contains("sizee"), "{err}");
    let text = format!("colour = \"blue\"\n{GOOD}");
    let err = parse_raw(&text, no_env()).unwrap_err().to_string();
    assert!(err.contains("colour"), "{err}");
}

#[test]
fn every_violation_is_listed_at_once() {
    let text = r#"
name = "x"
allowed_lateness = "-1s"
[input]
key = "k"
timestamp = "ts"
[window]
type = "sliding"
size = "1m"
slide = "2m"
[watermark]
max_out_of_orderness = "-5s"
[trigger]
early_every = "0s"
[[aggregations]]
name = "total"
op = "sum"
"#;
    let err = parse_raw(text, no_env()).unwrap().validate().unwrap_err();
    let ConfigError::Invalid(v) = err else {
        panic!("expected violations")
    };
    let fields: Vec<&str> = v.iter().map(|v| v.field.as_str()).collect();
    assert_eq!(
        fields,
        vec![
            "window.slide",
            "allowed_lateness",
            "watermark.max_out_of_orderness",
            "trigger.early_every",
            "aggregations[0].field"
        ],
        "{v:?}"
    );
}

#[test]
fn calendar_units_and_zero_sizes_are_rejected() {
    for (window, field) in [
        ("type = \"tumbling\"\nsize = \"1mo\"", "window.size"),
        ("type = \"tumbling\"\nsize = \"0s\"", "window.size"),
        ("type = \"session\"\ngap = \"1y\"", "window.gap"),
        (
            "type = \"sliding\"\nsize = \"1h\"\nslide = \"0ms\"",
            "window.slide",
        ),
    ] {
        let text = format!(
                "name = \"x\"\n[input]\nkey = \"k\"\ntimestamp = \"t\"\n[window]\n{window}\n[[aggregations]]\nname = \"n\"\nop = \"count\"\n"
            );
        let err = parse_raw(&text, no_env()).unwrap().validate().unwrap_err();
        let ConfigError::Invalid(v) = err else {
            panic!()
        };
        assert_eq!(v[0].field, field, "{v:?}");
    }
}

#[test]
fn large_size_to_slide_ratio_warns() {
    let text = GOOD
        .replace("early_every = \"10s\"\n", "")
        .replace("slide = \"1m\"", "slide = \"1s\"");
    let (_, warnings) = parse_raw(&text, no_env()).unwrap().validate().unwrap();
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].contains("600"), "{warnings:?}");
}

#[test]
fn environment_overrides_the_file() {
    let env = vec![
        ("TIDEMARK__WINDOW__SIZE".to_string(), "20m".to_string()),
        (
            "TIDEMARK__AGGREGATIONS__1__FIELD".to_string(),
            "price".to_string(),
        ),
        ("TIDEMARK__NAME".to_string(), "renamed".to_string()),
        ("UNRELATED".to_string(), "1".to_string()),
    ];
    let (spec, _) = parse_raw(GOOD, env).unwrap().validate().unwrap();
    assert_eq!(spec.engine.name, "renamed");
    assert_eq!(
        spec.engine.window,
        WindowKind::Sliding {
            size: 1_200_000,
            slide: 60_000,
            offset: 0
        }
    );
    assert_eq!(spec.input.fields[0].value.text, "price");
    // An override naming an unknown key is an unknown key.
    let env = vec![("TIDEMARK__WINDOW__BOGUS".to_string(), "1".to_string())];
    assert!(parse_raw(GOOD, env)
        .unwrap_err()
        .to_string()
        .contains("bogus"));
}

const KAFKA: &str = r#"
[kafka]
bootstrap_servers = "127.0.0.1:9092"
input_topic = "clicks"
output_topic = "clicks-out"
dead_letter_topic = "clicks-dead"
[kafka.properties]
"session.timeout.ms" = "6000"
"#;

#[test]
fn a_kafka_section_validates_with_defaults() {
    let text = format!("{GOOD}{KAFKA}");
    let (spec, _) = parse_raw(&text, no_env()).unwrap().validate().unwrap();
    // The engine's cache takes its bytes from the Kafka section, default or set.
    assert_eq!(spec.engine.cache.bytes, 64 << 20);
    let set = text.replace("[kafka]\n", "[kafka]\ncache_memory = \"8MiB\"\n");
    let (set, _) = parse_raw(&set, no_env()).unwrap().validate().unwrap();
    assert_eq!(set.engine.cache.bytes, 8 << 20);
    let k = spec.kafka.unwrap();
    assert_eq!(k.application_id, "clicks");
    assert_eq!(k.changelog_topic, "clicks-changelog");
    assert_eq!(
        (k.commit_interval, k.transaction_timeout, k.max_future_skew),
        (100, 10_000, 3_600_000)
    );
    assert_eq!(k.max_batch_records, 10_000);
    assert_eq!(k.state_dir, std::path::PathBuf::from("state/clicks"));
    assert_eq!(
        k.properties.get("session.timeout.ms").map(String::as_str),
        Some("6000")
    );
    // The environment overrides Kafka settings too.
    let env = vec![(
        "TIDEMARK__KAFKA__BOOTSTRAP_SERVERS".to_string(),
        "broker:9093".to_string(),
    )];
    let (spec, _) = parse_raw(&text, env).unwrap().validate().unwrap();
    assert_eq!(spec.kafka.unwrap().brokers.bootstrap(), "broker:9093");
}

#[test]
fn a_secured_cluster_takes_its_secrets_from_the_environment_and_never_shows_them() {
    let text = format!("{GOOD}{KAFKA}").replace(
        "\"session.timeout.ms\" = \"6000\"",
        "\"security.protocol\" = \"SASL_SSL\"\n\"sasl.mechanism\" = \"SCRAM-SHA-512\"\n\"sasl.password\" = \"${env:TEST_SECRET_A}\"",
    );
    // The user name from an override: single underscores stand for the dots.
    let env = vec![(
        "TIDEMARK__KAFKA__PROPERTIES__SASL_USERNAME".to_string(),
        "alice".to_string(),
    )];
    std::env::set_var("TEST_SECRET_A", "hunter2-in-env");
    let (spec, _) = parse_raw(&text, env).unwrap().validate().unwrap();
    let k = spec.kafka.clone().unwrap();
    let sasl = k.brokers.security().sasl.clone().unwrap();
    assert_eq!(sasl.username, "alice");
    assert_eq!(sasl.password.expose(), "hunter2-in-env");
    assert_eq!(k.secrets["sasl.password"].expose(), "hunter2-in-env");
    assert!(!k.properties.contains_key("sasl.password"));
    assert!(
        !format!("{spec:?}").contains("hunter2"),
        "a Debug print shows the secret"
    );
    // A variable that is not set is named; no value is shown.
    let missing = text.replace("TEST_SECRET_A", "TEST_SECRET_NOT_SET");
    let ConfigError::Invalid(v) = parse_raw(&missing, no_env())
        .unwrap()
        .validate()
        .unwrap_err()
    else {
        panic!("expected violations")
    };
    let text = v
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        text.contains(
            "kafka.properties.sasl.password: names the environment variable TEST_SECRET_NOT_SET"
        ),
        "{text}"
    );
    assert!(
        text.contains("kafka.properties.sasl.username: is needed"),
        "{text}"
    );
}

#[test]
fn members_are_dynamic_unless_static_membership_is_turned_on() {
    let text = format!("{GOOD}{KAFKA}");
    let (spec, _) = parse_raw(&text, no_env()).unwrap().validate().unwrap();
    assert!(
        !spec.kafka.unwrap().static_membership,
        "generated id: dynamic"
    );
    let with_id = text.replace("[kafka]\n", "[kafka]\ninstance_id = \"host-1\"\n");
    let (spec, _) = parse_raw(&with_id, no_env()).unwrap().validate().unwrap();
    let k = spec.kafka.unwrap();
    assert!(!k.static_membership, "an instance id alone: dynamic");
    assert_eq!(k.instance_id, "host-1");
    // Turned on from the environment, as compose or Kubernetes would.
    let env = vec![(
        "TIDEMARK__KAFKA__STATIC_MEMBERSHIP".to_string(),
        "true".to_string(),
    )];
    let (spec, _) = parse_raw(&with_id, env).unwrap().validate().unwrap();
    let k = spec.kafka.unwrap();
    assert!(k.static_membership);
}

#[test]
fn bad_kafka_settings_are_all_listed() {
    let text = format!("{GOOD}{KAFKA}")
        .replace("output_topic = \"clicks-out\"", "output_topic = \"clicks\"")
        .replace(
            "dead_letter_topic = \"clicks-dead\"",
            "dead_letter_topic = \"no spaces\"\ncommit_interval = \"0ms\"",
        )
        .replace(
            "\"session.timeout.ms\" = \"6000\"",
            "\"transactional.id\" = \"mine\"\n\"security.protocol\" = \"SASL_TLS\"\n\"auto.offset.reset\" = \"error\"\n\"partition.assignment.strategy\" = \"range,cooperative-sticky\"",
        )
        .replace("[kafka]\n", "[kafka]\nstatic_membership = true\n");
    let ConfigError::Invalid(v) = parse_raw(&text, no_env()).unwrap().validate().unwrap_err()
    else {
        panic!("expected violations")
    };
    let fields: Vec<&str> = v.iter().map(|v| v.field.as_str()).collect();
    for f in [
        "kafka.dead_letter_topic",
        "kafka",
        "kafka.properties.transactional.id",
        "kafka.commit_interval",
        "kafka.properties.auto.offset.reset",
        "kafka.properties.partition.assignment.strategy",
        "kafka.properties.security.protocol",
        "kafka.static_membership",
    ] {
        assert!(fields.contains(&f), "{f} missing from {fields:?}");
    }
}

#[test]
fn reserved_and_duplicate_names_are_rejected() {
    let text = GOOD
        .replace("name = \"n\"", "name = \"count\"")
        .replace("name = \"avg\"", "name = \"revenue\"");
    let ConfigError::Invalid(v) = parse_raw(&text, no_env()).unwrap().validate().unwrap_err()
    else {
        panic!()
    };
    assert_eq!(v.len(), 2, "{v:?}");
}

#[test]
fn the_fingerprint_follows_what_shapes_state_and_nothing_else() {
    let base = format!("{GOOD}{KAFKA}");
    let fp = |text: &str| {
        let (spec, _) = parse_raw(text, no_env()).unwrap().validate().unwrap();
        spec.fingerprint()
    };
    let before = fp(&base);
    assert_eq!(before.len(), 16);
    // Kafka settings, the metrics address, the output format and names: same state.
    for same in [
        base.replace("clicks-out", "clicks-other"),
        base.replace("\"6000\"", "\"9000\""),
        format!("{base}[metrics]\naddress = \"127.0.0.1:9000\"\n"),
        base.replace("name = \"revenue\"", "name = \"income\""),
        base.replace("name = \"clicks\"", "name = \"renamed\""),
    ] {
        assert_eq!(fp(&same), before, "{same}");
    }
    // The window, lateness, trigger, aggregations and paths: other state.
    for other in [
        base.replace("size = \"10m\"", "size = \"20m\""),
        base.replace("allowed_lateness = \"1m\"", "allowed_lateness = \"2m\""),
        base.replace(
            "accumulation = \"discarding\"",
            "accumulation = \"accumulating\"",
        ),
        base.replace("op = \"sum\"", "op = \"max\""),
        base.replace(
            "field = \"amount\"\n[[aggregations]]",
            "field = \"price\"\n[[aggregations]]",
        ),
        base.replace("key = \"user.id\"", "key = \"user.name\""),
        base.replace("key = \"user.id\"", "key = [\"user.id\", \"page\"]"),
        base.replace("key = \"user.id\"", "key = []"),
        base.replace(
            "key = \"user.id\"",
            "key = \"user.id\"\nfilter = \"amount > 0\"",
        ),
        base.replace("timestamp = \"ts\"", "timestamp = \"$record_timestamp\""),
        base.replace(
            "max_out_of_orderness = \"5s\"",
            "max_out_of_orderness = \"6s\"",
        ),
    ] {
        assert_ne!(fp(&other), before, "{other}");
    }
}

/// Validates a pipeline with this window, top-level line and trigger section: the fields of every
/// violation, or the warnings.
fn check(
    window: &str,
    top: &str,
    trigger: &str,
) -> Result<(PipelineSpec, Vec<String>), Vec<String>> {
    let text = format!(
        "name = \"x\"\n{top}\n[input]\nkey = \"k\"\ntimestamp = \"t\"\n[window]\n{window}\n[trigger]\n{trigger}\n[[aggregations]]\nname = \"n\"\nop = \"count\"\n"
    );
    match parse_raw(&text, no_env()).unwrap().validate() {
        Ok(ok) => Ok(ok),
        Err(ConfigError::Invalid(v)) => Err(v.into_iter().map(|v| v.field).collect()),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn count_triggers_are_validated() {
    let tumbling = "type = \"tumbling\"\nsize = \"1m\"";
    let t = |trigger: &str| check(tumbling, "", trigger).map(|(s, _)| s.engine.trigger);
    let ok = t("late_count = 10\nearly_count = 100\nearly_every = \"5s\"").unwrap();
    assert_eq!(ok.late, LateFiring::Count(10));
    assert_eq!((ok.early_count, ok.early_every), (Some(100), Some(5_000)));
    // late_count = 1 is every_element, and may say so twice.
    assert_eq!(t("late_count = 1").unwrap().late, LateFiring::EveryElement);
    assert_eq!(
        t("late_count = 1\nlate = \"every_element\"").unwrap().late,
        LateFiring::EveryElement
    );
    for (bad, field) in [
        ("late_count = 0", "trigger.late_count"),
        ("late_count = -3", "trigger.late_count"),
        ("early_count = 0", "trigger.early_count"),
        ("late_count = 5\nlate = \"none\"", "trigger.late_count"),
        (
            "late_count = 5\nlate = \"every_element\"",
            "trigger.late_count",
        ),
    ] {
        assert_eq!(t(bad).unwrap_err(), vec![field], "{bad}");
    }
}

#[test]
fn global_windows_need_an_early_trigger_and_have_nothing_late() {
    let global = "type = \"global\"\nidle_expiry = \"1h\"";
    let (spec, warnings) = check(global, "", "early_count = 100").unwrap();
    assert_eq!(
        spec.engine.window,
        WindowKind::Global {
            idle_expiry: Some(3_600_000)
        }
    );
    assert!(warnings.is_empty(), "{warnings:?}");
    let (_, warnings) = check("type = \"global\"", "", "early_every = \"1s\"").unwrap();
    assert!(
        warnings[0].starts_with("window.idle_expiry"),
        "{warnings:?}"
    );
    assert_eq!(check(global, "", "").unwrap_err(), vec!["trigger"]);
    assert_eq!(
        check(
            global,
            "allowed_lateness = \"1m\"",
            "early_count = 2\nlate_count = 3"
        )
        .unwrap_err(),
        vec!["trigger.late_count", "allowed_lateness"]
    );
    assert_eq!(
        check(
            "type = \"global\"\nidle_expiry = \"0s\"",
            "",
            "early_count = 2"
        )
        .unwrap_err(),
        vec!["window.idle_expiry"]
    );
    // idle_expiry belongs to global windows only.
    let text = "name = \"x\"\n[input]\nkey = \"k\"\ntimestamp = \"t\"\n[window]\ntype = \"tumbling\"\nsize = \"1m\"\nidle_expiry = \"1h\"\n[[aggregations]]\nname = \"n\"\nop = \"count\"\n";
    assert!(parse_raw(text, no_env()).is_err());
}

/// A pipeline file with this `[input]` body and aggregation field: its spec, or the fields of
/// every violation.
fn input(body: &str, field: &str) -> Result<PipelineSpec, Vec<String>> {
    let text = format!(
        "name = \"x\"\n[input]\n{body}\n[window]\ntype = \"tumbling\"\nsize = \"1m\"\n[[aggregations]]\nname = \"a\"\nop = \"sum\"\nfield = {field:?}\n"
    );
    match parse_raw(&text, no_env()).unwrap().validate() {
        Ok((spec, _)) => Ok(spec),
        Err(ConfigError::Invalid(v)) => Err(v.iter().map(|v| v.to_string()).collect()),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn keys_of_every_shape_filters_and_three_kinds_of_time_validate() {
    let spec = input(
        "filter = \"kind = 'click' AND NOT is_bot\"\nkey = [\"page\", { expr = \"lower(geo.country)\", alias = \"country\" }]\ntimestamp = \"$record_timestamp\"",
        "price * qty",
    )
    .unwrap();
    let names: Vec<&str> = spec.input.key.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["page", "country"]);
    assert_eq!(spec.input.key_text(), r#"["page","lower(geo.country)"]"#);
    assert_eq!(spec.input.time, TimeSpec::RecordTimestamp);
    assert_eq!(spec.input.fields[0].value.text, "price * qty");
    // Slots: every distinct path once.
    let paths: Vec<String> = spec.input.paths.all().iter().map(|p| p.join(".")).collect();
    assert_eq!(
        paths,
        ["kind", "is_bot", "page", "geo.country", "price", "qty"]
    );

    let none = input("key = []\ntime = \"processing\"", "v").unwrap();
    assert!(none.input.key.is_empty());
    assert_eq!(none.input.time, TimeSpec::Processing);
    assert!(none.engine.watermark.processing_time);
}

#[test]
fn every_input_problem_is_listed_with_its_text() {
    let err = input(
        "filter = \"kind = \"\nkey = [\"page\", \"sqrt(x)\", \"page\"]\ntimestamp = \"ts\"\ntime = \"processing\"",
        "price *",
    )
    .unwrap_err();
    let joined = err.join("\n");
    for want in [
        "input.filter: \"kind = \" is not a SQL expression",
        "input.key[1]: \"sqrt(x)\": the function sqrt is not supported",
        "input.key[2]: duplicate key part \"page\"",
        "input.timestamp: time = \"processing\" windows records by arrival",
        "aggregations[0].field: \"price *\" is not a SQL expression",
    ] {
        assert!(joined.contains(want), "missing {want:?} in\n{joined}");
    }
    let err = input("key = \"k\"", "v").unwrap_err();
    assert!(err[0].starts_with("input.timestamp: required"), "{err:?}");
    let err = input("key = \"k\"\ntime = \"wall\"", "v").unwrap_err();
    assert!(
        err.iter()
            .any(|e| e.starts_with("input.time: unknown time \"wall\"")),
        "{err:?}"
    );
}

#[test]
fn an_input_partitioned_by_its_key_needs_a_key_of_one_part() {
    let text = format!("{GOOD}{KAFKA}").replace(
        "dead_letter_topic = \"clicks-dead\"\n",
        "dead_letter_topic = \"clicks-dead\"\nrepartition = false\n",
    );
    assert!(parse_raw(&text, no_env()).unwrap().validate().is_ok());
    for key in ["key = []", "key = [\"a\", \"b\"]"] {
        let text = text.replace("key = \"user.id\"", key);
        let err = parse_raw(&text, no_env()).unwrap().validate().unwrap_err();
        assert!(
            err.to_string()
                .contains("input.key: kafka.repartition = false needs a key of exactly one part"),
            "{err}"
        );
    }
}

#[test]
fn the_fingerprint_of_a_pipeline_without_count_triggers_is_unchanged() {
    // Pinned on the commit before count triggers existed (61f428a): adding early_count must not
    // invalidate the state of pipelines that do not use it.
    let (plain, _) = check("type = \"tumbling\"\nsize = \"1m\"", "", "").unwrap();
    assert_eq!(plain.fingerprint(), "a9c85834ceeb6089");
    let (counted, _) = check("type = \"tumbling\"\nsize = \"1m\"", "", "early_count = 5").unwrap();
    let (late, _) = check("type = \"tumbling\"\nsize = \"1m\"", "", "late_count = 1").unwrap();
    assert_ne!(plain.fingerprint(), counted.fingerprint());
    assert_eq!(
        plain.fingerprint(),
        late.fingerprint(),
        "late_count = 1 is the default"
    );
}

/// A pipeline of `[[aggregations]]` tables: its spec and warnings, or its violations.
fn aggregations(tables: &str) -> Result<(PipelineSpec, Vec<String>), Vec<String>> {
    let text = format!(
        "name = \"x\"\n[input]\nkey = \"k\"\ntimestamp = \"ts\"\n[window]\ntype = \"tumbling\"\nsize = \"1m\"\n{tables}"
    );
    match parse_raw(&text, no_env()).unwrap().validate() {
        Ok(ok) => Ok(ok),
        Err(ConfigError::Invalid(v)) => Err(v.iter().map(|v| v.to_string()).collect()),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn every_operation_validates_with_its_parameters() {
    let (spec, warnings) = aggregations(
        r#"
[[aggregations]]
name = "p99"
op = "approx_percentile"
field = "latency"
q = 0.99
[[aggregations]]
name = "top"
op = "top_k"
field = "page"
k = 5
[[aggregations]]
name = "users"
op = "approx_count_distinct"
field = "user"
precision = 12
[[aggregations]]
name = "pages"
op = "count_distinct"
field = "page"
[[aggregations]]
name = "exit"
op = "last"
field = "page"
[[aggregations]]
name = "spread"
op = "stddev_samp"
field = "latency"
[[aggregations]]
name = "length"
op = "duration"
"#,
    )
    .unwrap();
    let ops: Vec<String> = spec
        .engine
        .aggregations
        .iter()
        .map(|a| format!("{}({})", a.op.name(), a.op.params()))
        .collect();
    assert_eq!(
        ops,
        [
            "approx_percentile(q = 0.99, relative_error = 0.01)",
            "top_k(k = 5)",
            "approx_count_distinct(precision = 12)",
            "count_distinct()",
            "last()",
            "stddev_samp()",
            "duration()"
        ]
    );
    // `latency` is read as a number (percentile, stddev); `page` and `user` as any value.
    let numeric: Vec<(&str, bool)> = spec
        .input
        .fields
        .iter()
        .map(|f| (f.value.text.as_str(), f.numeric))
        .collect();
    assert_eq!(
        numeric,
        [("latency", true), ("page", false), ("user", false)]
    );
    // State that grows with the distinct values is called out.
    assert_eq!(
        warnings
            .iter()
            .filter(|w| w.contains("distinct values"))
            .count(),
        2,
        "{warnings:?}"
    );
}

#[test]
fn every_aggregation_problem_is_listed_at_once() {
    let err = aggregations(
        r#"
[[aggregations]]
name = "a"
op = "median"
field = "x"
[[aggregations]]
name = "b"
op = "approx_percentile"
field = "x"
[[aggregations]]
name = "c"
op = "sum"
field = "x"
k = 3
[[aggregations]]
name = "d"
op = "first"
[[aggregations]]
name = "e"
op = "duration"
field = "x"
[[aggregations]]
name = "f"
op = "approx_count_distinct"
field = "x"
precision = 40
"#,
    )
    .unwrap_err();
    let joined = err.join("\n");
    for want in [
        "aggregations[0].op: unknown operation \"median\": use one of count, count_values, sum",
        "aggregations[1].op: approx_percentile needs q",
        "aggregations[2].op: sum takes no k",
        "aggregations[3].field: first needs a field",
        "aggregations[4].field: duration takes no field",
        "aggregations[5].op: approx_count_distinct precision must be from 4 to 18, not 40",
    ] {
        assert!(joined.contains(want), "{want}\nnot in\n{joined}");
    }
    assert_eq!(err.len(), 6, "{joined}");
}

#[test]
fn every_unknown_key_is_listed_at_once_with_the_key_it_meant() {
    let text = GOOD
        .replace("[window]\n", "[window]\nsizee = \"1m\"\n")
        .replace("[input]\n", "[input]\ntimestmap_unit = \"s\"\n");
    let text = format!("alowed_lateness = \"1m\"\ncolour = \"blue\"\n{text}");
    let err = parse_raw(&text, no_env()).unwrap_err().to_string();
    for said in [
        "alowed_lateness: unknown key; did you mean \"allowed_lateness\"?",
        "colour: unknown key (expected one of",
        "input.timestmap_unit: unknown key; did you mean \"timestamp_unit\"?",
        "sizee: unknown key; did you mean \"size\"?",
    ] {
        assert!(err.contains(said), "{said:?} missing from:\n{err}");
    }
    // A value of an unknown variant is named with the closest one.
    let text = GOOD.replace("type = \"sliding\"", "type = \"slidng\"");
    let err = parse_raw(&text, no_env()).unwrap_err().to_string();
    assert!(err.contains("did you mean \"sliding\"?"), "{err}");
}

#[test]
fn cumulative_windows_are_a_whole_number_of_steps() {
    let cumulate = |size: &str, step: &str| {
        GOOD.replace(
            "type = \"sliding\"\nsize = \"10m\"\nslide = \"1m\"",
            &format!("type = \"cumulate\"\nsize = \"{size}\"\nstep = \"{step}\""),
        )
    };
    let (spec, _) = parse_raw(&cumulate("1h", "15m"), no_env())
        .unwrap()
        .validate()
        .unwrap();
    assert_eq!(
        spec.engine.window,
        WindowKind::Cumulate {
            size: 3_600_000,
            step: 900_000,
            offset: 0
        }
    );
    let err = parse_raw(&cumulate("1h", "7m"), no_env())
        .unwrap()
        .validate()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("window.step") && err.contains("whole number of steps"),
        "{err}"
    );
}

#[test]
fn a_pipeline_of_columns_has_a_row_spec_and_no_window() {
    let text = r#"
name = "purchases"
[input]
filter = "price > 0"
[[columns]]
name = "user"
expr = "user_id"
[[columns]]
name = "at"
expr = "ts"
format = "timestamp"
"#;
    let (spec, _) = parse_raw(text, no_env()).unwrap().validate().unwrap();
    let rows = spec.rows.expect("a row spec");
    let names: Vec<(&str, bool)> = rows
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.timestamp))
        .collect();
    assert_eq!(names, [("user", false), ("at", true)]);
    let fields: Vec<&str> = spec
        .input
        .fields
        .iter()
        .map(|f| f.value.text.as_str())
        .collect();
    assert_eq!(fields, ["user_id", "ts"]);
    assert!(spec.engine.aggregations.is_empty());
    assert_eq!(spec.input.time, TimeSpec::Processing);
}

#[test]
fn a_pipeline_of_columns_lists_everything_it_cannot_have() {
    let text = r#"
name = "x"
allowed_lateness = "1m"
having = "n > 1"
[input]
key = "k"
[window]
type = "tumbling"
size = "1m"
[trigger]
early_count = 2
[[aggregations]]
name = "n"
op = "count"
[[columns]]
name = "a"
expr = "a"
[[columns]]
name = "a"
expr = "b"
format = "date"
scale = 20
"#;
    let err = parse_raw(text, no_env()).unwrap().validate().unwrap_err();
    let ConfigError::Invalid(v) = err else {
        panic!("expected violations")
    };
    let mut fields: Vec<&str> = v.iter().map(|v| v.field.as_str()).collect();
    fields.sort();
    fields.dedup();
    for want in [
        "window",
        "aggregations",
        "having",
        "allowed_lateness",
        "trigger",
        "columns[1].name",
        "columns[1].format",
        "columns[1].scale",
        "input.key",
    ] {
        assert!(fields.contains(&want), "{want} missing from {v:?}");
    }
    // Neither a window nor columns: the window is missing.
    let text = "name = \"x\"\n[input]\nkey = \"k\"\ntimestamp = \"ts\"\n[[aggregations]]\nname = \"n\"\nop = \"count\"\n";
    let err = parse_raw(text, no_env()).unwrap().validate().unwrap_err();
    assert!(err.to_string().contains("window: missing"), "{err}");
    // A windowing pipeline still needs its key.
    let text = "name = \"x\"\n[input]\ntimestamp = \"ts\"\n[window]\ntype = \"tumbling\"\nsize = \"1m\"\n[[aggregations]]\nname = \"n\"\nop = \"count\"\n";
    let err = parse_raw(text, no_env()).unwrap().validate().unwrap_err();
    assert!(err.to_string().contains("input.key: required"), "{err}");
}
