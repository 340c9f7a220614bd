//! An independent reference for tumbling count and sum: a plain fold over the input records, with
//! no tidemark code in it (no decoder, no engine, no simulate), so a bug in the engine cannot pass
//! both sides of a check. It knows only the test scenario's shape: JSON objects with a string
//! `user`, an integer `ts` (epoch ms) and an integer `amount`.

use std::collections::{BTreeMap, BTreeSet};

/// What a correct run commits, according to the fold.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Expected {
    /// Per (key, window start): the count and sum of the records accepted into the window. A
    /// window's last pane (accumulating) must hold exactly these.
    pub windows: BTreeMap<(String, i64), (u64, f64)>,
    /// Records that must be dead-lettered as `late`, by (source partition, offset).
    pub late: BTreeSet<(i32, i64)>,
    /// Records that must be dead-lettered as `malformed`, by (source partition, offset).
    pub malformed: BTreeSet<(i32, i64)>,
}

/// Tumbling windows of `size` ms; the watermark of a partition is the largest event time seen
/// before a record minus `ooo`; a record is late when that watermark has reached its window's end
/// plus `lateness`. Windows ending after `cutoff` are left out (they have not fired). `records`
/// are (partition, offset, value) in offset order per partition.
pub fn tumbling(
    records: &[(i32, i64, String)],
    size: i64,
    ooo: i64,
    lateness: i64,
    cutoff: i64,
) -> Expected {
    let mut out = Expected::default();
    let mut max_ts: BTreeMap<i32, i64> = BTreeMap::new();
    for (p, offset, value) in records {
        let parsed = serde_json::from_str::<serde_json::Value>(value).ok();
        let fields = parsed.as_ref().and_then(|v| {
            Some((
                v.get("user")?.as_str()?.to_string(),
                v.get("ts")?.as_i64()?,
                v.get("amount")?.as_i64()?,
            ))
        });
        let Some((user, ts, amount)) = fields else {
            out.malformed.insert((*p, *offset));
            continue;
        };
        let start = ts.div_euclid(size) * size;
        let end = start + size;
        let watermark = max_ts.get(p).map(|m| m - ooo);
        if watermark.is_some_and(|w| w >= end + lateness) {
            out.late.insert((*p, *offset));
        } else if end <= cutoff {
            let e = out.windows.entry((user, start)).or_default();
            e.0 += 1;
            e.1 += amount as f64;
        }
        let m = max_ts.entry(*p).or_insert(ts);
        *m = (*m).max(ts);
    }
    out
}

/// The last pane per window (highest pane index) among committed pane JSON lines: per
/// (key, window start), (window end, count, sum of the aggregate `sum_field`).
pub fn last_panes(lines: &[String], sum_field: &str) -> BTreeMap<(String, i64), (i64, u64, f64)> {
    let mut last: BTreeMap<(String, i64), (i64, i64, u64, f64)> = BTreeMap::new();
    for l in lines {
        let v: serde_json::Value = serde_json::from_str(l).expect("a pane is JSON");
        // A key of one part is a string; of several, a JSON array (kept as its text).
        let key = (
            v["key"]
                .as_str()
                .map_or_else(|| v["key"].to_string(), str::to_string),
            v["window_start"].as_i64().expect("window_start"),
        );
        let idx = v["pane_index"].as_i64().expect("pane_index");
        let row = (
            idx,
            v["window_end"].as_i64().expect("window_end"),
            v["count"].as_u64().expect("count"),
            v[sum_field].as_f64().unwrap_or(0.0),
        );
        if last.get(&key).is_none_or(|old| old.0 < idx) {
            last.insert(key, row);
        }
    }
    last.into_iter()
        .map(|(k, (_, end, n, s))| (k, (end, n, s)))
        .collect()
}

/// Differences between the committed last panes and the reference, as readable lines (empty when
/// they agree): every expected window with its count and sum, nothing else, and each window's end
/// `size` after its start.
pub fn compare(
    got: &BTreeMap<(String, i64), (i64, u64, f64)>,
    want: &Expected,
    size: i64,
) -> Vec<String> {
    let mut problems = Vec::new();
    for ((key, start), (n, sum)) in &want.windows {
        match got.get(&(key.clone(), *start)) {
            None => problems.push(format!(
                "{key}@{start}: no pane (want count {n}, sum {sum})"
            )),
            Some((end, gn, gs)) => {
                if *end != start + size {
                    problems.push(format!("{key}@{start}: window end {end}"));
                }
                if (gn, gs) != (n, sum) {
                    problems.push(format!(
                        "{key}@{start}: count {gn} sum {gs}, want count {n} sum {sum}"
                    ));
                }
            }
        }
    }
    for (key, start) in got.keys() {
        if !want.windows.contains_key(&(key.clone(), *start)) {
            problems.push(format!("{key}@{start}: a pane the input does not explain"));
        }
    }
    problems
}
