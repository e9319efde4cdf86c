//! Postgres store of user deletions: the request row (`deletion.requests`, kind `user`), its
//! approval and its stage history (`deletion.user_stage_history`).
//!
//! The store knows no stage rules: the workflow's policy decides, the store saves. What the store
//! enforces is the exclusion proof: a handler attempt bumps the request's execution generation
//! under the request row lock and saves its outcome only while that generation is current; a
//! transition is a compare-and-set from the row the workflow expects to be current; and every
//! write is idempotent under retry (a repeated call finds its earlier effect and returns it).

mod abort;
mod approved;
pub mod data;
pub mod erasure;
pub mod error;
pub mod faults;
pub(crate) mod fence;
mod interrupt;
mod listing;
mod requests;
mod resume;
mod stages;
mod views;

use chrono::{DateTime, SecondsFormat, Utc};
use sqlx::PgPool;
use uuid::Uuid;

pub use error::UserStoreError;
pub use listing::{MAX_LIST_ROWS, UserRequestSummary};
pub use stages::StageStart;
pub use views::{StageRowView, UserRequestView};

/// Result of a user-deletion store call.
pub type UserStoreResult<T> = Result<T, UserStoreError>;

/// The user-deletion store over one connection pool.
#[derive(Debug, Clone)]
pub struct UserStore {
    pool: PgPool,
    /// Signs the receipt of a request this process completes (workers only).
    receipt_key: Option<crate::certificates::ReceiptKey>,
    /// Crash points inside its transactions (tests only; production passes every point).
    faults: crate::user::faults::FaultPoints,
}

impl UserStore {
    /// A store over `pool` (migrated to at least `0002_user_deletion`).
    pub fn new(pool: PgPool) -> Self {
        UserStore {
            pool,
            receipt_key: None,
            faults: crate::user::faults::FaultPoints::default(),
        }
    }

    /// The same store passing `faults` at its crash points inside `commit_transition` (tests).
    pub fn with_faults(mut self, faults: crate::user::faults::FaultPoints) -> Self {
        self.faults = faults;
        self
    }

    /// The same store signing a receipt with `key` when it completes a request (the worker's).
    pub fn with_receipt_key(mut self, key: crate::certificates::ReceiptKey) -> Self {
        self.receipt_key = Some(key);
        self
    }

    /// The underlying pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

/// Appends one row to the request's hash-chained audit trail, inside the caller's transaction.
async fn audit(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    request_id: Uuid,
    actor: &str,
    event: &str,
    detail: serde_json::Value,
) -> UserStoreResult<()> {
    crate::chain::append_chained(tx, request_id, actor, event, &detail).await?;
    Ok(())
}

/// [`audit`] as the last write of `tx`, then commits it.
async fn commit_audited(
    mut tx: sqlx::Transaction<'_, sqlx::Postgres>,
    request_id: Uuid,
    actor: &str,
    event: &str,
    detail: serde_json::Value,
) -> UserStoreResult<()> {
    audit(&mut tx, request_id, actor, event, detail).await?;
    tx.commit().await?;
    Ok(())
}

/// Runs `update` (an `UPDATE deletion.requests … WHERE id = $1`) on the request and records the
/// audit event that explains it, inside the caller's transaction.
async fn update_request_audited(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    update: &'static str,
    request_id: Uuid,
    actor: &str,
    event: &str,
    detail: serde_json::Value,
) -> UserStoreResult<()> {
    sqlx::query(update)
        .bind(request_id)
        .execute(&mut **tx)
        .await?;
    audit(tx, request_id, actor, event, detail).await
}

/// Verifies that `signed` is an operator's statement of exactly `expected` (action, kind,
/// request, target, digest) and consumes it, once, for `consumer`, inside the caller's
/// transaction; `label` is the operator name the caller was given, checked against the key's.
async fn consume_statement(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    signed: Option<&workflows::operator::SignedAction>,
    expected: &workflows::operator::Expected<'_>,
    label: &str,
    consumer: &str,
) -> UserStoreResult<crate::identity::ConsumedSignature> {
    let signed = workflows::operator::check_binding(signed, expected)
        .map_err(crate::identity::IdentityError::from)?;
    Ok(crate::identity::consume_signature(tx, signed, label, consumer).await?)
}

/// [`consume_statement`] of an operator's signed `action` (abort, unblock) on the user request
/// `request_id` of `target`: such statements name no digest.
async fn consume_user_action(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    action: workflows::operator::Action,
    request_id: Uuid,
    target: &str,
    signed: Option<&workflows::operator::SignedAction>,
    label: &str,
    consumer: &str,
) -> UserStoreResult<crate::identity::ConsumedSignature> {
    let expected = workflows::operator::Expected {
        action,
        kind: workflows::operator::Kind::User,
        request_id,
        target,
        digest: None,
    };
    consume_statement(tx, signed, &expected, label, consumer).await
}

/// A user request's approval row, as stored.
#[derive(sqlx::FromRow)]
struct StoredApproval {
    approved_by: String,
    approved_at: DateTime<Utc>,
    inventory_digest: String,
    note: Option<String>,
}

impl StoredApproval {
    /// The approval of request `request_id`, if it is approved (read on the caller's connection).
    async fn of(
        conn: &mut sqlx::PgConnection,
        request_id: Uuid,
    ) -> UserStoreResult<Option<StoredApproval>> {
        Ok(sqlx::query_as(
            "SELECT approved_by, approved_at, inventory_digest, note \
             FROM deletion.approvals WHERE request_id = $1",
        )
        .bind(request_id)
        .fetch_optional(conn)
        .await?)
    }

    /// The approval record, with `signed` (the approver's statement, where the caller has it:
    /// the signatures are otherwise listed with the request).
    fn record(
        self,
        signed: Option<workflows::operator::SignedAction>,
    ) -> workflows::user::UserApprovalRecord {
        workflows::user::UserApprovalRecord {
            approved_by: self.approved_by,
            approved_at: rfc3339(self.approved_at),
            inventory_digest: self.inventory_digest,
            note: self.note,
            signed,
            child_deletions: Vec::new(),
        }
    }
}

/// RFC 3339 with milliseconds, UTC: the one timestamp format of contracts and CLI output.
pub fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The retry state of a request as stored: its retry count (a negative count reads as 0) and
/// its next attempt's deadline.
fn retry_state(retry_count: i32, next_attempt_at: DateTime<Utc>) -> workflows::user::RetryState {
    workflows::user::RetryState {
        retry_count: u32::try_from(retry_count).unwrap_or(0),
        next_attempt_at: rfc3339(next_attempt_at),
        next_attempt_at_unix_ms: next_attempt_at.timestamp_millis(),
    }
}
