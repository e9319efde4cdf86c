//! The deletion certificates' side of the store: issuing a signed receipt when a request
//! finishes (`issue`, from the facts in `community_facts`/`user_facts`), the transparency log
//! (`log`), exporting a certificate (`export`) and auditing one against the database (`audit`).
//! The encodings, signatures and proofs are the `certificate` crate's; this module only reads
//! and writes Postgres.

mod audit;
mod community_facts;
pub mod error;
mod export;
mod facts;
mod issue;
mod log;
mod user_facts;

use std::sync::Arc;

use certificate::certificate::Certificate;
use certificate::checkpoint::Checkpoint;
use certificate::keys::ReceiptSigningKey;
use sqlx::PgConnection;
use uuid::Uuid;

pub use audit::CertificateAudit;
pub use error::{CertificateResult, CertificateStoreError};
pub(crate) use issue::{ReceiptFor, issue_receipt};

use crate::Store;

/// Names the file holding the worker's Ed25519 receipt signing key (PKCS#8 PEM).
pub const SIGNING_KEY_FILE_ENV: &str = "BUZZ_RECEIPT_SIGNING_KEY_FILE";

/// The worker's receipt signing key (shared by every activity; printed only by key id).
#[derive(Clone)]
pub struct ReceiptKey(Arc<ReceiptSigningKey>);

impl ReceiptKey {
    /// Wraps a loaded key.
    pub fn new(key: ReceiptSigningKey) -> Self {
        ReceiptKey(Arc::new(key))
    }

    /// The key.
    pub fn signing_key(&self) -> &ReceiptSigningKey {
        &self.0
    }

    /// Its id (`ed25519:` and 16 hex digits).
    pub fn key_id(&self) -> String {
        self.0.key_id()
    }
}

impl std::fmt::Debug for ReceiptKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReceiptKey({})", self.key_id())
    }
}

impl Store {
    /// The certificate of a finished request: its signed receipt with an inclusion proof against
    /// the latest checkpoint, and a consistency proof from `older` when given.
    pub async fn certificate(
        &self,
        request_id: Uuid,
        older: Option<&Checkpoint>,
    ) -> CertificateResult<Certificate> {
        self.read_in_transaction(async |conn| export::certificate_of(conn, request_id, older).await)
            .await
    }

    /// Re-derives a request's receipt from the database and its audit chain and reports every
    /// difference, and every receipt or checkpoint signature that does not verify with `keys`
    /// (see [`CertificateAudit`]).
    pub async fn audit_certificate(
        &self,
        request_id: Uuid,
        keys: &certificate::keys::KeyRing,
    ) -> CertificateResult<CertificateAudit> {
        self.read_in_transaction(async |conn| audit::audit_request(conn, request_id, keys).await)
            .await
    }

    /// Runs `read` inside a read-only transaction of its own on one snapshot (REPEATABLE READ),
    /// committed once `read` succeeded. One snapshot matters: a deletion completing meanwhile
    /// appends a leaf and its checkpoint in one transaction, and under READ COMMITTED the log's
    /// leaves read before that commit and its checkpoints read after it disagree, so an audit
    /// reported a removed receipt that was only a newer one.
    async fn read_in_transaction<T>(
        &self,
        read: impl AsyncFnOnce(&mut PgConnection) -> CertificateResult<T>,
    ) -> CertificateResult<T> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await?;
        let value = read(&mut tx).await?;
        tx.commit().await?;
        Ok(value)
    }

    /// Verifies `request_id`'s audit hash chain as stored and returns its head; a break is
    /// [`CertificateStoreError::ChainBroken`], naming the first bad row.
    pub async fn verify_audit_chain(
        &self,
        request_id: Uuid,
    ) -> CertificateResult<certificate::chain::ChainHead> {
        let mut conn = self.pool.acquire().await?;
        let rows = crate::chain::chain_rows(&mut conn, request_id).await?;
        certificate::chain::verify_chain(&rows)
            .map_err(|break_| CertificateStoreError::ChainBroken { request_id, break_ })
    }

    /// Where `request_id`'s receipt is, if it has one.
    pub async fn receipt_summary(
        &self,
        request_id: Uuid,
    ) -> CertificateResult<Option<ReceiptSummary>> {
        Ok(sqlx::query_as(
            "SELECT r.key_id, r.receipt_digest, l.leaf_index, r.created_at AS signed_at \
             FROM deletion.receipts r LEFT JOIN deletion.transparency_log l USING (request_id) \
             WHERE r.request_id = $1",
        )
        .bind(request_id)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// The latest signed checkpoint of the transparency log (`None` before the first receipt).
    pub async fn latest_checkpoint(&self) -> CertificateResult<Option<Checkpoint>> {
        let mut conn = self.pool.acquire().await?;
        log::latest_checkpoint(&mut conn).await
    }

    /// The stored signed receipt of `request_id`, as JSON (for the object-lock archive).
    pub async fn signed_receipt_json(
        &self,
        request_id: Uuid,
    ) -> CertificateResult<serde_json::Value> {
        let mut conn = self.pool.acquire().await?;
        export::signed_receipt(&mut conn, request_id)
            .await?
            .to_json()
            .map_err(|e| CertificateStoreError::certificate("encoding the receipt", e))
    }

    /// Where `request_id`'s receipt was archived, if it was.
    pub async fn receipt_archive(
        &self,
        request_id: Uuid,
    ) -> CertificateResult<Option<ReceiptArchive>> {
        Ok(sqlx::query_as(
            "SELECT bucket, object_key, version_id FROM deletion.receipt_archives \
             WHERE request_id = $1",
        )
        .bind(request_id)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Records that `request_id`'s receipt was written to the object-lock bucket.
    pub async fn record_receipt_archive(
        &self,
        request_id: Uuid,
        archive: &ReceiptArchive,
        retain_until: Option<chrono::DateTime<chrono::Utc>>,
    ) -> CertificateResult<()> {
        sqlx::query(
            "INSERT INTO deletion.receipt_archives \
             (request_id, bucket, object_key, version_id, retain_until) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (request_id) DO NOTHING",
        )
        .bind(request_id)
        .bind(&archive.bucket)
        .bind(&archive.object_key)
        .bind(&archive.version_id)
        .bind(retain_until)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}

/// The audit chain as a reader of the trail sees it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AuditChainCheck {
    /// Every link and hash checks out.
    pub intact: bool,
    /// Events in the chain (0 when broken).
    pub length: i64,
    /// The last event's hash (empty when broken).
    pub head_hash: String,
    /// The first bad row and what is wrong with it, when broken.
    pub first_bad_row: Option<String>,
}

impl AuditChainCheck {
    /// Re-checks the chain of a request's audit rows (as read, in id order).
    pub(crate) fn of(rows: &[certificate::chain::ChainRow]) -> AuditChainCheck {
        match certificate::chain::verify_chain(rows) {
            Ok(head) => AuditChainCheck {
                intact: true,
                length: head.length,
                head_hash: head.head_hash,
                first_bad_row: None,
            },
            Err(first_bad) => AuditChainCheck {
                intact: false,
                length: 0,
                head_hash: String::new(),
                first_bad_row: Some(first_bad.to_string()),
            },
        }
    }
}

/// A finished request's receipt, as `inspect` shows it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct ReceiptSummary {
    /// The signing key.
    pub key_id: String,
    /// The receipt's digest (its log leaf).
    pub receipt_digest: String,
    /// Its index in the transparency log (`None` if it is missing from the log).
    pub leaf_index: Option<i64>,
    /// When it was stored.
    pub signed_at: chrono::DateTime<chrono::Utc>,
}

/// A receipt's copy in the object-lock bucket.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct ReceiptArchive {
    /// The bucket.
    pub bucket: String,
    /// The object key.
    pub object_key: String,
    /// The version written.
    pub version_id: Option<String>,
}
