//! The `tidemark` binary: `validate` lists every problem and sets the exit code; `simulate` runs
//! the bundled example end to end.

use std::process::Command;

fn tidemark() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tidemark"))
}

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn validate_accepts_the_example() {
    let out = tidemark()
        .args(["validate", "--config"])
        .arg(root().join("examples/clicks/pipeline.toml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok"));
}

#[test]
fn validate_lists_every_violation_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "name = \"x\"\nallowed_lateness = \"-1s\"\n[input]\nkey = \"k\"\ntimestamp = \"t\"\n[window]\ntype = \"sliding\"\nsize = \"1mo\"\nslide = \"0s\"\n[[aggregations]]\nname = \"n\"\nop = \"median\"\n",
    )
    .unwrap();
    let out = tidemark()
        .args(["validate", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for field in [
        "window.size",
        "window.slide",
        "allowed_lateness",
        "aggregations[0].op",
    ] {
        assert!(err.contains(field), "{field} missing from:\n{err}");
    }
}

#[test]
fn validate_names_unknown_keys() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    let good = std::fs::read_to_string(root().join("examples/clicks/pipeline.toml")).unwrap();
    std::fs::write(
        &path,
        good.replace("[trigger]", "[trigger]\nearly_evry = \"1s\""),
    )
    .unwrap();
    let out = tidemark()
        .args(["validate", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("early_evry"));
}

/// Runs `simulate` on a pipeline and an input under `examples/`: the text of the pane and
/// dead-letter files.
fn simulate_example(pipeline: &str, input: &str) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let (panes, dead) = (
        dir.path().join("panes.jsonl"),
        dir.path().join("dead.jsonl"),
    );
    let out = tidemark()
        .args(["simulate", "--config"])
        .arg(root().join("examples").join(pipeline))
        .arg("--input")
        .arg(root().join("examples").join(input))
        .arg("--output")
        .arg(&panes)
        .arg("--dead-letter")
        .arg(&dead)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        std::fs::read_to_string(panes).unwrap(),
        std::fs::read_to_string(dead).unwrap(),
    )
}

#[test]
fn simulate_runs_the_example() {
    let (panes, dead) = simulate_example("clicks/pipeline.toml", "clicks/events.jsonl");
    assert!(panes.lines().count() >= 5, "{panes}");
    for timing in ["EARLY", "ON_TIME", "LATE"] {
        assert!(panes.contains(timing), "no {timing} pane in:\n{panes}");
    }
    assert!(dead.contains("\"reason\":\"malformed\""), "{dead}");
    assert!(dead.contains("\"reason\":\"late\""), "{dead}");
}

#[test]
fn simulate_reports_a_missing_input_file() {
    let out = tidemark()
        .args(["simulate", "--config"])
        .arg(root().join("examples/clicks/pipeline.toml"))
        .args(["--input", "/nonexistent/events.jsonl"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/events.jsonl"));
}

#[test]
fn an_unknown_sink_is_a_usage_error_naming_the_sinks() {
    let out = tidemark()
        .args(["sink", "nope", "--config"])
        .arg(root().join("examples/clicks/pipeline.toml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nope") && err.contains("postgres"), "{err}");
}

/// `simulate --input A --input B`: two watermark sources read in turns; the watermark is the
/// minimum over them, so a record that is on time for its own input is not late because the
/// other input ran ahead. Read as one input, the same record is late.
#[test]
fn simulate_reads_several_inputs_as_several_watermark_sources() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("p.toml");
    std::fs::write(
        &cfg,
        "name = \"two\"\n[input]\nkey = \"k\"\ntimestamp = \"t\"\n[window]\ntype = \"tumbling\"\nsize = \"10ms\"\n[[aggregations]]\nname = \"n\"\nop = \"count\"\n",
    )
    .unwrap();
    let line = |t: i64| format!("{{\"k\":\"a\",\"t\":{t}}}\n");
    // In turns: a@0, b@2, a@30, b@4. With two sources the watermark is min(30, 2) = 2 when b@4
    // comes: on time. As one input it is 30: late.
    std::fs::write(dir.path().join("a.jsonl"), line(0) + &line(30)).unwrap();
    std::fs::write(dir.path().join("b.jsonl"), line(2) + &line(4)).unwrap();
    std::fs::write(
        dir.path().join("one.jsonl"),
        line(0) + &line(2) + &line(30) + &line(4),
    )
    .unwrap();
    let run = |inputs: &[&str]| {
        let mut c = tidemark();
        c.args(["simulate", "--config"]).arg(&cfg);
        for i in inputs {
            c.arg("--input").arg(dir.path().join(i));
        }
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let first: serde_json::Value = serde_json::from_str(
            String::from_utf8(out.stdout)
                .unwrap()
                .lines()
                .next()
                .unwrap(),
        )
        .unwrap();
        (
            first["window_end"].as_i64(),
            first["count"].as_i64(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let (end, count, _) = run(&["a.jsonl", "b.jsonl"]);
    assert_eq!(
        (end, count),
        (Some(10), Some(3)),
        "two sources: all three in [0, 10)"
    );
    let (end, count, err) = run(&["one.jsonl"]);
    assert_eq!(
        (end, count),
        (Some(10), Some(2)),
        "one source: the last record is late"
    );
    assert!(err.contains("\"reason\":\"late\""), "{err}");
}

/// Runs `simulate` on one of the Dataflow examples: (timing, count, revenue) of each pane, and
/// the number of dead letters.
fn dataflow_example(pipeline: &str) -> (Vec<(String, u64, f64)>, usize) {
    let (panes, dead) = simulate_example(&format!("dataflow/{pipeline}"), "dataflow/events.jsonl");
    let panes = panes
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["timing"].as_str().unwrap().to_string(),
                v["count"].as_u64().unwrap(),
                v["revenue"].as_f64().unwrap(),
            )
        })
        .collect();
    (panes, dead.lines().count())
}

/// The pipeline reference's Dataflow section shows both example pipelines as they are, and the
/// panes they give: corrections every 10 late orders and a last one at expiry; counters that fire early by
/// the clock and once more when the input ends.
#[test]
fn the_dataflow_examples_run_as_the_pipeline_reference_says() {
    let doc = std::fs::read_to_string(root().join("docs/pipeline.md")).unwrap();
    for file in ["corrections.toml", "counters.toml"] {
        let text = std::fs::read_to_string(root().join("examples/dataflow").join(file)).unwrap();
        assert!(
            doc.contains(&text),
            "docs/pipeline.md does not show examples/dataflow/{file} as it is"
        );
    }
    let p = |t: &str, n: u64, r: f64| (t.to_string(), n, r);
    assert_eq!(
        dataflow_example("corrections.toml"),
        (
            vec![
                p("ON_TIME", 8, 56.0),
                p("ON_TIME", 4, 22.0),
                p("LATE", 10, 100.0),
                p("LATE", 10, 100.0),
                p("LATE", 3, 30.0),
                p("LATE", 2, 10.0),
            ],
            1
        )
    );
    assert_eq!(
        dataflow_example("counters.toml"),
        (
            vec![
                p("EARLY", 8, 56.0),
                p("EARLY", 4, 22.0),
                p("ON_TIME", 6, 32.0),
                p("ON_TIME", 32, 385.0),
            ],
            0
        )
    );
}

/// The pipelines of `examples/guides/`, checked against a plain fold of their input.
mod guides {
    use super::*;
    use serde_json::Value;
    use std::collections::BTreeMap;

    const SECOND: i64 = 1_000;

    /// How a guide pipeline reads a record, written out by hand: whether the filter keeps it,
    /// its key, and its aggregation input (`None` when it cannot be evaluated).
    struct Reading {
        keep: fn(&Value) -> bool,
        key: fn(&Value) -> Value,
        input: fn(&Value) -> Option<f64>,
    }

    /// One window's fold: count, sum, min and max of the input.
    #[derive(Debug, Default, Clone, PartialEq)]
    struct Fold {
        count: u64,
        sum: f64,
        min: Option<f64>,
        max: Option<f64>,
    }

    /// Folds `events.jsonl` as the pipeline must: records in file order, the watermark the
    /// largest event time so far minus `ooo`, a record late when every window of it ended
    /// `lateness` or more before the watermark. Returns the fold per (key, window start) and
    /// the dead letters the pipeline must write: (late, other).
    fn fold(
        r: &Reading,
        size: i64,
        slide: i64,
        ooo: i64,
        lateness: i64,
    ) -> (BTreeMap<(String, i64), Fold>, usize, usize) {
        let text = std::fs::read_to_string(root().join("examples/guides/events.jsonl")).unwrap();
        let mut out: BTreeMap<(String, i64), Fold> = BTreeMap::new();
        let (mut late, mut other) = (0, 0);
        let mut max_ts = i64::MIN;
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<Value>(line) else {
                other += 1;
                continue;
            };
            if !(r.keep)(&v) {
                continue;
            }
            let Some(x) = (r.input)(&v) else {
                other += 1;
                continue;
            };
            let ts = v["ts"].as_i64().unwrap();
            let wm = max_ts.saturating_sub(ooo);
            let first = (ts - size).div_euclid(slide) * slide + slide;
            let starts: Vec<i64> = (0..)
                .map(|i| first + i * slide)
                .take_while(|s| *s <= ts)
                .collect();
            if starts.iter().all(|s| s + size + lateness <= wm) {
                late += 1;
                continue;
            }
            max_ts = max_ts.max(ts);
            let key = (r.key)(&v).to_string();
            for s in starts {
                if s + size + lateness <= wm {
                    continue;
                }
                let f = out.entry((key.clone(), s)).or_default();
                f.count += 1;
                f.sum += x;
                f.min = Some(f.min.map_or(x, |m| m.min(x)));
                f.max = Some(f.max.map_or(x, |m| m.max(x)));
            }
        }
        (out, late, other)
    }

    /// The last pane of every (key, window start) of a simulation, and its dead letters by
    /// reason.
    fn last_panes(pipeline: &str) -> (BTreeMap<(String, i64), Value>, BTreeMap<String, usize>) {
        let (panes, dead) = simulate_example(&format!("guides/{pipeline}"), "guides/events.jsonl");
        let mut last = BTreeMap::new();
        for l in panes.lines() {
            let v: Value = serde_json::from_str(l).unwrap();
            last.insert(
                (v["key"].to_string(), v["window_start"].as_i64().unwrap()),
                v,
            );
        }
        let mut reasons = BTreeMap::new();
        for l in dead.lines() {
            let v: Value = serde_json::from_str(l).unwrap();
            *reasons
                .entry(v["reason"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
        (last, reasons)
    }

    fn number(v: &Value) -> Option<f64> {
        v.as_f64()
    }

    fn spend(v: &Value) -> Option<f64> {
        Some(v["price"].as_f64()? * v["quantity"].as_f64()?)
    }

    #[test]
    fn the_clickstream_per_page_is_the_fold_of_its_input() {
        let reading = Reading {
            keep: |_| true,
            key: |v| v["page"].clone(),
            input: spend,
        };
        let (want, late, other) = fold(
            &reading,
            60 * SECOND,
            60 * SECOND,
            10 * SECOND,
            300 * SECOND,
        );
        let (got, reasons) = last_panes("clickstream.toml");
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>()
        );
        for (k, f) in &want {
            let p = &got[k];
            assert_eq!(p["events"].as_u64(), Some(f.count), "{k:?}");
            assert_eq!(p["revenue"].as_f64(), Some(f.sum), "{k:?}");
        }
        assert_eq!(reasons.get("late").copied().unwrap_or(0), late);
        assert_eq!(reasons.get("expression"), Some(&1), "{reasons:?}");
        assert_eq!(reasons.values().sum::<usize>(), late + other);
        // The late click two minutes behind fired a LATE pane: nothing accepted is dropped.
        let (panes, _) = simulate_example("guides/clickstream.toml", "guides/events.jsonl");
        assert!(panes.contains("\"timing\":\"LATE\""));
    }

    #[test]
    fn the_global_sliding_max_mean_min_has_no_key() {
        let reading = Reading {
            keep: |_| true,
            key: |_| Value::Null,
            input: |v| number(&v["price"]),
        };
        let (want, late, other) = fold(&reading, 30 * SECOND, 5 * SECOND, 10 * SECOND, 0);
        let (got, reasons) = last_panes("global-sliding.toml");
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>()
        );
        for (k, f) in &want {
            let p = &got[k];
            assert_eq!(p["key"], Value::Null);
            assert_eq!(p["count"].as_u64(), Some(f.count), "{k:?}");
            assert_eq!(p["max_price"].as_f64(), f.max, "{k:?}");
            assert_eq!(p["min_price"].as_f64(), f.min, "{k:?}");
            let mean = p["mean_price"].as_f64().unwrap();
            assert!((mean - f.sum / f.count as f64).abs() < 1e-9, "{k:?}");
        }
        assert_eq!(reasons.get("late").copied().unwrap_or(0), late);
        assert_eq!(reasons.values().sum::<usize>(), late + other);
    }

    #[test]
    fn clicks_per_page_and_country_skip_bots_and_fold_case() {
        let reading = Reading {
            keep: |v| {
                v["kind"] == "click" && !v["user_agent"].as_str().is_some_and(|a| a.contains("bot"))
            },
            key: |v| {
                serde_json::json!([
                    v["page"],
                    v["geo"]["country"].as_str().map(str::to_lowercase)
                ])
            },
            input: spend,
        };
        let (want, late, other) = fold(
            &reading,
            60 * SECOND,
            60 * SECOND,
            10 * SECOND,
            300 * SECOND,
        );
        let (got, reasons) = last_panes("page-country.toml");
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>()
        );
        for (k, f) in &want {
            let p = &got[k];
            assert!(p["key"].is_array(), "{p}");
            assert_eq!(p["clicks"].as_u64(), Some(f.count), "{k:?}");
            assert_eq!(p["spend"].as_f64(), Some(f.sum), "{k:?}");
        }
        assert!(
            !got.keys().any(|(k, _)| k.contains("\"DE\"")),
            "case folded"
        );
        assert_eq!(reasons.get("late").copied().unwrap_or(0), late);
        assert_eq!(reasons.values().sum::<usize>(), late + other);
        // The filter's rejections are counted, not dead-lettered.
        let out = tidemark()
            .args(["simulate", "--config"])
            .arg(root().join("examples/guides/page-country.toml"))
            .arg("--input")
            .arg(root().join("examples/guides/events.jsonl"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let text = std::fs::read_to_string(root().join("examples/guides/events.jsonl")).unwrap();
        let rejected = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| !(reading.keep)(v))
            .count();
        assert!(err.contains(&format!(" {rejected} filtered,")), "{err}");
    }

    #[test]
    fn processing_time_windows_by_arrival() {
        let (panes, dead) =
            simulate_example("guides/processing-time.toml", "guides/arrivals.jsonl");
        assert_eq!(dead, "");
        let got: Vec<(String, i64, String, u64)> = panes
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                (
                    v["key"].as_str().unwrap().to_string(),
                    v["window_start"].as_i64().unwrap(),
                    v["timing"].as_str().unwrap().to_string(),
                    v["records"].as_u64().unwrap(),
                )
            })
            .collect();
        let p = |k: &str, s: i64, n: u64| (k.to_string(), s, "ON_TIME".to_string(), n);
        // Three records at 0 s and two at 30 s land in [0, 60 s); one at 70 s in [60 s, 120 s);
        // one at 130 s in [120 s, 180 s). The first window fires when the clock passes 60 s.
        assert_eq!(
            got,
            vec![
                p("u1", 0, 3),
                p("u2", 0, 2),
                p("u1", 60_000, 1),
                p("u3", 120_000, 1)
            ]
        );
    }

    #[test]
    fn explain_prints_every_stage_of_the_plan() {
        let out = tidemark()
            .args(["explain", "--config"])
            .arg(root().join("examples/guides/page-country.toml"))
            .output()
            .unwrap();
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        for want in [
            "decode      JSON, reading kind, user_agent, page, geo.country, ts, price, quantity",
            "filter      keep records where kind = 'click' AND user_agent NOT LIKE '%bot%'",
            "key         page, lower(geo.country) AS country",
            "time        event time from ts",
            "window      tumbling 1m, allowed lateness 5m",
            "aggregates  clicks = count(*); spend = sum(price * quantity)",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
    }
}

/// `$record_timestamp` in `simulate`: an envelope line carries the record's Kafka timestamp;
/// a bare line takes the clock's. A filter that rejects everything gives no pane and no dead
/// letter.
#[test]
fn simulate_gives_records_their_kafka_timestamp_and_filters() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("p.toml");
    let pipeline = "name = \"rt\"\n[input]\nkey = \"k\"\ntimestamp = \"$record_timestamp\"\n[window]\ntype = \"tumbling\"\nsize = \"10s\"\n[[aggregations]]\nname = \"n\"\nop = \"count\"\n";
    std::fs::write(&cfg, pipeline).unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(
        &input,
        "{\"$record_timestamp\": 12000, \"$value\": {\"k\": \"a\"}}\n{\"$advance_processing_time\": 25000}\n{\"k\": \"b\"}\n{\"$record_timestamp\": \"soon\", \"$value\": {\"k\": \"c\"}}\n",
    )
    .unwrap();
    let run = |cfg: &std::path::Path| {
        let out = tidemark()
            .args(["simulate", "--config"])
            .arg(cfg)
            .arg("--input")
            .arg(&input)
            .output()
            .unwrap();
        assert!(out.status.success());
        (
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let (panes, err) = run(&cfg);
    let windows: Vec<(String, i64)> = panes
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["key"].as_str().unwrap().to_string(),
                v["window_start"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        windows,
        vec![("a".to_string(), 10_000), ("b".to_string(), 20_000)]
    );
    assert!(
        err.contains("$record_timestamp must be an integer"),
        "{err}"
    );
    std::fs::write(
        &cfg,
        pipeline.replace("[window]", "filter = \"FALSE\"\n[window]"),
    )
    .unwrap();
    let (panes, err) = run(&cfg);
    assert_eq!(panes, "");
    assert!(
        err.contains(" 2 filtered,") && err.contains(", 1 other dead letters"),
        "{err}"
    );
}

/// Every key the pipeline file accepts, in every section, is in the pipeline reference or the
/// operations guide: the list comes from the parser itself (the keys a section's error message
/// says it expects), so a key added to the code and not to the documents fails here.
#[test]
fn every_key_of_the_pipeline_file_is_documented() {
    let docs = ["docs/pipeline.md", "docs/operations.md"]
        .iter()
        .map(|d| std::fs::read_to_string(root().join(d)).unwrap())
        .collect::<Vec<_>>()
        .join("\n");
    let base = "name = \"x\"\n[input]\nkey = \"k\"\ntimestamp = \"t\"\n[window]\ntype = \"tumbling\"\nsize = \"1m\"\n[watermark]\n[trigger]\n[[aggregations]]\nname = \"n\"\nop = \"count\"\n[kafka]\nbootstrap_servers = \"a:1\"\ninput_topic = \"i\"\noutput_topic = \"o\"\ndead_letter_topic = \"d\"\n[metrics]\naddress = \"127.0.0.1:0\"\n[output]\n[schema_registry]\nurl = \"http://a\"\n[sink.postgres]\nurl = \"x\"\ntable = \"t\"\n";
    let mut checked = 0;
    for section in [
        "",
        "input",
        "watermark",
        "trigger",
        "aggregations",
        "kafka",
        "metrics",
        "output",
        "schema_registry",
        "sink.postgres",
    ] {
        let text = if section.is_empty() {
            base.replacen('\n', "\nbogus = 1\n", 1)
        } else {
            base.lines()
                .flat_map(|l| {
                    let header = l == format!("[{section}]") || l == format!("[[{section}]]");
                    std::iter::once(l.to_string()).chain(header.then(|| "bogus = 1".to_string()))
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        // A sink's section is kept as written by the parser and checked by its sink.
        let err = match tidemark::config::parse_raw(&text, Vec::new()) {
            Err(e) => e.to_string(),
            Ok(raw) => raw
                .validate_with(&tidemark::sink::sections())
                .unwrap_err()
                .to_string(),
        };
        // serde says "expected one of `a`, `b`" (or "expected `a` or `b`" for two).
        let expected = err
            .split("expected ")
            .nth(1)
            .unwrap_or_else(|| panic!("{section}: {err}"));
        let expected = expected.split('\n').next().unwrap_or_default();
        for key in expected.split('`').skip(1).step_by(2) {
            assert!(
                docs.contains(&format!("{key} ="))
                    || docs.contains(&format!("{key}`"))
                    || docs.contains(&format!("{key}]")),
                "[{section}] {key} is in no document"
            );
            checked += 1;
        }
    }
    assert!(checked > 60, "only {checked} keys");
}

/// The session analysis of `examples/sessions/`: every pane equals the fold of the records it
/// holds, and the sessions that stand at the end are the gaps' split of each user's records.
#[test]
fn every_session_pane_is_the_fold_of_its_records() {
    use serde_json::{json, Value};
    use std::collections::{BTreeMap, BTreeSet};
    const GAP: i64 = 30 * 60_000;
    let (panes, dead) = simulate_example("sessions/sessions.toml", "sessions/events.jsonl");
    assert_eq!(dead, "", "no dead letters");
    let text = std::fs::read_to_string(root().join("examples/sessions/events.jsonl")).unwrap();
    let records: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v.get("user_id").is_some())
        .collect();
    let mut last: BTreeMap<(String, i64), Value> = BTreeMap::new();
    let (mut checked, mut early) = (0, 0);
    for line in panes.lines() {
        let p: Value = serde_json::from_str(line).unwrap();
        let user = p["key"].as_str().unwrap().to_string();
        let (s, e) = (
            p["window_start"].as_i64().unwrap(),
            p["window_end"].as_i64().unwrap(),
        );
        last.insert((user.clone(), s), p.clone());
        if p["timing"] == "RETRACT" {
            continue;
        }
        early += usize::from(p["timing"] == "EARLY");
        // Accumulating: the pane holds every record of the session that had arrived, which are
        // the first `count` of the user's records in [s, e) in file order.
        let count = p["count"].as_u64().unwrap() as usize;
        let held: Vec<&Value> = records
            .iter()
            .filter(|r| r["user_id"] == user.as_str())
            .filter(|r| (s..e).contains(&r["ts"].as_i64().unwrap()))
            .take(count)
            .collect();
        assert_eq!(held.len(), count, "{p}");
        let ts = |r: &&Value| r["ts"].as_i64().unwrap();
        let page = |r: &Value| r["page"].as_str().unwrap().to_string();
        let lo = held.iter().map(ts).min().unwrap();
        let hi = held.iter().map(ts).max().unwrap();
        let entry = held.iter().find(|r| ts(r) == lo).map(|r| page(r));
        let exit = held.iter().rev().find(|r| ts(r) == hi).map(|r| page(r));
        let pages: BTreeSet<String> = held.iter().map(|r| page(r)).collect();
        let spend: f64 = held.iter().filter_map(|r| r["price"].as_f64()).sum();
        let mut visits: BTreeMap<String, u64> = BTreeMap::new();
        for r in &held {
            *visits.entry(page(r)).or_default() += 1;
        }
        let mut top: Vec<(String, u64)> = visits.into_iter().collect();
        top.sort_by_key(|t| std::cmp::Reverse(t.1));
        top.truncate(2);
        let top: Vec<Value> = top
            .into_iter()
            .map(|(v, n)| json!({"value": v, "count": n}))
            .collect();
        assert_eq!(p["duration_ms"], json!(hi - lo), "{p}");
        assert_eq!(p["distinct_pages"], json!(pages.len()), "{p}");
        assert_eq!(p["entry_page"], json!(entry), "{p}");
        assert_eq!(p["exit_page"], json!(exit), "{p}");
        assert!((p["spend"].as_f64().unwrap() - spend).abs() < 1e-9, "{p}");
        assert_eq!(p["top_pages"], Value::Array(top), "{p}");
        checked += 1;
    }
    assert!(early > 10, "only {early} EARLY panes");
    // The sessions standing at the end: each user's records split where they are 30 minutes
    // or more apart.
    let standing: BTreeSet<(String, i64, i64)> = last
        .iter()
        .filter(|(_, p)| p["timing"] != "RETRACT")
        .map(|((u, s), p)| (u.clone(), *s, p["window_end"].as_i64().unwrap()))
        .collect();
    let mut by_user: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for r in &records {
        by_user
            .entry(r["user_id"].as_str().unwrap().to_string())
            .or_default()
            .push(r["ts"].as_i64().unwrap());
    }
    let mut want = BTreeSet::new();
    for (u, mut ts) in by_user {
        ts.sort();
        let mut start = ts[0];
        for w in ts.windows(2) {
            if w[1] - w[0] >= GAP {
                want.insert((u.clone(), start, w[0] + GAP));
                start = w[1];
            }
        }
        want.insert((u, start, ts[ts.len() - 1] + GAP));
    }
    assert_eq!(standing, want);
    assert!(checked > 40, "only {checked} panes");
}
