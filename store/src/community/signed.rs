//! Binds an operator's signed statement to a community request and consumes it, inside the
//! transaction that records the action (see `crate::identity`).

use sqlx::PgConnection;
use uuid::Uuid;
use workflows::community::contracts::{AbortRequest, UnblockRequest};
use workflows::operator::{Action, Expected, Kind, SignedAction, check_binding};

use super::audit::require_named;
use crate::error::StoreResult;
use crate::identity::{ConsumedSignature, IdentityError, consume_signature};

/// Checks that `signed` is this community request's `action` (with `digest` for approvals),
/// then verifies and consumes it for `consumer`. `label` is the operator name the message gave.
pub(crate) async fn consume_community_signature(
    conn: &mut PgConnection,
    signed: Option<&SignedAction>,
    expected: (Action, Uuid, &str, Option<&str>),
    label: &str,
    consumer: &str,
) -> StoreResult<ConsumedSignature> {
    let (action, request_id, host, digest) = expected;
    let expected = Expected {
        action,
        kind: Kind::Community,
        request_id,
        target: host,
        digest,
    };
    let signed = check_binding(signed, &expected).map_err(IdentityError::from)?;
    Ok(consume_signature(conn, signed, label, consumer).await?)
}

/// [`consume_community_signature`] of a statement made on an existing request (approve, unblock,
/// abort): `expected` is its action, the request and the digest it must name, and the target it
/// must name is the one the submit signature named ([`signed_target`]).
pub(crate) async fn consume_request_signature(
    conn: &mut PgConnection,
    signed: Option<&SignedAction>,
    expected: (Action, Uuid, Option<&str>),
    label: &str,
    consumer: &str,
) -> StoreResult<ConsumedSignature> {
    let (action, request_id, digest) = expected;
    let host = signed_target(conn, request_id).await?.unwrap_or_default();
    let expected = (action, request_id, host.as_str(), digest);
    consume_community_signature(conn, signed, expected, label, consumer).await
}

/// An operator's statement on an existing request that names no digest: an abort or an unblock.
pub(crate) trait Statement {
    /// The action it states.
    const ACTION: Action;

    /// Who made it, why, and its signature.
    fn parts(&self) -> (&str, &str, Option<&SignedAction>);
}

impl Statement for AbortRequest {
    const ACTION: Action = Action::Abort;

    fn parts(&self) -> (&str, &str, Option<&SignedAction>) {
        (&self.actor, &self.reason, self.signed.as_ref())
    }
}

impl Statement for UnblockRequest {
    const ACTION: Action = Action::Unblock;

    fn parts(&self) -> (&str, &str, Option<&SignedAction>) {
        (&self.actor, &self.reason, self.signed.as_ref())
    }
}

/// Refuses a statement without an actor or a reason (before any SQL).
pub(crate) fn require_statement(statement: &impl Statement) -> StoreResult<()> {
    let (actor, reason, _) = statement.parts();
    require_named("actor", actor)?;
    require_named("reason", reason)
}

/// [`consume_request_signature`] of `statement` on request `request_id`, labelled with its actor.
pub(crate) async fn consume_statement<S: Statement>(
    conn: &mut PgConnection,
    request_id: Uuid,
    statement: &S,
    consumer: &str,
) -> StoreResult<ConsumedSignature> {
    let (actor, _, signed) = statement.parts();
    consume_request_signature(conn, signed, (S::ACTION, request_id, None), actor, consumer).await
}

/// The target every later signature of a community request must name: the one its submit
/// signature named (immutable, unlike the request row's `host`), or the row's host for a
/// request made before signatures.
pub(crate) async fn signed_target(
    conn: &mut PgConnection,
    request_id: Uuid,
) -> StoreResult<Option<String>> {
    let row: Option<(Option<String>, Option<String>, Option<String>)> = sqlx::query_as(
        "SELECT r.host, s.statement, s.signature FROM deletion.requests r \
         LEFT JOIN deletion.operator_signatures s \
         ON s.fingerprint = r.requested_fingerprint AND s.nonce = r.requested_nonce \
         WHERE r.id = $1",
    )
    .bind(request_id)
    .fetch_optional(conn)
    .await?;
    Ok(row.and_then(
        |(host, statement, signature)| match (statement, signature) {
            (Some(statement), Some(signature)) => {
                SignedAction::from_statement(&statement, &signature).map(|s| s.target)
            }
            _ => host,
        },
    ))
}
