//! Generic stage advances for the stages whose evidence is only a checkpoint (cache purged,
//! logically verified), the final advance to retention pending (which issues the signed
//! receipt in the same transaction), and milestones that do not change the stage.

use super::audit::{WORKFLOW_ACTOR, commit_advance, record_advance, record_milestone};
use super::stage::Stage;
use super::token::{ExecToken, lock_for_token};
use crate::Store;
use crate::certificates::{ReceiptFor, issue_receipt};
use crate::error::{StoreError, StoreResult};

/// The transitions `advance` may make; every other one has a dedicated call that checks its own
/// evidence (approval, fence, manifest, purge).
const GENERIC_TRANSITIONS: [(Stage, Stage); 2] = [
    (Stage::PostgresPurged, Stage::CachePurged),
    (Stage::CachePurged, Stage::LogicallyVerified),
];

impl Store {
    /// Compare-and-set `from → to` with a checkpoint and an audit event, in one transaction.
    /// Refused with [`StoreError::StaleGeneration`] for a stale token, [`StoreError::WrongStage`]
    /// unless the request is at `from`, and [`StoreError::TransitionNotGeneric`] for a transition
    /// that has its own call.
    pub async fn advance(
        &self,
        token: &ExecToken,
        from: Stage,
        to: Stage,
        detail: serde_json::Value,
    ) -> StoreResult<()> {
        if !GENERIC_TRANSITIONS.contains(&(from, to)) {
            return Err(StoreError::TransitionNotGeneric {
                from: from.to_string(),
                to: to.to_string(),
            });
        }
        let mut tx = self.pool.begin().await?;
        lock_for_token(&mut tx, token, &[from]).await?;
        commit_advance(
            tx,
            token.request_id,
            to,
            token.exec_generation,
            WORKFLOW_ACTOR,
            &detail,
        )
        .await?;
        Ok(())
    }

    /// `logically_verified → retention_pending` with its checkpoint and audit event, and the
    /// request's signed receipt appended to the transparency log, in one transaction: a deletion
    /// is never finished without its receipt. Refused like [`Store::advance`], and with
    /// [`crate::certificates::CertificateStoreError::NoSigningKey`] when this store has no signing key.
    pub async fn complete_with_receipt(
        &self,
        token: &ExecToken,
        detail: serde_json::Value,
    ) -> StoreResult<()> {
        let key = self.receipt_key()?;
        let mut tx = self.pool.begin().await?;
        lock_for_token(&mut tx, token, &[Stage::LogicallyVerified]).await?;
        record_advance(
            &mut tx,
            token.request_id,
            Stage::RetentionPending,
            token.exec_generation,
            WORKFLOW_ACTOR,
            &detail,
        )
        .await?;
        issue_receipt(
            &mut tx,
            key.signing_key(),
            token.request_id,
            ReceiptFor::Community,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Records a milestone that does not change the stage (e.g. `preflight`, `drain`), checked
    /// against the token's generation and the stage it happens in. The first evidence recorded for
    /// a milestone is kept; every call is audited.
    pub async fn record_milestone(
        &self,
        token: &ExecToken,
        at_stage: Stage,
        milestone: &str,
        detail: serde_json::Value,
    ) -> StoreResult<()> {
        if milestone.parse::<Stage>().is_ok() {
            return Err(StoreError::InvalidInput {
                field: "milestone",
                reason: format!("{milestone:?} is a stage name; stages are reached by advancing"),
            });
        }
        let mut tx = self.pool.begin().await?;
        lock_for_token(&mut tx, token, &[at_stage]).await?;
        record_milestone(
            &mut tx,
            token.request_id,
            milestone,
            token.exec_generation,
            WORKFLOW_ACTOR,
            &detail,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }
}
