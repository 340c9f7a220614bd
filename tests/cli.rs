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
