//! `var_pop`, `var_samp`, `stddev_pop` and `stddev_samp`, from mergeable moments.
//!
//! The state is the count, the mean and the sum of squared deviations from the mean (M2), updated
//! with Welford's method and merged with Chan et al.'s pairwise formula, which stay accurate where
//! the textbook `sum(x²) - sum(x)²/n` cancels catastrophically. They do not retract: inverting
//! the merge leaves a rounding error of the order of the larger part's M2, which a square root
//! turns into a visible deviation where the remaining values are equal (1e-4 where 0 is right),
//! so sliced sliding windows combine their slices instead. The population forms are NULL without
//! values, the sample forms without two.

use super::value::{take, take_f64, take_u64, Value};
use super::{only, same, Aggregate, Input, Output, OutputType, Params, SavedSize, State};
use std::sync::Arc;

#[derive(Debug, Clone, Copy)]
struct Moments {
    name: &'static str,
    sample: bool,
    root: bool,
}

fn build(name: &'static str, sample: bool, root: bool, p: &Params) -> BuildResult {
    only(name, p, &[])?;
    Ok(Arc::new(Moments { name, sample, root }))
}

type BuildResult = Result<Arc<dyn Aggregate>, String>;

/// `var_pop`: the population variance.
pub fn var_pop(p: &Params) -> BuildResult {
    build("var_pop", false, false, p)
}

/// `var_samp`: the sample variance.
pub fn var_samp(p: &Params) -> BuildResult {
    build("var_samp", true, false, p)
}

/// `stddev_pop`: the population standard deviation.
pub fn stddev_pop(p: &Params) -> BuildResult {
    build("stddev_pop", false, true, p)
}

/// `stddev_samp`: the sample standard deviation.
pub fn stddev_samp(p: &Params) -> BuildResult {
    build("stddev_samp", true, true, p)
}

impl Aggregate for Moments {
    fn name(&self) -> &'static str {
        self.name
    }

    fn input(&self) -> Input {
        Input::Number
    }

    fn output(&self) -> OutputType {
        OutputType::Double
    }

    fn saved_size(&self) -> SavedSize {
        SavedSize::AtMost(32)
    }

    fn new_state(&self) -> Box<dyn State> {
        Box::new(MomentState {
            n: 0,
            mean: 0.0,
            m2: 0.0,
            of: *self,
        })
    }

    fn decode(&self, mut bytes: &[u8]) -> Option<Box<dyn State>> {
        let b = &mut bytes;
        let [1] = take::<1>(b)? else { return None };
        let st = MomentState {
            n: take_u64(b)?,
            mean: take_f64(b)?,
            m2: take_f64(b)?,
            of: *self,
        };
        bytes.is_empty().then_some(Box::new(st) as Box<dyn State>)
    }
}

#[derive(Debug, Clone)]
struct MomentState {
    n: u64,
    mean: f64,
    m2: f64,
    of: Moments,
}

impl MomentState {
    fn combine(&mut self, n: u64, mean: f64, m2: f64) {
        if n == 0 {
            return;
        }
        if self.n == 0 {
            (self.n, self.mean, self.m2) = (n, mean, m2);
            return;
        }
        let (na, nb) = (self.n as f64, n as f64);
        let total = na + nb;
        let delta = mean - self.mean;
        self.mean += delta * nb / total;
        self.m2 += m2 + delta * delta * na * nb / total;
        self.n += n;
    }
}

impl State for MomentState {
    fn add(&mut self, v: &Value, _: i64) {
        if let Some(x) = v.as_f64() {
            self.n += 1;
            let delta = x - self.mean;
            self.mean += delta / self.n as f64;
            self.m2 += delta * (x - self.mean);
        }
    }

    fn merge(&mut self, other: &dyn State) {
        let o = same::<MomentState>(other);
        self.combine(o.n, o.mean, o.m2);
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.push(1);
        out.extend_from_slice(&self.n.to_le_bytes());
        out.extend_from_slice(&self.mean.to_le_bytes());
        out.extend_from_slice(&self.m2.to_le_bytes());
    }

    fn evaluate(&self, _elements: u64) -> Output {
        let divisor = if self.of.sample {
            self.n.checked_sub(1)
        } else {
            Some(self.n)
        };
        Output::Value(match divisor {
            Some(d) if d > 0 => {
                let var = self.m2.max(0.0) / d as f64;
                Value::Float(if self.of.root { var.sqrt() } else { var })
            }
            _ => Value::Null,
        })
    }
}
