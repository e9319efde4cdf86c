//! One-time consumption of a signed statement inside the transaction that records its action.
//!
//! In that transaction, in this order: the key is looked up (the worker may only read the
//! registry, so it takes no row lock: a revocation counts for every action whose transaction
//! reads the registry after the revocation committed, and the insert trigger re-checks the key
//! at insert time); a statement this consumer already
//! recorded is an idempotent repeat; the key must not be revoked and the operator name given
//! must be the key's; the SSHSIG signature must verify over the canonical statement; the
//! statement's time must lie within the window by the database clock; the `(fingerprint, nonce)`
//! row is then inserted, and a conflict means a replay.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;
use workflows::approval::same_operator_name;
use workflows::operator::SignedAction;

use super::error::{IdentityError, IdentityResult};
use super::keys::verify_signature;

/// A signature counts for this long after `signed_at`, by the database clock.
pub const MAX_SIGNATURE_AGE_SECS: i64 = 600;
/// A signature may claim a time at most this far ahead of the database clock.
pub const MAX_SIGNATURE_SKEW_SECS: i64 = 60;

/// A signature accepted for one action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumedSignature {
    /// The key's registered name: the operator recorded for the action.
    pub name: String,
    /// The key's fingerprint.
    pub fingerprint: String,
    /// The statement's nonce.
    pub nonce: String,
    /// True when this consumer had recorded it before (an activity retry).
    pub repeat: bool,
}

#[derive(sqlx::FromRow)]
struct KeyRow {
    name: String,
    public_key: String,
    revoked_at: Option<DateTime<Utc>>,
    revoked_by: Option<String>,
    revoke_reason: Option<String>,
}

/// Verifies `signed` and records it as consumed by `consumer`, inside the caller's transaction.
/// `label` is the operator name the message gave (empty: none); it must be the key's registered
/// name (compared trimmed, ignoring case).
pub async fn consume_signature(
    conn: &mut PgConnection,
    signed: &SignedAction,
    label: &str,
    consumer: &str,
) -> IdentityResult<ConsumedSignature> {
    signed.check_well_formed()?;
    let key = sqlx::query_as::<_, KeyRow>(
        "SELECT name, public_key, revoked_at, revoked_by, revoke_reason FROM deletion.operators \
         WHERE fingerprint = $1",
    )
    .bind(&signed.operator)
    .fetch_optional(&mut *conn)
    .await?
    .ok_or_else(|| IdentityError::UnknownKey {
        fingerprint: signed.operator.clone(),
    })?;
    let accepted = |repeat| ConsumedSignature {
        name: key.name.clone(),
        fingerprint: signed.operator.clone(),
        nonce: signed.nonce.clone(),
        repeat,
    };
    if let Some(consumed_by) = consumed_by(conn, signed).await? {
        return if consumed_by == consumer {
            Ok(accepted(true))
        } else {
            Err(replayed(signed, consumed_by))
        };
    }
    if let Some(revoked_at) = key.revoked_at {
        return Err(IdentityError::Revoked {
            fingerprint: signed.operator.clone(),
            name: key.name.clone(),
            revoked_at: revoked_at.to_rfc3339_opts(SecondsFormat::Secs, true),
            revoked_by: key.revoked_by.clone().unwrap_or_default(),
            reason: key.revoke_reason.clone().unwrap_or_default(),
        });
    }
    let label = label.trim();
    if !label.is_empty() && !same_operator_name(label, &key.name) {
        return Err(IdentityError::NameMismatch {
            label: label.to_owned(),
            fingerprint: signed.operator.clone(),
            name: key.name.clone(),
        });
    }
    verify_signature(&key.public_key, signed)?;
    let age_secs: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM clock_timestamp() - $1::timestamptz)::float8",
    )
    .bind(&signed.signed_at)
    .fetch_one(&mut *conn)
    .await?;
    let age_secs = age_secs.floor() as i64;
    if age_secs > MAX_SIGNATURE_AGE_SECS {
        return Err(IdentityError::Expired {
            signed_at: signed.signed_at.clone(),
            age_secs,
            max_secs: MAX_SIGNATURE_AGE_SECS,
        });
    }
    if -age_secs > MAX_SIGNATURE_SKEW_SECS {
        return Err(IdentityError::FromTheFuture {
            signed_at: signed.signed_at.clone(),
            ahead_secs: -age_secs,
            max_secs: MAX_SIGNATURE_SKEW_SECS,
        });
    }
    let inserted = sqlx::query(
        "INSERT INTO deletion.operator_signatures (fingerprint, nonce, action, kind, request_id, \
         digest, statement, signature, signed_at, consumed_by) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::timestamptz, $10) \
         ON CONFLICT (fingerprint, nonce) DO NOTHING",
    )
    .bind(&signed.operator)
    .bind(&signed.nonce)
    .bind(signed.action.as_str())
    .bind(signed.kind.as_str())
    .bind(signed.request_id)
    .bind(signed.digest.as_deref())
    .bind(signed.statement())
    .bind(&signed.signature)
    .bind(&signed.signed_at)
    .bind(consumer)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if inserted == 1 {
        return Ok(accepted(false));
    }
    // A concurrent transaction consumed it first.
    match consumed_by(conn, signed).await? {
        Some(by) if by == consumer => Ok(accepted(true)),
        Some(by) => Err(replayed(signed, by)),
        None => Err(replayed(signed, "a concurrent action".into())),
    }
}

async fn consumed_by(
    conn: &mut PgConnection,
    signed: &SignedAction,
) -> IdentityResult<Option<String>> {
    Ok(sqlx::query_scalar(
        "SELECT consumed_by FROM deletion.operator_signatures WHERE fingerprint = $1 AND nonce = $2",
    )
    .bind(&signed.operator)
    .bind(&signed.nonce)
    .fetch_optional(&mut *conn)
    .await?)
}

fn replayed(signed: &SignedAction, consumed_by: String) -> IdentityError {
    IdentityError::Replayed {
        fingerprint: signed.operator.clone(),
        nonce: signed.nonce.clone(),
        consumed_by,
    }
}

/// A stored signature with its key, for evidence output and outside verification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct StoredSignature {
    /// `submit`, `approve`, `abort`, `unblock`.
    pub action: String,
    /// The key's fingerprint.
    pub fingerprint: String,
    /// The key's registered name.
    pub name: String,
    /// The registered OpenSSH public key line.
    pub public_key: String,
    /// The canonical statement, as signed.
    pub statement: String,
    /// The armored SSHSIG signature.
    pub signature: String,
    /// When it was signed (statement time).
    pub signed_at: DateTime<Utc>,
    /// When it was recorded (database time).
    pub recorded_at: DateTime<Utc>,
}

/// Every signature recorded for the request, oldest first.
pub async fn signatures_of_request(
    pool: &PgPool,
    request_id: Uuid,
) -> IdentityResult<Vec<StoredSignature>> {
    Ok(sqlx::query_as::<_, StoredSignature>(
        "SELECT s.action, s.fingerprint, o.name, o.public_key, s.statement, s.signature, \
         s.signed_at, s.recorded_at FROM deletion.operator_signatures s \
         JOIN deletion.operators o USING (fingerprint) WHERE s.request_id = $1 \
         ORDER BY s.recorded_at, s.action",
    )
    .bind(request_id)
    .fetch_all(pool)
    .await?)
}
