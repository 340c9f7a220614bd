//! The independent reference fold of `tests/common/reference.rs`, checked on a hand-worked input:
//! the checks that lean on it are only as good as it is.

use crate::common;

use common::reference::{compare, last_panes, tumbling};
use std::collections::BTreeSet;

#[test]
fn the_fold_counts_sums_and_calls_records_late_or_malformed() {
    let r = |p: i32, o: i64, v: &str| (p, o, v.to_string());
    let want = tumbling(
        &[
            r(0, 0, r#"{"user":"a","ts":1500,"amount":2}"#),
            r(0, 1, r#"{"user":"a","ts":1999,"amount":3}"#),
            r(0, 2, "not json"),
            r(0, 3, r#"{"user":"b","ts":5000,"amount":1}"#),
            // The watermark is now 5000 - 100: window [1000, 2000) plus lateness 500 is gone.
            r(0, 4, r#"{"user":"a","ts":1000,"amount":7}"#),
            // Partition 1 has its own watermark.
            r(1, 0, r#"{"user":"a","ts":1000,"amount":5}"#),
        ],
        1000,
        100,
        500,
        6000,
    );
    assert_eq!(want.windows[&("a".to_string(), 1000)], (3, 10.0));
    assert_eq!(want.windows[&("b".to_string(), 5000)], (1, 1.0));
    assert_eq!(want.late, BTreeSet::from([(0, 4)]));
    assert_eq!(want.malformed, BTreeSet::from([(0, 2)]));
    let got = last_panes(
        &[
            r#"{"key":"a","window_start":1000,"window_end":2000,"pane_index":0,"count":2,"total":5}"#.into(),
            r#"{"key":"a","window_start":1000,"window_end":2000,"pane_index":1,"count":3,"total":10}"#.into(),
            r#"{"key":"b","window_start":5000,"window_end":6000,"pane_index":0,"count":1,"total":1}"#.into(),
        ],
        "total",
    );
    assert!(compare(&got, &want, 1000).is_empty());
    let mut wrong = got.clone();
    wrong.insert(("a".into(), 1000), (2000, 3, 11.0));
    assert_eq!(compare(&wrong, &want, 1000).len(), 1);
}
