//! Mergeable aggregates: count, sum, min, max and mean over numeric fields.
//!
//! An [`Acc`] holds the element count and, for every numeric field the pipeline reads, its sum,
//! minimum and maximum. Mean is derived as sum / count, so every aggregate is mergeable: slices of
//! a sliding window and the parts of a merged session combine with [`Acc::merge`]. Count and sum are
//! also invertible ([`Acc::subtract`]), which sliced sliding windows use to move a running window.

use serde::Serialize;

/// Which aggregate an output field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AggOp {
    /// Number of elements.
    Count,
    /// Sum of a field.
    Sum,
    /// Minimum of a field.
    Min,
    /// Maximum of a field.
    Max,
    /// Arithmetic mean of a field.
    Mean,
}

/// One configured aggregation: an output name, an operation and (except for count) the index of
/// the numeric input field it reads.
#[derive(Debug, Clone, PartialEq)]
pub struct AggSpec {
    /// Name of the output field.
    pub name: String,
    /// The operation.
    pub op: AggOp,
    /// Index into the event's value vector; `None` for count.
    pub field: Option<usize>,
}

/// Running totals of one numeric field.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FieldAcc {
    /// Sum of the values.
    pub sum: f64,
    /// Smallest value (`+inf` when empty).
    pub min: f64,
    /// Largest value (`-inf` when empty).
    pub max: f64,
}

impl FieldAcc {
    const EMPTY: FieldAcc = FieldAcc {
        sum: 0.0,
        min: f64::INFINITY,
        max: f64::NEG_INFINITY,
    };
}

/// A mergeable accumulator: the count of elements and per-field sum/min/max.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Acc {
    /// Number of elements.
    pub count: u64,
    /// One entry per numeric input field, in the pipeline's field order.
    pub fields: Vec<FieldAcc>,
}

impl Acc {
    /// An empty accumulator for `n_fields` numeric fields.
    pub fn empty(n_fields: usize) -> Acc {
        Acc {
            count: 0,
            fields: vec![FieldAcc::EMPTY; n_fields],
        }
    }

    /// Whether no element has been added.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Adds one element with the given field values.
    pub fn add(&mut self, values: &[f64]) {
        self.count += 1;
        if self.fields.len() < values.len() {
            self.fields.resize(values.len(), FieldAcc::EMPTY);
        }
        for (f, &v) in self.fields.iter_mut().zip(values) {
            f.sum += v;
            f.min = f.min.min(v);
            f.max = f.max.max(v);
        }
    }

    /// Merges another accumulator into this one.
    pub fn merge(&mut self, other: &Acc) {
        self.count += other.count;
        if self.fields.len() < other.fields.len() {
            self.fields.resize(other.fields.len(), FieldAcc::EMPTY);
        }
        for (f, o) in self.fields.iter_mut().zip(&other.fields) {
            f.sum += o.sum;
            f.min = f.min.min(o.min);
            f.max = f.max.max(o.max);
        }
    }

    /// Removes a previously merged accumulator's count and sums. Minimum and maximum cannot be
    /// removed; callers that need them recompute from parts (see `needs_min_max`).
    pub fn subtract(&mut self, other: &Acc) {
        self.count -= other.count.min(self.count);
        for (f, o) in self.fields.iter_mut().zip(&other.fields) {
            f.sum -= o.sum;
        }
    }

    /// Resets to empty, keeping the allocation.
    pub fn clear(&mut self) {
        self.count = 0;
        for f in &mut self.fields {
            *f = FieldAcc::EMPTY;
        }
    }

    /// The value of one aggregation: `None` for min, max and mean of an empty accumulator.
    pub fn value(&self, spec: &AggSpec) -> Option<f64> {
        let field = spec.field.and_then(|i| self.fields.get(i));
        match spec.op {
            AggOp::Count => Some(self.count as f64),
            AggOp::Sum => Some(field.map_or(0.0, |f| f.sum)),
            _ if self.count == 0 => None,
            AggOp::Min => field.map(|f| f.min),
            AggOp::Max => field.map(|f| f.max),
            AggOp::Mean => field.map(|f| f.sum / self.count as f64),
        }
    }
}

/// Whether any aggregation needs a minimum or maximum (which cannot be subtracted).
pub fn needs_min_max(specs: &[AggSpec]) -> bool {
    specs
        .iter()
        .any(|s| matches!(s.op, AggOp::Min | AggOp::Max))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs() -> Vec<AggSpec> {
        vec![
            AggSpec {
                name: "n".into(),
                op: AggOp::Count,
                field: None,
            },
            AggSpec {
                name: "s".into(),
                op: AggOp::Sum,
                field: Some(0),
            },
            AggSpec {
                name: "lo".into(),
                op: AggOp::Min,
                field: Some(0),
            },
            AggSpec {
                name: "hi".into(),
                op: AggOp::Max,
                field: Some(0),
            },
            AggSpec {
                name: "avg".into(),
                op: AggOp::Mean,
                field: Some(0),
            },
        ]
    }

    #[test]
    fn values_of_an_accumulator() {
        let mut a = Acc::empty(1);
        for v in [3.0, -1.0, 4.0] {
            a.add(&[v]);
        }
        let got: Vec<_> = specs().iter().map(|s| a.value(s)).collect();
        assert_eq!(
            got,
            vec![Some(3.0), Some(6.0), Some(-1.0), Some(4.0), Some(2.0)]
        );
    }

    #[test]
    fn empty_accumulator_has_null_min_max_mean() {
        let a = Acc::empty(1);
        let got: Vec<_> = specs().iter().map(|s| a.value(s)).collect();
        assert_eq!(got, vec![Some(0.0), Some(0.0), None, None, None]);
    }

    #[test]
    fn merge_equals_adding_everything() {
        let (mut a, mut b, mut all) = (Acc::empty(1), Acc::empty(1), Acc::empty(1));
        for v in [1.0, 5.0] {
            a.add(&[v]);
            all.add(&[v]);
        }
        for v in [-2.0, 7.0] {
            b.add(&[v]);
            all.add(&[v]);
        }
        a.merge(&b);
        assert_eq!(a, all);
        a.subtract(&b);
        assert_eq!(a.count, 2);
        assert_eq!(a.fields[0].sum, 6.0);
    }
}
