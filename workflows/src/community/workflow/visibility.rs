//! Visibility: what the Web UI and the CLI see of a run without asking it to act — the search
//! attributes (`BuzzDeletionKind`, `BuzzDeletionStage`, `BuzzCommunityId`, `BuzzBlocked`), the
//! memo, and the snapshot the `status` query returns.

use temporalio_sdk::{MemoValue, WorkflowContext, WorkflowTermination};

use super::{CommunityDeletion, Stop};
use crate::community::phase::Phase;
use crate::community::status::{BlockedInfo, DeletionStatus};
use crate::search;

impl CommunityDeletion {
    /// Moves to `phase`, publishing it in the search attributes when it changes.
    pub(super) fn enter(ctx: &WorkflowContext<Self>, phase: Phase) {
        let previous = ctx.state_mut(|s| std::mem::replace(&mut s.phase, phase));
        if previous != phase {
            Self::publish(ctx);
        }
    }

    /// Sets every search attribute and the memo from the state; called at the start of each
    /// run, so a continued run shows the same as its predecessor.
    pub(super) fn announce(ctx: &WorkflowContext<Self>) -> Result<(), Stop> {
        Self::publish(ctx);
        let memo = ctx.state(|s| {
            let mut memo = vec![
                ("host", Some(MemoValue::new(s.input.host.clone()))),
                (
                    "requested_by",
                    Some(MemoValue::new(s.input.requested_by.clone())),
                ),
            ];
            if let Some(approval) = &s.approval {
                memo.push((
                    "approved_by",
                    Some(MemoValue::new(approval.approved_by.clone())),
                ));
            }
            memo
        });
        ctx.upsert_memo(memo)
            .map_err(|err| Stop::End(WorkflowTermination::from(err)))
    }

    /// Sets `BuzzDeletionKind`, `BuzzDeletionStage`, `BuzzCommunityId` (once known) and
    /// `BuzzBlocked` from the state.
    pub(super) fn publish(ctx: &WorkflowContext<Self>) {
        let (phase, community_id, blocked) =
            ctx.state(|s| (s.phase, s.community_id, s.blocked.is_some()));
        let mut updates = vec![
            search::KIND.value_set("community".to_string()),
            search::STAGE.value_set(phase.as_str().to_string()),
            search::BLOCKED.value_set(blocked),
        ];
        if let Some(id) = community_id {
            updates.push(search::COMMUNITY_ID.value_set(id.to_string()));
        }
        ctx.upsert_search_attributes(updates);
    }

    /// Adds `approved_by` to the memo. A memo is display only, so a value that cannot be
    /// encoded (a plain string always can) is skipped rather than failing the approval.
    pub(super) fn publish_memo(ctx: &WorkflowContext<Self>) {
        let approver = ctx.state(|s| s.approval.as_ref().map(|a| a.approved_by.clone()));
        if let Some(approver) = approver {
            let _display_only = ctx.upsert_memo([("approved_by", Some(MemoValue::new(approver)))]);
        }
    }

    pub(super) fn snapshot(&self) -> DeletionStatus {
        DeletionStatus {
            request_id: self.input.request_id,
            community_id: self.community_id,
            host: self.input.host.clone(),
            requested_by: self.input.requested_by.clone(),
            submitted: self.input.signed.clone(),
            phase: self.phase,
            blocked: self.blocked.clone().map(|blocked| BlockedInfo {
                unblocking: self.unblock_in_flight,
                ..blocked
            }),
            last_error: self.last_error.clone(),
            approval: self.approval.clone(),
            inventory: self.inventory.clone(),
            progress: self.progress.clone(),
            fence_generation: self.fence_generation,
            verification: self.verification.clone(),
            abort: self.abort.clone(),
            run_number: self.run_number,
        }
    }
}
