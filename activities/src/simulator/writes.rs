//! One serving write of each kind, done the way the relay's serving path does it: rows with plain
//! SQL (the write-fence trigger refuses them with SQLSTATE BZ001 once fenced), external writes
//! under their own serving-write lease (`acquire` → `protect` → `finish`).

use std::future::Future;

use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::cache::Cache;
use crate::demo::{content_hash, writer_key};
use crate::objects::{ObjectStore, ObjectVersionRef};
use crate::serving::{ServingLeaseConfig, acquire_serving_write_with};
use crate::store::{Store, is_fenced_write};
use crate::taxonomy::PrefixRoot;

use super::report::{
    AdmittedRow, AdmittedWrite, RowTable, UnconfirmedWrite, WriteKind, WriteOutcome,
};

/// Everything one host's writes need. Cheap to clone: every store client shares its pool.
#[derive(Debug, Clone)]
pub struct HostWriter {
    /// Postgres (rows and leases).
    pub store: Store,
    /// The bucket.
    pub objects: ObjectStore,
    /// Redis.
    pub cache: Cache,
    /// Lease timing and owner of this serving process.
    pub lease: ServingLeaseConfig,
    /// The community written to.
    pub community_id: Uuid,
    /// Distinguishes this run's Redis keys from any other run's.
    pub run_tag: String,
}

/// A fresh 64-hex value (content hash, event id, pubkey).
fn fresh_hex64() -> String {
    hex::encode(Sha256::digest(Uuid::new_v4().as_bytes()))
}

impl HostWriter {
    /// Performs the `seq`-th write, of `kind`. `existing_key` is the key a [`WriteKind::NewVersion`]
    /// write adds a version to (an earlier write's key); without one it writes a version of the
    /// community's first seeded media key.
    pub async fn write(
        &self,
        kind: WriteKind,
        seq: u64,
        existing_key: Option<String>,
    ) -> WriteOutcome {
        match kind {
            WriteKind::Row => self.insert_row(seq).await,
            WriteKind::NewObject => {
                let root = PrefixRoot::ALL[usize::try_from(seq / 4 % 3).unwrap_or_default()];
                let key = writer_key(root, self.community_id, &fresh_hex64());
                self.put_object(kind, key, seq).await
            }
            WriteKind::NewVersion => {
                let key = existing_key.unwrap_or_else(|| {
                    writer_key(
                        PrefixRoot::Media,
                        self.community_id,
                        &content_hash(self.community_id, 0),
                    )
                });
                self.put_object(kind, key, seq).await
            }
            WriteKind::CacheKey => self.set_key(seq).await,
        }
    }

    /// Inserts an event or a membership (alternately) with plain SQL.
    async fn insert_row(&self, seq: u64) -> WriteOutcome {
        let key = fresh_hex64();
        let (table, insert) = if (seq / 4).is_multiple_of(2) {
            (
                RowTable::Events,
                sqlx::query(
                    "INSERT INTO buzz.events (id, community_id, pubkey, kind, content) \
                     VALUES ($1, $2, $3, 1, $4)",
                )
                .bind(key.clone())
                .bind(self.community_id)
                .bind(fresh_hex64())
                .bind(format!("served message {seq}")),
            )
        } else {
            (
                RowTable::Memberships,
                sqlx::query(
                    "INSERT INTO buzz.memberships (community_id, pubkey, role) \
                     VALUES ($1, $2, 'member')",
                )
                .bind(self.community_id)
                .bind(key.clone()),
            )
        };
        let row = AdmittedRow { table, key };
        match insert.execute(self.store.pool()).await {
            Ok(_) => WriteOutcome::Admitted(AdmittedWrite::Row(row)),
            Err(error) if is_fenced_write(&error) => WriteOutcome::Refused,
            Err(error) => WriteOutcome::Unconfirmed {
                error: format!("row insert: {error}"),
                write: UnconfirmedWrite::Row(row),
            },
        }
    }

    /// Puts one object version under a lease.
    async fn put_object(&self, kind: WriteKind, key: String, seq: u64) -> WriteOutcome {
        let body = format!("served {kind:?} {seq} of {}", self.community_id).into_bytes();
        let put = self.objects.put_object(&key, body);
        let unconfirmed = UnconfirmedWrite::ObjectKey(key.clone());
        self.under_lease(kind, put, unconfirmed, |version_id| {
            AdmittedWrite::Object(ObjectVersionRef {
                key: key.clone(),
                version_id,
            })
        })
        .await
    }

    /// Sets one Redis key of the community namespace under a lease.
    async fn set_key(&self, seq: u64) -> WriteOutcome {
        let key = format!(
            "buzz:{}:served:{}:{seq}",
            self.community_id.hyphenated(),
            self.run_tag
        );
        let value = format!("served session {seq}");
        let set = self.cache.set(&key, value.as_bytes());
        let unconfirmed = UnconfirmedWrite::Key(key.clone());
        self.under_lease(WriteKind::CacheKey, set, unconfirmed, |()| {
            AdmittedWrite::Key(key.clone())
        })
        .await
    }

    /// Runs `write` as one admitted serving write: refused before it starts once the community is
    /// quiescing or fenced; admitted only if the lease held from before it started until it was
    /// released after it finished. A failure once the write was sent is `unconfirmed`.
    async fn under_lease<T, E: std::fmt::Display>(
        &self,
        kind: WriteKind,
        write: impl Future<Output = Result<T, E>>,
        unconfirmed: UnconfirmedWrite,
        admitted: impl FnOnce(T) -> AdmittedWrite,
    ) -> WriteOutcome {
        let unsure = |error: String| WriteOutcome::Unconfirmed {
            error,
            write: unconfirmed.clone(),
        };
        let guard = match acquire_serving_write_with(
            &self.store,
            self.community_id,
            kind.lease_operation(),
            &self.lease,
        )
        .await
        {
            Ok(guard) => guard,
            Err(error) if error.is_refused_because_fenced() => return WriteOutcome::Refused,
            Err(error) => return WriteOutcome::Failed(error.to_string()),
        };
        let written = match guard.protect(write).await {
            Ok(Ok(value)) => value,
            Ok(Err(error)) => {
                // The write failed on its own; the lease is released either way.
                let _ = guard.finish().await;
                return unsure(error.to_string());
            }
            Err(error) => return unsure(error.to_string()),
        };
        match guard.finish().await {
            Ok(()) => WriteOutcome::Admitted(admitted(written)),
            Err(error) => unsure(error.to_string()),
        }
    }
}
