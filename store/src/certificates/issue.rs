//! Issuing a receipt: in the transaction that finishes the request, after its last audit event,
//! the receipt is derived from the evidence, signed, stored, and appended to the transparency
//! log with a new signed checkpoint. Nothing is written to the audit trail afterwards, so the
//! signed chain head is the trail's last row. A community receipt whose purge or verification
//! facts cover fewer relations than the frozen inventory is never signed.

use certificate::certificate::{SignedReceipt, sign_receipt};
use certificate::keys::ReceiptSigningKey;
use certificate::receipt::{Receipt, coverage_problems};
use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::community_facts::community_receipt;
use super::error::{CertificateResult, CertificateStoreError};
use super::facts::{Signing, StampForm};
use super::log;
use super::user_facts::user_receipt;
use crate::chain::stored_head;

/// Which receipt to issue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReceiptFor {
    /// A community deletion that reached `retention_pending`.
    Community,
    /// A user deletion that completed.
    User,
}

impl ReceiptFor {
    fn kind(self) -> &'static str {
        match self {
            ReceiptFor::Community => "community",
            ReceiptFor::User => "user",
        }
    }
}

/// Issues `request_id`'s receipt inside the caller's transaction (which holds the request lock
/// and has just finished the request). A request that already has one keeps it.
pub(crate) async fn issue_receipt(
    conn: &mut PgConnection,
    key: &ReceiptSigningKey,
    request_id: Uuid,
    kind: ReceiptFor,
) -> CertificateResult<()> {
    let existing: Option<String> =
        sqlx::query_scalar("SELECT receipt_digest FROM deletion.receipts WHERE request_id = $1")
            .bind(request_id)
            .fetch_optional(&mut *conn)
            .await?;
    if existing.is_some() {
        return Ok(());
    }
    let head = stored_head(conn, request_id).await?;
    let signed_at: DateTime<Utc> =
        sqlx::query_scalar("SELECT date_trunc('microseconds', clock_timestamp())")
            .fetch_one(&mut *conn)
            .await?;
    let key_id = key.key_id();
    // The worker issues the current format: chunk stamps by their root.
    let signing = Signing {
        key_id: key_id.as_str(),
        signed_at,
        form: StampForm::Rooted,
    };
    let receipt = match kind {
        ReceiptFor::Community => {
            let receipt = community_receipt(conn, request_id, head, signing).await?;
            require_scope_covered(request_id, &receipt)?;
            receipt
        }
        ReceiptFor::User => {
            let salt = certificate::receipt::new_salt()
                .map_err(|e| CertificateStoreError::certificate("target salt", e))?;
            user_receipt(conn, request_id, &salt, head, signing).await?
        }
    };
    let signed = sign_receipt(receipt, key)
        .map_err(|e| CertificateStoreError::certificate("signing the receipt", e))?;
    let digest = signed
        .digest()
        .map_err(|e| CertificateStoreError::certificate("the receipt digest", e))?;
    store_signed(conn, request_id, kind, &key_id, &signed, &digest).await?;
    log::append(conn, key, request_id, &digest, signed_at).await?;
    Ok(())
}

/// Refuses ([`CertificateStoreError::ScopeNotCovered`]) a receipt whose purge or verification
/// facts cover fewer relations than its frozen inventory: the offline verifier's own coverage
/// rules, so nothing is signed that `certificate verify` would reject for it.
fn require_scope_covered(request_id: Uuid, receipt: &Receipt) -> CertificateResult<()> {
    let problems = coverage_problems(receipt);
    if problems.is_empty() {
        return Ok(());
    }
    Err(CertificateStoreError::ScopeNotCovered {
        request_id,
        problems: problems.iter().map(ToString::to_string).collect(),
    })
}

async fn store_signed(
    conn: &mut PgConnection,
    request_id: Uuid,
    kind: ReceiptFor,
    key_id: &str,
    signed: &SignedReceipt,
    digest: &[u8; 32],
) -> CertificateResult<()> {
    // Encoded straight from the struct (what `SignedReceipt::to_json` holds, without building
    // that JSON tree too: a large tenant's receipt has tens of thousands of field digests).
    sqlx::query(
        "INSERT INTO deletion.receipts (request_id, kind, key_id, signed, receipt_digest) \
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(request_id)
    .bind(kind.kind())
    .bind(key_id)
    .bind(sqlx::types::Json(signed))
    .bind(hex::encode(digest))
    .execute(conn)
    .await?;
    Ok(())
}
