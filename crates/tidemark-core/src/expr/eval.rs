//! Evaluating a compiled [`Expr`] on one record.

use super::{ArithOp, CastType, CmpOp, Datum, EvalError, Expr, Func, Row};
use std::borrow::Cow;
use std::cmp::Ordering;

#[cold]
fn err<T>(msg: String) -> Result<T, EvalError> {
    Err(EvalError(msg))
}

impl Expr {
    /// The expression's value on `row`. Fields and literals, the leaves of most expressions and
    /// the whole of most keys and values, are answered here without a call of the evaluator.
    #[inline(always)]
    pub fn eval<'a, R: Row>(&'a self, row: &'a R) -> Result<Datum<'a>, EvalError> {
        match self {
            Expr::Field { slot, .. } => Ok(row.field(*slot)),
            Expr::Lit(d) => Ok(borrow(d)),
            _ => self.eval_node(row),
        }
    }

    /// The value of an expression that is neither a field nor a literal.
    fn eval_node<'a, R: Row>(&'a self, row: &'a R) -> Result<Datum<'a>, EvalError> {
        Ok(match self {
            Expr::Lit(_) | Expr::Field { .. } => return self.eval(row),
            Expr::Neg(e) => match e.eval(row)? {
                Datum::Null => Datum::Null,
                Datum::Int(i) => Datum::Int(
                    i.checked_neg()
                        .ok_or_else(|| EvalError(format!("-({i}) overflows a 64-bit integer")))?,
                ),
                Datum::Float(f) => Datum::Float(-f),
                other => return err(format!("cannot negate {}", other.type_name())),
            },
            Expr::Not(_) | Expr::And(..) | Expr::Or(..) | Expr::Cmp(..) => {
                match self.truth_of(row, "")? {
                    None => Datum::Null,
                    Some(b) => Datum::Bool(b),
                }
            }
            Expr::Arith(op, a, b) => arith(*op, a.eval(row)?, b.eval(row)?)?,
            Expr::StrConcat(a, b) => match (a.eval(row)?, b.eval(row)?) {
                (Datum::Null, _) | (_, Datum::Null) => Datum::Null,
                (l, r) => Datum::Str(Cow::Owned(format!("{l}{r}"))),
            },
            Expr::IsNull { expr, negated } => Datum::Bool(expr.eval(row)?.is_null() != *negated),
            Expr::In {
                expr,
                list,
                negated,
            } => {
                let v = expr.eval(row)?;
                if v.is_null() {
                    return Ok(Datum::Null);
                }
                let mut saw_null = false;
                let mut found = false;
                for item in list {
                    match compare(&v, &item.eval(row)?)? {
                        None => saw_null = true,
                        Some(Ordering::Equal) => {
                            found = true;
                            break;
                        }
                        Some(_) => {}
                    }
                }
                if found {
                    Datum::Bool(!negated)
                } else if saw_null {
                    Datum::Null
                } else {
                    Datum::Bool(*negated)
                }
            }
            Expr::Between {
                expr,
                low,
                high,
                negated,
            } => {
                let v = expr.eval(row)?;
                let above = compare(&v, &low.eval(row)?)?.map(|o| o != Ordering::Less);
                let below = compare(&v, &high.eval(row)?)?.map(|o| o != Ordering::Greater);
                match (above, below) {
                    (Some(false), _) | (_, Some(false)) => Datum::Bool(*negated),
                    (Some(true), Some(true)) => Datum::Bool(!negated),
                    _ => Datum::Null,
                }
            }
            Expr::Like {
                expr,
                pattern,
                negated,
                case_insensitive,
            } => match (expr.eval(row)?, pattern.eval(row)?) {
                (Datum::Null, _) | (_, Datum::Null) => Datum::Null,
                (Datum::Str(s), Datum::Str(p)) => {
                    let hit = if *case_insensitive {
                        like(&s.to_lowercase(), &p.to_lowercase())
                    } else {
                        like(&s, &p)
                    };
                    Datum::Bool(hit != *negated)
                }
                (s, p) => {
                    return err(format!(
                        "LIKE needs strings, got {} and {}",
                        s.type_name(),
                        p.type_name()
                    ))
                }
            },
            Expr::Case {
                operand,
                whens,
                otherwise,
            } => {
                let subject = match operand {
                    Some(o) => Some(o.eval(row)?),
                    None => None,
                };
                for (when, then) in whens {
                    let w = when.eval(row)?;
                    let hit = match &subject {
                        Some(s) => compare(s, &w)? == Some(Ordering::Equal),
                        None => truth(w, "CASE WHEN")? == Some(true),
                    };
                    if hit {
                        return then.eval(row);
                    }
                }
                match otherwise {
                    Some(o) => o.eval(row)?,
                    None => Datum::Null,
                }
            }
            Expr::Cast(e, to) => cast(e.eval(row)?, *to)?,
            Expr::Call(f, args) => call(*f, args, row)?,
        })
    }

    /// The expression as a filter: true keeps the record; false and NULL reject it (as SQL's
    /// `WHERE` does); a value that is not a boolean is an error.
    pub fn eval_filter<R: Row>(&self, row: &R) -> Result<bool, EvalError> {
        Ok(self.truth_of(row, "a filter")? == Some(true))
    }

    /// The expression's truth value: `None` for NULL, an error when it is not a boolean (`what`
    /// names where one was needed). `NOT`, `AND`, `OR` and comparisons, the whole of most
    /// filters, are answered here without a value of their own, the rest through [`Expr::eval`].
    fn truth_of<R: Row>(&self, row: &R, what: &str) -> Result<Option<bool>, EvalError> {
        match self {
            Expr::Not(e) => Ok(e.truth_of(row, "NOT")?.map(|b| !b)),
            Expr::And(a, b) | Expr::Or(a, b) => {
                // The operand value that settles the operator alone: FALSE for AND, TRUE for OR.
                let (settles, name) = match self {
                    Expr::And(..) => (false, "AND"),
                    _ => (true, "OR"),
                };
                let l = a.truth_of(row, name)?;
                if l == Some(settles) {
                    return Ok(l);
                }
                let r = b.truth_of(row, name)?;
                Ok(match (l, r) {
                    (_, Some(x)) if x == settles => r,
                    (Some(_), Some(_)) => Some(!settles),
                    _ => None,
                })
            }
            Expr::Cmp(op, a, b) => {
                let (l, r) = (a.eval(row)?, b.eval(row)?);
                // Equality of strings needs no order: lengths that differ settle it at once.
                if let (CmpOp::Eq | CmpOp::NotEq, Datum::Str(x), Datum::Str(y)) = (op, &l, &r) {
                    return Ok(Some((x == y) == (*op == CmpOp::Eq)));
                }
                Ok(compare(&l, &r)?.map(|ord| match op {
                    CmpOp::Eq => ord == Ordering::Equal,
                    CmpOp::NotEq => ord != Ordering::Equal,
                    CmpOp::Lt => ord == Ordering::Less,
                    CmpOp::LtEq => ord != Ordering::Greater,
                    CmpOp::Gt => ord == Ordering::Greater,
                    CmpOp::GtEq => ord != Ordering::Less,
                }))
            }
            _ => truth(self.eval(row)?, what),
        }
    }

    /// Calls `f` with every field slot the expression reads.
    pub fn for_each_slot(&self, f: &mut impl FnMut(usize)) {
        match self {
            Expr::Lit(_) => {}
            Expr::Field { slot, .. } => f(*slot),
            Expr::Not(e) | Expr::Neg(e) | Expr::Cast(e, _) => e.for_each_slot(f),
            Expr::IsNull { expr, .. } => expr.for_each_slot(f),
            Expr::And(a, b)
            | Expr::Or(a, b)
            | Expr::Cmp(_, a, b)
            | Expr::Arith(_, a, b)
            | Expr::StrConcat(a, b) => {
                a.for_each_slot(f);
                b.for_each_slot(f);
            }
            Expr::In { expr, list, .. } => {
                expr.for_each_slot(f);
                list.iter().for_each(|e| e.for_each_slot(f));
            }
            Expr::Between {
                expr, low, high, ..
            } => {
                expr.for_each_slot(f);
                low.for_each_slot(f);
                high.for_each_slot(f);
            }
            Expr::Like { expr, pattern, .. } => {
                expr.for_each_slot(f);
                pattern.for_each_slot(f);
            }
            Expr::Case {
                operand,
                whens,
                otherwise,
            } => {
                if let Some(o) = operand {
                    o.for_each_slot(f);
                }
                for (w, t) in whens {
                    w.for_each_slot(f);
                    t.for_each_slot(f);
                }
                if let Some(o) = otherwise {
                    o.for_each_slot(f);
                }
            }
            Expr::Call(_, args) => args.iter().for_each(|e| e.for_each_slot(f)),
        }
    }

    /// The field path when the expression is one field and nothing else.
    pub fn as_field(&self) -> Option<&str> {
        match self {
            Expr::Field { name, .. } => Some(name),
            _ => None,
        }
    }
}

#[inline]
fn borrow<'a>(d: &'a Datum<'static>) -> Datum<'a> {
    match d {
        Datum::Str(s) => Datum::Str(Cow::Borrowed(s)),
        Datum::Null => Datum::Null,
        Datum::Bool(b) => Datum::Bool(*b),
        Datum::Int(i) => Datum::Int(*i),
        Datum::Float(f) => Datum::Float(*f),
    }
}

/// A boolean operand: `Some(b)`, `None` for NULL, an error for any other type.
#[inline]
fn truth(d: Datum<'_>, what: &str) -> Result<Option<bool>, EvalError> {
    match d {
        Datum::Null => Ok(None),
        Datum::Bool(b) => Ok(Some(b)),
        other => not_boolean(what, &other),
    }
}

#[cold]
fn not_boolean(what: &str, d: &Datum<'_>) -> Result<Option<bool>, EvalError> {
    err(format!("{what} needs a boolean, got {}", d.type_name()))
}

/// SQL comparison: `None` when either side is NULL; numbers compare across integer and double.
#[inline]
fn compare(l: &Datum<'_>, r: &Datum<'_>) -> Result<Option<Ordering>, EvalError> {
    Ok(Some(match (l, r) {
        (Datum::Null, _) | (_, Datum::Null) => return Ok(None),
        (Datum::Int(a), Datum::Int(b)) => a.cmp(b),
        (Datum::Str(a), Datum::Str(b)) => a.as_ref().cmp(b.as_ref()),
        (Datum::Bool(a), Datum::Bool(b)) => a.cmp(b),
        (a, b) => match (a.as_f64(), b.as_f64()) {
            (Some(x), Some(y)) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
            _ => {
                return err(format!(
                    "cannot compare {} with {}",
                    a.type_name(),
                    b.type_name()
                ))
            }
        },
    }))
}

fn arith<'a>(op: ArithOp, l: Datum<'a>, r: Datum<'a>) -> Result<Datum<'a>, EvalError> {
    let sym = match op {
        ArithOp::Add => "+",
        ArithOp::Sub => "-",
        ArithOp::Mul => "*",
        ArithOp::Div => "/",
        ArithOp::Rem => "%",
    };
    Ok(match (&l, &r) {
        (Datum::Null, _) | (_, Datum::Null) => Datum::Null,
        (Datum::Int(a), Datum::Int(b)) => {
            let (a, b) = (*a, *b);
            if b == 0 && matches!(op, ArithOp::Div | ArithOp::Rem) {
                return err(format!("division by zero in {a} {sym} {b}"));
            }
            let v = match op {
                ArithOp::Add => a.checked_add(b),
                ArithOp::Sub => a.checked_sub(b),
                ArithOp::Mul => a.checked_mul(b),
                ArithOp::Div => a.checked_div(b),
                ArithOp::Rem => a.checked_rem(b),
            };
            Datum::Int(
                v.ok_or_else(|| EvalError(format!("{a} {sym} {b} overflows a 64-bit integer")))?,
            )
        }
        _ => match (l.as_f64(), r.as_f64()) {
            (Some(a), Some(b)) => {
                if b == 0.0 && matches!(op, ArithOp::Div | ArithOp::Rem) {
                    return err(format!("division by zero in {a} {sym} {b}"));
                }
                let v = match op {
                    ArithOp::Add => a + b,
                    ArithOp::Sub => a - b,
                    ArithOp::Mul => a * b,
                    ArithOp::Div => a / b,
                    ArithOp::Rem => a % b,
                };
                if !v.is_finite() {
                    return err(format!("{a} {sym} {b} is not a finite number"));
                }
                Datum::Float(v)
            }
            _ => {
                return err(format!(
                    "{sym} needs numbers, got {} and {}",
                    l.type_name(),
                    r.type_name()
                ))
            }
        },
    })
}

/// SQL `LIKE`: `%` matches any run of characters, `_` exactly one.
fn like(s: &str, p: &str) -> bool {
    let s: Vec<char> = s.chars().collect();
    let p: Vec<char> = p.chars().collect();
    // Greedy matching with backtracking to the last `%`.
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        if j < p.len() && (p[j] == '_' || p[j] == s[i]) {
            i += 1;
            j += 1;
        } else if j < p.len() && p[j] == '%' {
            star = Some((j, i));
            j += 1;
        } else if let Some((sj, si)) = star {
            j = sj + 1;
            i = si + 1;
            star = Some((sj, si + 1));
        } else {
            return false;
        }
    }
    p[j..].iter().all(|&c| c == '%')
}

fn cast<'a>(d: Datum<'a>, to: CastType) -> Result<Datum<'a>, EvalError> {
    let fail = |d: &Datum<'_>, t: &str| err(format!("cannot cast {} {d:?} to {t}", d.type_name()));
    Ok(match (to, d) {
        (_, Datum::Null) => Datum::Null,
        (CastType::Int, Datum::Int(i)) => Datum::Int(i),
        (CastType::Int, Datum::Float(f)) => {
            let t = f.trunc();
            if !(i64::MIN as f64..=i64::MAX as f64).contains(&t) {
                return err(format!("{f} does not fit a 64-bit integer"));
            }
            Datum::Int(t as i64)
        }
        (CastType::Int, Datum::Bool(b)) => Datum::Int(b as i64),
        (CastType::Int, Datum::Str(s)) => match s.trim().parse::<i64>() {
            Ok(i) => Datum::Int(i),
            Err(_) => return fail(&Datum::Str(s), "BIGINT"),
        },
        (CastType::Float, Datum::Int(i)) => Datum::Float(i as f64),
        (CastType::Float, Datum::Float(f)) => Datum::Float(f),
        (CastType::Float, Datum::Bool(b)) => Datum::Float(b as i64 as f64),
        (CastType::Float, Datum::Str(s)) => match s.trim().parse::<f64>() {
            Ok(f) if f.is_finite() => Datum::Float(f),
            _ => return fail(&Datum::Str(s), "DOUBLE"),
        },
        (CastType::Str, Datum::Str(s)) => Datum::Str(s),
        (CastType::Str, other) => Datum::Str(Cow::Owned(other.to_string())),
        (CastType::Bool, Datum::Bool(b)) => Datum::Bool(b),
        (CastType::Bool, Datum::Int(i)) => Datum::Bool(i != 0),
        (CastType::Bool, Datum::Str(s)) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "t" | "yes" | "1" => Datum::Bool(true),
            "false" | "f" | "no" | "0" => Datum::Bool(false),
            _ => return fail(&Datum::Str(s), "BOOLEAN"),
        },
        (CastType::Bool, other) => return fail(&other, "BOOLEAN"),
    })
}

fn string_arg<'a>(f: Func, d: Datum<'a>) -> Result<Option<Cow<'a, str>>, EvalError> {
    match d {
        Datum::Null => Ok(None),
        Datum::Str(s) => Ok(Some(s)),
        other => err(format!(
            "{} needs a string, got {}",
            f.name(),
            other.type_name()
        )),
    }
}

fn int_arg(f: Func, d: Datum<'_>) -> Result<Option<i64>, EvalError> {
    match d {
        Datum::Null => Ok(None),
        Datum::Int(i) => Ok(Some(i)),
        other => err(format!(
            "{} needs an integer, got {}",
            f.name(),
            other.type_name()
        )),
    }
}

fn call<'a, R: Row>(f: Func, args: &'a [Expr], row: &'a R) -> Result<Datum<'a>, EvalError> {
    let arg = |i: usize| args[i].eval(row);
    Ok(match f {
        Func::Coalesce => {
            for a in args {
                let v = a.eval(row)?;
                if !v.is_null() {
                    return Ok(v);
                }
            }
            Datum::Null
        }
        Func::Lower | Func::Upper => match string_arg(f, arg(0)?)? {
            None => Datum::Null,
            Some(s) => {
                let lower = f == Func::Lower;
                if s.is_ascii() {
                    // The common case, without Unicode tables, and without a copy when the
                    // string is already in that case.
                    let unchanged = if lower {
                        !s.bytes().any(|b| b.is_ascii_uppercase())
                    } else {
                        !s.bytes().any(|b| b.is_ascii_lowercase())
                    };
                    if unchanged {
                        Datum::Str(s)
                    } else if lower {
                        Datum::Str(Cow::Owned(s.to_ascii_lowercase()))
                    } else {
                        Datum::Str(Cow::Owned(s.to_ascii_uppercase()))
                    }
                } else if lower {
                    Datum::Str(Cow::Owned(s.to_lowercase()))
                } else {
                    Datum::Str(Cow::Owned(s.to_uppercase()))
                }
            }
        },
        Func::Concat => {
            let mut out = String::new();
            for a in args {
                let v = a.eval(row)?;
                if !v.is_null() {
                    use std::fmt::Write as _;
                    let _ = write!(out, "{v}");
                }
            }
            Datum::Str(Cow::Owned(out))
        }
        Func::Substr => {
            let Some(s) = string_arg(f, arg(0)?)? else {
                return Ok(Datum::Null);
            };
            let Some(start) = int_arg(f, arg(1)?)? else {
                return Ok(Datum::Null);
            };
            let len = match args.get(2) {
                None => None,
                Some(e) => match int_arg(f, e.eval(row)?)? {
                    None => return Ok(Datum::Null),
                    Some(n) if n < 0 => return err(format!("substr: negative length {n}")),
                    Some(n) => Some(n),
                },
            };
            // SQL positions are 1-based; characters before position 1 count against the length.
            let first = start.max(1);
            let end = len.map(|n| start.saturating_add(n));
            let taken: String = s
                .chars()
                .enumerate()
                .map(|(i, c)| (i as i64 + 1, c))
                .filter(|(pos, _)| *pos >= first && end.is_none_or(|e| *pos < e))
                .map(|(_, c)| c)
                .collect();
            Datum::Str(Cow::Owned(taken))
        }
        Func::Length => match string_arg(f, arg(0)?)? {
            None => Datum::Null,
            Some(s) => Datum::Int(s.chars().count() as i64),
        },
        Func::Abs => match arg(0)? {
            Datum::Null => Datum::Null,
            Datum::Int(i) => Datum::Int(
                i.checked_abs()
                    .ok_or_else(|| EvalError(format!("abs({i}) overflows a 64-bit integer")))?,
            ),
            Datum::Float(x) => Datum::Float(x.abs()),
            other => return err(format!("abs needs a number, got {}", other.type_name())),
        },
        Func::Round => {
            let digits = match args.get(1) {
                None => 0,
                Some(e) => match int_arg(f, e.eval(row)?)? {
                    None => return Ok(Datum::Null),
                    Some(d) => d.clamp(-18, 18),
                },
            };
            match arg(0)? {
                Datum::Null => Datum::Null,
                Datum::Int(i) if digits >= 0 => Datum::Int(i),
                Datum::Int(i) => {
                    let m = 10f64.powi((-digits) as i32);
                    Datum::Int(((i as f64 / m).round() * m) as i64)
                }
                Datum::Float(x) => {
                    let m = 10f64.powi(digits as i32);
                    Datum::Float((x * m).round() / m)
                }
                other => return err(format!("round needs a number, got {}", other.type_name())),
            }
        }
        Func::Floor | Func::Ceil => match arg(0)? {
            Datum::Null => Datum::Null,
            Datum::Int(i) => Datum::Int(i),
            Datum::Float(x) => Datum::Float(if f == Func::Floor {
                x.floor()
            } else {
                x.ceil()
            }),
            other => {
                return err(format!(
                    "{} needs a number, got {}",
                    f.name(),
                    other.type_name()
                ))
            }
        },
    })
}
