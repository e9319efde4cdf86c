//! Every activity retry policy of the workflows, in one place.
//!
//! Two shapes exist and no other:
//! - [`until_success`]: a deletion's activities. A transient failure is retried without limit
//!   (the pending activity shows it in the Web UI while an operator looks), backing off
//!   exponentially; the failure types named as final are not retried, so the workflow sees them
//!   and decides (block, refuse, re-claim).
//! - [`a_few_times`]: observational runs (the taxonomy sweep, the stack check). A few spaced
//!   tries, then the run fails and the next one starts afresh.
//!
//! Changing a value here changes new schedules only: Temporal records the policy with each
//! scheduled activity and never compares it on replay.

use std::time::Duration;

use temporalio_common::RetryPolicy;

/// How far the backoff grows per retry.
const BACKOFF: f64 = 2.0;

/// Retries a transient failure forever, from `first` doubling up to `longest` between tries;
/// the failure types in `final_types` end the activity at once.
pub fn until_success<S: Into<String>>(
    first: Duration,
    longest: Duration,
    final_types: impl IntoIterator<Item = S>,
) -> RetryPolicy {
    RetryPolicy::builder()
        .initial_interval(first)
        .backoff_coefficient(BACKOFF)
        .maximum_interval(longest.max(first))
        .maximum_attempts(0)
        .non_retryable_error_types(final_types.into_iter().map(Into::into).collect::<Vec<_>>())
        .build()
}

/// At most `attempts` tries, the first retry after `first`.
pub fn a_few_times(first: Duration, attempts: u32) -> RetryPolicy {
    RetryPolicy::builder()
        .initial_interval(first)
        .maximum_attempts(attempts)
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deletion_retries_forever_with_a_growing_bounded_backoff_and_stops_on_final_types() {
        let policy = until_success(
            Duration::from_secs(1),
            Duration::from_secs(30),
            ["Permanent"],
        );
        assert_eq!(policy.maximum_attempts(), 0);
        assert_eq!(policy.backoff_coefficient(), BACKOFF);
        assert_eq!(policy.initial_interval(), Duration::from_secs(1));
        assert_eq!(policy.maximum_interval(), Some(Duration::from_secs(30)));
        assert_eq!(policy.non_retryable_error_types(), ["Permanent".to_owned()]);
        let shorter = until_success(
            Duration::from_secs(10),
            Duration::from_secs(5),
            Vec::<String>::new(),
        );
        assert_eq!(shorter.maximum_interval(), Some(shorter.initial_interval()));
    }

    #[test]
    fn an_observational_run_is_tried_a_bounded_number_of_times() {
        let policy = a_few_times(Duration::from_secs(30), 5);
        assert_eq!(policy.maximum_attempts(), 5);
        assert_eq!(policy.initial_interval(), Duration::from_secs(30));
    }
}
