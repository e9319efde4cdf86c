//! One serving write of each kind, done the way the relay's serving path does it: rows with plain
//! SQL (the write-fence triggers refuse them with SQLSTATE BZ001 once the community is fenced,
//! BZ006 once their user is), external writes under their own serving-write lease (`acquire` →
//! `protect` → `finish`).
//!
//! A write made as a user (a plan with authors) is what that user's client would cause: an event
//! they author, a media upload (its `buzz.media_uploads` row naming them, then the
//! content-addressed object `media/{community}/{sha256}`, under a per-user lease) or a per-user
//! cache key `buzz:{community}:user:{pubkey}:served:{run}:{seq}` set under a per-user lease.

use std::future::Future;

use sha2::{Digest, Sha256};
use sqlx::Postgres;
use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use uuid::Uuid;

use crate::{content_hash, writer_key};
use activities::redis::Cache;
use activities::s3::{ObjectStore, ObjectVersionRef};
use activities::store::{Store, is_fenced_write};
use activities::taxonomy::PrefixRoot;
use serving::{ServingLeaseConfig, acquire_serving_write_with, acquire_user_serving_write_with};

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
    /// Users to write as (see [`crate::simulator::SimulationPlan::authors`]); empty: anonymous.
    pub authors: Vec<String>,
}

/// A fresh 64-hex value (content hash, event id, pubkey).
fn fresh_hex64() -> String {
    hex::encode(Sha256::digest(Uuid::new_v4().as_bytes()))
}

impl HostWriter {
    /// The user the `seq`-th write is made as, when the plan has authors.
    pub fn author(&self, seq: u64) -> Option<&str> {
        if self.authors.is_empty() {
            return None;
        }
        let index = usize::try_from(seq % self.authors.len() as u64).unwrap_or_default();
        self.authors.get(index).map(String::as_str)
    }

    /// Performs the `seq`-th write, of `kind`. `existing_key` is the key a [`WriteKind::NewVersion`]
    /// write adds a version to (an earlier write's key); without one it writes a version of the
    /// community's first seeded media key.
    pub async fn write(
        &self,
        kind: WriteKind,
        seq: u64,
        existing_key: Option<String>,
    ) -> WriteOutcome {
        if let Some(author) = self.author(seq) {
            return match kind {
                WriteKind::Row => self.insert_event_as(author, seq).await,
                WriteKind::NewObject | WriteKind::NewVersion => {
                    self.upload_as(kind, author, seq).await
                }
                WriteKind::CacheKey => self.set_user_key(author, seq).await,
            };
        }
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
        if (seq / 4).is_multiple_of(2) {
            let insert = self.event_insert(&key, fresh_hex64(), seq);
            return self.run_insert(RowTable::Events, key, insert).await;
        }
        let insert = sqlx::query(
            "INSERT INTO buzz.memberships (community_id, pubkey, role) VALUES ($1, $2, 'member')",
        )
        .bind(self.community_id)
        .bind(key.clone());
        self.run_insert(RowTable::Memberships, key, insert).await
    }

    /// Inserts an event authored by `author` with plain SQL.
    async fn insert_event_as(&self, author: &str, seq: u64) -> WriteOutcome {
        let key = fresh_hex64();
        let insert = self.event_insert(&key, author.to_owned(), seq);
        self.run_insert(RowTable::Events, key, insert).await
    }

    /// The insert of event `key` by `pubkey`, the community's message `seq`.
    fn event_insert(
        &self,
        key: &str,
        pubkey: String,
        seq: u64,
    ) -> Query<'static, Postgres, PgArguments> {
        sqlx::query(
            "INSERT INTO buzz.events (id, community_id, pubkey, kind, content) \
             VALUES ($1, $2, $3, 1, $4)",
        )
        .bind(key.to_owned())
        .bind(self.community_id)
        .bind(pubkey)
        .bind(format!("served message {seq}"))
    }

    /// Runs `insert` of row `key` of `table`: admitted, refused by the fence, or unconfirmed.
    async fn run_insert(
        &self,
        table: RowTable,
        key: String,
        insert: Query<'_, Postgres, PgArguments>,
    ) -> WriteOutcome {
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

    /// Uploads one media object as `author`: puts the content-addressed version, then records the
    /// upload row naming them, both under one per-user lease.
    async fn upload_as(&self, kind: WriteKind, author: &str, seq: u64) -> WriteOutcome {
        let body = format!(
            "served upload {seq} by {author} in {} ({})",
            self.community_id, self.run_tag
        )
        .into_bytes();
        let sha256 = hex::encode(Sha256::digest(&body));
        let key = writer_key(PrefixRoot::Media, self.community_id, &sha256);
        let bytes = i64::try_from(body.len()).unwrap_or(i64::MAX);
        // Row first, then the object (the relay's upload protocol, docs/data-model.md "Media
        // decisions"): an object whose row was never recorded could outlive its uploader's
        // deletion, a row whose object never landed is purged with the user's rows.
        let upload = async {
            sqlx::query(
                "INSERT INTO buzz.media_uploads \
                 (id, community_id, sha256, object_key, bytes, uploader_pubkey) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(Uuid::new_v4())
            .bind(self.community_id)
            .bind(&sha256)
            .bind(&key)
            .bind(bytes)
            .bind(author)
            .execute(self.store.pool())
            .await
            .map_err(|error| format!("media upload row: {error}"))?;
            self.objects
                .put_object(&key, body)
                .await
                .map_err(|error| format!("media put: {error}"))
        };
        self.object_under_lease(kind, Some(author), &key, upload)
            .await
    }

    /// Sets one per-user Redis key of the community namespace as `author`, under a per-user
    /// lease.
    async fn set_user_key(&self, author: &str, seq: u64) -> WriteOutcome {
        let key = format!(
            "buzz:{}:user:{author}:served:{}:{seq}",
            self.community_id.hyphenated(),
            self.run_tag
        );
        let value = format!("served session {seq} of {author}");
        self.key_under_lease(Some(author), &key, &value).await
    }

    /// Puts one object version under a lease.
    async fn put_object(&self, kind: WriteKind, key: String, seq: u64) -> WriteOutcome {
        let body = format!("served {kind:?} {seq} of {}", self.community_id).into_bytes();
        let put = self.objects.put_object(&key, body);
        self.object_under_lease(kind, None, &key, put).await
    }

    /// Sets one Redis key of the community namespace under a lease.
    async fn set_key(&self, seq: u64) -> WriteOutcome {
        let key = format!(
            "buzz:{}:served:{}:{seq}",
            self.community_id.hyphenated(),
            self.run_tag
        );
        let value = format!("served session {seq}");
        self.key_under_lease(None, &key, &value).await
    }

    /// Runs `write`, which puts a version of object `key` and answers its version id, under a
    /// lease (a per-user one when made as `author`).
    async fn object_under_lease<E: std::fmt::Display>(
        &self,
        kind: WriteKind,
        author: Option<&str>,
        key: &str,
        write: impl Future<Output = Result<String, E>>,
    ) -> WriteOutcome {
        let unconfirmed = UnconfirmedWrite::ObjectKey(key.to_owned());
        self.under_lease(kind, author, write, unconfirmed, |version_id| {
            AdmittedWrite::Object(ObjectVersionRef {
                key: key.to_owned(),
                version_id,
            })
        })
        .await
    }

    /// Sets Redis `key` to `value` under a lease (a per-user one when made as `author`).
    async fn key_under_lease(&self, author: Option<&str>, key: &str, value: &str) -> WriteOutcome {
        let set = self.cache.set(key, value.as_bytes());
        let unconfirmed = UnconfirmedWrite::Key(key.to_owned());
        self.under_lease(WriteKind::CacheKey, author, set, unconfirmed, |()| {
            AdmittedWrite::Key(key.to_owned())
        })
        .await
    }

    /// Runs `write` as one admitted serving write: refused before it starts once the community
    /// (or, for a write made as `author`, that user) is quiescing or fenced; admitted only if the
    /// lease held from before it started until it was released after it finished. A failure once
    /// the write was sent is `unconfirmed`.
    async fn under_lease<T, E: std::fmt::Display>(
        &self,
        kind: WriteKind,
        author: Option<&str>,
        write: impl Future<Output = Result<T, E>>,
        unconfirmed: UnconfirmedWrite,
        admitted: impl FnOnce(T) -> AdmittedWrite,
    ) -> WriteOutcome {
        let unsure = |error: String| WriteOutcome::Unconfirmed {
            error,
            write: unconfirmed.clone(),
        };
        let acquired = match author {
            Some(author) => {
                acquire_user_serving_write_with(
                    &self.store,
                    self.community_id,
                    author,
                    kind.lease_operation(),
                    &self.lease,
                )
                .await
            }
            None => {
                acquire_serving_write_with(
                    &self.store,
                    self.community_id,
                    kind.lease_operation(),
                    &self.lease,
                )
                .await
            }
        };
        let guard = match acquired {
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
