//! What the lease and the request gauge samples share: every `(kind, state)` series of a label
//! grid, zero where no row is, filled from the sample query's rows, and ages in whole seconds.

use crate::count_u64;
use crate::error::{StoreError, StoreResult};

/// One `(kind, state)` series of a gauge sample.
pub(crate) trait Series {
    /// The series labelled `kind` and `state`, at zero.
    fn zero(kind: &'static str, state: &'static str) -> Self;

    /// Its `(kind, state)` labels.
    fn labels(&self) -> (&str, &str);

    /// Its count.
    fn count(&self) -> u64;

    /// Sets its count.
    fn set_count(&mut self, count: u64);
}

/// Every `kinds` × `states` series, in that order, at zero: a state that empties must read 0,
/// not keep its last count.
pub(crate) fn zero_grid<S: Series>(
    kinds: &'static [&'static str],
    states: &'static [&'static str],
) -> Vec<S> {
    kinds
        .iter()
        .flat_map(|kind| states.iter().map(move |state| S::zero(kind, state)))
        .collect()
}

/// The count of the `(kind, state)` series, `None` for a pair outside the grid.
pub(crate) fn count_of<S: Series>(series: &[S], kind: &str, state: &str) -> Option<u64> {
    series
        .iter()
        .find(|s| s.labels() == (kind, state))
        .map(Series::count)
}

/// Sets the `(kind, state)` series to the stored count `rows` (a negative count reads 0). A pair
/// outside the grid is refused as a corrupt `what` rather than silently dropped.
pub(crate) fn fill<S: Series>(
    series: &mut [S],
    (kind, state): (&str, &str),
    rows: i64,
    what: &'static str,
) -> StoreResult<()> {
    let slot = series
        .iter_mut()
        .find(|s| s.labels() == (kind, state))
        .ok_or_else(|| unknown_series(what, kind, state))?;
    slot.set_count(count_u64(rows));
    Ok(())
}

/// The refusal of a sample row whose kind or state this binary does not know.
pub(crate) fn unknown_series(what: &'static str, kind: &str, state: &str) -> StoreError {
    StoreError::Corrupt {
        what,
        reason: format!("unknown kind {kind:?} or state {state:?}"),
    }
}

/// Seconds truncated to a whole number; negative or not-a-number ages (clock skew) read 0.
pub(crate) fn whole_seconds(secs: f64) -> u64 {
    if secs.is_finite() && secs > 0.0 {
        secs.floor() as u64
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negative_and_nan_ages_read_zero() {
        assert_eq!(whole_seconds(-3.0), 0);
        assert_eq!(whole_seconds(f64::NAN), 0);
        assert_eq!(whole_seconds(59.99), 59);
    }
}
