use super::value::string;
use super::*;
use proptest::prelude::*;
use std::collections::BTreeMap;
use value::Scalar;

fn spec(op: &str, params: Params) -> AggSpec {
    AggSpec {
        name: op.to_string(),
        op: operation(op, &params).unwrap(),
        field: Some(0),
    }
}

/// One aggregation of every operation.
fn all_ops() -> Vec<AggSpec> {
    let mut out: Vec<AggSpec> = OPERATIONS
        .iter()
        .filter(|(n, _)| !matches!(*n, "approx_percentile" | "avg"))
        .map(|(n, _)| spec(n, Params::default()))
        .collect();
    out.push(spec(
        "approx_percentile",
        Params {
            q: Some(0.9),
            ..Params::default()
        },
    ));
    for a in &mut out {
        if a.op.input() == Input::Nothing {
            a.field = None;
        }
    }
    out
}

fn fold(aggs: &[AggSpec], items: &[(Value, i64)]) -> Acc {
    let mut a = Acc::default();
    for (v, ts) in items {
        a.add(aggs, std::slice::from_ref(v), *ts);
    }
    a
}

fn enc(a: &Acc) -> Vec<u8> {
    let mut out = Vec::new();
    a.encode(&mut out);
    out
}

/// Whether two outputs agree: exactly, or for doubles within a relative `tol`.
fn close(a: &Output, b: &Output, tol: f64) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => (x - y).abs() <= tol * x.abs().max(y.abs()).max(1.0),
        _ => a == b,
    }
}

fn numbers() -> impl Strategy<Value = Vec<(Value, i64)>> {
    prop::collection::vec(
        (
            prop_oneof![
                1 => Just(Value::Null),
                4 => (-1000i64..1000).prop_map(Value::Int),
                4 => (-1e4f64..1e4).prop_map(Value::Float),
            ],
            0i64..50,
        ),
        0..60,
    )
}

fn scalars() -> impl Strategy<Value = Vec<(Value, i64)>> {
    prop::collection::vec(
        (
            prop_oneof![
                1 => Just(Value::Null),
                3 => (0i64..8).prop_map(Value::Int),
                3 => "[a-e]".prop_map(string),
                1 => any::<bool>().prop_map(Value::Bool),
            ],
            0i64..20,
        ),
        0..60,
    )
}

/// Operations whose result is exact whatever the grouping (sketch estimates are deterministic
/// for a given set of inputs too, but merging changes float sums in their last bits).
const TOL: f64 = 1e-9;

proptest! {
    #[test]
    fn merging_partials_in_any_grouping_equals_folding_everything(
        items in numbers(),
        cuts in prop::collection::vec(0usize..60, 0..4),
    ) {
        let aggs: Vec<AggSpec> = all_ops()
            .into_iter()
            .filter(|a| a.op.input() != Input::Any || matches!(a.op.name(), "first" | "last"))
            .collect();
        let whole = fold(&aggs, &items);
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(items.len())).collect();
        cuts.sort();
        let mut bounds = vec![0];
        bounds.extend(cuts);
        bounds.push(items.len());
        let mut merged = Acc::default();
        for w in bounds.windows(2) {
            merged.merge(&fold(&aggs, &items[w[0]..w[1]]));
        }
        prop_assert_eq!(merged.count, whole.count);
        for i in 0..aggs.len() {
            let (m, w) = (merged.value(&aggs, i), whole.value(&aggs, i));
            prop_assert!(close(&m, &w, TOL), "{}: {:?} vs {:?}", aggs[i].name, m, w);
        }
    }

    #[test]
    fn value_keeping_operations_merge_exactly(
        items in scalars(),
        cut in 0usize..60,
    ) {
        let aggs: Vec<AggSpec> = all_ops()
            .into_iter()
            .filter(|a| a.op.input() == Input::Any)
            .collect();
        let cut = cut.min(items.len());
        let mut merged = fold(&aggs, &items[..cut]);
        merged.merge(&fold(&aggs, &items[cut..]));
        prop_assert_eq!(enc(&merged), enc(&fold(&aggs, &items)));
    }

    #[test]
    fn states_survive_encode_and_decode_bit_for_bit(items in numbers(), strs in scalars()) {
        for (aggs, items) in [
            (all_ops().into_iter().filter(|a| a.op.input() != Input::Any).collect::<Vec<_>>(), items),
            (all_ops().into_iter().filter(|a| a.op.input() == Input::Any).collect(), strs),
        ] {
            let a = fold(&aggs, &items);
            let bytes = enc(&a);
            let mut rest = &bytes[..];
            let back = Acc::decode(&aggs, &mut rest, false).expect("decodes");
            prop_assert!(rest.is_empty());
            prop_assert_eq!(enc(&back), bytes.clone());
            for i in 0..aggs.len() {
                prop_assert_eq!(back.value(&aggs, i), a.value(&aggs, i));
            }
            // A truncated form never decodes as something else.
            let mut short = &bytes[..bytes.len() - 1];
            prop_assert!(Acc::decode(&aggs, &mut short, false).is_none_or(|_| !short.is_empty()));
        }
    }

    #[test]
    fn retraction_undoes_a_merge(items in numbers(), strs in scalars(), cut in 0usize..60) {
        for (aggs, items) in [
            (all_ops().into_iter().filter(|a| a.op.retractable() && a.op.input() != Input::Any).collect::<Vec<_>>(), items),
            (all_ops().into_iter().filter(|a| a.op.retractable() && a.op.input() == Input::Any).collect(), strs),
        ] {
            let cut = cut.min(items.len());
            let (head, tail) = (fold(&aggs, &items[..cut]), fold(&aggs, &items[cut..]));
            let mut all = head.clone();
            all.merge(&tail);
            all.retract(&tail);
            for i in 0..aggs.len() {
                let (got, want) = (all.value(&aggs, i), head.value(&aggs, i));
                // Moments lose a little precision when a large part is taken out of a sum.
                prop_assert!(close(&got, &want, 1e-4), "{}: {:?} vs {:?}", aggs[i].name, got, want);
            }
        }
    }
}

proptest! {
    #[test]
    fn bounded_distinct_counts_merge_as_one_fold_and_save_exactly(
        items in scalars(),
        cut in 0usize..60,
        max in 1u32..8,
    ) {
        // Past its bound a distinct count is a sketch of every value it saw: folding in any
        // split and merging gives the state one fold gives.
        let aggs = [spec("count_distinct", Params { max_values: Some(max), ..Params::default() })];
        let cut = cut.min(items.len());
        let mut merged = fold(&aggs, &items[..cut]);
        merged.merge(&fold(&aggs, &items[cut..]));
        let whole = fold(&aggs, &items);
        prop_assert_eq!(enc(&merged), enc(&whole));
        let bytes = enc(&whole);
        let back = Acc::decode(&aggs, &mut &bytes[..], false).expect("decodes");
        prop_assert_eq!(enc(&back), bytes);
        prop_assert_eq!(back.value(&aggs, 0), whole.value(&aggs, 0));
    }

    #[test]
    fn a_bounded_top_k_never_overcounts_and_undercounts_by_at_most_its_bound(
        items in scalars(),
        cut in 0usize..60,
        max in 1u32..6,
    ) {
        let aggs = [spec("top_k", Params { k: Some(1), max_values: Some(max), ..Params::default() })];
        let cut = cut.min(items.len());
        let mut merged = fold(&aggs, &items[..cut]);
        merged.merge(&fold(&aggs, &items[cut..]));
        let n = items.iter().filter(|(v, _)| !v.is_null()).count() as u64;
        let slack = n / (max as u64 + 1);
        let mut truth: BTreeMap<Scalar, u64> = BTreeMap::new();
        for (v, _) in &items {
            if let Some(s) = Scalar::of(v) {
                *truth.entry(s).or_default() += 1;
            }
        }
        for acc in [fold(&aggs, &items), merged] {
            let Output::Top(top) = acc.value(&aggs, 0) else { panic!("top_k outputs a list") };
            if let Some((v, got)) = top.first() {
                let want = truth[&Scalar::of(v).unwrap()];
                prop_assert!(*got <= want && got + slack >= want, "{v:?}: {got} of {want}, slack {slack}");
            }
            // The most frequent value is reported when it is frequent enough to be kept.
            let best = truth.values().copied().max().unwrap_or(0);
            if best > slack {
                prop_assert!(!top.is_empty());
            }
            let bytes = enc(&acc);
            let back = Acc::decode(&aggs, &mut &bytes[..], false).expect("decodes");
            prop_assert_eq!(enc(&back), bytes);
            // The size kept as values come and go is the size of what is kept.
            prop_assert_eq!(back.size(), acc.size());
        }
    }
}

/// The share of a record the byte-bound tests give the operations that keep values.
const SHARE: usize = crate::windowing::spec::MIN_SHARE;

/// Every operation with the share [`SHARE`], and the longest string each may read.
fn shared_ops() -> Vec<(AggSpec, Option<usize>)> {
    all_ops()
        .into_iter()
        .map(|a| match a.op.saved_size() {
            SavedSize::AtMost(_) => (a, None),
            SavedSize::Share { value_divisor } => {
                let params = Params {
                    k: (a.op.name() == "top_k").then_some(3),
                    max_bytes: Some(SHARE),
                    ..Params::default()
                };
                let longest = SHARE / value_divisor - 64;
                (spec(a.op.name(), params), Some(longest))
            }
        })
        .collect()
}

/// Strings of up to 9,000 bytes (longer than a quarter of the share) and numbers.
fn long_values() -> impl Strategy<Value = Vec<(Value, i64)>> {
    prop::collection::vec(
        prop_oneof![
            (0usize..9_000, any::<u8>()).prop_map(|(n, c)| {
                let c = char::from(b'a' + c % 26);
                string(std::iter::repeat_n(c, n).collect::<String>())
            }),
            any::<i64>().prop_map(Value::Int),
            Just(Value::Null),
        ],
        0..120,
    )
    .prop_map(|vs| {
        vs.into_iter()
            .enumerate()
            .map(|(i, v)| (v, i as i64))
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn every_state_saves_within_its_saved_size(items in long_values(), cut in 0usize..120) {
        // What `RecordBudget` promises: a state fed strings no longer than its operation may
        // read never saves more than its `saved_size`, merged or not.
        for (agg, longest) in shared_ops() {
            let bound = match agg.op.saved_size() {
                SavedSize::AtMost(n) => n,
                SavedSize::Share { .. } => SHARE,
            };
            let items: Vec<(Value, i64)> = items
                .iter()
                .filter(|(v, _)| agg.op.input() != Input::Number || !matches!(v, Value::Str(_)))
                .map(|(v, ts)| match (v, longest) {
                    (Value::Str(s), Some(l)) if s.len() > l => (string(&s[..l]), *ts),
                    _ => (v.clone(), *ts),
                })
                .collect();
            let cut = cut.min(items.len());
            let mut st = agg.op.new_state();
            let mut saved = Vec::new();
            for (i, (v, ts)) in items.iter().enumerate() {
                st.add(v, *ts);
                saved.clear();
                st.encode(&mut saved);
                prop_assert!(saved.len() <= bound, "{} after {i}: {} > {bound}", agg.op.name(), saved.len());
            }
            let mut left = agg.op.new_state();
            let mut right = agg.op.new_state();
            for (v, ts) in &items[..cut] {
                left.add(v, *ts);
            }
            for (v, ts) in &items[cut..] {
                right.add(v, *ts);
            }
            left.merge(&*right);
            saved.clear();
            left.encode(&mut saved);
            prop_assert!(saved.len() <= bound, "{} merged: {} > {bound}", agg.op.name(), saved.len());
        }
    }
}

#[test]
fn a_top_k_of_long_values_keeps_its_heavy_hitters_within_its_share() {
    let aggs = [spec(
        "top_k",
        Params {
            k: Some(2),
            max_bytes: Some(SHARE),
            ..Params::default()
        },
    )];
    let long = |tag: &str| format!("{tag}-{}", "x".repeat(2_000));
    let mut a = Acc::default();
    for i in 0..3_000u64 {
        let v = match i % 10 {
            0..=2 => long("home"),
            3..=4 => long("cart"),
            _ => long(&format!("page-{i}")),
        };
        a.add(&aggs, &[string(v)], 0);
        let mut saved = Vec::new();
        a.encode(&mut saved);
        assert!(saved.len() <= SHARE + 64, "{} after {i}", saved.len());
    }
    let Output::Top(top) = a.value(&aggs, 0) else {
        panic!()
    };
    let names: Vec<Value> = top.iter().map(|(v, _)| v.clone()).collect();
    assert_eq!(names, [string(long("home")), string(long("cart"))]);
    // Never above the true count.
    assert!(top[0].1 <= 900 && top[1].1 <= 600, "{top:?}");
}

#[test]
fn a_distinct_count_past_its_bound_estimates_in_bounded_memory() {
    let aggs = [spec(
        "count_distinct",
        Params {
            max_values: Some(1_000),
            ..Params::default()
        },
    )];
    let mut a = Acc::default();
    let mut sizes = Vec::new();
    for i in 0..50_000u64 {
        a.add(&aggs, &[string(format!("user-{i}"))], 0);
        if i == 999 {
            // Exact up to the bound, and the state holds every value.
            assert_eq!(a.value(&aggs, 0), Output::Value(Value::Int(1_000)));
            assert!(a.size() > 1_000 * 16, "{}", a.size());
        }
        if i % 10_000 == 9_999 {
            sizes.push(a.size());
        }
    }
    let est = a.value(&aggs, 0).as_f64().unwrap();
    assert!(
        (est - 50_000.0).abs() / 50_000.0 <= 3.0 * 0.0081,
        "estimate {est}"
    );
    // Past the bound the state is the sketch: 16 KiB of registers at most, whatever comes.
    assert!(sizes.iter().all(|s| *s <= 17 * 1024), "{sizes:?}");
    assert_eq!(sizes.first(), sizes.last());
}

#[test]
fn a_top_k_past_its_bound_keeps_its_heavy_hitters_in_bounded_memory() {
    let aggs = [spec(
        "top_k",
        Params {
            k: Some(2),
            max_values: Some(100),
            ..Params::default()
        },
    )];
    let mut a = Acc::default();
    let mut biggest = 0;
    for i in 0..30_000u64 {
        // Two heavy hitters among a stream of values each seen once.
        let v = match i % 10 {
            0..=2 => "home".to_string(),
            3..=4 => "cart".to_string(),
            _ => format!("page-{i}"),
        };
        a.add(&aggs, &[string(v)], 0);
        biggest = biggest.max(a.size());
    }
    let Output::Top(top) = a.value(&aggs, 0) else {
        panic!()
    };
    let names: Vec<Value> = top.iter().map(|(v, _)| v.clone()).collect();
    assert_eq!(names, [string("home"), string("cart")]);
    let slack = 30_000 / 101;
    assert!(top[0].1 <= 9_000 && top[0].1 + slack >= 9_000, "{top:?}");
    assert!(top[1].1 <= 6_000 && top[1].1 + slack >= 6_000, "{top:?}");
    // Never more than twice the bound's counters.
    assert!(biggest < 2 * 101 * 100, "{biggest}");
}

#[test]
fn every_state_reports_its_size() {
    let aggs = all_ops();
    let empty = Acc::default().size();
    let mut a = Acc::default();
    a.add(&aggs, &[Value::Int(1)], 0);
    let one = a.size();
    assert!(one > empty + aggs.len() * 8, "{empty} then {one}");
    for i in 0..1_000 {
        a.add(&aggs, &[Value::Int(i)], i);
    }
    // The value-keeping states grew; the others did not.
    assert!(a.size() > one + 1_000 * 16, "{one} then {}", a.size());
}

fn value_of(op: &str, params: Params, items: &[(Value, i64)]) -> Output {
    let aggs = [spec(op, params)];
    fold(&aggs, items).value(&aggs, 0)
}

fn nums(xs: &[f64]) -> Vec<(Value, i64)> {
    xs.iter().map(|&x| (Value::Float(x), 0)).collect()
}

#[test]
fn simple_operations_skip_nulls() {
    let items = vec![
        (Value::Int(3), 0),
        (Value::Null, 0),
        (Value::Float(-1.0), 0),
        (Value::Int(4), 0),
    ];
    let v = |op| value_of(op, Params::default(), &items);
    assert_eq!(v("sum"), Output::Value(Value::Float(6.0)));
    assert_eq!(v("mean"), Output::Value(Value::Float(2.0)));
    assert_eq!(v("min"), Output::Value(Value::Float(-1.0)));
    assert_eq!(v("max"), Output::Value(Value::Float(4.0)));
    let nothing = [(Value::Null, 0)];
    let n = |op| value_of(op, Params::default(), &nothing);
    assert_eq!(n("sum"), Output::Value(Value::Float(0.0)));
    assert_eq!(n("mean"), Output::Value(Value::Null));
    assert_eq!(n("min"), Output::Value(Value::Null));
    assert_eq!(n("var_samp"), Output::Value(Value::Null));
}

#[test]
fn moments_match_their_definitions() {
    let items = nums(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
    let v = |op| value_of(op, Params::default(), &items).as_f64().unwrap();
    assert!((v("var_pop") - 4.0).abs() < 1e-12);
    assert!((v("stddev_pop") - 2.0).abs() < 1e-12);
    assert!((v("var_samp") - 32.0 / 7.0).abs() < 1e-12);
    assert!((v("stddev_samp") - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
    // Far from zero the textbook formula cancels; Welford's does not.
    let shifted: Vec<f64> = [4.0, 7.0, 13.0, 16.0].iter().map(|x| x + 1e9).collect();
    let var = value_of("var_samp", Params::default(), &nums(&shifted));
    assert!((var.as_f64().unwrap() - 30.0).abs() < 1e-6, "{var:?}");
}

#[test]
fn distinct_counts_and_top_values() {
    let items: Vec<(Value, i64)> = ["b", "a", "c", "a", "b", "d", "a"]
        .iter()
        .map(|s| (string(*s), 0))
        .chain([(Value::Null, 0), (Value::Int(2), 0), (Value::Float(2.0), 0)])
        .collect();
    assert_eq!(
        value_of("count_distinct", Params::default(), &items),
        Output::Value(Value::Int(5))
    );
    let top = value_of(
        "top_k",
        Params {
            k: Some(3),
            ..Params::default()
        },
        &items,
    );
    // Ties by value ascending: the number 2 sorts before the strings.
    assert_eq!(
        top,
        Output::Top(vec![(string("a"), 3), (Value::Int(2), 2), (string("b"), 2)])
    );
}

#[test]
fn duration_spans_the_event_times() {
    let items = vec![(Value::Null, 5), (Value::Null, 1), (Value::Null, 9)];
    let aggs = [AggSpec::new("d", "duration", None)];
    assert_eq!(
        fold(&aggs, &items).value(&aggs, 0),
        Output::Value(Value::Int(8))
    );
    assert_eq!(fold(&aggs, &[]).value(&aggs, 0), Output::Value(Value::Null));
}

#[test]
fn first_and_last_follow_event_time_then_input_order() {
    let items = vec![
        (string("mid"), 5),
        (string("early-1"), 1),
        (string("early-2"), 1),
        (Value::Null, 0),
        (string("late-1"), 9),
        (string("late-2"), 9),
    ];
    assert_eq!(
        value_of("first", Params::default(), &items),
        Output::Value(string("early-1"))
    );
    assert_eq!(
        value_of("last", Params::default(), &items),
        Output::Value(string("late-2"))
    );
}

#[test]
fn hyperloglog_stays_within_three_standard_errors() {
    for n in [10u64, 1_000, 20_000, 200_000] {
        let aggs = [spec("approx_count_distinct", Params::default())];
        let mut a = Acc::default();
        for i in 0..n {
            a.add(&aggs, &[string(format!("user-{i}"))], 0);
        }
        let est = a.value(&aggs, 0).as_f64().unwrap();
        let err = (est - n as f64).abs() / n as f64;
        assert!(err <= 3.0 * 0.0081, "n={n}: estimate {est}, error {err}");
        // Half the values again change nothing.
        for i in 0..n / 2 {
            a.add(&aggs, &[string(format!("user-{i}"))], 0);
        }
        assert_eq!(a.value(&aggs, 0).as_f64().unwrap(), est);
    }
}

#[test]
fn ddsketch_quantiles_are_within_the_relative_error() {
    let xs: Vec<f64> = (1..=10_000).map(|i| (i as f64).powf(1.7) * 0.37).collect();
    for q in [0.0, 0.5, 0.9, 0.99, 1.0] {
        let got = value_of(
            "approx_percentile",
            Params {
                q: Some(q),
                ..Params::default()
            },
            &nums(&xs),
        )
        .as_f64()
        .unwrap();
        let want = xs[(q * (xs.len() - 1) as f64) as usize];
        assert!((got - want).abs() <= 0.01 * want, "q={q}: {got} vs {want}");
    }
}

#[test]
fn the_earlier_saved_form_loads_into_the_same_values() {
    let aggs = [
        spec("count", Params::default()),
        spec("sum", Params::default()),
        spec("min", Params::default()),
        spec("max", Params::default()),
        spec("mean", Params::default()),
    ];
    // count 3, one field: sum 6, min -1, max 4.
    let mut old = 3u64.to_le_bytes().to_vec();
    old.push(1);
    for x in [6.0f64, -1.0, 4.0] {
        old.extend_from_slice(&x.to_le_bytes());
    }
    let mut rest = &old[..];
    let a = Acc::decode(&aggs, &mut rest, true).unwrap();
    assert!(rest.is_empty());
    let values: Vec<Option<f64>> = (0..5).map(|i| a.value(&aggs, i).as_f64()).collect();
    assert_eq!(
        values,
        [Some(3.0), Some(6.0), Some(-1.0), Some(4.0), Some(2.0)]
    );
}

#[test]
fn bad_parameters_are_refused_with_the_reason() {
    let err = |op: &str, p: Params| operation(op, &p).unwrap_err();
    assert!(err("median", Params::default()).contains("unknown operation \"median\""));
    assert!(err("approx_percentile", Params::default()).contains("needs q"));
    let q = |q| Params {
        q: Some(q),
        ..Params::default()
    };
    assert!(err("approx_percentile", q(1.5)).contains("from 0 to 1"));
    assert!(err("sum", q(0.5)).contains("sum takes no q"));
    let k = Params {
        k: Some(0),
        ..Params::default()
    };
    assert!(err("top_k", k).contains("at least 1"));
    let p = Params {
        precision: Some(30),
        ..Params::default()
    };
    assert!(err("approx_count_distinct", p).contains("from 4 to 18"));
}
