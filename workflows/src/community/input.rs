//! What a `CommunityDeletion` run starts from: the operator's request, the tuning knobs, and the
//! state a previous run carried over when it continued as new.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::contracts::{ApprovalRecord, InventorySummary};
use super::phase::Phase;
use super::status::Progress;
use crate::operator::SignedAction;

/// The workflow id of the deletion of request `request_id`: one workflow per request.
pub fn workflow_id(request_id: Uuid) -> String {
    format!("community-deletion-{request_id}")
}

/// Input of the `CommunityDeletion` workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommunityDeletionInput {
    /// Request id chosen by the starter (also the suffix of the workflow id).
    pub request_id: Uuid,
    /// Canonical host name of the community to delete.
    pub host: String,
    /// Operator who asked for the deletion; may not approve it.
    pub requested_by: String,
    /// Free-text reason, kept on the request row.
    #[serde(default)]
    pub reason: Option<String>,
    /// The requester's signed `submit` statement; its key is the requester's identity for the
    /// two-person rule. A run without one fails at registration.
    #[serde(default)]
    pub signed: Option<SignedAction>,
    /// Retry, heartbeat and batching knobs.
    #[serde(default)]
    pub tuning: Tuning,
    /// Set only on a run started by continue-as-new: where the previous run stood.
    #[serde(default)]
    pub carried: Option<CarriedState>,
}

impl CommunityDeletionInput {
    /// A fresh request with default tuning.
    pub fn new(
        request_id: Uuid,
        host: impl Into<String>,
        requested_by: impl Into<String>,
        reason: Option<String>,
    ) -> Self {
        Self {
            request_id,
            host: host.into(),
            requested_by: requested_by.into(),
            reason,
            signed: None,
            tuning: Tuning::default(),
            carried: None,
        }
    }
}

/// Knobs that change pace, never outcome. Every field has a serde default, so a starter may send
/// `{}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Tuning {
    /// First retry delay of a transiently failing activity, in seconds.
    pub retry_initial_secs: u64,
    /// Longest retry delay, in seconds (the delay doubles up to this).
    pub retry_max_secs: u64,
    /// An activity that reports no heartbeat for this long is presumed dead and retried.
    pub heartbeat_timeout_secs: u64,
    /// DeleteObjects calls in flight at once inside one `delete_chunks` attempt.
    pub delete_parallelism: u32,
    /// Manifest chunks one `delete_chunks` call stamps before returning.
    pub chunks_per_call: u64,
    /// `delete_chunks` calls per run; after that many the workflow continues as new, which keeps
    /// one run's history bounded whatever the tenant size.
    pub delete_rounds_per_run: u32,
    /// Rows one purge statement deletes.
    pub purge_batch_rows: u32,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            retry_initial_secs: 30,
            retry_max_secs: 600,
            heartbeat_timeout_secs: 30,
            delete_parallelism: 8,
            chunks_per_call: 100,
            delete_rounds_per_run: 40,
            purge_batch_rows: 5000,
        }
    }
}

/// What a run hands to its continue-as-new successor. Only runs past the irreversible point
/// continue as new, so the successor resumes at `DeletingObjects`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CarriedState {
    /// The phase the previous run was in.
    pub phase: Phase,
    /// The community being deleted.
    pub community_id: Uuid,
    /// The approval the deletion runs under.
    pub approval: Option<ApprovalRecord>,
    /// The frozen inventory the approval names.
    pub inventory: Option<InventorySummary>,
    /// Counters so far.
    pub progress: Progress,
    /// The fence generation recorded on the request.
    pub fence_generation: Option<u64>,
    /// Number of this run in the continue-as-new chain (the first run is 0).
    pub run_number: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_input_without_tuning_gets_the_documented_defaults() {
        let json = r#"{"request_id":"00000000-0000-0000-0000-000000000001","host":"a.example","requested_by":"alice"}"#;
        let input: CommunityDeletionInput = serde_json::from_str(json).unwrap();
        assert_eq!(input.tuning, Tuning::default());
        assert_eq!(input.tuning.retry_initial_secs, 30);
        assert_eq!(input.tuning.delete_rounds_per_run, 40);
        assert!(input.carried.is_none());
    }

    #[test]
    fn a_partial_tuning_keeps_defaults_for_missing_fields() {
        let tuning: Tuning = serde_json::from_str(r#"{"chunks_per_call":3}"#).unwrap();
        assert_eq!(tuning.chunks_per_call, 3);
        assert_eq!(tuning.purge_batch_rows, 5000);
    }
}
