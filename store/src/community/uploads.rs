//! Evidence of the multipart uploads a deletion aborted: one audit event per abort.

use super::stage::Stage;
use super::token::{ExecToken, check_fence_held};
use crate::Store;
use crate::error::StoreResult;

/// One abort, as recorded in the audit trail (event `upload_aborted`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadAbortRecord<'a> {
    /// The tenant prefix the upload was listed under.
    pub prefix: &'a str,
    /// The upload's key.
    pub key: &'a str,
    /// The upload id.
    pub upload_id: &'a str,
    /// `aborted`, or `already_gone` when the server no longer knew the upload id.
    pub outcome: &'a str,
}

impl Store {
    /// Appends an `upload_aborted` audit event. Generation- and fence-checked under the request
    /// lock, and refused before the irreversible point (aborting an upload destroys tenant data).
    pub async fn record_upload_aborted(
        &self,
        token: &ExecToken,
        record: &UploadAbortRecord<'_>,
    ) -> StoreResult<()> {
        let (mut tx, row) = self.begin_for_token(token, &[Stage::Drained]).await?;
        check_fence_held(&mut tx, &row).await?;
        row.require_irreversible_marked()?;
        let detail = serde_json::json!({
            "prefix": record.prefix,
            "key": record.key,
            "upload_id": record.upload_id,
            "outcome": record.outcome,
            "exec_generation": token.exec_generation,
        });
        token.commit_event(tx, "upload_aborted", &detail).await
    }
}
