//! The workflow's bookkeeping of phase, approval and runs: which updates are admitted, and what a
//! finished run leaves behind. Pure, so the admission rules are unit-tested without a server.

use uuid::Uuid;

use crate::approval::{self, Operator};

use super::contracts::{RetryState, UserApprovalRecord, UserApproveRequest};
use super::messages::{RunOptions, RunOutcome, RunReport, UserPhase};

/// Phase, approval and run bookkeeping of one `UserDeletion` workflow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunLedger {
    /// Where the workflow stands.
    pub phase: UserPhase,
    /// The approval evidence, once persisted.
    pub approval: Option<UserApprovalRecord>,
    /// The saved retry state while a failed handler waits.
    pub retry: Option<RetryState>,
    /// The admitted run the main loop has not picked up or finished yet.
    pub pending_run: Option<(u64, RunOptions)>,
    /// Runs admitted so far (the sequence number of the latest).
    pub runs_started: u64,
    /// Runs that paused or ended.
    pub runs_finished: u64,
    /// The report of the last finished run.
    pub last_run: Option<RunReport>,
    /// `run` updates still waiting for their report; the workflow does not end before they got it.
    pub waiting_updates: u32,
    /// An operator asked the run in progress to stop (cleared when that run ends).
    pub stop_requested: bool,
    /// Who asked for that stop, for the audit trail.
    pub stop_requested_by: Option<String>,
}

/// What to do with an incoming `run` update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Admitted as run number `.0`; the update waits until that run is finished.
    Queued(u64),
    /// Not admitted; answer at once (nothing changed).
    Answer(RunReport),
}

impl Default for RunLedger {
    fn default() -> Self {
        RunLedger {
            phase: UserPhase::Registering,
            approval: None,
            retry: None,
            pending_run: None,
            runs_started: 0,
            runs_finished: 0,
            last_run: None,
            waiting_updates: 0,
            stop_requested: false,
            stop_requested_by: None,
        }
    }
}

impl RunLedger {
    /// Why an approval must be refused, if it must: wrong phase, an empty approver, an approver
    /// who is the requester (the one rule of [`crate::approval`]: the approval's key, unverified
    /// here, and its name against the requester's), or a digest other than the frozen one. The
    /// signature's binding is checked by the workflow, its validity by the recording activity.
    pub fn approval_refusal(
        &self,
        requester: Operator<'_>,
        frozen_digest: Option<&str>,
        request: &UserApproveRequest,
    ) -> Option<String> {
        if self.phase != UserPhase::AwaitingApproval {
            return Some(format!(
                "the request is not awaiting approval (phase {})",
                self.phase.as_str()
            ));
        }
        let approver = request.approved_by.trim();
        if approver.is_empty() {
            return Some("approved_by must name the approving operator".into());
        }
        let approver = Operator {
            fingerprint: request.signed.as_ref().map(|s| s.operator.as_str()),
            name: approver,
        };
        if let Err(refusal) = approval::check_two_person(requester, approver) {
            return Some(refusal.to_string());
        }
        approval::check_digest(frozen_digest, &request.inventory_digest)
            .err()
            .map(|refusal| refusal.to_string())
    }

    /// Why a `run` update must be rejected before it is accepted, if it must. Time-dependent
    /// refusals (the retry deadline) are answered by [`RunLedger::admit_run`] instead, because
    /// validators do not see workflow time.
    pub fn run_rejection(&self) -> Option<String> {
        match self.phase {
            UserPhase::Registering | UserPhase::RegistrationFailed => {
                Some("the request is not registered".into())
            }
            UserPhase::AwaitingApproval | UserPhase::Approving => {
                Some("the request is not approved yet: approve its inventory digest first".into())
            }
            UserPhase::Running => Some(
                "a run of this request is already in progress; wait for it to pause, or stop \
                     it with `buzz-deletion user stop ID`"
                    .into(),
            ),
            UserPhase::Approved
            | UserPhase::Paused
            | UserPhase::RetryWait
            | UserPhase::Stopped
            | UserPhase::Blocked
            | UserPhase::Completed => None,
            UserPhase::Aborted => Some("the request was aborted; nothing more runs".into()),
        }
    }

    /// Admits a run at workflow time `now_unix_ms`, or answers it at once: a completed request
    /// is reported read-only, a run before the saved retry deadline is refused.
    pub fn admit_run(&mut self, options: RunOptions, now_unix_ms: i64) -> Admission {
        let answer = |outcome| {
            Admission::Answer(RunReport {
                run: 0,
                handlers_run: 0,
                outcome,
            })
        };
        if self.phase == UserPhase::RetryWait
            && let Some(retry) = self
                .retry
                .as_ref()
                .filter(|r| now_unix_ms < r.next_attempt_at_unix_ms)
        {
            return answer(RunOutcome::RetryNotDue {
                retry: retry.clone(),
            });
        }
        match self.phase {
            UserPhase::Completed => answer(RunOutcome::AlreadyCompleted),
            UserPhase::Running => answer(RunOutcome::RunInProgress),
            UserPhase::Registering
            | UserPhase::RegistrationFailed
            | UserPhase::AwaitingApproval
            | UserPhase::Approving
            | UserPhase::Aborted => answer(RunOutcome::NotApproved),
            UserPhase::Approved
            | UserPhase::Paused
            | UserPhase::RetryWait
            | UserPhase::Stopped
            | UserPhase::Blocked => {
                self.runs_started += 1;
                self.pending_run = Some((self.runs_started, options));
                self.phase = UserPhase::Running;
                Admission::Queued(self.runs_started)
            }
        }
    }

    /// Records the end of run `run` and moves to the phase its outcome implies.
    pub fn finish_run(&mut self, run: u64, handlers_run: u32, outcome: RunOutcome) {
        match &outcome {
            RunOutcome::Paused { .. } | RunOutcome::HandlerBudgetReached { .. } => {
                self.phase = UserPhase::Paused;
                self.retry = None;
            }
            // The store refused an early start: the saved deadline (perhaps later than the one
            // this workflow knew) gates the next run.
            RunOutcome::RetryNotDue { retry } => {
                self.phase = UserPhase::RetryWait;
                self.retry = Some(retry.clone());
            }
            RunOutcome::Completed | RunOutcome::AlreadyCompleted => {
                self.phase = UserPhase::Completed;
                self.retry = None;
            }
            RunOutcome::HandlerFailed { retry, .. } => {
                self.phase = UserPhase::RetryWait;
                self.retry = Some(retry.clone());
            }
            // The saved retry state (if any) still gates the next run.
            RunOutcome::Blocked { .. } => self.phase = UserPhase::Blocked,
            // The run was admitted after any saved deadline; nothing gates the next one.
            RunOutcome::Stopped { .. } => self.phase = UserPhase::Stopped,
            RunOutcome::RunInProgress | RunOutcome::NotApproved => {}
        }
        self.pending_run = None;
        self.stop_requested = false;
        self.stop_requested_by = None;
        self.runs_finished = run;
        self.last_run = Some(RunReport {
            run,
            handlers_run,
            outcome,
        });
    }

    /// Asks the run in progress to stop; returns its number, or None when no run is in progress
    /// (then nothing changes). Asking twice is the same as asking once.
    pub fn request_stop(&mut self, requested_by: Option<String>) -> Option<u64> {
        if self.phase != UserPhase::Running {
            return None;
        }
        if !self.stop_requested {
            self.stop_requested_by = requested_by;
        }
        self.stop_requested = true;
        Some(self.runs_started)
    }

    /// The report of run `run`, once finished.
    pub fn report_of(&self, run: u64) -> Option<RunReport> {
        self.last_run.clone().filter(|report| report.run == run)
    }

    /// The report given when run `run` has no recorded report (the workflow was cancelled while
    /// the update waited).
    pub fn missing_report(run: u64, request_id: Uuid) -> RunReport {
        RunReport {
            run,
            handlers_run: 0,
            outcome: RunOutcome::Blocked {
                reason: format!("run {run} of request {request_id} ended without a report"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approve(by: &str, digest: &str) -> UserApproveRequest {
        UserApproveRequest {
            signed: None,
            approved_by: by.into(),
            inventory_digest: digest.into(),
            note: None,
            child_deletions: Vec::new(),
        }
    }

    fn alice() -> Operator<'static> {
        Operator {
            fingerprint: Some("SHA256:alice"),
            name: "alice",
        }
    }

    fn awaiting() -> RunLedger {
        in_phase(UserPhase::AwaitingApproval)
    }

    fn in_phase(phase: UserPhase) -> RunLedger {
        RunLedger {
            phase,
            ..RunLedger::default()
        }
    }

    /// Admits a run at `now_ms` (it must be admitted) and returns its number.
    fn admitted(ledger: &mut RunLedger, now_ms: i64) -> u64 {
        let Admission::Queued(run) = ledger.admit_run(RunOptions::default(), now_ms) else {
            panic!("the run must be admitted at {now_ms} ms");
        };
        run
    }

    /// A retry due at `at` (`next_attempt_at_unix_ms` = `unix_ms`), after one failure.
    fn retry_due(at: &str, unix_ms: i64) -> RetryState {
        RetryState {
            retry_count: 1,
            next_attempt_at: at.into(),
            next_attempt_at_unix_ms: unix_ms,
        }
    }

    /// The answer to a run asked for before `retry` is due.
    fn not_due(retry: RetryState) -> Admission {
        Admission::Answer(RunReport {
            run: 0,
            handlers_run: 0,
            outcome: RunOutcome::RetryNotDue { retry },
        })
    }

    #[test]
    fn approval_requires_the_frozen_digest_and_a_second_operator() {
        let ledger = awaiting();
        assert_eq!(
            ledger.approval_refusal(alice(), Some("d1"), &approve("bob", "d1")),
            None
        );
        assert!(
            ledger
                .approval_refusal(alice(), Some("d1"), &approve("bob", "d2"))
                .unwrap()
                .contains("does not match the frozen digest d1")
        );
        assert!(
            ledger
                .approval_refusal(alice(), Some("d1"), &approve(" Alice ", "d1"))
                .unwrap()
                .contains("two-person rule")
        );
        assert!(
            ledger
                .approval_refusal(alice(), Some("d1"), &approve(" ", "d1"))
                .is_some()
        );
    }

    #[test]
    fn the_requesters_key_cannot_approve_under_another_name() {
        let mut request = approve("bob", "d1");
        request.signed = Some(crate::operator::SignedAction {
            action: crate::operator::Action::Approve,
            kind: crate::operator::Kind::User,
            request_id: Uuid::from_u128(1),
            target: "u1".into(),
            digest: Some("d1".into()),
            operator: "SHA256:alice".into(),
            signed_at: "2026-11-30T12:00:00Z".into(),
            nonce: "0123456789abcdef0123456789abcdef".into(),
            signature: "sig".into(),
        });
        let refusal = awaiting()
            .approval_refusal(alice(), Some("d1"), &request)
            .unwrap();
        assert!(
            refusal.contains("key SHA256:alice requested this deletion"),
            "{refusal}"
        );
        request.signed.as_mut().unwrap().operator = "SHA256:bob".into();
        assert_eq!(
            awaiting().approval_refusal(alice(), Some("d1"), &request),
            None
        );
    }

    #[test]
    fn a_second_approval_is_refused() {
        let ledger = in_phase(UserPhase::Approved);
        assert!(
            ledger
                .approval_refusal(alice(), Some("d1"), &approve("bob", "d1"))
                .unwrap()
                .contains("not awaiting approval")
        );
    }

    #[test]
    fn runs_are_rejected_before_approval_and_while_one_runs() {
        assert!(awaiting().run_rejection().is_some());
        let mut ledger = in_phase(UserPhase::Approved);
        assert_eq!(ledger.run_rejection(), None);
        assert_eq!(
            ledger.admit_run(RunOptions::default(), 0),
            Admission::Queued(1)
        );
        assert!(ledger.run_rejection().is_some());
        assert_eq!(
            ledger.admit_run(RunOptions::default(), 0),
            Admission::Answer(RunReport {
                run: 0,
                handlers_run: 0,
                outcome: RunOutcome::RunInProgress
            })
        );
    }

    #[test]
    fn a_failed_handler_refuses_runs_until_the_saved_deadline() {
        let mut ledger = in_phase(UserPhase::Approved);
        let run = admitted(&mut ledger, 0);
        let retry = retry_due("2030-01-01T00:00:30Z", 30_000);
        ledger.finish_run(
            run,
            1,
            RunOutcome::HandlerFailed {
                stage_id: Uuid::nil(),
                stage: "purge_db".into(),
                community_id: None,
                error: "boom".into(),
                retry: retry.clone(),
            },
        );
        assert_eq!(ledger.phase, UserPhase::RetryWait);
        assert_eq!(
            ledger.admit_run(RunOptions::default(), 29_999),
            not_due(retry)
        );
        assert_eq!(
            ledger.admit_run(RunOptions::default(), 30_000),
            Admission::Queued(2)
        );
        ledger.finish_run(2, 1, RunOutcome::Completed);
        assert_eq!(
            ledger.retry, None,
            "a successful run clears the retry state"
        );
        assert_eq!(ledger.phase, UserPhase::Completed);
    }

    #[test]
    fn a_stop_marks_only_the_run_in_progress_and_the_next_run_is_admitted() {
        let mut ledger = in_phase(UserPhase::Paused);
        assert_eq!(
            ledger.request_stop(None),
            None,
            "no run in progress: nothing to stop"
        );
        assert!(!ledger.stop_requested);
        let run = admitted(&mut ledger, 0);
        assert_eq!(ledger.request_stop(None), Some(run));
        assert_eq!(
            ledger.request_stop(None),
            Some(run),
            "a second stop is the same stop"
        );
        ledger.finish_run(
            run,
            0,
            RunOutcome::Stopped {
                stage_id: Some(Uuid::nil()),
                stage: Some("purge_db".into()),
                community_id: None,
                handler: crate::user::stop::HandlerAtStop::Interrupted,
            },
        );
        assert_eq!(ledger.phase, UserPhase::Stopped);
        assert!(!ledger.stop_requested, "the stop ends with its run");
        assert_eq!(
            ledger.run_rejection(),
            None,
            "a stopped request accepts the next run"
        );
        assert_eq!(
            ledger.admit_run(RunOptions::default(), 0),
            Admission::Queued(run + 1)
        );
    }

    #[test]
    fn a_completed_request_answers_runs_read_only() {
        let mut ledger = RunLedger {
            phase: UserPhase::Completed,
            runs_started: 5,
            ..RunLedger::default()
        };
        let before = ledger.clone();
        assert_eq!(ledger.run_rejection(), None);
        assert!(matches!(
            ledger.admit_run(RunOptions::default(), 0),
            Admission::Answer(RunReport {
                outcome: RunOutcome::AlreadyCompleted,
                ..
            })
        ));
        assert_eq!(ledger, before);
    }

    #[test]
    fn an_early_start_refused_by_the_store_gates_runs_on_the_saved_deadline() {
        let mut ledger = RunLedger {
            phase: UserPhase::RetryWait,
            retry: Some(retry_due("2030-01-01T00:00:30Z", 30_000)),
            ..RunLedger::default()
        };
        // The workflow clock says the deadline it knows has passed...
        let run = admitted(&mut ledger, 31_000);
        // ...but the database's deadline is later, and the store refused the start.
        let later = retry_due("2030-01-01T01:00:30Z", 3_630_000);
        let outcome = RunOutcome::RetryNotDue {
            retry: later.clone(),
        };
        assert!(outcome.needs_attention());
        ledger.finish_run(run, 0, outcome);
        assert_eq!(ledger.phase, UserPhase::RetryWait);
        assert_eq!(ledger.retry, Some(later.clone()));
        assert_eq!(
            ledger.admit_run(RunOptions::default(), 31_000),
            not_due(later),
            "the next run is refused by the saved deadline, not left running"
        );
    }

    #[test]
    fn a_run_that_reached_its_handler_budget_pauses_and_the_next_run_is_admitted() {
        let mut ledger = in_phase(UserPhase::Approved);
        let run = admitted(&mut ledger, 0);
        let outcome = RunOutcome::HandlerBudgetReached {
            limit: 100,
            stage_id: Uuid::nil(),
            stage: "purge_db".into(),
            community_id: None,
        };
        assert!(!outcome.needs_attention(), "a budget pause exits 0");
        ledger.finish_run(run, 100, outcome);
        assert_eq!(ledger.phase, UserPhase::Paused);
        assert_eq!(
            ledger.admit_run(RunOptions::default(), 0),
            Admission::Queued(2)
        );
    }
}
