//! From SQL text to a compiled [`Expr`]: `sqlparser` reads the text, and this file keeps the
//! subset tidemark evaluates, resolving every field path to its slot in [`Paths`].

use super::{ArithOp, CastType, CmpOp, Datum, Expr, ExprError, Func, Paths};
use sqlparser::ast::{self as sql, BinaryOperator, UnaryOperator};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::Token;
use std::borrow::Cow;

/// Parses `text` as one SQL expression and compiles it, adding the field paths it reads to
/// `paths`. A plain dotted path of identifiers (`user.id`, `ts`) is a field even where a word of
/// it is a SQL keyword (`user`, `timestamp`, `order`); other names are quoted, as in SQL
/// (`"user-id"`).
pub fn parse(text: &str, paths: &mut Paths) -> Result<Expr, ExprError> {
    if let Some(path) = plain_path(text) {
        let name = path.join(".");
        return Ok(Expr::Field {
            slot: paths.slot(path),
            name,
        });
    }
    let syntax = |message: String| ExprError::Syntax {
        text: text.to_string(),
        message,
    };
    let dialect = GenericDialect {};
    let mut parser = Parser::new(&dialect)
        .try_with_sql(text)
        .map_err(|e| syntax(e.to_string()))?;
    let ast = parser.parse_expr().map_err(|e| syntax(e.to_string()))?;
    let next = parser.peek_token();
    if next.token != Token::EOF {
        return Err(syntax(format!(
            "unexpected {} after the expression",
            next.token
        )));
    }
    Compiler { text, paths }.expr(&ast)
}

/// The segments of `text` when it is a dotted path of plain identifiers and not a literal.
fn plain_path(text: &str) -> Option<Vec<String>> {
    let text = text.trim();
    if ["true", "false", "null"]
        .iter()
        .any(|w| text.eq_ignore_ascii_case(w))
    {
        return None;
    }
    let segs: Vec<&str> = text.split('.').collect();
    let ident = |s: &&str| {
        let mut chars = s.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    segs.iter()
        .all(ident)
        .then(|| segs.iter().map(|s| s.to_string()).collect())
}

/// The field path an identifier, a dotted access or a bare keyword (`user`) names.
fn path_of(e: &sql::Expr) -> Option<Vec<String>> {
    use sql::Expr as E;
    match e {
        E::Identifier(id) => Some(vec![id.value.clone()]),
        E::CompoundIdentifier(ids) => Some(ids.iter().map(|i| i.value.clone()).collect()),
        E::Function(f) if matches!(f.args, sql::FunctionArguments::None) => f
            .name
            .0
            .iter()
            .map(|p| p.as_ident().map(|i| i.value.clone()))
            .collect(),
        E::CompoundFieldAccess { root, access_chain } => {
            let mut parts = path_of(root)?;
            for a in access_chain {
                match a {
                    sql::AccessExpr::Dot(inner) => parts.extend(path_of(inner)?),
                    _ => return None,
                }
            }
            Some(parts)
        }
        _ => None,
    }
}

struct Compiler<'p> {
    text: &'p str,
    paths: &'p mut Paths,
}

impl Compiler<'_> {
    fn unsupported(&self, what: impl Into<String>) -> ExprError {
        ExprError::Unsupported {
            text: self.text.to_string(),
            what: what.into(),
        }
    }

    fn boxed(&mut self, e: &sql::Expr) -> Result<Box<Expr>, ExprError> {
        Ok(Box::new(self.expr(e)?))
    }

    fn field(&mut self, parts: Vec<String>) -> Expr {
        let name = parts.join(".");
        let slot = self.paths.slot(parts);
        Expr::Field { slot, name }
    }

    fn expr(&mut self, e: &sql::Expr) -> Result<Expr, ExprError> {
        use sql::Expr as E;
        Ok(match e {
            E::Identifier(id) => self.field(vec![id.value.clone()]),
            E::CompoundIdentifier(ids) => self.field(ids.iter().map(|i| i.value.clone()).collect()),
            E::CompoundFieldAccess { .. } => match path_of(e) {
                Some(parts) => self.field(parts),
                None => return Err(self.unsupported(format!("`{e}`"))),
            },
            E::Nested(inner) => self.expr(inner)?,
            E::Value(v) => Expr::Lit(self.literal(&v.value)?),
            E::UnaryOp { op, expr } => match op {
                UnaryOperator::Not | UnaryOperator::BangNot => Expr::Not(self.boxed(expr)?),
                UnaryOperator::Minus => match self.expr(expr)? {
                    Expr::Lit(Datum::Int(i)) => Expr::Lit(Datum::Int(-i)),
                    Expr::Lit(Datum::Float(f)) => Expr::Lit(Datum::Float(-f)),
                    other => Expr::Neg(Box::new(other)),
                },
                UnaryOperator::Plus => self.expr(expr)?,
                other => return Err(self.unsupported(format!("the operator {other}"))),
            },
            E::BinaryOp { left, op, right } => {
                let (l, r) = (self.boxed(left)?, self.boxed(right)?);
                match op {
                    BinaryOperator::And => Expr::And(l, r),
                    BinaryOperator::Or => Expr::Or(l, r),
                    BinaryOperator::Eq => Expr::Cmp(CmpOp::Eq, l, r),
                    BinaryOperator::NotEq => Expr::Cmp(CmpOp::NotEq, l, r),
                    BinaryOperator::Lt => Expr::Cmp(CmpOp::Lt, l, r),
                    BinaryOperator::LtEq => Expr::Cmp(CmpOp::LtEq, l, r),
                    BinaryOperator::Gt => Expr::Cmp(CmpOp::Gt, l, r),
                    BinaryOperator::GtEq => Expr::Cmp(CmpOp::GtEq, l, r),
                    BinaryOperator::Plus => Expr::Arith(ArithOp::Add, l, r),
                    BinaryOperator::Minus => Expr::Arith(ArithOp::Sub, l, r),
                    BinaryOperator::Multiply => Expr::Arith(ArithOp::Mul, l, r),
                    BinaryOperator::Divide => Expr::Arith(ArithOp::Div, l, r),
                    BinaryOperator::Modulo => Expr::Arith(ArithOp::Rem, l, r),
                    BinaryOperator::StringConcat => Expr::StrConcat(l, r),
                    other => return Err(self.unsupported(format!("the operator {other}"))),
                }
            }
            E::IsNull(inner) => Expr::IsNull {
                expr: self.boxed(inner)?,
                negated: false,
            },
            E::IsNotNull(inner) => Expr::IsNull {
                expr: self.boxed(inner)?,
                negated: true,
            },
            E::IsTrue(inner) => Expr::Cmp(
                CmpOp::Eq,
                Box::new(Expr::Call(
                    Func::Coalesce,
                    vec![self.expr(inner)?, Expr::Lit(Datum::Bool(false))],
                )),
                Box::new(Expr::Lit(Datum::Bool(true))),
            ),
            E::IsFalse(inner) => Expr::Cmp(
                CmpOp::Eq,
                Box::new(Expr::Call(
                    Func::Coalesce,
                    vec![self.expr(inner)?, Expr::Lit(Datum::Bool(true))],
                )),
                Box::new(Expr::Lit(Datum::Bool(false))),
            ),
            E::In {
                expr,
                target: sql::InTarget::List(list),
                negated,
                global: false,
            } => Expr::In {
                expr: self.boxed(expr)?,
                list: list
                    .iter()
                    .map(|x| self.expr(x))
                    .collect::<Result<_, _>>()?,
                negated: *negated,
            },
            E::Between {
                expr,
                negated,
                low,
                high,
            } => Expr::Between {
                expr: self.boxed(expr)?,
                low: self.boxed(low)?,
                high: self.boxed(high)?,
                negated: *negated,
            },
            E::Like {
                negated,
                any: false,
                expr,
                pattern,
                escape_char: None,
            } => Expr::Like {
                expr: self.boxed(expr)?,
                pattern: self.boxed(pattern)?,
                negated: *negated,
                case_insensitive: false,
            },
            E::ILike {
                negated,
                any: false,
                expr,
                pattern,
                escape_char: None,
            } => Expr::Like {
                expr: self.boxed(expr)?,
                pattern: self.boxed(pattern)?,
                negated: *negated,
                case_insensitive: true,
            },
            E::Case {
                operand,
                conditions,
                else_result,
                ..
            } => Expr::Case {
                operand: match operand {
                    Some(o) => Some(self.boxed(o)?),
                    None => None,
                },
                whens: conditions
                    .iter()
                    .map(|w| Ok((self.expr(&w.condition)?, self.expr(&w.result)?)))
                    .collect::<Result<_, ExprError>>()?,
                otherwise: match else_result {
                    Some(o) => Some(self.boxed(o)?),
                    None => None,
                },
            },
            E::Cast {
                kind: sql::CastKind::Cast | sql::CastKind::DoubleColon,
                expr,
                data_type,
                format: None,
            } => Expr::Cast(self.boxed(expr)?, self.cast_type(data_type)?),
            E::Floor {
                expr,
                field: sql::CeilFloorKind::DateTimeField(sql::DateTimeField::NoDateTime),
            } => Expr::Call(Func::Floor, vec![self.expr(expr)?]),
            E::Ceil {
                expr,
                field: sql::CeilFloorKind::DateTimeField(sql::DateTimeField::NoDateTime),
            } => Expr::Call(Func::Ceil, vec![self.expr(expr)?]),
            E::Substring {
                expr,
                substring_from,
                substring_for,
                ..
            } => {
                let Some(from) = substring_from else {
                    return Err(
                        self.unsupported("substr with 1 argument (it takes 2 to 3 arguments)")
                    );
                };
                let mut args = vec![self.expr(expr)?, self.expr(from)?];
                if let Some(n) = substring_for {
                    args.push(self.expr(n)?);
                }
                Expr::Call(Func::Substr, args)
            }
            E::Function(f) => self.function(f)?,
            other => return Err(self.unsupported(format!("`{other}`"))),
        })
    }

    fn literal(&self, v: &sql::Value) -> Result<Datum<'static>, ExprError> {
        use sql::Value as V;
        Ok(match v {
            V::Number(n, _) => match n.parse::<i64>() {
                Ok(i) => Datum::Int(i),
                Err(_) => match n.parse::<f64>() {
                    Ok(f) if f.is_finite() => Datum::Float(f),
                    _ => return Err(self.unsupported(format!("the number {n}"))),
                },
            },
            V::SingleQuotedString(s) | V::DoubleQuotedString(s) => {
                Datum::Str(Cow::Owned(s.clone()))
            }
            V::Boolean(b) => Datum::Bool(*b),
            V::Null => Datum::Null,
            other => return Err(self.unsupported(format!("the literal {other}"))),
        })
    }

    fn cast_type(&self, t: &sql::DataType) -> Result<CastType, ExprError> {
        let name = t.to_string().to_ascii_uppercase();
        let base = name.split(['(', ' ']).next().unwrap_or_default();
        Ok(match base {
            "BIGINT" | "INT" | "INTEGER" | "SMALLINT" | "TINYINT" | "INT8" | "INT4" | "LONG" => {
                CastType::Int
            }
            "DOUBLE" | "FLOAT" | "REAL" | "DECIMAL" | "NUMERIC" | "FLOAT8" | "FLOAT4" => {
                CastType::Float
            }
            "VARCHAR" | "TEXT" | "STRING" | "CHAR" | "CHARACTER" => CastType::Str,
            "BOOLEAN" | "BOOL" => CastType::Bool,
            _ => return Err(self.unsupported(format!("CAST to {t}"))),
        })
    }

    fn function(&mut self, f: &sql::Function) -> Result<Expr, ExprError> {
        // A keyword the parser reads as a function without parentheses (`user`, `date`) is a
        // field of that name.
        if matches!(f.args, sql::FunctionArguments::None) {
            if let Some(parts) = path_of(&sql::Expr::Function(f.clone())) {
                return Ok(self.field(parts));
            }
        }
        let name = f.name.to_string().to_ascii_lowercase();
        if name == "mod" {
            // `MOD(a, b)` is `a % b`.
            if let sql::FunctionArguments::List(list) = &f.args {
                if let [sql::FunctionArg::Unnamed(sql::FunctionArgExpr::Expr(a)), sql::FunctionArg::Unnamed(sql::FunctionArgExpr::Expr(b))] =
                    list.args.as_slice()
                {
                    let (a, b) = (self.expr(a)?, self.expr(b)?);
                    return Ok(Expr::Arith(ArithOp::Rem, Box::new(a), Box::new(b)));
                }
            }
            return Err(self.unsupported("mod without two arguments".to_string()));
        }
        let func = match name.as_str() {
            "coalesce" => Func::Coalesce,
            "lower" => Func::Lower,
            "upper" => Func::Upper,
            "concat" => Func::Concat,
            "substr" | "substring" => Func::Substr,
            "length" | "char_length" | "character_length" => Func::Length,
            "abs" => Func::Abs,
            "round" => Func::Round,
            "floor" => Func::Floor,
            "ceil" | "ceiling" => Func::Ceil,
            _ => return Err(self.unsupported(format!("the function {name}"))),
        };
        let sql::FunctionArguments::List(list) = &f.args else {
            return Err(self.unsupported(format!("{name} without an argument list")));
        };
        if list.duplicate_treatment.is_some() || !list.clauses.is_empty() || f.filter.is_some() {
            return Err(self.unsupported(format!("{name} with clauses")));
        }
        let mut args = Vec::with_capacity(list.args.len());
        for a in &list.args {
            match a {
                sql::FunctionArg::Unnamed(sql::FunctionArgExpr::Expr(e)) => {
                    args.push(self.expr(e)?)
                }
                other => return Err(self.unsupported(format!("the argument {other} of {name}"))),
            }
        }
        let (lo, hi) = match func {
            Func::Coalesce | Func::Concat => (1, usize::MAX),
            Func::Substr => (2, 3),
            Func::Round => (1, 2),
            _ => (1, 1),
        };
        if args.len() < lo || args.len() > hi {
            let want = match (lo, hi) {
                (l, h) if l == h => format!("{l} argument{}", if l == 1 { "" } else { "s" }),
                (l, usize::MAX) => {
                    format!("at least {l} argument{}", if l == 1 { "" } else { "s" })
                }
                (l, h) => format!("{l} to {h} arguments"),
            };
            return Err(ExprError::Unsupported {
                text: self.text.to_string(),
                what: format!("{name} with {} arguments (it takes {want})", args.len()),
            });
        }
        Ok(Expr::Call(func, args))
    }
}
