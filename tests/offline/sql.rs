//! SQL pipelines: every query of `examples/sql/` gives, under `tidemark simulate --sql`, the rows
//! Flink 2.3 gives for the same query text over the same file (`tests/golden/sql/`), and a SQL file
//! with problems gets every one listed, with its line and column, and exit code 2.

use crate::common;
use std::process::Command;

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn simulate_over(sql: &str, events: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args(["simulate", "--sql"])
        .arg(root().join(sql))
        .arg("--input")
        .arg(root().join(events))
        .output()
        .unwrap()
}

/// Runs every `.sql` file of `dir` over `events` and compares its rows with Flink's in
/// `golden/NAME.rows`; `adjust` may rewrite tidemark's rows of a query first. Returns how many
/// queries were compared.
fn compare_with_flink(
    dir: &str,
    events: &str,
    golden: &str,
    adjust: impl Fn(&str, Vec<String>) -> Vec<String>,
) -> usize {
    let mut checked = 0;
    for entry in std::fs::read_dir(root().join(dir)).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("sql") {
            continue;
        }
        let name = path.file_stem().unwrap().to_str().unwrap().to_string();
        let want_path = root().join(format!("{golden}/{name}.rows"));
        let want = std::fs::read_to_string(&want_path)
            .unwrap_or_else(|_| panic!("{name}: no Flink rows in {}", want_path.display()));
        let out = simulate_over(&format!("{dir}/{name}.sql"), events);
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let want = common::sorted_rows(&want);
        let got = adjust(
            &name,
            common::sorted_rows(&String::from_utf8_lossy(&out.stdout)),
        );
        assert!(!want.is_empty(), "{name}: Flink gave no rows");
        let missing: Vec<_> = want.iter().filter(|r| !got.contains(r)).take(3).collect();
        let extra: Vec<_> = got.iter().filter(|r| !want.contains(r)).take(3).collect();
        assert!(
            missing.is_empty() && extra.is_empty() && got.len() == want.len(),
            "{name}: {} rows against Flink's {}; missing {missing:?}, extra {extra:?}",
            got.len(),
            want.len()
        );
        checked += 1;
    }
    checked
}

#[test]
fn every_sql_example_gives_flinks_rows() {
    let checked = compare_with_flink(
        "examples/sql",
        "examples/sql/clicks.jsonl",
        "tests/golden/sql",
        |_, rows| rows,
    );
    assert_eq!(checked, 5, "every example has its Flink rows");
}

/// Nexmark-shaped events (`scripts/nexmark-sample.py`, disorder inside the watermark delay) and
/// queries over Nexmark's views give Flink's rows, q11's sessions included: SQL sessions whose
/// events lie exactly one gap apart merge, as Flink's do (17 such pairs in these events). q0,
/// q1 and q2 have no window: a row per bid (q1's DECIMAL is a double in tidemark, written at
/// Flink's scale).
#[test]
fn nexmark_queries_give_flinks_rows() {
    let checked = compare_with_flink(
        "examples/sql/nexmark",
        "examples/sql/nexmark/events.jsonl",
        "tests/golden/sql/nexmark",
        |_, rows| rows,
    );
    assert_eq!(checked, 9, "every Nexmark query has its Flink rows");
}

#[test]
fn a_sql_file_with_problems_gets_every_one_with_its_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.sql");
    std::fs::write(
        &path,
        "CREATE TABLE t (a INT, ts BIGINT, WATERMARK FOR ts AS ts) WITH ('format' = 'xml');\n\
         SELECT window_start, b, MEDIAN(a) AS m, COUNT(*) OVER (PARTITION BY a) AS o\n\
         FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MINUTE))\n\
         GROUP BY window_start, window_end;\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args(["validate", "--sql"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for want in [
        "line 2, column 1: t: format \"xml\"",
        "line 2, column 22: SELECT b: a column is",
        "line 2, column 25: m: MEDIAN is not an aggregate",
        "line 2, column 41: o: COUNT(...) OVER (...) is an OVER window, which is not supported",
    ] {
        assert!(err.contains(want), "{want} missing from:\n{err}");
    }
}

#[test]
fn explain_shows_a_query_as_the_pipeline_file_it_means() {
    let out = Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args(["explain", "--sql"])
        .arg(root().join("examples/sql/clicks_per_minute.sql"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // The pipeline file it prints validates as TOML, and means the same pipeline.
    let toml_text = text
        .split("As a pipeline file:\n")
        .nth(1)
        .expect("the pipeline file");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.toml");
    std::fs::write(&path, toml_text).unwrap();
    let from_sql = tidemark::config::load_sql(
        &root().join("examples/sql/clicks_per_minute.sql"),
        &tidemark::sink::sections(),
    )
    .unwrap();
    let (from_toml, _) = tidemark::config::load(&path, &tidemark::sink::sections()).unwrap();
    assert_eq!(from_sql.spec.fingerprint(), from_toml.fingerprint());
    assert!(text.contains("rows:"), "{text}");
}

/// Every example pipeline with a SQL twin (`X.toml` and `X.sql` side by side), and the events
/// file it is run over.
const TWINS: [(&str, &str); 11] = [
    ("clicks/pipeline", "clicks/events"),
    ("clicks/purchases", "clicks/events"),
    ("sessions/sessions", "sessions/events"),
    ("guides/clickstream", "guides/events"),
    ("guides/global-sliding", "guides/events"),
    ("guides/page-country", "guides/events"),
    ("guides/page-view-sessions", "guides/hours"),
    ("guides/rolling-revenue", "guides/hours"),
    ("guides/processing-time", "guides/arrivals"),
    ("dataflow/corrections", "dataflow/events"),
    ("dataflow/counters", "dataflow/events"),
];

/// The panes and dead letters `spec` gives over `events`, as `simulate` writes them.
fn panes_of(spec: &tidemark::config::PipelineSpec, events: &std::path::Path) -> (String, String) {
    let tmp = tempfile::tempdir().unwrap();
    let store = tidemark::state::store::StateStore::open(tmp.path()).unwrap();
    let input = std::io::BufReader::new(std::fs::File::open(events).unwrap());
    let (mut panes, mut dead) = (Vec::new(), Vec::new());
    tidemark::simulate::run(spec, &store, input, &mut panes, &mut dead).unwrap();
    (
        String::from_utf8(panes).unwrap(),
        String::from_utf8(dead).unwrap(),
    )
}

#[test]
fn every_example_pipeline_has_a_sql_twin_with_its_plan_and_panes() {
    let sinks = tidemark::sink::sections();
    let mut twins = 0;
    for (pipeline, events) in TWINS {
        let examples = root().join("examples");
        let (toml, _) = tidemark::config::load(&examples.join(format!("{pipeline}.toml")), &sinks)
            .unwrap_or_else(|e| panic!("{pipeline}.toml: {e}"));
        let sql = tidemark::config::load_sql(&examples.join(format!("{pipeline}.sql")), &sinks)
            .unwrap_or_else(|e| panic!("{pipeline}.sql: {e}"))
            .spec;
        assert_eq!(
            tidemark::cli::explain::plan(&toml),
            tidemark::cli::explain::plan(&sql),
            "{pipeline}: explain differs"
        );
        assert_eq!(toml.fingerprint(), sql.fingerprint(), "{pipeline}");
        let events = examples.join(format!("{events}.jsonl"));
        let (want, got) = (panes_of(&toml, &events), panes_of(&sql, &events));
        assert!(!want.0.is_empty(), "{pipeline}: no panes");
        assert_eq!(want, got, "{pipeline}: panes or dead letters differ");
        twins += 1;
    }
    // Every pipeline file of examples/ that a member runs beside Kafka alone has its twin.
    let mut tomls = Vec::new();
    for dir in ["clicks", "sessions", "guides", "dataflow"] {
        for e in std::fs::read_dir(root().join("examples").join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().and_then(|x| x.to_str()) == Some("toml") {
                tomls.push(format!(
                    "{dir}/{}",
                    p.file_stem().unwrap().to_str().unwrap()
                ));
            }
        }
    }
    tomls.retain(|t| t != "clicks/kafka-demo"); // the demo's, with its PostgreSQL sink
    tomls.sort();
    let mut named: Vec<String> = TWINS.iter().map(|(p, _)| p.to_string()).collect();
    named.sort();
    assert_eq!(tomls, named);
    assert_eq!(twins, 11);
}

/// `--input TABLE=FILE` binds the file to the table the query reads, or to the table under its
/// view; another name is refused, naming what the query reads.
#[test]
fn an_input_is_bound_to_the_querys_table_by_name() {
    let run = |input: &str| {
        Command::new(env!("CARGO_BIN_EXE_tidemark"))
            .args(["simulate", "--sql"])
            .arg(root().join("examples/sql/nexmark/q2_selection.sql"))
            .arg("--input")
            .arg(input)
            .current_dir(root())
            .output()
            .unwrap()
    };
    for name in ["datagen", "bid"] {
        let out = run(&format!("{name}=examples/sql/nexmark/events.jsonl"));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 4);
    }
    let out = run("clicks=examples/sql/nexmark/events.jsonl");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("the query reads bid (a view of datagen), not clicks"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
