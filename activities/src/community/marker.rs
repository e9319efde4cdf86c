//! One attempt's view of the irreversible marker: it is set only once S3 has acknowledged a
//! destructive call (a version deletion or an upload abort), so a first call refused whole
//! leaves the request abortable (see `store::community::irreversible`).
//!
//! Every destructive call of `delete_chunks` goes through [`Marker::before_call`] (until the
//! marker is set, records a pending call in Postgres, so an abort waits for the answer),
//! [`Marker::start_call`] and [`Marker::book`] (its answer), then
//! [`Marker::confirm_if_acknowledged`] sets the marker once S3 acknowledged a call. When the
//! attempt fails, [`Marker::settle_failure`] withdraws the pending call if S3 refused every call
//! the attempt made, and sets the marker if any answer is unknown.
//!
//! The calls run concurrently in one task, so their bookkeeping is atomics; the Postgres writes
//! (`before_call`, `confirm_if_acknowledged`) are made by the task itself between calls, never
//! inside a call in flight: a call's future is not polled while the task awaits something else,
//! and a transaction it held open there would hold the request row's lock against the task.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::s3::{AbortOutcome, BulkDeleteOutcome, ObjectStoreError};
use crate::store::ExecToken;

use super::CommunityActivities;
use super::failure::PhaseResult;

/// What one destructive call's answer proves about the bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CallEffect {
    /// S3 acknowledged at least one deletion or abort (an absent version or upload included).
    Acknowledged,
    /// S3 refused the call whole, or it was never sent: nothing changed.
    RefusedWhole,
    /// No verdict (timeout, 5xx, a version neither acknowledged nor refused): it may have acted.
    Unknown,
}

impl CallEffect {
    /// The effect of a DeleteObjects answer.
    pub(super) fn of_delete(answer: &Result<BulkDeleteOutcome, ObjectStoreError>) -> Self {
        match answer {
            Ok(outcome) if outcome.deleted > 0 => CallEffect::Acknowledged,
            Ok(outcome) if outcome.unacknowledged.is_empty() => CallEffect::RefusedWhole,
            Ok(_) => CallEffect::Unknown,
            Err(error) => Self::of_error(error),
        }
    }

    /// The effect of an AbortMultipartUpload answer (an upload already gone is acknowledged).
    pub(super) fn of_abort(answer: &Result<AbortOutcome, ObjectStoreError>) -> Self {
        match answer {
            Ok(AbortOutcome::Aborted | AbortOutcome::AlreadyGone) => CallEffect::Acknowledged,
            Err(error) => Self::of_error(error),
        }
    }

    fn of_error(error: &ObjectStoreError) -> Self {
        if error.changed_nothing() {
            CallEffect::RefusedWhole
        } else {
            CallEffect::Unknown
        }
    }
}

/// The marker as one attempt of `delete_chunks` (or of a later phase, where it is set) sees it.
pub(super) struct Marker<'a> {
    acts: &'a CommunityActivities,
    token: &'a ExecToken,
    /// The marker is set in Postgres (by this attempt or before it).
    set: AtomicBool,
    /// This attempt recorded a pending call in Postgres.
    began: AtomicBool,
    /// No further call may be sent: the attempt is failing and waits for its calls in flight.
    halted: AtomicBool,
    sent: AtomicU64,
    acknowledged: AtomicU64,
    refused: AtomicU64,
    unknown: AtomicU64,
}

impl<'a> Marker<'a> {
    /// The marker of `token`'s request at the start of an attempt: a call an earlier attempt left
    /// pending sets it (its answer is unknown).
    pub(super) async fn resolve(
        acts: &'a CommunityActivities,
        token: &'a ExecToken,
    ) -> PhaseResult<Self> {
        let set = acts.store.resolve_inherited_call(token).await?;
        Ok(Self::with(acts, token, set))
    }

    /// The marker of a phase that only runs once it is set (the late chunks).
    pub(super) fn already_set(acts: &'a CommunityActivities, token: &'a ExecToken) -> Self {
        Self::with(acts, token, true)
    }

    fn with(acts: &'a CommunityActivities, token: &'a ExecToken, set: bool) -> Self {
        Self {
            acts,
            token,
            set: AtomicBool::new(set),
            began: AtomicBool::new(false),
            halted: AtomicBool::new(false),
            sent: AtomicU64::new(0),
            acknowledged: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            unknown: AtomicU64::new(0),
        }
    }

    /// Before a destructive call: until the marker is set, records in Postgres that a call may be
    /// in flight (so an abort waits for its answer).
    pub(super) async fn before_call(&self) -> PhaseResult<()> {
        if self.set.load(Ordering::SeqCst) {
            return Ok(());
        }
        if self.acts.store.begin_destructive_call(self.token).await? {
            self.set.store(true, Ordering::SeqCst);
        } else {
            self.began.store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    /// Right before the call is sent: `false` once the attempt is failing (the call must not be
    /// sent); otherwise counts it as sent.
    pub(super) fn start_call(&self) -> bool {
        if self.halted.load(Ordering::SeqCst) {
            return false;
        }
        self.sent.fetch_add(1, Ordering::SeqCst);
        true
    }

    /// Books a sent call's answer (no I/O: safe inside a call in flight).
    pub(super) fn book(&self, effect: CallEffect) {
        let counter = match effect {
            CallEffect::Acknowledged => &self.acknowledged,
            CallEffect::RefusedWhole => &self.refused,
            CallEffect::Unknown => &self.unknown,
        };
        counter.fetch_add(1, Ordering::SeqCst);
    }

    /// Sets the marker in Postgres once S3 acknowledged a call of this attempt (and it is not
    /// set yet). Called by the task between calls, before anything relies on the marker.
    pub(super) async fn confirm_if_acknowledged(&self) -> PhaseResult<()> {
        if self.set.load(Ordering::SeqCst) || self.acknowledged.load(Ordering::SeqCst) == 0 {
            return Ok(());
        }
        let why = serde_json::json!({"s3": "acknowledged a deletion or abort"});
        self.acts
            .store
            .mark_irreversible_because(self.token, why)
            .await?;
        self.set.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Stops further calls: the attempt is failing and only waits for the calls in flight.
    pub(super) fn halt(&self) {
        self.halted.store(true, Ordering::SeqCst);
    }

    /// Whether S3 acknowledged a call of this attempt, or the marker was set before it.
    pub(super) fn is_set(&self) -> bool {
        self.set.load(Ordering::SeqCst)
    }

    /// Once the attempt fails: withdraws the pending call when S3 refused every call this attempt
    /// sent (the request stays abortable), sets the marker when an answer is unknown or a call is
    /// unanswered. A failure here is left for the next attempt, which resolves a pending call
    /// conservatively: the attempt's own failure is what it reports.
    pub(super) async fn settle_failure(&self, failure: &str) {
        if self.is_set() || !self.began.load(Ordering::SeqCst) {
            return;
        }
        let sent = self.sent.load(Ordering::SeqCst);
        let refused = self.refused.load(Ordering::SeqCst);
        let unknown = self.unknown.load(Ordering::SeqCst);
        let acknowledged = self.acknowledged.load(Ordering::SeqCst);
        let settled = if unknown == 0 && acknowledged == 0 && refused == sent {
            let refusal = serde_json::json!({
                "calls_sent": sent,
                "calls_refused_whole": refused,
                "failure": failure,
            });
            self.acts
                .store
                .withdraw_destructive_call(self.token, refusal)
                .await
                .map(|_| ())
        } else {
            let why = serde_json::json!({
                "s3": "an answer is unknown",
                "calls_sent": sent,
                "calls_unknown": unknown,
                "calls_unanswered": sent.saturating_sub(refused + unknown + acknowledged),
                "failure": failure,
            });
            self.acts
                .store
                .mark_irreversible_because(self.token, why)
                .await
                .map(|_| ())
        };
        if let Err(error) = settled {
            tracing::warn!(
                request_id = %self.token.request_id,
                %error,
                "could not settle the irreversible marker after a failed attempt; the next \
                 attempt resolves it"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::s3::{DeleteFailure, ObjectVersionRef, S3Operation};

    fn refused(code: &str) -> DeleteFailure {
        DeleteFailure {
            key: "media/c/k".into(),
            version_id: "v".into(),
            code: code.into(),
            message: String::new(),
        }
    }

    #[test]
    fn a_delete_answer_counts_as_acknowledged_only_when_a_version_was_acknowledged() {
        let partly = BulkDeleteOutcome {
            requested: 2,
            deleted: 1,
            failed: vec![refused("AccessDenied")],
            unacknowledged: vec![],
        };
        assert_eq!(CallEffect::of_delete(&Ok(partly)), CallEffect::Acknowledged);
        let denied_whole = BulkDeleteOutcome {
            requested: 2,
            deleted: 0,
            failed: vec![refused("AccessDenied"), refused("AccessDenied")],
            unacknowledged: vec![],
        };
        assert_eq!(
            CallEffect::of_delete(&Ok(denied_whole)),
            CallEffect::RefusedWhole
        );
        let silent = BulkDeleteOutcome {
            requested: 2,
            deleted: 0,
            failed: vec![refused("AccessDenied")],
            unacknowledged: vec![ObjectVersionRef {
                key: "media/c/k2".into(),
                version_id: "v2".into(),
            }],
        };
        assert_eq!(CallEffect::of_delete(&Ok(silent)), CallEffect::Unknown);
    }

    #[test]
    fn a_failed_call_is_refused_whole_only_on_a_verdict_that_proves_nothing_changed() {
        let denied = ObjectStoreError::AccessDenied {
            operation: S3Operation::DeleteObjects,
            bucket: "b".into(),
            status: 403,
            code: Some("AccessDenied".into()),
        };
        assert_eq!(
            CallEffect::of_delete(&Err(denied)),
            CallEffect::RefusedWhole
        );
        let server = ObjectStoreError::ServerError {
            operation: S3Operation::DeleteObjects,
            status: 500,
            code: None,
        };
        assert_eq!(CallEffect::of_delete(&Err(server)), CallEffect::Unknown);
        let timeout = ObjectStoreError::Unreachable {
            operation: S3Operation::AbortMultipartUpload,
            endpoint: "http://s3".into(),
            detail: "timeout".into(),
            certificate: None,
        };
        assert_eq!(CallEffect::of_abort(&Err(timeout)), CallEffect::Unknown);
        let abort_denied = ObjectStoreError::AccessDenied {
            operation: S3Operation::AbortMultipartUpload,
            bucket: "b".into(),
            status: 403,
            code: None,
        };
        assert_eq!(
            CallEffect::of_abort(&Err(abort_denied)),
            CallEffect::RefusedWhole
        );
        assert_eq!(
            CallEffect::of_abort(&Ok(AbortOutcome::AlreadyGone)),
            CallEffect::Acknowledged
        );
    }
}
