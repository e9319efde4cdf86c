//! The operator registry: owner-only writes (`buzz-deletion operators …`); revocation, never
//! deletion (the database enforces both).

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use workflows::approval::same_operator_name;

use super::error::{IdentityError, IdentityResult};
use super::keys::{OperatorKey, parse_public_key};

/// A registry row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct OperatorRecord {
    /// `SHA256:…`: the operator's identity.
    pub fingerprint: String,
    /// The label.
    pub name: String,
    /// `ssh-ed25519`, …
    pub algorithm: String,
    /// The OpenSSH public key line.
    pub public_key: String,
    /// When registered.
    pub added_at: DateTime<Utc>,
    /// The database role that registered it.
    pub added_by: String,
    /// When revoked, if it was.
    pub revoked_at: Option<DateTime<Utc>>,
    /// The role that revoked it.
    pub revoked_by: Option<String>,
    /// Why.
    pub revoke_reason: Option<String>,
}

const COLUMNS: &str = "fingerprint, name, algorithm, public_key, added_at, added_by, revoked_at, \
     revoked_by, revoke_reason";

fn valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 64
        && bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"._@-".contains(b))
}

/// Registers `public_key` (an OpenSSH public key line) as operator `name`. Registering the same
/// key under the same name again returns the existing row, also when two registrations race
/// (the loser reads the winner's row on its second pass). With `replace`, a live key that holds
/// the name is revoked in the same transaction; without it that is refused.
pub async fn add_operator(
    pool: &PgPool,
    name: &str,
    public_key: &str,
    replace: bool,
) -> IdentityResult<OperatorRecord> {
    let name = name.trim();
    if !valid_name(name) {
        return Err(IdentityError::InvalidName {
            name: name.to_owned(),
        });
    }
    let key = parse_public_key(public_key)?;
    match register_once(pool, name, &key, replace).await? {
        Some(record) => Ok(record),
        // A concurrent registration committed first: decide again against what it wrote.
        None => register_once(pool, name, &key, replace)
            .await?
            .ok_or_else(|| IdentityError::DuplicateName {
                name: name.to_owned(),
                fingerprint: "(registered concurrently)".into(),
            }),
    }
}

/// One registration attempt in its own transaction; `None` when a concurrent registration's
/// unique key won the race (nothing written).
async fn register_once(
    pool: &PgPool,
    name: &str,
    key: &OperatorKey,
    replace: bool,
) -> IdentityResult<Option<OperatorRecord>> {
    let mut tx = pool.begin().await?;
    let sql = format!("SELECT {COLUMNS} FROM deletion.operators WHERE fingerprint = $1");
    let existing = sqlx::query_as::<_, OperatorRecord>(sqlx::AssertSqlSafe(sql))
        .bind(&key.fingerprint)
        .fetch_optional(&mut *tx)
        .await?;
    if let Some(existing) = existing {
        if existing.revoked_at.is_none() && same_operator_name(&existing.name, name) {
            return Ok(Some(existing));
        }
        return Err(IdentityError::DuplicateKey {
            fingerprint: existing.fingerprint,
            name: existing.name,
            revoked: existing.revoked_at.is_some(),
        });
    }
    let holder: Option<String> = sqlx::query_scalar(
        "SELECT fingerprint FROM deletion.operators WHERE lower(name) = lower($1) \
         AND revoked_at IS NULL FOR UPDATE",
    )
    .bind(name)
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(holder) = holder {
        if !replace {
            return Err(IdentityError::DuplicateName {
                name: name.to_owned(),
                fingerprint: holder,
            });
        }
        sqlx::query(
            "UPDATE deletion.operators SET revoked_at = clock_timestamp(), \
             revoked_by = session_user, revoke_reason = $2 WHERE fingerprint = $1",
        )
        .bind(&holder)
        .bind(format!("replaced by {}", key.fingerprint))
        .execute(&mut *tx)
        .await?;
    }
    let sql = format!(
        "INSERT INTO deletion.operators (fingerprint, name, public_key, algorithm) \
         VALUES ($1, $2, $3, $4) RETURNING {COLUMNS}"
    );
    let inserted = sqlx::query_as::<_, OperatorRecord>(sqlx::AssertSqlSafe(sql))
        .bind(&key.fingerprint)
        .bind(name)
        .bind(&key.line)
        .bind(&key.algorithm)
        .fetch_one(&mut *tx)
        .await;
    let record = match inserted {
        Ok(record) => record,
        Err(sqlx::Error::Database(db)) if db.is_unique_violation() => return Ok(None),
        Err(other) => return Err(other.into()),
    };
    tx.commit().await?;
    Ok(Some(record))
}

/// Every registered key, revoked ones included, in registration order.
pub async fn list_operators(pool: &PgPool) -> IdentityResult<Vec<OperatorRecord>> {
    let sql = format!("SELECT {COLUMNS} FROM deletion.operators ORDER BY added_at, fingerprint");
    Ok(
        sqlx::query_as::<_, OperatorRecord>(sqlx::AssertSqlSafe(sql))
            .fetch_all(pool)
            .await?,
    )
}

/// The registry row of a key, if registered.
pub async fn operator_by_fingerprint(
    pool: &PgPool,
    fingerprint: &str,
) -> IdentityResult<Option<OperatorRecord>> {
    let sql = format!("SELECT {COLUMNS} FROM deletion.operators WHERE fingerprint = $1");
    Ok(
        sqlx::query_as::<_, OperatorRecord>(sqlx::AssertSqlSafe(sql))
            .bind(fingerprint)
            .fetch_optional(pool)
            .await?,
    )
}

/// Revokes the live key named `name`, recording who (the database role) and why.
pub async fn revoke_operator(
    pool: &PgPool,
    name: &str,
    reason: &str,
) -> IdentityResult<OperatorRecord> {
    let sql = format!(
        "UPDATE deletion.operators SET revoked_at = clock_timestamp(), revoked_by = session_user, \
         revoke_reason = $2 WHERE lower(name) = lower($1) AND revoked_at IS NULL \
         RETURNING {COLUMNS}"
    );
    sqlx::query_as::<_, OperatorRecord>(sqlx::AssertSqlSafe(sql))
        .bind(name.trim())
        .bind(reason)
        .fetch_optional(pool)
        .await?
        .ok_or_else(|| IdentityError::UnknownName {
            name: name.trim().to_owned(),
        })
}
