//! Starting a `UserDeletion` from what Postgres holds instead of registering a new request: an
//! operator's `user resume` (the request's workflow was terminated or lost) and the workflow's own
//! continue-as-new both start an execution in [`StartMode::Resume`]. The new execution carries
//! nothing but the request id: the `user.resume` activity reads the request, its approval and its
//! retry state, and bumps the execution generation so that every late write of an older execution
//! is refused as stale.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::contracts::{RetryState, UserApprovalRecord};
use super::inventory::UserInventory;
use super::messages::UserPhase;

/// Runs one execution serves before it continues as new, unless the input says otherwise.
pub const DEFAULT_RUNS_PER_EXECUTION: u64 = 50;

/// How a `UserDeletion` execution begins.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum StartMode {
    /// A new request: register it, then wait for its approval (`user submit`).
    #[default]
    Register,
    /// An existing request: read it from Postgres and continue from its stage history.
    Resume {
        /// Why this execution resumes the request.
        cause: ResumeCause,
    },
}

/// Why an execution resumes a request from Postgres.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResumeCause {
    /// An operator asked (`user resume`, or `user run` finding no running workflow).
    Operator,
    /// The previous execution continued as new to keep its history bounded.
    ContinueAsNew,
}

impl ResumeCause {
    /// The stable name saved in the audit trail.
    pub fn as_str(self) -> &'static str {
        match self {
            ResumeCause::Operator => "operator",
            ResumeCause::ContinueAsNew => "continue_as_new",
        }
    }
}

/// Knobs of one workflow execution (carried across continue-as-new).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserTuning {
    /// Runs one execution serves before it continues as new (0: [`DEFAULT_RUNS_PER_EXECUTION`]).
    /// Tests set it low to reach continue-as-new with a few runs.
    #[serde(default)]
    pub runs_per_execution: u64,
}

impl UserTuning {
    /// The effective number of runs per execution.
    pub fn runs_per_execution(&self) -> u64 {
        match self.runs_per_execution {
            0 => DEFAULT_RUNS_PER_EXECUTION,
            n => n,
        }
    }
}

/// Input of `user.resume`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeInput {
    /// The request.
    pub request_id: Uuid,
    /// The resuming execution's workflow id.
    pub workflow_id: String,
    /// The resuming execution's run id (saved in the audit trail).
    pub run_id: String,
    /// Why it resumes.
    pub cause: ResumeCause,
}

/// What Postgres holds about a request an execution resumes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumedRequest {
    /// The user.
    pub target: String,
    /// Operator who asked for the deletion.
    pub requested_by: String,
    /// Free-text reason.
    pub reason: Option<String>,
    /// The frozen inventory as saved.
    pub inventory: UserInventory,
    /// The saved digest.
    pub inventory_digest: String,
    /// `deletion.requests.stage`: inventoried, approved, running or retry_wait.
    pub request_stage: String,
    /// The approval evidence, once approved.
    pub approval: Option<UserApprovalRecord>,
    /// The saved retry state while a failed handler waits.
    pub retry: Option<RetryState>,
    /// The execution generation after the resume's bump.
    pub exec_generation: i64,
}

impl ResumedRequest {
    /// The phase a resumed execution starts in, or why the request cannot be resumed: a saved
    /// inventory that does not hash to its saved digest, or an approval of another digest, is
    /// never resumed.
    pub fn phase(&self) -> Result<UserPhase, String> {
        let digest = self.inventory.digest();
        if digest != self.inventory_digest {
            return Err(format!(
                "the saved inventory hashes to {digest}, not to its saved digest {}",
                self.inventory_digest
            ));
        }
        if let Some(approval) = &self.approval
            && approval.inventory_digest != digest
        {
            return Err(format!(
                "the approval names digest {}, not the saved inventory's {digest}",
                approval.inventory_digest
            ));
        }
        match (self.request_stage.as_str(), &self.approval) {
            ("inventoried", None) => Ok(UserPhase::AwaitingApproval),
            ("approved", Some(_)) => Ok(UserPhase::Approved),
            ("running", Some(_)) => Ok(UserPhase::Paused),
            ("retry_wait", Some(_)) => Ok(UserPhase::RetryWait),
            (stage, approval) => Err(format!(
                "a request that is {stage} ({}) cannot be resumed",
                if approval.is_some() {
                    "approved"
                } else {
                    "without approval"
                }
            )),
        }
    }
}

/// The token of run `run` of execution `run_id`: saved on every stage row whose handler the run
/// starts, so a retried activity can tell from the row whether this run already executed it.
/// Deterministic workflow state (the run id and the run's sequence number).
pub fn run_token(run_id: &str, run: u64) -> String {
    format!("{run_id}/run-{run}")
}

/// The execution run id a [`run_token`] names.
pub fn run_id_of(token: &str) -> Option<&str> {
    token.rsplit_once("/run-").map(|(run_id, _)| run_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resumed(stage: &str, approved: bool) -> ResumedRequest {
        let digest = UserInventory::demo("demo:a").unwrap().digest();
        ResumedRequest {
            target: "demo:a".into(),
            requested_by: "operator-a".into(),
            reason: None,
            inventory: UserInventory::demo("demo:a").unwrap(),
            inventory_digest: digest.clone(),
            request_stage: stage.into(),
            approval: approved.then(|| UserApprovalRecord {
                approved_by: "operator-b".into(),
                approved_at: "2030-01-01T00:00:00.000Z".into(),
                inventory_digest: digest.clone(),
                note: None,
                signed: None,
                child_deletions: Vec::new(),
            }),
            retry: None,
            exec_generation: 3,
        }
    }

    #[test]
    fn a_resumed_request_starts_in_the_phase_its_saved_stage_implies() {
        assert_eq!(
            resumed("inventoried", false).phase(),
            Ok(UserPhase::AwaitingApproval)
        );
        assert_eq!(resumed("approved", true).phase(), Ok(UserPhase::Approved));
        assert_eq!(resumed("running", true).phase(), Ok(UserPhase::Paused));
        assert_eq!(
            resumed("retry_wait", true).phase(),
            Ok(UserPhase::RetryWait)
        );
        assert!(resumed("completed", true).phase().is_err());
        assert!(resumed("running", false).phase().is_err());
        let mut edited = resumed("running", true);
        edited.inventory.communities.pop();
        assert!(
            edited
                .phase()
                .unwrap_err()
                .contains("not to its saved digest")
        );
    }

    #[test]
    fn a_run_token_names_its_execution() {
        let token = run_token("0193-abc", 7);
        assert_eq!(token, "0193-abc/run-7");
        assert_eq!(run_id_of(&token), Some("0193-abc"));
        assert_eq!(run_id_of("no token"), None);
    }

    #[test]
    fn an_old_start_input_without_mode_or_tuning_registers() {
        let input: super::super::messages::UserDeletionInput = serde_json::from_value(
            serde_json::json!({"request_id": Uuid::nil(), "target": "demo:a", "requested_by": "x"}),
        )
        .unwrap();
        assert_eq!(input.start, StartMode::Register);
        assert_eq!(
            input.tuning.runs_per_execution(),
            DEFAULT_RUNS_PER_EXECUTION
        );
    }
}
