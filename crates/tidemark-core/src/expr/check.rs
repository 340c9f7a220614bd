//! Static types of expressions, for formats whose schema is known before the first record (Avro):
//! `validate` refuses an expression that could never be evaluated, instead of dead-lettering
//! every record at run time.

use super::{CastType, Datum, Expr, Func};

/// What an expression's value is known to be before any record is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    /// Not known (a JSON field): checked per record.
    Any,
    /// Always NULL (the literal).
    Null,
    /// A boolean.
    Bool,
    /// An integer.
    Int,
    /// A double.
    Float,
    /// A string.
    Str,
}

impl Ty {
    /// The type's name in messages ("a string").
    pub fn name(self) -> &'static str {
        match self {
            Ty::Any => "a value",
            Ty::Null => "NULL",
            Ty::Bool => "a boolean",
            Ty::Int => "an integer",
            Ty::Float => "a double",
            Ty::Str => "a string",
        }
    }

    fn numeric(self) -> bool {
        matches!(self, Ty::Int | Ty::Float | Ty::Any | Ty::Null)
    }

    fn is(self, want: Ty) -> bool {
        self == want || matches!(self, Ty::Any | Ty::Null)
    }

    /// Whether values of the two types can be compared.
    fn comparable(self, other: Ty) -> bool {
        matches!(self, Ty::Any | Ty::Null)
            || matches!(other, Ty::Any | Ty::Null)
            || self == other
            || (self.numeric() && other.numeric())
    }
}

/// The type of `e` when field slot `s` has type `field(s)`, or why it cannot be evaluated on any
/// record.
pub fn infer(e: &Expr, field: &dyn Fn(usize) -> Ty) -> Result<Ty, String> {
    let ty = |x: &Expr| infer(x, field);
    let need = |x: &Expr, want: Ty, what: &str| -> Result<(), String> {
        let t = ty(x)?;
        if t.is(want) {
            Ok(())
        } else {
            Err(format!("{what} needs {}, got {}", want.name(), t.name()))
        }
    };
    let number = |x: &Expr, what: &str| -> Result<Ty, String> {
        let t = ty(x)?;
        if t.numeric() {
            Ok(t)
        } else {
            Err(format!("{what} needs a number, got {}", t.name()))
        }
    };
    let compare = |a: &Expr, b: &Expr| -> Result<(), String> {
        let (l, r) = (ty(a)?, ty(b)?);
        if l.comparable(r) {
            Ok(())
        } else {
            Err(format!("cannot compare {} with {}", l.name(), r.name()))
        }
    };
    Ok(match e {
        Expr::Lit(d) => match d {
            Datum::Null => Ty::Null,
            Datum::Bool(_) => Ty::Bool,
            Datum::Int(_) => Ty::Int,
            Datum::Float(_) => Ty::Float,
            Datum::Str(_) => Ty::Str,
        },
        Expr::Field { slot, .. } => field(*slot),
        Expr::Not(x) => {
            need(x, Ty::Bool, "NOT")?;
            Ty::Bool
        }
        Expr::Neg(x) => number(x, "-")?,
        Expr::And(a, b) | Expr::Or(a, b) => {
            need(a, Ty::Bool, "AND/OR")?;
            need(b, Ty::Bool, "AND/OR")?;
            Ty::Bool
        }
        Expr::Cmp(_, a, b) => {
            compare(a, b)?;
            Ty::Bool
        }
        Expr::Arith(_, a, b) => match (number(a, "arithmetic")?, number(b, "arithmetic")?) {
            (Ty::Int, Ty::Int) => Ty::Int,
            (Ty::Float, _) | (_, Ty::Float) => Ty::Float,
            _ => Ty::Any,
        },
        Expr::StrConcat(a, b) => {
            ty(a)?;
            ty(b)?;
            Ty::Str
        }
        Expr::IsNull { expr, .. } => {
            ty(expr)?;
            Ty::Bool
        }
        Expr::In { expr, list, .. } => {
            for item in list {
                compare(expr, item)?;
            }
            Ty::Bool
        }
        Expr::Between {
            expr, low, high, ..
        } => {
            compare(expr, low)?;
            compare(expr, high)?;
            Ty::Bool
        }
        Expr::Like { expr, pattern, .. } => {
            need(expr, Ty::Str, "LIKE")?;
            need(pattern, Ty::Str, "LIKE")?;
            Ty::Bool
        }
        Expr::Case {
            operand,
            whens,
            otherwise,
        } => {
            let mut out: Option<Ty> = None;
            for (w, then) in whens {
                match operand {
                    Some(o) => compare(o, w)?,
                    None => need(w, Ty::Bool, "CASE WHEN")?,
                }
                let t = ty(then)?;
                out = Some(match out {
                    None => t,
                    Some(prev) if prev == t || t == Ty::Null => prev,
                    Some(Ty::Null) => t,
                    Some(_) => Ty::Any,
                });
            }
            if let Some(o) = otherwise {
                let t = ty(o)?;
                out = Some(match out {
                    Some(prev) if prev == t || t == Ty::Null => prev,
                    Some(Ty::Null) | None => t,
                    Some(_) => Ty::Any,
                });
            }
            out.unwrap_or(Ty::Null)
        }
        Expr::Cast(x, to) => {
            ty(x)?;
            match to {
                CastType::Int => Ty::Int,
                CastType::Float => Ty::Float,
                CastType::Str => Ty::Str,
                CastType::Bool => Ty::Bool,
            }
        }
        Expr::Call(f, args) => match f {
            Func::Coalesce => {
                let mut out = Ty::Null;
                for a in args {
                    let t = ty(a)?;
                    if out == Ty::Null {
                        out = t;
                    } else if t != Ty::Null && t != out {
                        out = Ty::Any;
                    }
                }
                out
            }
            Func::Lower | Func::Upper => {
                need(&args[0], Ty::Str, f.name())?;
                Ty::Str
            }
            Func::Concat => {
                for a in args {
                    ty(a)?;
                }
                Ty::Str
            }
            Func::Substr => {
                need(&args[0], Ty::Str, "substr")?;
                for a in &args[1..] {
                    need(a, Ty::Int, "substr")?;
                }
                Ty::Str
            }
            Func::Length => {
                need(&args[0], Ty::Str, "length")?;
                Ty::Int
            }
            Func::Abs | Func::Floor | Func::Ceil => number(&args[0], f.name())?,
            Func::Round => {
                if let Some(d) = args.get(1) {
                    need(d, Ty::Int, "round")?;
                }
                number(&args[0], "round")?
            }
        },
    })
}
