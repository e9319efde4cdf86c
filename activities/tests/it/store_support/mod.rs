//! Shared fixtures for the store and serving-lease tests: a migrated store on the real local
//! PostgreSQL, fresh communities with unique hosts (tests run in parallel), and requests driven
//! to a given stage through the store's own calls.
#![allow(dead_code)]

pub use activities::store::ChunkTail;
pub use testkit::operators;
pub mod private_db;
pub mod request_flow;

use activities::serving::{ServingError, ServingWriteLease};
use activities::store::{
    AuditEvent, CatalogInventory, ChunkAck, ChunkProgress, Community, ExecToken, FenceStatus,
    FrozenInventory, Request, RequestError, Stage, Store, StoreError, StoreResult,
    is_append_only_refusal,
};
use activities::taxonomy::{KeyStreamDigest, ManifestEntry, VersionKind, tenant_prefixes};
use std::time::Duration;
use uuid::Uuid;
use workflows::community::contracts::{
    AbortRequest, ApproveRequest, ManifestSummary, PrefixSummary, RegisterInput,
};
use workflows::operator::{Action, Kind};

/// The requester and approver used by fixtures (two different people).
pub const REQUESTER: &str = "operator-a";
pub const APPROVER: &str = "operator-b";

/// How long the fixtures' serving-write leases last.
pub const LEASE_TTL: Duration = Duration::from_secs(30);

/// How many serving-write leases of `community_id` are live.
pub async fn live_leases(store: &Store, community_id: Uuid) -> u64 {
    store
        .live_serving_writes(community_id)
        .await
        .expect("live leases")
        .count
}

/// Connections of each store the fixtures open (tests run in parallel on one server).
const POOL: u32 = 4;

/// A store as the worker role (DATABASE_URL), on a migrated schema.
pub async fn worker_store() -> Store {
    testkit::role_stores::worker_store(POOL).await
}

/// A store as the serving role (BUZZ_SERVING_DATABASE_URL), on a migrated schema: what a relay's
/// serving path connects as.
pub async fn serving_store() -> Store {
    testkit::role_stores::serving_store(POOL).await
}

/// A store on the local PostgreSQL as the schema owner (BUZZ_OWNER_DATABASE_URL), with the
/// schema migrated: fixtures, inspection and deliberate tampering. Panics, naming the server and
/// how to start it, when PostgreSQL is unreachable.
pub async fn store() -> Store {
    testkit::role_stores::owner_store(POOL).await
}

/// A store as each role: the schema owner, the worker and the serving role, in that order.
pub async fn every_role() -> (Store, Store, Store) {
    (store().await, worker_store().await, serving_store().await)
}

/// A fresh community under a unique host.
pub async fn community(store: &Store) -> Community {
    let host = format!("t-{}.test.example", Uuid::new_v4().simple());
    demo::create_community(store, &host)
        .await
        .expect("create community")
}

/// A request in the state one stage of a test needs, with the token of its latest claim.
pub struct Fixture {
    pub store: Store,
    pub community: Community,
    pub request_id: Uuid,
    pub token: ExecToken,
}

impl Fixture {
    /// The request row.
    pub async fn request(&self) -> Request {
        must(self.store.get_request(self.request_id), "get request").await
    }

    /// An approval of `digest` for this request, signed by `approved_by`'s test key.
    pub async fn signed_approval(&self, approved_by: &str, digest: &str) -> ApproveRequest {
        let host = &self.community.host;
        signed_approval(&self.store, self.request_id, host, approved_by, digest).await
    }

    /// The request's community stage.
    pub async fn stage(&self) -> Stage {
        self.request()
            .await
            .community_stage()
            .expect("community stage")
    }

    /// Claims the request again (making every older token stale).
    pub async fn claim(&mut self, allowed: &[Stage]) -> ExecToken {
        self.token = must(self.store.claim(self.request_id, allowed), "claim").await;
        self.token.clone()
    }

    /// Begins quiescing the community's serving writes under the fixture's token; returns the
    /// quiesce generation.
    pub async fn quiesce(&self) -> i64 {
        must(self.store.begin_quiescing(&self.token), "quiesce").await
    }

    /// The community's fence, if it has one.
    pub async fn fence_status(&self) -> Option<FenceStatus> {
        must(self.store.fence_status(self.community.id), "fence status").await
    }

    /// A serving-write lease on the community for `operation`, held by `owner` for
    /// [`LEASE_TTL`].
    pub async fn acquire_lease(
        &self,
        operation: &str,
        owner: &str,
    ) -> Result<ServingWriteLease, ServingError> {
        self.store
            .serving()
            .acquire_serving_write_lease(self.community.id, operation, owner, LEASE_TTL)
            .await
    }

    /// [`Fixture::acquire_lease`], which must be admitted.
    pub async fn lease(&self, operation: &str, owner: &str) -> ServingWriteLease {
        must(self.acquire_lease(operation, owner), "lease admitted").await
    }

    /// How many serving-write leases of the community are live.
    pub async fn live_leases(&self) -> u64 {
        live_leases(&self.store, self.community.id).await
    }

    /// Marks the irreversible point under the fixture's token.
    pub async fn mark_irreversible(&self) -> chrono::DateTime<chrono::Utc> {
        must(
            self.store.mark_irreversible(&self.token),
            "irreversible point",
        )
        .await
    }

    /// Announces a destructive call under the fixture's token; whether the irreversible point
    /// was already marked (so nothing is left pending).
    pub async fn begin_destructive_call(&self) -> bool {
        must(self.store.begin_destructive_call(&self.token), "begin call").await
    }

    /// Withdraws the pending destructive call, recording `detail`; whether one was withdrawn.
    pub async fn withdraw_destructive_call(&self, detail: serde_json::Value) -> bool {
        let withdrawn = self.store.withdraw_destructive_call(&self.token, detail);
        must(withdrawn, "withdraw call").await
    }

    /// Asks to lift the fence and end the request aborted (see `Store::unfence_for_abort`).
    pub async fn abort(&self, abort: &AbortRequest) -> StoreResult<i64> {
        self.store.unfence_for_abort(self.request_id, abort).await
    }

    /// Asserts that `abort` is refused because the irreversible point was marked, and that the
    /// request stays `drained`.
    pub async fn assert_abort_refused_past_the_marker(&self, abort: &AbortRequest) {
        let refused = self.abort(abort).await;
        assert_matches!(
            refused,
            Err(StoreError::Request(
                RequestError::IrreversibleStarted { .. }
            ))
        );
        assert_eq!(self.stage().await, Stage::Drained);
    }

    /// Stamps chunk `chunk_no` with `ack` under the fixture's token; whether this call stamped it.
    pub async fn stamp(&self, chunk_no: u32, ack: ChunkAck) -> bool {
        let stamped = self.store.stamp_chunk(&self.token, chunk_no, ack);
        must(stamped, "stamp chunk").await
    }

    /// The request's manifest chunks: how many and how many versions are stamped.
    pub async fn chunk_progress(&self) -> ChunkProgress {
        must(self.store.chunk_progress(self.request_id), "chunk progress").await
    }

    /// The request's audit trail, oldest first.
    pub async fn audit_events(&self) -> Vec<AuditEvent> {
        must(self.store.audit_events(self.request_id), "audit events").await
    }

    /// The request's audit events named `name`, oldest first.
    pub async fn events_named(&self, name: &str) -> Vec<AuditEvent> {
        let mut events = self.audit_events().await;
        events.retain(|event| event.event == name);
        events
    }
}

/// The value of a fixture's store call, which must succeed (a panic names the call when not).
async fn must<T, E: std::fmt::Debug>(call: impl Future<Output = Result<T, E>>, what: &str) -> T {
    call.await
        .unwrap_or_else(|error| panic!("{what}: {error:?}"))
}

/// A fresh community with `rows` demo rows per table.
pub async fn seeded_community(store: &Store, rows: u64) -> Community {
    let community = community(store).await;
    if rows > 0 {
        demo::seed_rows(store, community.id, rows)
            .await
            .expect("seed rows");
    }
    community
}

pub use testkit::private_db::exec;

/// Runs one statement on `conn` (a transaction's, so that what it creates is seen by no other
/// test), panicking with the statement when it fails.
pub async fn exec_in(conn: &mut sqlx::PgConnection, sql: &str) {
    sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The one value `sql` selects for `id` (bound as `$1`), read through `store`.
pub async fn scalar_for<T>(store: &Store, sql: &'static str, id: Uuid) -> T
where
    T: Send + Unpin + for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    sqlx::query_scalar(sql)
        .bind(id)
        .fetch_one(store.pool())
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Asserts that no row of `community_id` is left in any tenant table.
pub async fn assert_no_rows_left(store: &Store, community_id: Uuid) {
    let left = store
        .count_community_rows(community_id)
        .await
        .expect("count the community's rows");
    assert!(left.iter().all(|count| count.rows == 0), "{left:?}");
}

/// Asserts that `store` refuses `sql` (with `key` bound as `$1`) as a change to an append-only
/// table.
pub async fn assert_append_only<'q, K>(store: &Store, sql: &'q str, key: K)
where
    K: 'q + Send + sqlx::Encode<'q, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    let refused = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(key)
        .execute(store.pool())
        .await
        .expect_err(sql);
    assert!(is_append_only_refusal(&refused), "{sql}: {refused}");
}

/// Runs `sql` on `store`, which must refuse it: the SQLSTATE of the refusal, and the refusal.
pub async fn refused_sqlstate(store: &Store, sql: &str) -> (Option<String>, sqlx::Error) {
    let refused = sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(store.pool())
        .await
        .expect_err("the statement must be refused");
    let code = refused
        .as_database_error()
        .and_then(|e| e.code())
        .map(|c| c.into_owned());
    (code, refused)
}

/// Asserts that `actual` seconds are `expected` seconds, give or take the test's own time.
pub fn assert_about(actual: u64, expected: u64, what: &str) {
    assert!(
        (expected..=expected + 5).contains(&actual),
        "{what}: {actual} s, expected {expected} s (+5 s for the test's own time)"
    );
}

/// Registers a request for a fresh community (with `rows` demo rows per table) and claims it.
pub async fn submitted(store: &Store, rows: u64) -> Fixture {
    let community = seeded_community(store, rows).await;
    register_and_claim(store, &community, "test").await
}

/// Registers a request for `community`, signed by the requester giving `reason`, and claims it
/// at `submitted`.
pub async fn register_and_claim(store: &Store, community: &Community, reason: &str) -> Fixture {
    let request_id = Uuid::new_v4();
    store
        .register_community_request(
            &signed_registration(store, request_id, &community.host, REQUESTER, reason).await,
            "store-test/register",
        )
        .await
        .expect("register request");
    let token = store
        .claim(request_id, &[Stage::Submitted])
        .await
        .expect("claim");
    Fixture {
        store: store.clone(),
        community: community.clone(),
        request_id,
        token,
    }
}

/// A registration of `host` signed by `requested_by`'s test key.
pub async fn signed_registration(
    store: &Store,
    request_id: Uuid,
    host: &str,
    requested_by: &str,
    reason: &str,
) -> RegisterInput {
    let requester = operators::operator_in(store.pool(), requested_by).await;
    RegisterInput {
        request_id,
        workflow_id: format!("community-deletion-{request_id}"),
        host: host.to_owned(),
        requested_by: requested_by.into(),
        reason: Some(reason.into()),
        signed: Some(requester.sign(Action::Submit, Kind::Community, request_id, host, None)),
    }
}

/// An approval of `digest` signed by `approved_by`'s test key.
pub async fn signed_approval(
    store: &Store,
    request_id: Uuid,
    host: &str,
    approved_by: &str,
    digest: &str,
) -> ApproveRequest {
    let approver = operators::operator_in(store.pool(), approved_by).await;
    ApproveRequest {
        approved_by: approved_by.into(),
        digest: digest.into(),
        note: None,
        signed: Some(approver.sign(
            Action::Approve,
            Kind::Community,
            request_id,
            host,
            Some(digest),
        )),
    }
}

/// What DeleteObjects acknowledged of a chunk: `deleted` versions deleted and `already_missing`
/// already gone.
pub fn chunk_ack(deleted: u64, already_missing: u64) -> ChunkAck {
    ChunkAck {
        deleted,
        already_missing,
    }
}

/// The empty digest of a prefix without versions.
pub fn empty_prefix(prefix: String) -> PrefixSummary {
    let (keys_digest, versions) = KeyStreamDigest::new().finish();
    PrefixSummary {
        prefix,
        versions,
        bytes: 0,
        keys_digest,
    }
}

/// The inventory of the community as the inventory activity would freeze it (no objects).
pub async fn inventory_of(store: &Store, community: &Community) -> FrozenInventory {
    let catalog: CatalogInventory = store
        .catalog_scan(community.id)
        .await
        .expect("catalog scan");
    let prefixes = tenant_prefixes(community.id)
        .into_iter()
        .map(empty_prefix)
        .collect();
    FrozenInventory::new(community.id, community.host.clone(), catalog, prefixes, 0)
}

/// Frozen inventory; returns the fixture and the digest.
pub async fn inventoried(store: &Store, rows: u64) -> (Fixture, String) {
    let fixture = submitted(store, rows).await;
    let inventory = inventory_of(store, &fixture.community).await;
    let digest = store
        .freeze_inventory(&fixture.token, &inventory)
        .await
        .expect("freeze inventory");
    (fixture, digest)
}

/// Approved by a second operator, claimed at `approved`.
pub async fn approved(store: &Store, rows: u64) -> Fixture {
    let (mut fixture, digest) = inventoried(store, rows).await;
    store
        .record_approval(
            fixture.request_id,
            &fixture.signed_approval(APPROVER, &digest).await,
            "store-test/approve",
        )
        .await
        .expect("approve");
    fixture.claim(&[Stage::Approved]).await;
    fixture
}

/// Quiesced and fenced, claimed at `fenced`.
pub async fn fenced(store: &Store, rows: u64) -> Fixture {
    let mut fixture = approved(store, rows).await;
    store
        .begin_quiescing(&fixture.token)
        .await
        .expect("quiesce");
    store.fence(&fixture.token).await.expect("fence");
    fixture.claim(&[Stage::Fenced]).await;
    fixture
}

/// `n` media versions of the community, encoded as manifest entries.
pub fn media_entries(community_id: Uuid, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let hash = format!("{:064x}", i + 1);
            let key = format!("media/{}/{hash}", community_id.hyphenated());
            ManifestEntry::new(key, format!("v{i}"), VersionKind::Object).encode()
        })
        .collect()
}

/// The manifest summary for `entries` under the media prefix, split into chunks of `chunk_size`.
pub fn media_manifest(
    community_id: Uuid,
    entries: &[String],
    chunk_size: usize,
) -> ManifestSummary {
    tenant_manifest(community_id, [entries, &[], &[]], chunk_size)
}

/// The manifest summary for the entries of each tenant prefix (media, thumbs, _meta), each
/// prefix split into chunks of `chunk_size`.
pub fn tenant_manifest(
    community_id: Uuid,
    entries: [&[String]; 3],
    chunk_size: usize,
) -> ManifestSummary {
    let mut chunks = 0;
    let mut total = 0;
    let mut prefixes = Vec::new();
    for (prefix, entries) in tenant_prefixes(community_id).into_iter().zip(entries) {
        let mut digest = KeyStreamDigest::new();
        for entry in entries {
            digest.fold_encoded(entry);
        }
        let (keys_digest, versions) = digest.finish();
        chunks += entries.len().div_ceil(chunk_size) as u64;
        total += versions;
        prefixes.push(PrefixSummary {
            prefix,
            versions,
            bytes: 0,
            keys_digest,
        });
    }
    ManifestSummary {
        chunks,
        versions: total,
        prefixes,
    }
}

/// `n` versions of the community under `family` (`media`, `thumbs` or `_meta`), encoded as
/// manifest entries.
pub fn family_entries(community_id: Uuid, family: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let hash = format!("{:064x}", i + 1);
            let suffix = match family {
                "thumbs" => ".webp",
                "_meta" => ".json",
                _ => "",
            };
            let key = format!("{family}/{}/{hash}{suffix}", community_id.hyphenated());
            ManifestEntry::new(key, format!("v{i}"), VersionKind::Object).encode()
        })
        .collect()
}

/// Manifest of `versions` media versions in chunks of `chunk_size`, bound; claimed at `drained`.
pub async fn drained(store: &Store, rows: u64, versions: usize, chunk_size: usize) -> Fixture {
    let mut fixture = fenced(store, rows).await;
    let entries = media_entries(fixture.community.id, versions);
    let [media, _, _] = tenant_prefixes(fixture.community.id);
    for (chunk_no, chunk) in entries.chunks(chunk_size).enumerate() {
        store
            .append_manifest_chunk(
                &fixture.token,
                chunk_no as u32,
                &media,
                chunk,
                &ChunkTail::default(),
            )
            .await
            .expect("append chunk");
    }
    let summary = media_manifest(fixture.community.id, &entries, chunk_size);
    store
        .bind_destructive_manifest(&fixture.token, &summary)
        .await
        .expect("bind manifest");
    fixture.claim(&[Stage::Drained]).await;
    fixture
}
