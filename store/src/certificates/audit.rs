//! `certificate audit`: re-derives a receipt from the database and its audit chain and reports
//! every difference from the receipt that was signed, plus any break in the chain (first bad row)
//! and any stored checkpoint the log no longer matches. It verifies what it audits: the stored
//! receipt's signature (and every field against its digest) and every stored checkpoint's
//! signature, with the auditor's public keys, so an owner who lifts the append-only triggers and
//! rewrites a receipt, its log leaf and the checkpoints consistently, without the signing key,
//! is caught.

use certificate::certificate::SignedReceipt;
use certificate::chain::{verify_against_head, verify_chain};
use certificate::keys::KeyRing;
use certificate::merkle;
use certificate::receipt::{Receipt, Subject};
use certificate::verify_signed_receipt;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

use super::community_facts::community_receipt;
use super::error::{CertificateResult, CertificateStoreError};
use super::export::signed_receipt;
use super::facts::{Signing, StampForm};
use super::log;
use super::user_facts::user_receipt;
use crate::chain::chain_rows;

/// The outcome of an audit: empty `problems` means the database still states what was signed.
#[derive(Debug, Clone, Serialize)]
pub struct CertificateAudit {
    /// The request audited.
    pub request_id: Uuid,
    /// Audit events checked.
    pub audit_rows: usize,
    /// The verified chain length (0 when the chain is broken).
    pub chain_length: i64,
    /// Leaves in the transparency log.
    pub log_size: usize,
    /// Every difference, first chain break first; one line each.
    pub problems: Vec<String>,
}

/// Audits `request_id` (see the module doc).
pub(crate) async fn audit_request(
    conn: &mut PgConnection,
    request_id: Uuid,
    keys: &KeyRing,
) -> CertificateResult<CertificateAudit> {
    let signed = signed_receipt(conn, request_id).await?;
    let rows = chain_rows(conn, request_id).await?;
    let mut problems = Vec::new();
    let signed_json = signed
        .to_json()
        .map_err(|e| CertificateStoreError::certificate("the stored receipt", e))?;
    for problem in verify_signed_receipt(&signed_json, keys) {
        problems.push(format!(
            "receipt signature: {}: {}",
            problem.field, problem.problem
        ));
    }
    let mut chain_length = 0;
    match verify_chain(&rows) {
        Ok(head) => chain_length = head.length,
        Err(first_bad) => problems.push(format!("audit trail: {first_bad}")),
    }
    if problems.is_empty()
        && let Err(first_bad) = verify_against_head(&rows, &signed.receipt.audit_chain)
    {
        problems.push(format!("audit trail: {first_bad}"));
    }
    let derived = derive_again(conn, &signed.receipt).await?;
    problems.extend(receipt_differences(&signed.receipt, &derived));
    let leaves = log::leaves(conn).await;
    let log_size = leaves.as_ref().map(Vec::len).unwrap_or(0);
    match leaves {
        Err(error) => problems.push(format!("transparency log: {error}")),
        Ok(leaves) => {
            problems.extend(log_problems(conn, request_id, &signed, &leaves, keys).await?)
        }
    }
    Ok(CertificateAudit {
        request_id,
        audit_rows: rows.len(),
        chain_length,
        log_size,
        problems,
    })
}

/// The receipt the evidence states today, with the signed receipt's chain head, key, signing
/// time and (for a user) salt.
async fn derive_again(conn: &mut PgConnection, signed: &Receipt) -> CertificateResult<Receipt> {
    let signed_at: DateTime<Utc> = DateTime::parse_from_rfc3339(&signed.signed_at)
        .map_err(|e| CertificateStoreError::certificate("stored receipt signed_at", e))?
        .with_timezone(&Utc);
    let head = signed.audit_chain.clone();
    // Derived in the form it was signed in: a v1 receipt lists its stamps, a v2 one roots them.
    let signing = Signing {
        key_id: signed.key_id.as_str(),
        signed_at,
        form: StampForm::of(&signed.format),
    };
    match &signed.subject {
        Subject::Community { .. } => {
            let mut derived = community_receipt(conn, signed.request_id, head, signing).await?;
            // A receipt signed before receipts stated the inventoried relations is compared
            // without them (its evidence records them, its signature does not cover them).
            if signed.inventory.relations.is_empty() {
                derived.inventory.relations.clear();
            }
            Ok(derived)
        }
        Subject::User { target_salt, .. } => {
            let mut derived =
                user_receipt(conn, signed.request_id, target_salt, head, signing).await?;
            // A receipt signed before user receipts named the media decisions is compared
            // without them (its evidence records them, its signature does not cover them).
            if signed.verification.get("media_decisions").is_none()
                && let Some(verification) = derived.verification.as_object_mut()
            {
                verification.remove("media_decisions");
            }
            Ok(derived)
        }
    }
}

/// One line per receipt field whose signed value differs from the derived one.
fn receipt_differences(signed: &Receipt, derived: &Receipt) -> Vec<String> {
    let signed = leaves_of(&serde_json::to_value(signed).unwrap_or_default());
    let derived = leaves_of(&serde_json::to_value(derived).unwrap_or_default());
    let mut problems = Vec::new();
    for (pointer, value) in &signed {
        match derived.iter().find(|(p, _)| p == pointer) {
            Some((_, now)) if now == value => {}
            Some((_, now)) => problems.push(format!(
                "receipt{pointer}: signed {value}, but the database now states {now}"
            )),
            None => problems.push(format!(
                "receipt{pointer}: signed {value}, but the database no longer states it"
            )),
        }
    }
    for (pointer, now) in &derived {
        if !signed.iter().any(|(p, _)| p == pointer) {
            problems.push(format!(
                "receipt{pointer}: the database now states {now}, which was not signed"
            ));
        }
    }
    problems
}

/// Every leaf of a JSON document with its RFC 6901 pointer (the walk the field digests use).
fn leaves_of(value: &serde_json::Value) -> Vec<(String, serde_json::Value)> {
    certificate::certificate::leaves(value, "")
        .into_iter()
        .map(|(pointer, leaf)| (pointer, leaf.clone()))
        .collect()
}

/// The receipt's leaf still holds its digest, and every stored checkpoint is signed by one of
/// `keys` and still matches the log's leaves (a removed or changed receipt changes every later
/// root).
async fn log_problems(
    conn: &mut PgConnection,
    request_id: Uuid,
    signed: &SignedReceipt,
    leaves: &[[u8; 32]],
    keys: &KeyRing,
) -> CertificateResult<Vec<String>> {
    let mut problems = Vec::new();
    let digest = signed
        .digest()
        .map_err(|e| CertificateStoreError::certificate("the receipt digest", e))?;
    match log::leaf_index_of(conn, request_id).await? {
        None => problems.push(format!(
            "transparency log: request {request_id}'s receipt is not in the log"
        )),
        Some((index, _)) => {
            let at = usize::try_from(index).ok().and_then(|i| leaves.get(i));
            if at != Some(&digest) {
                problems.push(format!(
                    "transparency log: leaf {index} does not hold this receipt's digest {}",
                    hex::encode(digest)
                ));
            }
        }
    }
    // Checkpoints come oldest (smallest) first, so one edge walked along the leaves gives every
    // checkpoint's root in a single pass.
    let mut edge = merkle::Frontier::new();
    let mut covered = 0;
    for checkpoint in log::checkpoints(conn).await? {
        if let Err(problem) = checkpoint.verify(keys) {
            problems.push(format!(
                "transparency log: the signed checkpoint of size {}: {}: {}",
                checkpoint.tree_size, problem.field, problem.problem
            ));
        }
        let size = usize::try_from(checkpoint.tree_size).unwrap_or(usize::MAX);
        let root = leaves
            .get(..size)
            .map(|prefix| match prefix.get(covered..) {
                Some(added) => {
                    added.iter().for_each(|leaf| edge.push(leaf));
                    covered = size;
                    edge.root_hex()
                }
                None => merkle::root(prefix),
            });
        if root.as_deref() != Some(checkpoint.root_hash.as_str()) {
            problems.push(format!(
                "transparency log: signed checkpoint of size {} no longer matches the log's \
                 leaves: a receipt was removed or changed after it was signed",
                checkpoint.tree_size
            ));
        }
    }
    Ok(problems)
}
