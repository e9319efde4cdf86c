//! Exporting a certificate: the stored signed receipt, its inclusion proof against the latest
//! signed checkpoint and, when the caller holds an older checkpoint, the consistency proof from
//! it. Nothing here is trusted by the verifier: it recomputes everything offline.

use certificate::certificate::{Certificate, ConsistencyProof, SignedReceipt, assemble};
use certificate::checkpoint::Checkpoint;
use certificate::merkle;
use sqlx::PgConnection;
use uuid::Uuid;

use super::community_facts::chunk_stamps;
use super::error::{CertificateResult, CertificateStoreError};
use super::log;

/// The stored signed receipt of `request_id`.
pub(crate) async fn signed_receipt(
    conn: &mut PgConnection,
    request_id: Uuid,
) -> CertificateResult<SignedReceipt> {
    let stored: Option<serde_json::Value> =
        sqlx::query_scalar("SELECT signed FROM deletion.receipts WHERE request_id = $1")
            .bind(request_id)
            .fetch_optional(&mut *conn)
            .await?;
    let stored = stored.ok_or(CertificateStoreError::NotIssued { request_id })?;
    SignedReceipt::from_json(&stored)
        .map_err(|e| CertificateStoreError::certificate("stored receipt", e))
}

/// The certificate of `request_id`, proving inclusion in the latest checkpoint (and consistency
/// with `older`, when given); a v2 receipt's certificate carries the chunk stamps its receipt
/// states by their Merkle root, read from the same append-only evidence (the verifier checks
/// them against the signed root).
pub(crate) async fn certificate_of(
    conn: &mut PgConnection,
    request_id: Uuid,
    older: Option<&Checkpoint>,
) -> CertificateResult<Certificate> {
    let signed = signed_receipt(conn, request_id).await?;
    let (leaf_index, _) = log::leaf_index_of(conn, request_id)
        .await?
        .ok_or(CertificateStoreError::NotIssued { request_id })?;
    let checkpoint = log::latest_checkpoint(conn)
        .await?
        .ok_or(CertificateStoreError::NotIssued { request_id })?;
    let leaves = log::leaves(conn).await?;
    let inclusion = merkle::inclusion_proof(&leaves, leaf_index, checkpoint.tree_size)
        .map_err(|e| CertificateStoreError::certificate("inclusion proof", e))?;
    let consistency = match older {
        None => None,
        Some(older) => {
            if older.tree_size > checkpoint.tree_size {
                return Err(CertificateStoreError::certificate(
                    "consistency proof",
                    format!(
                        "the given checkpoint covers {} receipts but this log's latest covers \
                         only {}: the log lost receipts, or the checkpoint is from another log",
                        older.tree_size, checkpoint.tree_size
                    ),
                ));
            }
            let proof = merkle::consistency_proof(&leaves, older.tree_size, checkpoint.tree_size)
                .map_err(|e| CertificateStoreError::certificate("consistency proof", e))?;
            Some(ConsistencyProof {
                from: older.clone(),
                proof,
            })
        }
    };
    let stamps = match signed.receipt.manifest.stamps {
        Some(_) => Some(chunk_stamps(conn, request_id).await?),
        None => None,
    };
    assemble(
        signed,
        leaf_index,
        inclusion,
        checkpoint,
        consistency,
        stamps,
    )
    .map_err(|e| CertificateStoreError::certificate("assembling the certificate", e))
}
