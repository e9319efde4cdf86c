//! The worker's part in deletion certificates: its receipt signing key (read from the file named
//! by [`SIGNING_KEY_FILE_ENV`]) and the optional object-lock archive of signed receipts (the
//! bucket named by [`ARCHIVE_BUCKET_ENV`]). Issuing, exporting and auditing receipts is the
//! store's (`crate::store::certificates`); encodings and proofs are the `certificate` crate's.

use std::path::Path;

use uuid::Uuid;

use crate::failure::{Classified, Severity};
use crate::s3::{ObjectStore, ObjectStoreError};
use crate::store::Store;
pub use crate::store::certificates::{CertificateAudit, ReceiptKey};
use crate::store::certificates::{CertificateStoreError, ReceiptArchive};

pub use crate::store::certificates::SIGNING_KEY_FILE_ENV;

/// Names the object-lock bucket signed receipts are copied to (unset: no archive).
pub const ARCHIVE_BUCKET_ENV: &str = "BUZZ_RECEIPT_ARCHIVE_BUCKET";

/// Reads the signing key at `path`. The error names the variable and the file, never key bytes.
pub fn load_receipt_key(path: &Path) -> Result<ReceiptKey, String> {
    certificate::keys::ReceiptSigningKey::read_file(path)
        .map(ReceiptKey::new)
        .map_err(|error| format!("{SIGNING_KEY_FILE_ENV}={}: {error}", path.display()))
}

/// The object key of `request_id`'s archived receipt.
pub fn archive_key(request_id: Uuid) -> String {
    format!("receipts/{request_id}.json")
}

/// Why a receipt could not be archived.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// Reading the receipt or recording the copy failed.
    #[error(transparent)]
    Store(#[from] CertificateStoreError),
    /// Writing the copy failed.
    #[error(transparent)]
    Objects(#[from] ObjectStoreError),
}

impl Classified for ArchiveError {
    fn severity(&self) -> Severity {
        match self {
            ArchiveError::Store(error) => error.severity(),
            ArchiveError::Objects(error) => error.severity(),
        }
    }
}

/// Copies `request_id`'s signed receipt (RFC 8785 canonical JSON) to the archive bucket, once:
/// a copy already recorded is not written again.
pub async fn archive_receipt(
    store: &Store,
    archive: &ObjectStore,
    request_id: Uuid,
) -> Result<(), ArchiveError> {
    if store.receipt_archive(request_id).await?.is_some() {
        return Ok(());
    }
    let signed = store.signed_receipt_json(request_id).await?;
    let body = certificate::canonical::canonical_json(&signed).map_err(|e| {
        CertificateStoreError::Certificate {
            what: "encoding the receipt",
            reason: e.to_string(),
        }
    })?;
    let key = archive_key(request_id);
    let copy = archive.put_locked(&key, body).await?;
    store
        .record_receipt_archive(
            request_id,
            &ReceiptArchive {
                bucket: archive.bucket().to_owned(),
                object_key: copy.key,
                version_id: Some(copy.version_id),
            },
            copy.retain_until,
        )
        .await?;
    Ok(())
}
