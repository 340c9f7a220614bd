use super::*;

const CLICKS: &str = r#"
SET 'name' = 'clicks_per_minute';
CREATE TABLE clicks (
  user_id STRING,
  page STRING,
  amount DOUBLE,
  ts_ms BIGINT,
  ts AS TO_TIMESTAMP_LTZ(ts_ms, 3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH (
  'connector' = 'kafka',
  'topic' = 'clicks',
  'properties.bootstrap.servers' = 'localhost:9092',
  'format' = 'json',
  'scan.watermark.idle-timeout' = '30 s'
);
CREATE TABLE per_minute WITH ('connector' = 'kafka', 'topic' = 'clicks-per-minute');
"#;

fn compiled(query: &str) -> Compiled {
    let text = format!("{CLICKS}\n{query};");
    compile(&text).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_tumbling_window_query_becomes_a_pipeline_document() {
    let c = compiled(
        "INSERT INTO per_minute
         SELECT window_start, window_end, user_id, COUNT(*) AS clicks, SUM(amount) AS spent,
                COUNT(DISTINCT page) AS pages, APPROX_PERCENTILE(amount, 0.99) AS p99
         FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
         WHERE page <> 'health'
         GROUP BY window_start, window_end, user_id",
    );
    let doc = toml::to_string(&c.pipeline).unwrap();
    let want = [
        "name = \"clicks_per_minute\"",
        "timestamp = \"ts_ms\"",
        "timestamp_unit = \"ms\"",
        "filter = \"page <> 'health'\"",
        "type = \"tumbling\"",
        "size = \"60000ms\"",
        "max_out_of_orderness = \"5000ms\"",
        "idle_timeout = \"30000ms\"",
        "input_topics = [\"clicks\"]",
        "output_topic = \"clicks-per-minute\"",
        "dead_letter_topic = \"clicks-per-minute-dead-letters\"",
        "op = \"approx_percentile\"",
        "q = 0.99",
    ];
    for w in want {
        assert!(doc.contains(w), "{w} not in\n{doc}");
    }
    assert_eq!(
        c.columns,
        [
            OutColumn::WindowStart("window_start".into()),
            OutColumn::WindowEnd("window_end".into()),
            OutColumn::Key {
                name: "user_id".into(),
                part: 0,
                number: false
            },
            OutColumn::Aggregate("clicks".into()),
            OutColumn::Aggregate("spent".into()),
            OutColumn::Aggregate("pages".into()),
            OutColumn::Aggregate("p99".into()),
        ]
    );
}

#[test]
fn hop_and_session_windows_and_expression_keys() {
    let c = compiled(
        "SELECT window_start, MOD(CAST(amount AS INT), 7) AS bucket, LAST_VALUE(page)
         FROM TABLE(HOP(TABLE clicks, DESCRIPTOR(ts), INTERVAL '5' MINUTES, INTERVAL '10' MINUTES))
         GROUP BY window_start, window_end, MOD(CAST(amount AS INT), 7)",
    );
    let doc = toml::to_string(&c.pipeline).unwrap();
    assert!(doc.contains("slide = \"300000ms\""), "{doc}");
    assert!(doc.contains("alias = \"bucket\""), "{doc}");
    assert!(c.columns.contains(&OutColumn::Aggregate("EXPR$2".into())));
    let c = compiled(
        "SELECT window_start, window_end, user_id, COUNT(*) AS n
         FROM TABLE(SESSION(TABLE clicks PARTITION BY user_id, DESCRIPTOR(ts), INTERVAL '30' MINUTES))
         GROUP BY window_start, window_end, user_id",
    );
    let doc = toml::to_string(&c.pipeline).unwrap();
    assert!(doc.contains("gap = \"1800000ms\""), "{doc}");
    // No sink: a query for `simulate`, with no Kafka section.
    assert!(!doc.contains("[kafka]"), "{doc}");
}

#[test]
fn computed_columns_are_inlined_and_settings_reach_any_key() {
    let text = format!(
        "{CLICKS}
        CREATE TABLE t2 (u STRING, lp AS LOWER(page), t TIMESTAMP(3), WATERMARK FOR t AS t) WITH ('format' = 'json');
        SET 'kafka.properties.security.protocol' = 'SASL_SSL';
        SET 'allowed_lateness' = '5s';
        SELECT window_start, lp, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE t2, DESCRIPTOR(t), INTERVAL '10' SECONDS))
        WHERE lp <> 'x' GROUP BY window_start, window_end, lp;"
    );
    let c = compile(&text).unwrap();
    let doc = toml::to_string(&c.pipeline).unwrap();
    assert!(doc.contains("filter = \"(LOWER(page)) <> 'x'\""), "{doc}");
    assert!(doc.contains("expr = \"(LOWER(page))\""), "{doc}");
    assert!(doc.contains("timestamp = \"t\""), "{doc}");
    assert!(doc.contains("allowed_lateness = \"5s\""), "{doc}");
    assert!(
        doc.contains("\"security.protocol\" = \"SASL_SSL\""),
        "{doc}"
    );
}

#[test]
fn every_problem_is_reported_with_its_line() {
    let text =
        "CREATE TABLE t (a INT, ts BIGINT, WATERMARK FOR ts AS ts + 1) WITH ('colour' = 'red');\n\
                SELECT window_start, a, b, COUNT(x) AS n, MEDIAN(a) AS m\n\
                FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' WEEK))\n\
                GROUP BY window_start, a;";
    let err = compile(text).unwrap_err();
    let all = err.to_string();
    for want in ["unknown option \"colour\"", "unit \"week\""] {
        assert!(all.contains(want), "{want} not in\n{all}");
    }
    let text =
        "CREATE TABLE t (a INT, ts BIGINT, WATERMARK FOR ts AS ts) WITH ('format' = 'json');\n\
                SELECT window_start, a, b, COUNT(x) AS n, MEDIAN(a) AS m\n\
                FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MINUTE))\n\
                GROUP BY window_start, a;";
    let all = compile(text).unwrap_err().to_string();
    for want in [
        "line 4, column 10: GROUP BY must include window_start and window_end",
        "line 2, column 25: SELECT b: a column is",
        "line 2, column 43: m: MEDIAN is not an aggregate",
    ] {
        assert!(all.contains(want), "{want} not in\n{all}");
    }
    assert!(compile("SELECT 1;").is_err());
    assert!(compile("").unwrap_err().to_string().contains("no query"));
}

#[test]
fn sparks_window_forms_are_windows_too() {
    let c = compiled(
        "SELECT window.start, window.end, user_id, COUNT(*) AS n FROM clicks
         GROUP BY window(ts, '10 minutes', '5 minutes'), user_id",
    );
    let doc = toml::to_string(&c.pipeline).unwrap();
    assert!(doc.contains("type = \"sliding\""), "{doc}");
    assert!(
        doc.contains("size = \"600000ms\"") && doc.contains("slide = \"300000ms\""),
        "{doc}"
    );
    assert_eq!(c.columns[0], OutColumn::WindowStart("window_start".into()));
    let c = compiled(
        "SELECT session_window.start, user_id, SUM(amount) AS spent FROM clicks
         GROUP BY session_window(ts, '30 minutes'), user_id",
    );
    let doc = toml::to_string(&c.pipeline).unwrap();
    assert!(doc.contains("gap = \"1800000ms\""), "{doc}");
    let c =
        compiled("SELECT window.start, COUNT(*) AS n FROM clicks GROUP BY window(ts, '1 minute')");
    let doc = toml::to_string(&c.pipeline).unwrap();
    assert!(doc.contains("type = \"tumbling\""), "{doc}");
    // Its time column is the watermark's.
    let text =
        format!("{CLICKS}\nSELECT COUNT(*) AS n FROM clicks GROUP BY window(ts_ms, '1 minute');");
    assert!(compile(&text)
        .unwrap_err()
        .to_string()
        .contains("not the one WATERMARK FOR names"));
}

#[test]
fn a_spark_window_means_what_the_flink_window_of_the_same_sizes_means() {
    let spark = compiled(
        "SELECT window.start, window.end, page, COUNT(*) AS n FROM clicks
         GROUP BY window(ts, '2 minutes', '30 seconds'), page",
    );
    let flink = compiled(
        "SELECT window_start, window_end, page, COUNT(*) AS n
         FROM TABLE(HOP(TABLE clicks, DESCRIPTOR(ts), INTERVAL '30' SECOND, INTERVAL '2' MINUTE))
         GROUP BY window_start, window_end, page",
    );
    assert_eq!(spark.pipeline, flink.pipeline);
    assert_eq!(spark.columns, flink.columns);
}

const EVENTS: &str = r#"
CREATE TABLE events (
  event_type INT,
  bid ROW<auction BIGINT, price BIGINT, ts BIGINT>,
  ts AS TO_TIMESTAMP_LTZ(bid.ts, 3),
  WATERMARK FOR ts AS ts - INTERVAL '4' SECOND
) WITH ('connector' = 'kafka', 'topic' = 'nexmark', 'format' = 'json');
"#;

#[test]
fn a_view_renames_computes_and_filters_and_keeps_the_time_attribute() {
    let text = format!(
        "{EVENTS}
        CREATE TEMPORARY VIEW bid AS SELECT bid.auction, bid.price * 2 AS doubled, ts AS at
          FROM events WHERE event_type = 2;
        CREATE VIEW big AS SELECT * FROM bid WHERE doubled > 100;
        SELECT auction, window_start, COUNT(*) AS n, MAX(doubled) AS top
        FROM TABLE(TUMBLE(TABLE big, DESCRIPTOR(at), INTERVAL '10' SECOND))
        WHERE auction <> 7
        GROUP BY auction, window_start, window_end;"
    );
    let c = compile(&text).unwrap_or_else(|e| panic!("{e}"));
    let doc = toml::to_string(&c.pipeline).unwrap();
    let want = [
        // The views' filters, outermost first, then the query's own.
        "filter = \"((event_type = 2) AND ((bid.price * 2) > 100)) AND ((bid.auction) <> 7)\"",
        "expr = \"(bid.auction)\"",
        "field = \"(bid.price * 2)\"",
        // The renamed time attribute is still the table's, with its watermark.
        "timestamp = \"bid.ts\"",
        "max_out_of_orderness = \"4000ms\"",
    ];
    for w in want {
        assert!(doc.contains(w), "{w} not in\n{doc}");
    }
}

#[test]
fn a_view_that_aggregates_or_reads_nothing_known_is_refused() {
    let text = format!(
        "{EVENTS}
        CREATE VIEW a AS SELECT event_type, COUNT(*) AS n FROM events GROUP BY event_type;
        CREATE VIEW b AS SELECT x FROM nowhere;
        CREATE VIEW c AS SELECT event_type, event_type FROM events;
        CREATE VIEW d AS SELECT nothing FROM events;
        SELECT event_type, COUNT(*) AS n FROM events GROUP BY event_type;"
    );
    let e = compile(&text).unwrap_err().to_string();
    for w in [
        "line 9, column 9: CREATE VIEW a: GROUP BY in a view is not supported",
        "line 10, column 9: CREATE VIEW b: no table \"nowhere\" was created before it",
        "line 11, column 9: CREATE VIEW c: two columns are named event_type",
        "line 12, column 33: CREATE VIEW d: events has no column nothing",
    ] {
        assert!(e.contains(w), "{w} not in\n{e}");
    }
}

#[test]
fn having_names_the_selects_aggregates_and_adds_the_others() {
    let c = compiled(
        "SELECT window_start, window_end, user_id, COUNT(*) AS clicks
         FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
         GROUP BY window_start, window_end, user_id
         HAVING COUNT(*) > 2 AND (MAX(amount) BETWEEN 1 AND 10 OR SUM(amount) IS NULL)",
    );
    let doc = toml::to_string(&c.pipeline).unwrap();
    assert!(
        doc.contains("having = \"clicks > 2 AND (HAVING$1 BETWEEN 1 AND 10 OR HAVING$2 IS NULL)\""),
        "{doc}"
    );
    // The added aggregations are not columns of the rows.
    assert_eq!(c.columns.len(), 4);
    let text = format!(
        "{CLICKS}
        SELECT window_start, window_end, user_id, COUNT(*) AS n
        FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
        GROUP BY window_start, window_end, user_id HAVING user_id <> 'x';"
    );
    let e = compile(&text).unwrap_err().to_string();
    assert!(
        e.contains("user_id is not an aggregate: a condition on a key belongs in WHERE"),
        "{e}"
    );
}

#[test]
fn a_jdbc_table_is_the_postgresql_sink_behind_a_kafka_topic() {
    let text = format!(
        "{CLICKS}
        CREATE TABLE pg WITH ('connector' = 'jdbc',
          'url' = 'jdbc:postgresql://db.example:6543/results?sslmode=require',
          'username' = 'o''brien', 'table-name' = 'per_minute', 'topic' = 'per-minute',
          'sink.buffer-flush.interval' = '2 s', 'sink.buffer-flush.max-rows' = '500');
        INSERT INTO pg SELECT window_start, user_id, COUNT(*) AS n
        FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
        GROUP BY window_start, window_end, user_id;"
    );
    let pipeline = compile(&text).unwrap_or_else(|e| panic!("{e}")).pipeline;
    let doc = toml::to_string(&pipeline).unwrap();
    for want in [
        "output_topic = \"per-minute\"",
        "[sink.postgres]",
        "table = \"per_minute\"",
        "commit_interval = \"2000ms\"",
        "max_batch_records = 500",
    ] {
        assert!(doc.contains(want), "{want} not in\n{doc}");
    }
    // The JDBC URL as a libpq string, each value quoted.
    assert_eq!(
        pipeline["sink"]["postgres"]["url"].as_str(),
        Some(r"host='db.example' port='6543' dbname='results' sslmode='require' user='o\'brien'")
    );
    let text = format!(
        "{CLICKS}
        CREATE TABLE pg WITH ('connector' = 'jdbc', 'url' = 'jdbc:mysql://h/d');
        INSERT INTO pg SELECT window_start, user_id, COUNT(*) AS n
        FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
        GROUP BY window_start, window_end, user_id;"
    );
    let e = compile(&text).unwrap_err().to_string();
    for want in [
        "writes to PostgreSQL",
        "needs its 'table-name'",
        "needs 'topic'",
    ] {
        assert!(e.contains(want), "{want} not in\n{e}");
    }
}

#[test]
fn a_query_without_group_by_becomes_columns_with_flinks_decimal_scales() {
    let c = compiled(
        "SELECT user_id, 0.908 * ts_ms AS converted, amount * 2 AS doubled, ts_ms + 1 AS next,
                ROUND(ts_ms * 0.25, 1) AS rounded, ts, UPPER(page)
         FROM clicks WHERE amount > 0",
    );
    assert!(c.columns.is_empty(), "rows are written from the columns");
    assert!(!c.pipeline.contains_key("window"));
    assert!(!c.pipeline.contains_key("aggregations"));
    let columns = c.pipeline["columns"].as_array().unwrap();
    let got: Vec<(String, String, Option<i64>, bool)> = columns
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_string(),
                t["expr"].as_str().unwrap().to_string(),
                t.get("scale").and_then(|s| s.as_integer()),
                t.get("format").and_then(|f| f.as_str()) == Some("timestamp"),
            )
        })
        .collect();
    let want = [
        ("user_id", "user_id", None, false),
        // A DECIMAL(4, 3) times a BIGINT is a DECIMAL of scale 3 in Flink.
        ("converted", "0.908 * ts_ms", Some(3), false),
        // A DOUBLE is no DECIMAL; integer arithmetic neither.
        ("doubled", "amount * 2", None, false),
        ("next", "ts_ms + 1", None, false),
        ("rounded", "ROUND(ts_ms * 0.25, 1)", Some(1), false),
        // The time attribute: its epoch, written as a TIMESTAMP(3).
        ("ts", "ts_ms", None, true),
        // Unnamed: Flink's name by position.
        ("EXPR$6", "UPPER(page)", None, false),
    ];
    let want: Vec<(String, String, Option<i64>, bool)> = want
        .iter()
        .map(|(n, e, s, t)| (n.to_string(), e.to_string(), *s, *t))
        .collect();
    assert_eq!(got, want);
    assert_eq!(c.pipeline["input"]["filter"].as_str(), Some("amount > 0"));
}
