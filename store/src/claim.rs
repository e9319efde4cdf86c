//! The one request claim of both stores (community and user deletions share the
//! `deletion.requests` table and its `exec_generation`).
//!
//! A claim bumps the request's execution generation inside the caller's transaction and hands
//! the new value to the attempt. Every later write of any attempt re-locks the row and compares
//! generations, so from the claim on every older attempt is refused on its next write. The
//! caller checks what its kind of request needs (stage, block, evidence, retry deadline, owner)
//! before claiming, under the row lock it already holds; the `UPDATE` takes that lock otherwise.

use sqlx::PgConnection;
use uuid::Uuid;

/// The kind of a request row (`deletion.requests.kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestKind {
    /// A whole community.
    Community,
    /// One user.
    User,
}

impl RequestKind {
    fn as_str(self) -> &'static str {
        match self {
            RequestKind::Community => "community",
            RequestKind::User => "user",
        }
    }
}

/// Claims request `request_id` of `kind` for one attempt: bumps its execution generation and
/// returns the new one, or `None` when no request of that kind has this id (nothing changed).
/// The caller commits (or rolls back) the claim with its own transaction.
pub(crate) async fn claim_request(
    conn: &mut PgConnection,
    request_id: Uuid,
    kind: RequestKind,
) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar(
        "UPDATE deletion.requests SET exec_generation = exec_generation + 1, updated_at = now() \
         WHERE id = $1 AND kind = $2 RETURNING exec_generation",
    )
    .bind(request_id)
    .bind(kind.as_str())
    .fetch_optional(conn)
    .await
}
