use super::*;

/// A record as a map from dotted path to value.
struct Rec {
    paths: Paths,
    values: Vec<(String, Datum<'static>)>,
}

impl Row for Rec {
    fn field(&self, slot: usize) -> Datum<'_> {
        let name = self.paths.all()[slot].join(".");
        self.values
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
            .unwrap_or(Datum::Null)
    }
}

fn s(x: &str) -> Datum<'static> {
    Datum::Str(Cow::Owned(x.to_string()))
}

fn rec() -> Vec<(String, Datum<'static>)> {
    vec![
        ("event_type".into(), s("click")),
        ("price".into(), Datum::Float(2.5)),
        ("quantity".into(), Datum::Int(4)),
        ("geo.country".into(), s("DE")),
        ("user".into(), s("Ada")),
        ("zero".into(), Datum::Int(0)),
        ("flag".into(), Datum::Bool(true)),
    ]
}

fn eval(text: &str) -> Result<Datum<'static>, EvalError> {
    let mut paths = Paths::default();
    let e = parse(text, &mut paths).unwrap_or_else(|e| panic!("{text}: {e}"));
    let r = Rec {
        paths,
        values: rec(),
    };
    e.eval(&r).map(Datum::into_owned)
}

fn ok(text: &str) -> Datum<'static> {
    eval(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

#[test]
fn comparisons_logic_and_arithmetic() {
    assert_eq!(ok("event_type = 'click' AND price > 0"), Datum::Bool(true));
    assert_eq!(ok("price * quantity"), Datum::Float(10.0));
    assert_eq!(ok("quantity * 3 - 2"), Datum::Int(10));
    assert_eq!(ok("7 / 2"), Datum::Int(3));
    assert_eq!(ok("7.0 / 2"), Datum::Float(3.5));
    assert_eq!(ok("7 % 4"), Datum::Int(3));
    assert_eq!(ok("MOD(7, 4)"), Datum::Int(3));
    assert_eq!(ok("mod(-7, 4)"), Datum::Int(-3));
    assert_eq!(ok("-quantity"), Datum::Int(-4));
    assert_eq!(ok("quantity = 4.0"), Datum::Bool(true));
    assert_eq!(ok("NOT (quantity <> 4)"), Datum::Bool(true));
    assert_eq!(ok("quantity != 4 OR flag"), Datum::Bool(true));
    assert_eq!(ok("quantity BETWEEN 1 AND 4"), Datum::Bool(true));
    assert_eq!(ok("quantity NOT BETWEEN 5 AND 9"), Datum::Bool(true));
    assert_eq!(ok("'a' || 'b' || quantity"), s("ab4"));
}

#[test]
fn null_follows_sql() {
    assert_eq!(ok("missing = 1"), Datum::Null);
    assert_eq!(ok("missing + 1"), Datum::Null);
    assert_eq!(ok("missing IS NULL"), Datum::Bool(true));
    assert_eq!(ok("price IS NOT NULL"), Datum::Bool(true));
    assert_eq!(ok("missing = 1 AND FALSE"), Datum::Bool(false));
    assert_eq!(ok("missing = 1 AND TRUE"), Datum::Null);
    assert_eq!(ok("missing = 1 OR TRUE"), Datum::Bool(true));
    assert_eq!(ok("missing = 1 OR FALSE"), Datum::Null);
    assert_eq!(ok("NOT (missing = 1)"), Datum::Null);
    assert_eq!(ok("quantity IN (1, NULL)"), Datum::Null);
    assert_eq!(ok("quantity IN (4, NULL)"), Datum::Bool(true));
    assert_eq!(ok("quantity NOT IN (1, 2)"), Datum::Bool(true));
    assert_eq!(ok("missing IN (1, 2)"), Datum::Null);
    assert_eq!(ok("coalesce(missing, NULL, 7)"), Datum::Int(7));
    assert_eq!(ok("concat('a', missing, 'b')"), s("ab"));
    assert_eq!(ok("missing || 'x'"), Datum::Null);
    assert_eq!(ok("(missing = 1) IS TRUE"), Datum::Bool(false));
    assert_eq!(ok("(missing = 1) IS FALSE"), Datum::Bool(false));
    // A NULL filter rejects; so does FALSE.
    let mut paths = Paths::default();
    let f = parse("missing > 1", &mut paths).unwrap();
    let r = Rec {
        paths,
        values: rec(),
    };
    assert!(!f.eval_filter(&r).unwrap());
}

#[test]
fn every_function() {
    assert_eq!(ok("lower(user)"), s("ada"));
    assert_eq!(ok("upper(geo.country)"), s("DE"));
    assert_eq!(ok("lower('ÀB')"), s("àb"));
    assert_eq!(ok("upper('àb')"), s("ÀB"));
    assert_eq!(ok("lower('already')"), s("already"));
    assert_eq!(ok("length('héllo')"), Datum::Int(5));
    assert_eq!(ok("substr('tidemark', 2, 3)"), s("ide"));
    assert_eq!(ok("substr('tidemark', 5)"), s("mark"));
    assert_eq!(ok("substr('tidemark', 0, 2)"), s("t"));
    assert_eq!(ok("SUBSTRING('tidemark' FROM 2 FOR 3)"), s("ide"));
    assert_eq!(ok("abs(-3)"), Datum::Int(3));
    assert_eq!(ok("abs(-2.5)"), Datum::Float(2.5));
    assert_eq!(ok("round(2.5)"), Datum::Float(3.0));
    assert_eq!(ok("round(-2.5)"), Datum::Float(-3.0));
    assert_eq!(ok("round(2.71828, 2)"), Datum::Float(2.72));
    assert_eq!(ok("round(1234, -2)"), Datum::Int(1200));
    assert_eq!(ok("floor(2.7)"), Datum::Float(2.0));
    assert_eq!(ok("ceil(2.1)"), Datum::Float(3.0));
    assert_eq!(ok("CEILING(2.1)"), Datum::Float(3.0));
    assert_eq!(ok("concat(user, '-', quantity)"), s("Ada-4"));
    assert_eq!(ok("CAST('42' AS BIGINT)"), Datum::Int(42));
    assert_eq!(ok("CAST(price AS INT)"), Datum::Int(2));
    assert_eq!(ok("CAST(quantity AS DOUBLE)"), Datum::Float(4.0));
    assert_eq!(ok("CAST(quantity AS VARCHAR)"), s("4"));
    assert_eq!(ok("CAST('true' AS BOOLEAN)"), Datum::Bool(true));
    assert_eq!(ok("quantity::text"), s("4"));
    assert_eq!(ok("user LIKE 'A%'"), Datum::Bool(true));
    assert_eq!(ok("user LIKE '_d_'"), Datum::Bool(true));
    assert_eq!(ok("user LIKE 'a%'"), Datum::Bool(false));
    assert_eq!(ok("user ILIKE 'a%'"), Datum::Bool(true));
    assert_eq!(ok("user NOT LIKE '%z%'"), Datum::Bool(true));
    assert_eq!(ok("'abcabd' LIKE '%ab_'"), Datum::Bool(true));
    assert_eq!(
        ok("CASE WHEN price > 10 THEN 'big' WHEN price > 1 THEN 'mid' ELSE 'small' END"),
        s("mid")
    );
    assert_eq!(
        ok("CASE event_type WHEN 'view' THEN 1 WHEN 'click' THEN 2 END"),
        Datum::Int(2)
    );
    assert_eq!(ok("CASE WHEN FALSE THEN 1 END"), Datum::Null);
    assert_eq!(ok("\"geo\".\"country\""), s("DE"));
    assert_eq!(ok("lower(user)"), s("ada"));
    assert_eq!(ok("user"), s("Ada"));
}

#[test]
fn type_errors_are_errors_not_panics() {
    for text in [
        "event_type + 1",
        "event_type > 3",
        "price AND TRUE",
        "quantity / zero",
        "price / 0.0",
        "lower(quantity)",
        "CAST(user AS BIGINT)",
        "9223372036854775807 + 1",
        "NOT user",
        "abs(user)",
        "substr(user, 1, -1)",
    ] {
        assert!(eval(text).is_err(), "{text} should fail");
    }
    let msg = eval("event_type + 1").unwrap_err().0;
    assert_eq!(msg, "+ needs numbers, got a string and an integer");
}

#[test]
fn unsupported_sql_is_refused_with_the_text() {
    let mut paths = Paths::default();
    for text in [
        "price >",
        "count(*)",
        "x IN (SELECT 1)",
        "sqrt(price)",
        "price, quantity",
        "lower(a, b)",
        "substr(a)",
    ] {
        let e = parse(text, &mut paths).unwrap_err();
        assert!(e.to_string().contains(text), "{e}");
    }
}

#[test]
fn fields_get_one_slot_per_distinct_path() {
    let mut paths = Paths::default();
    let a = parse("geo.country = 'DE' AND price > 1", &mut paths).unwrap();
    let b = parse("price * quantity", &mut paths).unwrap();
    assert_eq!(
        paths.all(),
        &[
            vec!["geo".to_string(), "country".to_string()],
            vec!["price".to_string()],
            vec!["quantity".to_string()]
        ]
    );
    let mut slots = Vec::new();
    a.for_each_slot(&mut |s| slots.push(s));
    b.for_each_slot(&mut |s| slots.push(s));
    assert_eq!(slots, vec![0, 1, 1, 2]);
    assert_eq!(
        parse("geo.country", &mut paths).unwrap().as_field(),
        Some("geo.country")
    );
    // Keywords as path segments, alone and inside expressions.
    for (text, path) in [
        ("user.id", "user.id"),
        ("timestamp", "timestamp"),
        ("order.from", "order.from"),
    ] {
        assert_eq!(
            parse(text, &mut paths).unwrap().as_field(),
            Some(path),
            "{text}"
        );
    }
    let e = parse("upper(user.name) = 'X'", &mut paths).unwrap();
    let mut slots = Vec::new();
    e.for_each_slot(&mut |s| slots.push(paths.all()[s].join(".")));
    assert_eq!(slots, ["user.name"]);
}

mod props {
    use super::*;
    use proptest::prelude::*;

    fn datum() -> impl Strategy<Value = Datum<'static>> {
        prop_oneof![
            Just(Datum::Null),
            any::<bool>().prop_map(Datum::Bool),
            (-1000i64..1000).prop_map(Datum::Int),
            "[a-c]{0,3}".prop_map(|t| Datum::Str(Cow::Owned(t))),
        ]
    }

    proptest! {
        /// `a AND b` and `a OR b` follow SQL's three-valued truth tables, and `NOT` swaps them
        /// (De Morgan), for every boolean or NULL operand.
        #[test]
        fn three_valued_logic(a in prop::option::of(any::<bool>()), b in prop::option::of(any::<bool>())) {
            let lit = |v: Option<bool>| v.map_or("NULL".to_string(), |b| b.to_string());
            let and = ok(&format!("{} AND {}", lit(a), lit(b)));
            let want_and = match (a, b) {
                (Some(false), _) | (_, Some(false)) => Datum::Bool(false),
                (Some(true), Some(true)) => Datum::Bool(true),
                _ => Datum::Null,
            };
            prop_assert_eq!(&and, &want_and);
            let de_morgan = ok(&format!("NOT (NOT {} OR NOT {})", lit(a), lit(b)));
            prop_assert_eq!(de_morgan, want_and);
        }

        /// Evaluation never panics, whatever the record holds: it gives a value or an error.
        #[test]
        fn never_panics(vals in prop::collection::vec(datum(), 3)) {
            for text in ["a + b * c", "a = b OR c", "lower(a) LIKE b", "CAST(a AS BIGINT) % b",
                         "coalesce(a, b, c)", "CASE a WHEN b THEN c END", "a IN (b, c)", "substr(a, b, c)",
                         "round(a, b)", "-a", "a / b", "a BETWEEN b AND c"] {
                let mut paths = Paths::default();
                let e = parse(text, &mut paths).unwrap();
                let r = Rec { values: paths.all().iter().map(|p| p.join(".")).zip(vals.clone()).collect(), paths };
                let _ = e.eval(&r);
            }
        }

        /// A filter keeps a record exactly when the expression's value is TRUE, rejects it when
        /// the value is FALSE or NULL, and fails, with the same message, exactly when the value
        /// cannot be had or is not a boolean.
        #[test]
        fn filters_agree_with_values(vals in prop::collection::vec(datum(), 3)) {
            for text in ["a = b AND c", "a < b OR NOT c", "NOT (a = b)", "a", "a AND b OR c",
                         "(a > b) = c", "NOT a", "a <> b AND b >= c OR a IS NULL", "a + 1 > b"] {
                let mut paths = Paths::default();
                let e = parse(text, &mut paths).unwrap();
                let r = Rec { values: paths.all().iter().map(|p| p.join(".")).zip(vals.clone()).collect(), paths };
                let want = match e.eval(&r) {
                    Ok(Datum::Bool(b)) => Ok(b),
                    Ok(Datum::Null) => Ok(false),
                    Ok(other) => Err(format!("a filter needs a boolean, got {}", other.type_name())),
                    Err(e) => Err(e.0),
                };
                prop_assert_eq!(e.eval_filter(&r).map_err(|e| e.0), want, "{}", text);
            }
        }
    }
}

#[test]
fn static_types_refuse_what_no_record_could_evaluate() {
    // Slot types: kind a string, price a double, qty an integer, flag a boolean, blob unknown.
    let types = |paths: &Paths| {
        let by_name: Vec<Ty> = paths
            .all()
            .iter()
            .map(|p| match p.join(".").as_str() {
                "kind" => Ty::Str,
                "price" => Ty::Float,
                "qty" => Ty::Int,
                "flag" => Ty::Bool,
                _ => Ty::Any,
            })
            .collect();
        by_name
    };
    let check = |text: &str| {
        let mut paths = Paths::default();
        let e = parse(text, &mut paths).unwrap();
        let t = types(&paths);
        infer(&e, &|s| t[s])
    };
    assert_eq!(check("price * qty"), Ok(Ty::Float));
    assert_eq!(check("qty * 2"), Ok(Ty::Int));
    assert_eq!(check("kind = 'click' AND price > 0"), Ok(Ty::Bool));
    assert_eq!(check("lower(kind)"), Ok(Ty::Str));
    assert_eq!(check("coalesce(price, 0.0)"), Ok(Ty::Float));
    assert_eq!(check("blob + 1"), Ok(Ty::Any));
    assert_eq!(check("CAST(kind AS BIGINT)"), Ok(Ty::Int));
    for (text, why) in [
        ("kind * 2", "arithmetic needs a number, got a string"),
        ("kind > 3", "cannot compare a string with an integer"),
        ("price AND flag", "AND/OR needs a boolean, got a double"),
        ("lower(qty)", "lower needs a string, got an integer"),
        ("qty LIKE 'a%'", "LIKE needs a string, got an integer"),
        (
            "CASE WHEN kind THEN 1 END",
            "CASE WHEN needs a boolean, got a string",
        ),
    ] {
        assert_eq!(check(text), Err(why.to_string()), "{text}");
    }
}
