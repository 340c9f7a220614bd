//! The PostgreSQL sink's write path against the ceiling, in one run, on a private PostgreSQL
//! cluster: the same rows written (a) by the sink's batch transaction (COPY into a temporary
//! table, one `INSERT ... SELECT ... ON CONFLICT ... DO UPDATE ... WHERE`, the offsets row) and
//! (b) by a plain batched loop of multi-row `INSERT ... VALUES ... ON CONFLICT DO UPDATE`
//! statements, 1,000 rows per statement, in transactions of the same size as the sink's batches.
//! Rounds alternate (a b a b ...) into an emptied table; the medians and their ratio are printed.
//!
//!   cargo bench --bench postgres            (TIDEMARK_BENCH_ROWS, default 200000)
//!
//! Reading the output topic and decoding panes are not in (a): this measures what the database
//! side of the sink costs next to the fastest plain way to upsert the same rows.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Instant;
use tidemark::format::pane::PaneRecord;
use tidemark::sink::postgres::PostgresSpec;
use tidemark::sink::postgres::{ensure_tables, write_pane_batch};
use tidemark::sink::{Batch, Offsets};
use tidemark::windowing::aggregate::AggSpec;
use tidemark::windowing::trigger::Timing;

const BATCH: usize = 10_000;
const ROUNDS: usize = 5;

fn rows(n: usize) -> Vec<PaneRecord> {
    (0..n)
        .map(|i| PaneRecord {
            dedup_id: format!(
                "{:032x}",
                (i as u128).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835)
            ),
            key: format!("user-{}", i % 10_000),
            window_start: 1_767_225_600_000 + (i as i64 / 10_000) * 1_000,
            window_end: 1_767_225_601_000 + (i as i64 / 10_000) * 1_000,
            epoch: 0,
            pane_index: 0,
            timing: Timing::OnTime,
            count: (i % 17) as u64 + 1,
            aggregates: vec![
                ("n".into(), serde_json::Value::from((i % 17) + 1)),
                ("total".into(), serde_json::Value::from(i as f64 * 0.5)),
            ],
        })
        .collect()
}

fn plain_loop(db: &mut postgres::Client, rows: &[PaneRecord]) {
    for batch in rows.chunks(BATCH) {
        let mut tx = db.transaction().unwrap();
        for chunk in batch.chunks(1_000) {
            let mut sql = String::from(
                "INSERT INTO bench (dedup_id, key, window_start, window_end, epoch, pane_index, timing, count, n, total) VALUES ",
            );
            let mut params: Vec<Box<dyn postgres::types::ToSql + Sync>> = Vec::new();
            for (i, r) in chunk.iter().enumerate() {
                let b = i * 10;
                if i > 0 {
                    sql.push(',');
                }
                sql.push_str(&format!(
                    "(${},${},to_timestamp(${}::bigint/1000.0),to_timestamp(${}::bigint/1000.0),${},${},${},${},${},${})",
                    b + 1, b + 2, b + 3, b + 4, b + 5, b + 6, b + 7, b + 8, b + 9, b + 10
                ));
                params.push(Box::new(r.dedup_id.clone()));
                params.push(Box::new(r.key.clone()));
                params.push(Box::new(r.window_start));
                params.push(Box::new(r.window_end));
                params.push(Box::new(r.epoch as i64));
                params.push(Box::new(r.pane_index as i32));
                params.push(Box::new(r.timing.as_str()));
                params.push(Box::new(r.count as i64));
                params.push(Box::new(r.aggregate("n").map(|v| v as i64)));
                params.push(Box::new(r.aggregate("total")));
            }
            sql.push_str(
                " ON CONFLICT (dedup_id) DO UPDATE SET key = EXCLUDED.key, window_start = EXCLUDED.window_start, \
                 window_end = EXCLUDED.window_end, epoch = EXCLUDED.epoch, pane_index = EXCLUDED.pane_index, \
                 timing = EXCLUDED.timing, count = EXCLUDED.count, n = EXCLUDED.n, total = EXCLUDED.total, \
                 updated_at = now() WHERE (bench.epoch, bench.pane_index) < (EXCLUDED.epoch, EXCLUDED.pane_index)",
            );
            let refs: Vec<&(dyn postgres::types::ToSql + Sync)> =
                params.iter().map(|p| p.as_ref()).collect();
            tx.execute(&sql, &refs).unwrap();
        }
        tx.commit().unwrap();
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let n: usize = std::env::var("TIDEMARK_BENCH_ROWS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let pg = common::Postgres::start();
    let mut db = pg.client();
    let aggs = vec![
        AggSpec::new("n", "count", None),
        AggSpec::new("total", "sum", Some(0)),
    ];
    let spec = PostgresSpec {
        url: pg.url(),
        table: "bench".into(),
        dead_letter_table: None,
        create_tables: true,
        commit_interval: 1_000,
        max_batch_records: BATCH,
        key_columns: vec!["key".to_string()],
    };
    ensure_tables(&mut db, &spec, &aggs).unwrap();
    let data = rows(n);
    // The sink's batches, made (and reduced to the last pane per dedup id) outside the timing.
    let batches: Vec<Batch> = data
        .chunks(BATCH)
        .enumerate()
        .map(|(i, rows)| {
            let offsets = Offsets::from([(("panes".to_string(), 0), i as i64)]);
            Batch::new(rows.to_vec(), vec![], offsets)
        })
        .collect();
    let (mut sink, mut plain) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        for which in ["sink", "plain"] {
            db.batch_execute("TRUNCATE bench").unwrap();
            db.batch_execute("VACUUM ANALYZE bench").unwrap();
            let started = Instant::now();
            if which == "sink" {
                for batch in &batches {
                    write_pane_batch(&mut db, &spec, &aggs, batch, "bench").unwrap();
                }
            } else {
                plain_loop(&mut db, &data);
            }
            let rate = n as f64 / started.elapsed().as_secs_f64();
            let count: i64 = db
                .query_one("SELECT count(*) FROM bench", &[])
                .unwrap()
                .get(0);
            assert_eq!(count as usize, n, "{which} wrote every row");
            println!("round {round} {which:>5}: {rate:>10.0} rows/s");
            if which == "sink" {
                sink.push(rate);
            } else {
                plain.push(rate);
            }
        }
    }
    let (s, p) = (median(sink), median(plain));
    println!(
        "postgres sink: {n} rows in batches of {BATCH}: sink {s:.0} rows/s, plain batched INSERT ... ON CONFLICT {p:.0} rows/s (ceiling); sink = {:.0}% of the ceiling (medians of {ROUNDS} interleaved rounds)",
        100.0 * s / p
    );
}
