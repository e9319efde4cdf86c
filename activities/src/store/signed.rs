//! Binds an operator's signed statement to a community request and consumes it, inside the
//! transaction that records the action (see `crate::identity`).

use sqlx::PgConnection;
use uuid::Uuid;
use workflows::operator::{Action, Expected, Kind, SignatureRefusal, SignedAction, check_binding};

use super::error::StoreResult;
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

/// The refusal of an approval made with the requester's key.
pub(crate) fn same_operator(fingerprint: &str) -> IdentityError {
    IdentityError::Statement(SignatureRefusal::SameOperator {
        fingerprint: fingerprint.to_owned(),
    })
}
