//! Generic stage advances for the stages whose evidence is only a checkpoint (cache purged,
//! logically verified), the final advance to retention pending (which issues the signed
//! receipt in the same transaction), and milestones that do not change the stage.

use super::stage::Stage;
use super::token::ExecToken;
use crate::RequestError;
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
    /// Refused with [`RequestError::StaleGeneration`] for a stale token, [`RequestError::WrongStage`]
    /// unless the request is at `from`, and [`RequestError::TransitionNotGeneric`] for a transition
    /// that has its own call.
    pub async fn advance(
        &self,
        token: &ExecToken,
        from: Stage,
        to: Stage,
        detail: serde_json::Value,
    ) -> StoreResult<()> {
        if !GENERIC_TRANSITIONS.contains(&(from, to)) {
            return Err(StoreError::Request(RequestError::TransitionNotGeneric {
                from: from.to_string(),
                to: to.to_string(),
            }));
        }
        let (tx, _) = self.begin_for_token(token, &[from]).await?;
        token.commit_advance(tx, to, &detail).await
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
        let (mut tx, _) = self
            .begin_for_token(token, &[Stage::LogicallyVerified])
            .await?;
        token
            .record_advance(&mut tx, Stage::RetentionPending, &detail)
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
        let (mut tx, _) = self.begin_for_token(token, &[at_stage]).await?;
        token.record_milestone(&mut tx, milestone, &detail).await?;
        tx.commit().await?;
        Ok(())
    }
}
