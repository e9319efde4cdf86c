//! Evidence both kinds of receipt state: the approval, stage checkpoints, counts.

use certificate::canonical::timestamp;
use certificate::receipt::{ApprovalFacts, RECEIPT_FORMAT, RECEIPT_FORMAT_V1};
use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::error::CertificateResult;

/// How a receipt states its manifest's chunk stamps, which its format decides: v1 lists them,
/// v2 states their count and Merkle root (the worker issues v2; an audit re-derives a receipt in
/// the form it was signed in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StampForm {
    /// v1: every stamp in the receipt.
    Listed,
    /// v2: count and Merkle root; the stamps travel in the certificate.
    Rooted,
}

/// How a receipt is signed: by which key, at what time, and in which form its manifest states
/// the chunk stamps (derived the same way when issued and when audited).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Signing<'a> {
    /// The signing key's id.
    pub(crate) key_id: &'a str,
    /// When it is (or was) signed.
    pub(crate) signed_at: DateTime<Utc>,
    /// The manifest's form, which fixes the receipt's format.
    pub(crate) form: StampForm,
}

impl StampForm {
    /// The form of a receipt of `format` (anything but v1 is derived as the current form, and
    /// then differs from what was signed).
    pub(crate) fn of(format: &str) -> StampForm {
        match format {
            RECEIPT_FORMAT_V1 => StampForm::Listed,
            _ => StampForm::Rooted,
        }
    }

    /// The receipt format of this form.
    pub(crate) fn format(self) -> &'static str {
        match self {
            StampForm::Listed => RECEIPT_FORMAT_V1,
            StampForm::Rooted => RECEIPT_FORMAT,
        }
    }
}

/// The approval bound to the frozen inventory (empty fields if none is recorded).
pub(crate) async fn approval_facts(
    conn: &mut PgConnection,
    request_id: Uuid,
) -> CertificateResult<ApprovalFacts> {
    let row: Option<(String, DateTime<Utc>, String)> = sqlx::query_as(
        "SELECT approved_by, approved_at, inventory_digest FROM deletion.approvals \
         WHERE request_id = $1",
    )
    .bind(request_id)
    .fetch_optional(conn)
    .await?;
    Ok(match row {
        Some((approved_by, approved_at, inventory_digest)) => ApprovalFacts {
            approved_by,
            approved_at: timestamp(approved_at),
            inventory_digest,
        },
        None => ApprovalFacts {
            approved_by: String::new(),
            approved_at: String::new(),
            inventory_digest: String::new(),
        },
    })
}

/// Every checkpoint of the request (stages and milestones) in the order they were reached:
/// name, time, execution generation, evidence.
pub(crate) async fn stages_reached(
    conn: &mut PgConnection,
    request_id: Uuid,
) -> CertificateResult<Vec<(String, DateTime<Utc>, i64, serde_json::Value)>> {
    Ok(sqlx::query_as(
        "SELECT stage, reached_at, exec_generation, detail FROM deletion.checkpoints \
         WHERE request_id = $1 ORDER BY reached_at, stage",
    )
    .bind(request_id)
    .fetch_all(conn)
    .await?)
}

/// A stored (non-negative) count as `u64`.
pub(crate) fn count(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}
