//! Binds an operator's signed statement to a community request and consumes it, inside the
//! transaction that records the action (see `crate::identity`).

use sqlx::PgConnection;
use uuid::Uuid;
use workflows::operator::{Action, Expected, Kind, SignedAction, check_binding};

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
