//! The PostgreSQL exclusion proof of buzz-deletion: the tenant catalog, the requests of both
//! deletions and everything that proves them (approvals bound to an inventory digest, fences,
//! serving-write leases, stamped manifest chunks, audit trail, deletion receipts), the operator
//! identity registry, the request claim, and the key taxonomy every stamped entry is checked
//! against. It speaks only to PostgreSQL: S3, Redis and Temporal are the `activities` crate's.
//!
//! Every progress write is generation-checked: an activity attempt first [`Store::claim`]s the
//! request (bumping its execution generation under the request row lock) and passes the returned
//! [`ExecToken`] to every later write, which re-locks the row and refuses with
//! [`RequestError::StaleGeneration`] once a newer attempt claimed it, or [`RequestError::WrongStage`]
//! when the stage is not the one the write advances from. A timed-out (zombie) attempt can
//! therefore never stamp progress after its successor began.
//!
//! Laid out by whose proof it is: `community/` holds the community deletion's (requests,
//! frozen inventory, approvals, fence, serving-write leases, destructive manifest, row purge,
//! checkpoints, audit trail), `user/` the user deletion's ([`user::UserStore`]: requests and
//! stages, the per-user write fence `fence.rs`, the user-data declarations `data.rs`, the
//! erasure's Postgres side `erasure/`, and the crash points of its tests `faults.rs`). Beside
//! them, shared by both and by the serving path: the write fence both scopes use (`fences.rs`),
//! the request claim (`claim.rs`), operator identity (`identity/`), the tenant catalog
//! (`catalog/`: the scan, its rules `rules.rs`, the relation tree `tenant_tree.rs` and the
//! closed-world check `closed_world/`), the communities and
//! their rows (`communities.rs`), deletion certificates (`certificates/`), the key taxonomy
//! (`taxonomy/`) and the addresses of object versions (`object_addresses.rs`), the failure
//! classification every error implements (`failure.rs`), errors, migrations, role checks and
//! taxonomy sweeps. Demo rows are written by the `demo` crate.
#![deny(unsafe_code)]

mod canonical_pubkey;
mod catalog;
pub mod certificates;
mod chain;
mod claim;
mod communities;
mod community;
mod error;
pub mod failure;
mod fences;
mod gauge_series;
pub mod identity;
pub mod lease_gauges;
mod migrate;
pub mod object_addresses;
mod pool;
mod privilege;
pub mod request_gauges;
mod serving_db;
mod sweeps;
pub mod taxonomy;
pub mod user;

use sqlx::PgPool;

pub use catalog::CatalogError;
pub use catalog::closed_world;
pub use catalog::{COMMUNITIES_TABLE, CatalogInventory, catalog_scan_in};
pub use communities::normalize_host;
pub use communities::{Community, TableSnapshot};
pub use community::approvals::ApprovalError;
pub use community::audit::AuditEvent;
pub use community::fence::FenceStatus;
pub use community::freeze_resume::{ChunkTail, FreezeResume, PrefixResume};
pub use community::inventory::{FROZEN_INVENTORY_VERSION, FrozenInventory};
pub use community::late::LateChunk;
pub use community::leases::AwaitedLease;
pub use community::manifest::{
    ChunkAck, ChunkProgress, ChunkSet, MANIFEST_CHUNK_MAX_ENTRIES, ManifestChunk, ManifestError,
    NewChunk,
};
pub use community::requests::{
    Checkpoint, Request, RequestError, RequestFilter, RequestInspection,
};
pub use community::stage::{Stage, UnknownStage};
pub use community::token::ExecToken;
pub use community::uploads::UploadAbortRecord;
pub(crate) use error::sqlx_severity as sqlx_error_severity;
pub use error::{
    APPEND_ONLY_SQLSTATE, CascadingReference, FENCED_WRITE_SQLSTATE, StoreError, StoreResult,
    USER_FENCED_WRITE_SQLSTATE, is_append_only_refusal, is_fenced_write, is_user_fenced_write,
};
pub use fences::{FenceError, FenceState, ScopedFenceStatus, StalledServingWrites};
pub use migrate::{MIGRATIONS_TABLE, MIGRATOR, SchemaError};
pub use pool::{DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT_MS, DEFAULT_MAX_CONNECTIONS, PoolSettings};
pub use privilege::{
    ALLOW_PRIVILEGED_ROLE_ENV, ALLOW_PRIVILEGED_ROLE_VALUE, PrivilegedRole, SERVING_GROUP,
    WORKER_GROUP, privileged_role_allowed,
};
/// The relay's lease types, from the `serving` crate.
pub use serving::{LiveServingWrites, ServingWriteLease};
pub use sweeps::{TaxonomySweep, TaxonomySweepInput};
pub use user::fence::{UserFenceStatus, validate_user_pubkey};

/// The Postgres store. Cheap to clone: clones share one connection pool.
#[derive(Debug, Clone)]
pub struct Store {
    pool: PgPool,
    /// Signs the receipt of a request this process finishes (workers only).
    receipt_key: Option<certificates::ReceiptKey>,
}

impl Store {
    /// Connects to `database_url` (the value of `DATABASE_URL`) with the default pool size.
    pub async fn connect(database_url: &str) -> StoreResult<Store> {
        Self::connect_with_pool_size(database_url, DEFAULT_MAX_CONNECTIONS).await
    }

    /// Connects with at most `max_connections` pooled connections and otherwise the default
    /// [`PoolSettings`] (see [`Store::connect_with`]).
    pub async fn connect_with_pool_size(
        database_url: &str,
        max_connections: u32,
    ) -> StoreResult<Store> {
        Self::connect_with(
            database_url,
            &PoolSettings::with_max_connections(max_connections),
        )
        .await
    }

    /// Wraps an existing pool (tests, or a binary that shares its pool).
    pub fn from_pool(pool: PgPool) -> Store {
        Store {
            pool,
            receipt_key: None,
        }
    }

    /// The same store signing receipts with `key` when it finishes a request (the worker's).
    pub fn with_receipt_key(mut self, key: certificates::ReceiptKey) -> Store {
        self.receipt_key = Some(key);
        self
    }

    /// The receipt signing key, or the error that says how to configure one.
    pub(crate) fn receipt_key(
        &self,
    ) -> Result<&certificates::ReceiptKey, certificates::CertificateStoreError> {
        self.receipt_key
            .as_ref()
            .ok_or(certificates::CertificateStoreError::NoSigningKey)
    }

    /// The underlying pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

/// `postgres://user:***@host/db`: the URL with its password hidden, for error messages.
pub fn redact_password(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|index| index + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_owned();
    };
    match rest[..at].find(':') {
        Some(colon) => format!(
            "{}{}:***{}",
            &url[..scheme_end],
            &rest[..colon],
            &rest[at..]
        ),
        None => url.to_owned(),
    }
}

/// Quotes an SQL identifier (`"` doubled), for tables discovered from the catalog.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A database count as `u64` (counts are never negative; a negative value would be a bug).
pub(crate) fn count_u64(value: i64) -> u64 {
    u64::try_from(value).unwrap_or_default()
}

/// A caller's count as the `bigint` Postgres stores.
pub fn count_i64(field: &'static str, value: u64) -> StoreResult<i64> {
    i64::try_from(value).map_err(|_| StoreError::InvalidInput {
        field,
        reason: format!("{value} does not fit a bigint"),
    })
}

/// Encodes one field of a canonical (digest) encoding as `len:bytes,` so that no two different
/// field sequences share an encoding, whatever characters the fields hold.
pub(crate) fn put_canonical_field(out: &mut Vec<u8>, field: &str) {
    out.extend_from_slice(field.len().to_string().as_bytes());
    out.push(b':');
    out.extend_from_slice(field.as_bytes());
    out.push(b',');
}

/// Encodes a list of a canonical (digest) encoding: its length, then every item (`put_item`) in
/// the order of `key`, whatever their order in memory.
pub(crate) fn put_canonical_list<T>(
    out: &mut Vec<u8>,
    items: &[T],
    key: impl Fn(&T) -> &str,
    mut put_item: impl FnMut(&mut Vec<u8>, &T),
) {
    let mut sorted: Vec<&T> = items.iter().collect();
    sorted.sort_by(|a, b| key(a).cmp(key(b)));
    put_canonical_field(out, &sorted.len().to_string());
    for item in sorted {
        put_item(out, item);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacted_url_hides_only_the_password() {
        assert_eq!(
            redact_password("postgres://buzz:secret@127.0.0.1:55432/buzz"),
            "postgres://buzz:***@127.0.0.1:55432/buzz"
        );
        assert_eq!(
            redact_password("postgres://buzz@127.0.0.1/buzz"),
            "postgres://buzz@127.0.0.1/buzz"
        );
        assert_eq!(redact_password("not a url"), "not a url");
    }

    #[test]
    fn quoted_identifiers_escape_embedded_quotes() {
        assert_eq!(quote_ident("events"), "\"events\"");
        assert_eq!(quote_ident("we\"ird"), "\"we\"\"ird\"");
    }

    #[test]
    fn canonical_fields_are_unambiguous() {
        let mut a = Vec::new();
        put_canonical_field(&mut a, "ab");
        put_canonical_field(&mut a, "c");
        let mut b = Vec::new();
        put_canonical_field(&mut b, "a");
        put_canonical_field(&mut b, "bc");
        assert_ne!(a, b);
    }
}
