//! The store's refusal of an early handler start, read as the run's answer.
//!
//! The retry deadline is stamped with the database's clock and the store enforces it with that
//! same clock: `user.execute_stage` refuses to start a handler while the database's `now()` is
//! before the saved `next_attempt_at`, with the failure type [`RETRY_NOT_DUE_FAILURE_TYPE`]. The
//! workflow's own admission check (workflow time against the deadline it knows) is only a first
//! filter; when the two clocks disagree, or the deadline was moved in Postgres, the store decides.

use temporalio_common::error::IncomingError;
use temporalio_sdk::ActivityExecutionError;

use super::contracts::RetryState;
use super::messages::RunOutcome;
use crate::contract::RETRY_NOT_DUE_FAILURE_TYPE;

/// The run's answer when `error` is the store's refusal of an early start: `retry_not_due` with
/// the retry state saved in Postgres (as loaded just before the attempt). None for any other
/// error, or when no saved deadline is known (the caller then blocks with the store's message).
pub fn store_refused_early_start(
    error: &ActivityExecutionError,
    saved: Option<&RetryState>,
) -> Option<RunOutcome> {
    let refused = matches!(
        error.cause(),
        Some(IncomingError::Application(failure))
            if failure.type_name() == Some(RETRY_NOT_DUE_FAILURE_TYPE)
    );
    match (refused, saved) {
        (true, Some(retry)) => Some(RunOutcome::RetryNotDue {
            retry: retry.clone(),
        }),
        _ => None,
    }
}
