//! Why a receipt could not be issued, exported or audited.

use uuid::Uuid;

/// A failure of the certificate store.
#[derive(Debug, thiserror::Error)]
pub enum CertificateStoreError {
    /// The process has no receipt signing key, so it cannot finish a deletion.
    #[error(
        "no receipt signing key is configured: set {env} to the path of an Ed25519 private key \
         (`buzz-deletion keys generate --dir DIR` writes one) and restart the worker",
        env = super::SIGNING_KEY_FILE_ENV
    )]
    NoSigningKey,
    /// The request has no receipt (it has not finished, or finished before receipts existed).
    #[error(
        "request {request_id} has no receipt: receipts are issued when a community deletion \
         reaches retention_pending or a user deletion completes"
    )]
    NotIssued {
        /// The request.
        request_id: Uuid,
    },
    /// The transparency log no longer matches its latest signed checkpoint.
    #[error(
        "the transparency log was rewritten: its latest signed checkpoint covers {signed_size} \
         receipt(s) with root {signed_root}, but the stored leaves are {stored_size} with root \
         {stored_root} (receipts were removed, changed or inserted by the database owner). No \
         receipt is appended to a rewritten log: restore deletion.transparency_log from a backup \
         or from the receipt archive bucket, then unblock (docs/certificates.md)"
    )]
    LogRewritten {
        /// Tree size of the latest signed checkpoint.
        signed_size: u64,
        /// Its root hash.
        signed_root: String,
        /// Leaves stored now.
        stored_size: u64,
        /// Their root hash.
        stored_root: String,
    },
    /// The receipt would state fewer relations purged or verified than the frozen inventory
    /// lists: the scope shrank after approval (or the purge or verification evidence was
    /// altered), so no receipt is issued.
    #[error(
        "no receipt is issued for request {request_id}: its purge and verification facts cover \
         fewer relations than its frozen inventory ({}); find why the relation's purge count or \
         verification is missing (docs/operations.md, \"Scope not covered\"), restore that \
         evidence, then unblock",
        .problems.join("; ")
    )]
    ScopeNotCovered {
        /// The request.
        request_id: Uuid,
        /// One line per uncovered relation: its receipt pointer and what is missing.
        problems: Vec<String>,
    },
    /// The request's audit chain is broken (names the first bad row).
    #[error("the audit trail of request {request_id} is broken: {break_}")]
    ChainBroken {
        /// The request.
        request_id: Uuid,
        /// The first bad row.
        break_: certificate::chain::ChainBreak,
    },
    /// Building, signing or proving failed (a stored document does not decode, a proof cannot be
    /// made for the stored log).
    #[error("{what}: {reason}")]
    Certificate {
        /// What was being done.
        what: &'static str,
        /// Why it failed.
        reason: String,
    },
    /// The database failed or refused the statement.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
}

impl CertificateStoreError {
    /// A [`CertificateStoreError::Certificate`] from any displayable cause.
    pub(crate) fn certificate(what: &'static str, reason: impl std::fmt::Display) -> Self {
        CertificateStoreError::Certificate {
            what,
            reason: reason.to_string(),
        }
    }
}

// A database error by its SQLSTATE; every other refusal is permanent.
crate::failure::database_else_permanent!(CertificateStoreError);

/// Result of a certificate store call.
pub type CertificateResult<T> = Result<T, CertificateStoreError>;
