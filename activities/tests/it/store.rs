//! The exclusion-proof store against a real PostgreSQL (`bash deploy/local/up && source
//! .state/env`). Every test creates its own communities under unique hosts, so tests run in
//! parallel without seeing each other's rows.

use crate::store_support;
use activities::store::{ApprovalError, CatalogError, FenceError, ManifestError, RequestError};

use std::time::Duration;

use activities::failure::{Classified, Severity};
use activities::identity::IdentityError;
use activities::serving::ServingError;
use activities::store::certificates::CertificateStoreError;
use activities::store::{
    FenceState, RequestFilter, Stage, StoreError, TaxonomySweepInput, catalog_scan_in,
    is_fenced_write,
};
use activities::taxonomy::{
    KeyStreamDigest, ListingLane, ManifestEntry, VersionKind, listing_lanes, tenant_prefixes,
    whole_prefix_lanes,
};
use std::collections::BTreeSet;
use store_support::*;
use uuid::Uuid;
use workflows::approval::TwoPersonRefusal;
use workflows::community::contracts::{
    AbortRequest, ApproveRequest, EventInput, RegisterInput, RequestEvent, UnblockRequest,
};
use workflows::operator::{Action, Kind, SignatureRefusal};

/// A registration signed by `requested_by`'s test key (over the canonical, lowercase host the
/// store binds the signature to).
async fn register_input(request_id: Uuid, host: &str, requested_by: &str) -> RegisterInput {
    let owner = store().await;
    let mut input =
        signed_registration(&owner, request_id, &host.to_lowercase(), requested_by, "-").await;
    input.host = host.to_owned();
    input.reason = None;
    input
}

/// The consumer the store tests consume signatures as.
const CONSUMER: &str = "store-test/activity";

/// A worker cut off inside a transaction must not hold its row locks for ever: every session of
/// the pool carries the server-side idle-in-transaction limit (the chaos run's stalled claim).
#[tokio::test]
async fn every_pooled_session_is_ended_by_the_server_when_idle_in_a_transaction() {
    for store in [worker_store().await, serving_store().await, store().await] {
        let mut sessions = Vec::new();
        for _ in 0..3 {
            let mut conn = store.pool().acquire().await.expect("a pooled session");
            let limit: String = sqlx::query_scalar("SHOW idle_in_transaction_session_timeout")
                .fetch_one(&mut *conn)
                .await
                .expect("SHOW");
            assert_eq!(limit, "1min");
            sessions.push(conn);
        }
    }
}

#[tokio::test]
async fn schema_is_current_after_migrate() {
    let store = store().await;
    store.migrate().await.expect("migrating again is a no-op");
    store.check_schema_current().await.expect("schema current");
}

#[tokio::test]
async fn stale_generation_cannot_advance_a_stage() {
    let store = store().await;
    let mut fixture = submitted(&store, 2).await;
    let stale = fixture.token.clone();
    let current = fixture.claim(&[Stage::Submitted]).await;
    let inventory = inventory_of(&store, &fixture.community).await;

    let refused = store.freeze_inventory(&stale, &inventory).await;
    match refused {
        Err(StoreError::Request(RequestError::StaleGeneration {
            expected, actual, ..
        })) => {
            assert_eq!(expected, stale.exec_generation);
            assert_eq!(actual, current.exec_generation);
        }
        other => panic!("stale freeze must be refused, got {other:?}"),
    }
    assert_eq!(fixture.stage().await, Stage::Submitted);
    assert_eq!(fixture.request().await.inventory_digest, None);

    let digest = store
        .freeze_inventory(&current, &inventory)
        .await
        .expect("current token");
    assert_eq!(fixture.stage().await, Stage::Inventoried);
    assert_eq!(fixture.request().await.inventory_digest, Some(digest));
}

#[tokio::test]
async fn a_stage_advance_is_a_compare_and_set_from_the_expected_stage() {
    let store = store().await;
    let fixture = submitted(&store, 0).await;
    let inventory = inventory_of(&store, &fixture.community).await;
    store
        .freeze_inventory(&fixture.token, &inventory)
        .await
        .expect("freeze");

    // Same (current) token, but the request already left `submitted`.
    let again = store.freeze_inventory(&fixture.token, &inventory).await;
    assert_matches!(
        again,
        Err(StoreError::Request(RequestError::WrongStage { .. }))
    );
    let skip = fixture
        .advance(Stage::PostgresPurged, Stage::CachePurged)
        .await;
    assert_matches!(
        skip,
        Err(StoreError::Request(RequestError::WrongStage { .. }))
    );
    let dedicated = fixture.advance(Stage::Inventoried, Stage::Approved).await;
    assert_matches!(
        dedicated,
        Err(StoreError::Request(
            RequestError::TransitionNotGeneric { .. }
        ))
    );
    assert_eq!(fixture.stage().await, Stage::Inventoried);
}

#[tokio::test]
async fn stale_generation_cannot_stamp_a_chunk() {
    let store = store().await;
    let mut fixture = drained(&store, 0, 25, 10).await;
    let stale = fixture.token.clone();
    store
        .mark_irreversible(&stale)
        .await
        .expect("irreversible point");
    let current = fixture.claim(&[Stage::Drained]).await;

    let ack = chunk_ack(10, 0);
    let refused = store.stamp_chunk(&stale, 0, ack).await;
    assert_matches!(
        refused,
        Err(StoreError::Request(RequestError::StaleGeneration { .. }))
    );
    let progress = fixture.chunk_progress().await;
    assert_eq!(progress.chunks_stamped, 0);

    assert!(
        store
            .stamp_chunk(&current, 0, ack)
            .await
            .expect("current token stamps")
    );
    let progress = fixture.chunk_progress().await;
    assert_eq!((progress.chunks_total, progress.chunks_stamped), (3, 1));
    assert_eq!(
        (progress.versions_total, progress.versions_stamped),
        (25, 10)
    );
}

#[tokio::test]
async fn no_chunk_is_stamped_twice() {
    let store = store().await;
    let fixture = drained(&store, 0, 12, 10).await;
    fixture.mark_irreversible().await;
    let ack = chunk_ack(7, 3);
    assert!(fixture.stamp(0, ack).await);
    assert!(!fixture.stamp(0, ack).await);

    let progress = fixture.chunk_progress().await;
    assert_eq!(
        (progress.chunks_stamped, progress.versions_stamped),
        (1, 10)
    );
    let stamps = fixture.events_named("chunk_stamped").await;
    assert_eq!(
        stamps.len(),
        1,
        "a replayed stamp is not audited as a second deletion"
    );
}

#[tokio::test]
async fn a_grouped_stamp_stamps_each_answered_chunk_once_with_its_own_chained_event() {
    use activities::store::ChunkSet;
    let store = store().await;
    let fixture = drained(&store, 0, 30, 10).await;
    fixture.mark_irreversible().await;
    let full = chunk_ack(10, 0);
    assert!(fixture.stamp(1, full).await);
    // Out of order, with chunk 1 already stamped and chunk 2 named twice.
    let group = [(2, full), (0, full), (1, full), (2, full)];
    let stamped = store
        .stamp_chunks_of(&fixture.token, ChunkSet::Frozen, &group)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        stamped, 2,
        "chunk 1 was stamped before, chunk 2 counts once"
    );
    let progress = fixture.chunk_progress().await;
    assert_eq!(
        (progress.chunks_stamped, progress.versions_stamped),
        (3, 30)
    );
    let stamps = fixture.events_named("chunk_stamped").await;
    let order: Vec<u64> = stamps
        .iter()
        .map(|e| e.detail["chunk_no"].as_u64().unwrap_or(u64::MAX))
        .collect();
    assert_eq!(
        order,
        [1, 0, 2],
        "one event per chunk, the group in chunk order"
    );
    let head = store
        .verify_audit_chain(fixture.request_id)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(head.length >= 3, "every event extends the chain");
    let again = store
        .stamp_chunks_of(&fixture.token, ChunkSet::Frozen, &group)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again, 0, "a replayed group stamps nothing");
    assert_eq!(fixture.events_named("chunk_stamped").await.len(), 3);
}

#[tokio::test]
async fn a_grouped_stamp_with_one_short_chunk_stamps_none() {
    use activities::store::ChunkSet;
    let store = store().await;
    let fixture = drained(&store, 0, 20, 10).await;
    fixture.mark_irreversible().await;
    let group = [(0, chunk_ack(10, 0)), (1, chunk_ack(9, 0))];
    let refused = store
        .stamp_chunks_of(&fixture.token, ChunkSet::Frozen, &group)
        .await;
    assert_matches!(
        refused,
        Err(StoreError::Manifest(ManifestError::ChunkIncomplete {
            chunk_no: 1,
            ..
        }))
    );
    let missing = [(0, chunk_ack(10, 0)), (7, chunk_ack(10, 0))];
    let refused = store
        .stamp_chunks_of(&fixture.token, ChunkSet::Frozen, &missing)
        .await;
    assert_matches!(refused, Err(StoreError::NotFound { .. }));
    assert_eq!(fixture.chunk_progress().await.chunks_stamped, 0);
    assert!(fixture.events_named("chunk_stamped").await.is_empty());
}

#[tokio::test]
async fn a_chunk_is_stamped_only_when_every_version_is_acknowledged() {
    let store = store().await;
    let fixture = drained(&store, 0, 10, 10).await;
    let ack = chunk_ack(10, 0);
    let early = store.stamp_chunk(&fixture.token, 0, ack).await;
    assert_matches!(
        early,
        Err(StoreError::Request(
            RequestError::IrreversibleNotMarked { .. }
        ))
    );

    fixture.mark_irreversible().await;
    let partial = chunk_ack(9, 0);
    let refused = store.stamp_chunk(&fixture.token, 0, partial).await;
    assert_matches!(
        refused,
        Err(StoreError::Manifest(ManifestError::ChunkIncomplete { .. }))
    );
    let pending = store
        .mark_bindings_removed(&fixture.token, serde_json::json!({}))
        .await;
    assert_matches!(
        pending,
        Err(StoreError::Manifest(ManifestError::ChunksPending {
            pending: 1,
            ..
        }))
    );

    assert!(fixture.stamp(0, ack).await);
    let chunks = store
        .pending_chunks(&fixture.token, 10)
        .await
        .expect("pending");
    assert!(chunks.is_empty());
    store
        .mark_bindings_removed(&fixture.token, serde_json::json!({ "deleted": 10 }))
        .await
        .expect("all chunks stamped");
    assert_eq!(fixture.stage().await, Stage::BindingsRemoved);
}

#[tokio::test]
async fn manifest_entries_outside_the_tenant_are_refused() {
    let store = store().await;
    let fixture = fenced(&store, 0).await;
    let other = community(&store).await;
    let [media, _, _] = tenant_prefixes(fixture.community.id);
    let [other_media, _, _] = tenant_prefixes(other.id);

    // Another community's entries under this prefix, and this community's under another's.
    let foreign = media_entries(other.id, 1);
    let own = media_entries(fixture.community.id, 1);
    for (prefix, entries) in [(&media, &foreign), (&other_media, &own)] {
        let refused = store
            .append_manifest_chunk(&fixture.token, 0, prefix, entries, &ChunkTail::default())
            .await;
        assert_matches!(
            refused,
            Err(StoreError::Manifest(ManifestError::Mismatch { .. }))
        );
    }
    let progress = fixture.chunk_progress().await;
    assert_eq!(progress.chunks_total, 0);
}

#[tokio::test]
async fn binding_refuses_a_summary_that_differs_from_the_stored_chunks() {
    let store = store().await;
    let fixture = fenced(&store, 0).await;
    let entries = media_entries(fixture.community.id, 5);
    let [media, _, _] = tenant_prefixes(fixture.community.id);
    store
        .append_manifest_chunk(&fixture.token, 0, &media, &entries, &ChunkTail::default())
        .await
        .expect("append");

    // The summary of four of the five entries: its digest and count do not match the chunk.
    let short = media_manifest(fixture.community.id, &entries[..4], 10);
    let refused = store
        .bind_destructive_manifest(&fixture.token, &short)
        .await;
    assert_matches!(
        refused,
        Err(StoreError::Manifest(ManifestError::Mismatch { .. }))
    );
    assert_eq!(fixture.stage().await, Stage::Fenced);

    let exact = media_manifest(fixture.community.id, &entries, 10);
    store
        .bind_destructive_manifest(&fixture.token, &exact)
        .await
        .expect("bind");
    assert_eq!(fixture.stage().await, Stage::Drained);
    let loaded = store
        .load_destructive_manifest(fixture.request_id)
        .await
        .expect("manifest re-validates");
    assert_eq!(loaded, exact);
}

/// Encoded media entries of `community`: `(key seed, version id)` pairs, keys in listing order.
fn keyed_media_entries(community: Uuid, versions: &[(u32, &str)]) -> Vec<String> {
    versions
        .iter()
        .map(|(seed, version)| {
            let key = format!("media/{}/{:064x}", community.hyphenated(), seed);
            ManifestEntry::new(key, *version, VersionKind::Object).encode()
        })
        .collect()
}

/// The key of an encoded entry.
fn key_of(encoded: &str) -> String {
    ManifestEntry::decode(encoded)
        .map(|e| e.key)
        .unwrap_or_default()
}

/// A freeze interrupted after storing some chunks is continued, not restarted: the resume point
/// holds every stored version's digest, count and bytes, the listing resumes after the last key
/// stored whole, and the versions of the key split across chunks are handed back to be skipped.
/// The retry stores only the rest; the manifest binds with each version exactly once; the audit
/// trail says what was kept. A bound manifest has no resume point.
#[tokio::test]
async fn an_interrupted_freeze_resumes_after_its_last_whole_key_and_binds_each_version_once() {
    let store = store().await;
    let mut fixture = fenced(&store, 0).await;
    let community = fixture.community.id;
    let [media, _, _] = tenant_prefixes(community);
    // Keys 1 and 2 have one version, key 3 three, key 4 one.
    let entries = keyed_media_entries(
        community,
        &[(1, "a"), (2, "a"), (3, "c"), (3, "b"), (3, "a"), (4, "a")],
    );
    // The first attempt stored [1, 2] (ends key 2) and [3c, 3b] (inside key 3), then died.
    let stored = [
        (&entries[0..2], Some(key_of(&entries[1]))),
        (&entries[2..4], None),
    ];
    for (chunk_no, (chunk, resume_after_key)) in stored.iter().enumerate() {
        let tail = ChunkTail {
            bytes: 100,
            resume_after_key: resume_after_key.clone(),
            ..ChunkTail::default()
        };
        store
            .append_manifest_chunk(&fixture.token, chunk_no as u32, &media, chunk, &tail)
            .await
            .expect("first attempt's chunk");
    }

    let retry = fixture.claim(&[Stage::Fenced]).await;
    let resume = store
        .freeze_resume_point(&retry)
        .await
        .expect("resume point");
    assert_eq!(
        (
            resume.next_chunk_no,
            resume.chunks_kept,
            resume.chunks_cleared
        ),
        (2, 2, 0)
    );
    assert_eq!(resume.versions_kept(), 4);
    // Chunks listed with the whole prefix as their lane (as releases before lanes list) are
    // continued that way: one whole-prefix lane per prefix.
    let continued: Vec<ListingLane> = resume.lanes.iter().map(|(l, _)| l.clone()).collect();
    assert_eq!(continued, whole_prefix_lanes(community));
    let prefix = resume
        .lane(&ListingLane::whole(media.clone()))
        .expect("the media prefix resumes");
    assert_eq!(
        prefix.after_key,
        Some(key_of(&entries[1])),
        "after the last key stored whole"
    );
    assert_eq!(prefix.bytes, 200);
    let beyond: BTreeSet<String> = prefix.stored_beyond.iter().cloned().collect();
    assert_eq!(
        beyond,
        entries[2..4].iter().cloned().collect(),
        "key 3's stored versions"
    );
    let mut first_four = KeyStreamDigest::new();
    for entry in &entries[..4] {
        first_four.fold_encoded(entry);
    }
    assert_eq!(prefix.digest, first_four);
    let resumed = fixture
        .audit_events()
        .await
        .into_iter()
        .find(|e| e.event == "freeze_resumed")
        .expect("freeze_resumed is audited");
    assert_eq!(resumed.detail["chunks_kept"], 2);
    assert_eq!(resumed.detail["versions_kept"], 4);

    // The retry lists key 3 again, skips 3c and 3b, and stores the rest in chunk 2.
    let rest = &entries[4..];
    store
        .append_manifest_chunk(&retry, 2, &media, rest, &ChunkTail::default())
        .await
        .expect("the retry's chunk");
    let summary = media_manifest(community, &entries, 2);
    assert_eq!(summary.chunks, 3);
    store
        .bind_destructive_manifest(&retry, &summary)
        .await
        .expect("kept and new chunks bind as one listing");
    fixture.token = retry.clone();
    let drained = fixture.claim(&[Stage::Drained]).await;
    let chunks = store.pending_chunks(&drained, 100).await.expect("chunks");
    let listed: Vec<String> = chunks.into_iter().flat_map(|c| c.entries).collect();
    assert_eq!(
        listed, entries,
        "every version exactly once, in listing order"
    );

    // Bound, the manifest is no longer the freeze's to resume (or clear).
    let refused = store.freeze_resume_point(&retry).await;
    assert!(
        refused.is_err(),
        "a bound manifest offered a resume point: {refused:?}"
    );
}

/// A media entry whose content hash starts with `digit` and ends with `seed`.
fn lane_entry(community: Uuid, digit: char, seed: u32, version: &str) -> String {
    let key = format!("media/{}/{digit}{seed:063x}", community.hyphenated());
    ManifestEntry::new(key, version, VersionKind::Object).encode()
}

/// A freeze lists each prefix in lanes and stores their chunks interleaved; a retry resumes each
/// lane after its own last key stored whole (never after another lane's), skipping the versions
/// of a key split across its chunks. The boundary of a bounded lane is kept out of the column a
/// release before lanes resumes from, so such a worker would list the prefix again rather than
/// skip a lane. A chunk holding a key outside its lane is refused, and chunks of lanes this
/// release does not list (a whole-prefix lane beside a bounded one) are cleared, not continued.
#[tokio::test]
async fn a_laned_freeze_resumes_each_lane_after_its_own_last_whole_key() {
    let store = store().await;
    let mut fixture = fenced(&store, 0).await;
    let community = fixture.community.id;
    let lanes = listing_lanes(community);
    let [media, _, _] = tenant_prefixes(community);
    let (first, second) = (&lanes[0], &lanes[1]);
    assert_eq!((&first.prefix, &second.prefix), (&media, &media));
    let low = [
        lane_entry(community, '0', 1, "a"),
        lane_entry(community, '0', 2, "b"),
        lane_entry(community, '0', 2, "a"),
        lane_entry(community, '3', 3, "a"),
    ];
    let high = [
        lane_entry(community, '4', 1, "a"),
        lane_entry(community, '7', 2, "a"),
    ];
    let in_lane = |lane: &ListingLane, resume_after_key: Option<String>| ChunkTail {
        bytes: 10,
        resume_after_key,
        lane_after: lane.after.clone(),
        lane_through: lane.through.clone(),
    };
    // The first attempt: [0-1] (ends its key) of the first lane, [4-1, 7-2] of the second, then
    // [0-2b] of the first (inside key 0-2), then it died.
    let stored = [
        (&low[0..1], in_lane(first, Some(key_of(&low[0])))),
        (&high[..], in_lane(second, Some(key_of(&high[1])))),
        (&low[1..2], in_lane(first, None)),
    ];
    for (chunk_no, (chunk, tail)) in stored.iter().enumerate() {
        store
            .append_manifest_chunk(&fixture.token, chunk_no as u32, &media, chunk, tail)
            .await
            .expect("first attempt's chunk");
    }
    // A key of the first lane offered as the second lane's is refused.
    let outside = store
        .append_manifest_chunk(&fixture.token, 3, &media, &low[3..], &in_lane(second, None))
        .await;
    assert_matches!(
        outside,
        Err(StoreError::Manifest(ManifestError::Mismatch { .. })),
        "a chunk outside its lane was stored: {outside:?}"
    );
    let columns: Vec<(Option<String>, Option<String>)> = sqlx::query_as(
        "SELECT resume_after_key, lane_resume_after_key FROM deletion.manifest_chunks \
         WHERE request_id = $1 ORDER BY chunk_no",
    )
    .bind(fixture.request_id)
    .fetch_all(store.pool())
    .await
    .expect("chunk columns");
    assert_eq!(
        columns,
        vec![
            (None, Some(key_of(&low[0]))),
            (None, Some(key_of(&high[1]))),
            (None, None)
        ],
        "a bounded lane's boundary must not be where an older release resumes a whole prefix"
    );

    let retry = fixture.claim(&[Stage::Fenced]).await;
    let resume = store
        .freeze_resume_point(&retry)
        .await
        .expect("resume point");
    assert_eq!((resume.next_chunk_no, resume.chunks_kept), (3, 3));
    let listed: Vec<ListingLane> = resume.lanes.iter().map(|(l, _)| l.clone()).collect();
    assert_eq!(listed, lanes, "the retry lists the same lanes");
    let first_resume = resume.lane(first).expect("first lane");
    assert_eq!(first_resume.after_key, Some(key_of(&low[0])));
    assert_eq!(
        first_resume
            .stored_beyond
            .iter()
            .cloned()
            .collect::<BTreeSet<_>>(),
        BTreeSet::from([low[1].clone()])
    );
    assert_eq!((first_resume.digest.count(), first_resume.bytes), (2, 20));
    let second_resume = resume.lane(second).expect("second lane");
    assert_eq!(second_resume.after_key, Some(key_of(&high[1])));
    assert!(second_resume.stored_beyond.is_empty());
    assert!(
        lanes[2..]
            .iter()
            .all(|lane| resume.lane(lane) == Some(&Default::default())),
        "lanes with nothing stored start from their own first key"
    );

    // The retry lists 0-2 again (skipping 0-2b) and stores the rest of the first lane; the
    // manifest binds with every version once.
    store
        .append_manifest_chunk(&retry, 3, &media, &low[2..], &in_lane(first, None))
        .await
        .expect("the retry's chunk");
    let all: Vec<String> = low.iter().chain(high.iter()).cloned().collect();
    let mut summary = media_manifest(community, &all, 10);
    summary.chunks = 4;
    store
        .bind_destructive_manifest(&retry, &summary)
        .await
        .expect("the lanes' chunks bind as one listing");

    // Another request: a whole-prefix chunk beside a bounded lane's is neither release's
    // freeze; the retry clears both and lists this release's lanes from the start.
    let mut mixed = fenced(&store, 0).await;
    let community = mixed.community.id;
    let [media, _, _] = tenant_prefixes(community);
    let lanes = listing_lanes(community);
    let whole = ChunkTail::default();
    let bounded = in_lane(&lanes[1], None);
    let entries = [
        lane_entry(community, '0', 1, "a"),
        lane_entry(community, '4', 1, "a"),
    ];
    for (chunk_no, (entry, tail)) in entries.iter().zip([&whole, &bounded]).enumerate() {
        store
            .append_manifest_chunk(
                &mixed.token,
                chunk_no as u32,
                &media,
                std::slice::from_ref(entry),
                tail,
            )
            .await
            .expect("mixed chunk");
    }
    let retry = mixed.claim(&[Stage::Fenced]).await;
    let resume = store
        .freeze_resume_point(&retry)
        .await
        .expect("resume point");
    assert_eq!(
        (
            resume.next_chunk_no,
            resume.chunks_kept,
            resume.chunks_cleared
        ),
        (0, 0, 2)
    );
    let listed: Vec<ListingLane> = resume.lanes.iter().map(|(l, _)| l.clone()).collect();
    assert_eq!(listed, lanes);
    assert_eq!(mixed.chunk_progress().await.chunks_total, 0);
}

/// Chunks stored before the resumable freeze (no partial digest) are cleared by the retry, which
/// starts from chunk 0; a repeated chunk or a count that differs keeps a manifest from binding.
#[tokio::test]
async fn chunks_without_a_partial_digest_are_cleared_and_a_stale_chunk_never_binds() {
    let store = store().await;
    let mut fixture = fenced(&store, 0).await;
    let entries = media_entries(fixture.community.id, 12);
    let [media, _, _] = tenant_prefixes(fixture.community.id);
    for (chunk_no, chunk) in entries.chunks(3).enumerate() {
        store
            .append_manifest_chunk(
                &fixture.token,
                chunk_no as u32,
                &media,
                chunk,
                &ChunkTail::default(),
            )
            .await
            .expect("first attempt's chunk");
    }
    // A retry rewriting chunks 0..=2 in chunks of 5 leaves chunk 3 stale: the bind refuses.
    let summary = media_manifest(fixture.community.id, &entries, 5);
    for (chunk_no, chunk) in entries.chunks(5).enumerate() {
        store
            .append_manifest_chunk(
                &fixture.token,
                chunk_no as u32,
                &media,
                chunk,
                &ChunkTail::default(),
            )
            .await
            .expect("rewritten chunk");
    }
    let refused = store
        .bind_destructive_manifest(&fixture.token, &summary)
        .await;
    assert_matches!(
        refused,
        Err(StoreError::Manifest(ManifestError::Mismatch { .. })),
        "the stale chunk must keep the manifest from binding: {refused:?}"
    );
    assert_eq!(fixture.stage().await, Stage::Fenced);

    // Rows as an older worker wrote them: no partial digest. The retry clears them all.
    sqlx::query("UPDATE deletion.manifest_chunks SET digest_sum = NULL WHERE request_id = $1")
        .bind(fixture.request_id)
        .execute(store.pool())
        .await
        .expect("strip the partial digests");
    let retry = fixture.claim(&[Stage::Fenced]).await;
    let resume = store
        .freeze_resume_point(&retry)
        .await
        .expect("resume point");
    assert_eq!(
        (
            resume.next_chunk_no,
            resume.chunks_kept,
            resume.chunks_cleared
        ),
        (0, 0, 4)
    );
    assert_eq!(resume.versions_kept(), 0);
    let lanes: Vec<ListingLane> = resume.lanes.iter().map(|(l, _)| l.clone()).collect();
    assert_eq!(
        lanes,
        listing_lanes(fixture.community.id),
        "a new freeze lists in lanes"
    );
    let progress = fixture.chunk_progress().await;
    assert_eq!((progress.chunks_total, progress.versions_total), (0, 0));
    for (chunk_no, chunk) in entries.chunks(5).enumerate() {
        store
            .append_manifest_chunk(
                &retry,
                chunk_no as u32,
                &media,
                chunk,
                &ChunkTail::default(),
            )
            .await
            .expect("retry's chunk");
    }
    store
        .bind_destructive_manifest(&retry, &summary)
        .await
        .expect("the rewritten manifest binds");
}

/// A chunk whose entries were changed after the freeze (the partial digest no longer matches) is
/// refused when the delete loop reads it, before anything of it is deleted; so is a resume key
/// that is not the chunk's last key.
#[tokio::test]
async fn a_chunk_edited_after_the_freeze_is_refused_when_read_for_deletion() {
    let store = store().await;
    let fixture = fenced(&store, 0).await;
    let community = fixture.community.id;
    let entries = media_entries(community, 4);
    let [media, _, _] = tenant_prefixes(community);
    let wrong_key = ChunkTail {
        bytes: 0,
        resume_after_key: Some(key_of(&entries[0])),
        ..ChunkTail::default()
    };
    let refused = store
        .append_manifest_chunk(&fixture.token, 0, &media, &entries[..2], &wrong_key)
        .await;
    assert_matches!(
        refused,
        Err(StoreError::Manifest(ManifestError::Mismatch { .. }))
    );
    let mut fixture = fixture;
    for (chunk_no, chunk) in entries.chunks(2).enumerate() {
        store
            .append_manifest_chunk(
                &fixture.token,
                chunk_no as u32,
                &media,
                chunk,
                &ChunkTail::default(),
            )
            .await
            .expect("chunk");
    }
    store
        .bind_destructive_manifest(&fixture.token, &media_manifest(community, &entries, 2))
        .await
        .expect("bind");
    // Someone swaps chunk 1's second entry for another version of the same key.
    let swapped = ManifestEntry::new(key_of(&entries[3]), "other", VersionKind::Object).encode();
    sqlx::query(
        "UPDATE deletion.manifest_chunks SET entries = jsonb_set(entries, '{1}', to_jsonb($3::text)) \
         WHERE request_id = $1 AND chunk_no = $2",
    )
    .bind(fixture.request_id)
    .bind(1_i32)
    .bind(&swapped)
    .execute(store.pool())
    .await
    .expect("edit chunk 1");
    let drained = fixture.claim(&[Stage::Drained]).await;
    let first = store
        .pending_chunks(&drained, 1)
        .await
        .expect("chunk 0 is intact");
    assert_eq!(first.len(), 1);
    let refused = store.pending_chunks_after(&drained, Some(0), 1).await;
    assert_matches!(
        refused,
        Err(StoreError::Manifest(ManifestError::Mismatch { .. })),
        "the edited chunk must be refused: {refused:?}"
    );
    let lane = store
        .next_pending_chunk_in(
            &drained,
            activities::store::ChunkSet::Frozen,
            &media,
            Some(0),
        )
        .await;
    assert!(
        lane.is_err(),
        "the per-prefix read refuses it too: {lane:?}"
    );
}

/// A deletion works the tenant's prefixes side by side: the store names each prefix with
/// unstamped chunks and its first one, and reads a prefix's chunks in order, never another's.
#[tokio::test]
async fn pending_chunks_are_read_per_prefix_lane_in_order() {
    use activities::store::ChunkSet;
    let store = store().await;
    let mut fixture = fenced(&store, 0).await;
    let community = fixture.community.id;
    let prefixes = tenant_prefixes(community);
    let media = family_entries(community, "media", 5);
    let thumbs = family_entries(community, "thumbs", 3);
    let meta = family_entries(community, "_meta", 2);
    let mut chunk_no = 0;
    for (prefix, entries) in prefixes.iter().zip([&media, &thumbs, &meta]) {
        for chunk in entries.chunks(2) {
            store
                .append_manifest_chunk(
                    &fixture.token,
                    chunk_no,
                    prefix,
                    chunk,
                    &ChunkTail::default(),
                )
                .await
                .expect("chunk");
            chunk_no += 1;
        }
    }
    let summary = tenant_manifest(community, [&media, &thumbs, &meta], 2);
    store
        .bind_destructive_manifest(&fixture.token, &summary)
        .await
        .expect("bind");
    let drained = fixture.claim(&[Stage::Drained]).await;
    let lanes = store
        .pending_prefixes(&drained, ChunkSet::Frozen)
        .await
        .expect("lanes");
    assert_eq!(
        lanes,
        vec![
            (prefixes[0].clone(), 0),
            (prefixes[1].clone(), 3),
            (prefixes[2].clone(), 5)
        ]
    );
    let mut read = Vec::new();
    let mut after = Some(2);
    while let Some(chunk) = store
        .next_pending_chunk_in(&drained, ChunkSet::Frozen, &prefixes[1], after)
        .await
        .expect("next")
    {
        assert_eq!(chunk.prefix, prefixes[1]);
        after = Some(chunk.chunk_no);
        read.push(chunk.chunk_no);
    }
    assert_eq!(
        read,
        vec![3, 4],
        "the thumbs lane, and nothing of _meta after it"
    );
    let none = store
        .next_pending_chunk_in(&drained, ChunkSet::Late, &prefixes[0], None)
        .await;
    assert!(
        none.is_err(),
        "late chunks are not read while drained: {none:?}"
    );

    fixture.mark_irreversible().await;
    assert!(fixture.stamp(3, chunk_ack(2, 0)).await);
    assert!(fixture.stamp(4, chunk_ack(1, 0)).await);
    let lanes = store
        .pending_prefixes(&drained, ChunkSet::Frozen)
        .await
        .expect("lanes");
    assert_eq!(
        lanes,
        vec![(prefixes[0].clone(), 0), (prefixes[2].clone(), 5)],
        "a lane whose chunks are all stamped is gone"
    );
}

/// Every chunk stamp records how its versions were acknowledged: deleted now, or already absent
/// (a replayed chunk), per chunk in the audit trail the receipt is built from.
#[tokio::test]
async fn each_chunk_stamp_records_its_deleted_and_already_missing_versions() {
    let store = store().await;
    let fixture = drained(&store, 0, 25, 10).await;
    fixture.mark_irreversible().await;
    let acks = [(0_u32, 10_u64, 0_u64), (1, 7, 3), (2, 0, 5)];
    for (chunk_no, deleted, already_missing) in acks {
        let ack = chunk_ack(deleted, already_missing);
        assert!(fixture.stamp(chunk_no, ack).await);
    }
    let mut recorded: Vec<(u32, u64, u64)> = fixture
        .events_named("chunk_stamped")
        .await
        .into_iter()
        .map(|event| {
            let field = |name: &str| {
                event.detail[name]
                    .as_u64()
                    .unwrap_or_else(|| panic!("{name} missing: {}", event.detail))
            };
            (
                u32::try_from(field("chunk_no")).expect("chunk number"),
                field("deleted"),
                field("already_missing"),
            )
        })
        .collect();
    recorded.sort_unstable();
    assert_eq!(recorded, acks.to_vec());
    let progress = fixture.chunk_progress().await;
    assert_eq!(
        (progress.chunks_stamped, progress.versions_stamped),
        (3, 25)
    );
}

#[tokio::test]
async fn stale_holder_cannot_release_someone_elses_lease() {
    let store = store().await;
    let community = community(&store).await;
    let lease = store
        .serving()
        .acquire_serving_write_lease(community.id, "s3_put", "relay-a", LEASE_TTL)
        .await
        .expect("acquire");

    let mut impostor = lease.clone();
    impostor.owner = "relay-b".into();
    let mut unknown = lease.clone();
    unknown.id = Uuid::new_v4();
    // Each release in turn, whether it released the lease (only the holder's first does), and
    // the live leases after it.
    let releases = [
        (&impostor, false, 1),
        (&unknown, false, 1),
        (&lease, true, 0),
        (&lease, false, 0),
    ];
    for (holder, released, live_after) in releases {
        let outcome = store.release_serving_write_lease(holder).await;
        assert_eq!(outcome.expect("release"), released, "{holder:?}");
        assert_eq!(live_leases(&store, community.id).await, live_after);
    }
    let renewed = store.renew_serving_write_lease(&lease, LEASE_TTL).await;
    assert_matches!(renewed, Err(ServingError::LeaseLost { .. }));
}

#[tokio::test]
async fn second_open_request_for_a_community_is_refused_naming_the_first() {
    let store = store().await;
    let community = community(&store).await;
    let first = Uuid::new_v4();
    store
        .register_community_request(
            &register_input(first, &community.host, REQUESTER).await,
            CONSUMER,
        )
        .await
        .expect("first request");

    let second = Uuid::new_v4();
    let refused = store
        .register_community_request(
            &register_input(second, &community.host, REQUESTER).await,
            CONSUMER,
        )
        .await;
    match refused {
        Err(error @ StoreError::Request(RequestError::OpenRequestExists { .. })) => {
            assert!(error.to_string().contains(&first.to_string()), "{error}");
            assert_eq!(error.severity(), Severity::Permanent);
        }
        other => panic!("expected OpenRequestExists, got {other:?}"),
    }
    assert!(store.find_request(second).await.expect("lookup").is_none());
    let open = store
        .find_open_request_for_community(community.id)
        .await
        .expect("open request");
    assert_eq!(open.map(|request| request.id), Some(first));
}

#[tokio::test]
async fn registering_the_same_request_twice_returns_the_first_registration() {
    let store = store().await;
    let community = community(&store).await;
    let request_id = Uuid::new_v4();
    let input = register_input(request_id, &community.host.to_uppercase(), REQUESTER).await;
    let first = store
        .register_community_request(&input, CONSUMER)
        .await
        .expect("first");
    let again = store
        .register_community_request(&input, CONSUMER)
        .await
        .expect("replay");
    assert_eq!(first, again);
    assert_eq!(first.community_id, Some(community.id));
    assert_eq!(first.host.as_deref(), Some(community.host.as_str()));
}

#[tokio::test]
async fn unknown_host_is_refused_permanently() {
    let store = store().await;
    let host = format!("missing-{}.test.example", Uuid::new_v4().simple());
    let refused = store
        .register_community_request(
            &register_input(Uuid::new_v4(), &host, REQUESTER).await,
            CONSUMER,
        )
        .await;
    match refused {
        Err(error @ StoreError::Request(RequestError::UnknownHost { .. })) => {
            assert_eq!(error.severity(), Severity::Permanent);
            assert!(error.to_string().contains(&host));
        }
        other => panic!("expected UnknownHost, got {other:?}"),
    }
}

#[tokio::test]
async fn audit_trail_and_approvals_refuse_update_and_delete() {
    let store = store().await;
    let fixture = approved(&store, 0).await;
    let before = fixture.audit_events().await;
    assert!(before.iter().any(|event| event.event == "submitted"));

    for sql in [
        "UPDATE deletion.audit_events SET actor = 'mallory' WHERE request_id = $1",
        "DELETE FROM deletion.audit_events WHERE request_id = $1",
        "DELETE FROM deletion.approvals WHERE request_id = $1",
    ] {
        assert_append_only(&store, sql, fixture.request_id).await;
    }

    let after = fixture.audit_events().await;
    assert_eq!(before, after);
    assert!(
        store
            .approval_of(fixture.request_id)
            .await
            .expect("approval")
            .is_some()
    );
}

#[tokio::test]
async fn tenant_table_without_the_fence_trigger_makes_the_inventory_fail_closed() {
    let store = store().await;
    let community = community(&store).await;
    let table = format!("test_unfenced_{}", Uuid::new_v4().simple());
    // The table exists only inside this uncommitted transaction, so tests scanning the catalog
    // in parallel never see it.
    let mut tx = store.pool().begin().await.expect("begin");
    let create =
        format!("CREATE TABLE buzz.{table} (id bigserial PRIMARY KEY, community_id uuid NOT NULL)");
    exec_in(&mut tx, &create).await;

    let scan = catalog_scan_in(&mut tx, community.id).await;
    match scan {
        Err(StoreError::Catalog(CatalogError::Unfenced { tables, .. })) => {
            assert_eq!(tables, vec![format!("buzz.{table}")]);
        }
        other => panic!("expected CatalogUnfenced, got {other:?}"),
    }

    // A disabled trigger is no fence either.
    for sql in [
        format!(
            "CREATE TRIGGER buzz_write_fence BEFORE INSERT OR UPDATE ON buzz.{table} \
             FOR EACH ROW EXECUTE FUNCTION buzz.refuse_fenced_write()"
        ),
        format!("ALTER TABLE buzz.{table} DISABLE TRIGGER buzz_write_fence"),
    ] {
        exec_in(&mut tx, &sql).await;
    }
    let scan = catalog_scan_in(&mut tx, community.id).await;
    assert_matches!(
        scan,
        Err(StoreError::Catalog(CatalogError::Unfenced { .. }))
    );
    tx.rollback().await.expect("rollback");

    store
        .catalog_scan(community.id)
        .await
        .expect("committed catalog is fenced");
}

#[tokio::test]
async fn a_tenant_table_added_later_is_discovered_and_counted() {
    let store = store().await;
    let community = seeded_community(&store, 3).await;
    let table = format!("test_later_{}", Uuid::new_v4().simple());
    let mut tx = store.pool().begin().await.expect("begin");
    for sql in [
        format!("CREATE TABLE buzz.{table} (id bigserial PRIMARY KEY, community_id uuid NOT NULL)"),
        format!(
            "CREATE TRIGGER buzz_write_fence BEFORE INSERT OR UPDATE ON buzz.{table} \
             FOR EACH ROW EXECUTE FUNCTION buzz.refuse_fenced_write()"
        ),
        format!("ALTER TABLE buzz.{table} ENABLE ALWAYS TRIGGER buzz_write_fence"),
        format!(
            "INSERT INTO buzz.{table} (community_id) VALUES ('{}'), ('{}')",
            community.id, community.id
        ),
    ] {
        exec_in(&mut tx, &sql).await;
    }
    let scan = catalog_scan_in(&mut tx, community.id).await.expect("scan");
    tx.rollback().await.expect("rollback");

    let qualified = format!("buzz.{table}");
    assert!(scan.tenant_tables.contains(&qualified));
    assert_eq!(scan.fenced_tables, scan.tenant_tables);
    let counted = scan
        .row_counts
        .iter()
        .find(|count| count.table == qualified);
    assert_eq!(counted.map(|count| count.rows), Some(2));
    for model_table in [
        "buzz.channels",
        "buzz.events",
        "buzz.memberships",
        "buzz.pubkey_allowlist",
        "buzz.agents",
        "buzz.media_uploads",
    ] {
        let rows = scan
            .row_counts
            .iter()
            .find(|count| count.table == model_table)
            .map(|c| c.rows);
        assert_eq!(rows, Some(3), "{model_table}");
    }
    assert!(!scan.tenant_tables.contains(&"buzz.communities".to_owned()));
}

#[tokio::test]
async fn fenced_community_rejects_row_writes_while_others_keep_writing() {
    let store = store().await;
    let fixture = fenced(&store, 2).await;
    let bystander = community(&store).await;

    let insert = demo::seed_rows(&store, fixture.community.id, 1).await;
    match insert {
        Err(StoreError::Database(error)) => assert!(is_fenced_write(&error), "{error}"),
        other => panic!("insert into a fenced community must fail with BZ001, got {other:?}"),
    }
    let update = sqlx::query("UPDATE buzz.channels SET topic = 'changed' WHERE community_id = $1")
        .bind(fixture.community.id)
        .execute(store.pool())
        .await;
    assert!(update.is_err_and(|error| is_fenced_write(&error)));
    let rename = sqlx::query("UPDATE buzz.communities SET display_name = 'x' WHERE id = $1")
        .bind(fixture.community.id)
        .execute(store.pool())
        .await;
    assert!(rename.is_err_and(|error| is_fenced_write(&error)));
    let counts = store
        .count_community_rows(fixture.community.id)
        .await
        .expect("counts");
    assert!(
        counts
            .iter()
            .filter(|c| c.table != "buzz.communities")
            .all(|c| c.rows == 2)
    );

    demo::seed_rows(&store, bystander.id, 1)
        .await
        .expect("another community still writes");
    let leased = fixture.acquire_lease("redis_write", "relay-a").await;
    assert_matches!(leased, Err(ServingError::Fenced { .. }));
}

#[tokio::test]
async fn quiescing_refuses_new_leases_while_an_admitted_one_can_finish() {
    let store = store().await;
    let fixture = approved(&store, 0).await;
    let admitted = fixture.lease("s3_put", "relay-a").await;
    fixture.quiesce().await;

    let refused = fixture.acquire_lease("s3_put", "relay-b").await;
    assert_matches!(refused, Err(ServingError::Quiescing { .. }));
    let renewed = store
        .renew_serving_write_lease(&admitted, LEASE_TTL)
        .await
        .expect("the admitted write may renew while quiescing");
    assert!(renewed >= admitted.expires_at);
    store
        .verify_serving_write_lease(&admitted)
        .await
        .expect("still valid");
    assert!(
        store
            .release_serving_write_lease(&admitted)
            .await
            .expect("release")
    );
    assert_eq!(fixture.live_leases().await, 0);
}

#[tokio::test]
async fn fence_refuses_while_a_lease_is_live() {
    let store = store().await;
    let fixture = approved(&store, 0).await;
    let lease = fixture.lease("push", "relay-a").await;
    let quiesced_at = fixture.quiesce().await;
    assert_eq!(
        fixture.quiesce().await,
        quiesced_at,
        "retrying quiescing does not bump the generation"
    );

    let refused = store.fence(&fixture.token).await;
    match refused {
        Err(error @ StoreError::Fence(FenceError::ServingWritesLive { .. })) => {
            assert_eq!(
                error.severity(),
                Severity::Transient,
                "the fence waits and retries"
            );
            if let StoreError::Fence(FenceError::ServingWritesLive {
                count, operations, ..
            }) = error
            {
                assert_eq!((count, operations), (1, vec!["push".to_owned()]));
            }
        }
        other => panic!("expected ServingWritesLive, got {other:?}"),
    }
    assert_eq!(fixture.stage().await, Stage::Approved);
    let fence = fixture.fence_status().await.expect("row");
    assert_eq!(
        (fence.state, fence.generation),
        (FenceState::Quiescing, quiesced_at)
    );

    assert!(
        store
            .release_serving_write_lease(&lease)
            .await
            .expect("release")
    );
    let generation = store
        .fence(&fixture.token)
        .await
        .expect("fence once drained");
    assert_eq!(generation, quiesced_at + 1);
    let request = fixture.request().await;
    assert_eq!(
        (request.stage.as_str(), request.fence_generation),
        ("fenced", Some(generation))
    );
    let mut token = fixture.token.clone();
    token.exec_generation = request.exec_generation;
    token.fence_generation = request.fence_generation;
    store.verify_fence(&token).await.expect("fence held");
}

#[tokio::test]
async fn an_expired_lease_does_not_hold_the_fence() {
    let store = store().await;
    let fixture = approved(&store, 0).await;
    store
        .serving()
        .acquire_serving_write_lease(
            fixture.community.id,
            "s3_put",
            "crashed-relay",
            Duration::from_millis(300),
        )
        .await
        .expect("acquire");
    fixture.quiesce().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    store
        .fence(&fixture.token)
        .await
        .expect("an expired lease proves nothing");
}

#[tokio::test]
async fn approval_refuses_wrong_digest_self_approval_and_a_second_approval_without_change() {
    let store = store().await;
    let (fixture, digest) = inventoried(&store, 1).await;
    let host = fixture.community.host.clone();
    let approve = |approved_by: &str, digest: &str| {
        let (approved_by, digest, host) = (approved_by.to_owned(), digest.to_owned(), host.clone());
        async move {
            let mut approval = signed_approval(
                &store_support::store().await,
                fixture.request_id,
                &host,
                &approved_by,
                &digest,
            )
            .await;
            approval.approved_by = approved_by;
            approval.note = Some("looked at it".into());
            approval
        }
    };
    let no_change = |fixture: &Fixture| {
        let store = fixture.store.clone();
        let request_id = fixture.request_id;
        async move {
            assert!(
                store
                    .approval_of(request_id)
                    .await
                    .expect("approval")
                    .is_none()
            );
            assert_eq!(
                store.get_request(request_id).await.expect("request").stage,
                "inventoried"
            );
        }
    };

    let submit = async |approval: ApproveRequest| {
        store
            .record_approval(fixture.request_id, &approval, CONSUMER)
            .await
    };
    // Another key under the requester's name is the requester too (the one rule's name half).
    let mut own_name = approve(APPROVER, &digest).await;
    own_name.approved_by = " OPERATOR-A ".into();
    /// Whether an error is the refusal a case expects.
    type IsRefusal = fn(&StoreError) -> bool;
    let refusals: [(_, _, IsRefusal); 3] = [
        (
            approve(APPROVER, &"0".repeat(64)).await,
            "a wrong digest cannot be approved",
            |e| {
                matches!(
                    e,
                    StoreError::Approval(ApprovalError::DigestMismatch { .. })
                )
            },
        ),
        (
            approve(" Operator-A ", &digest).await,
            "the requester's key cannot approve",
            |e| {
                matches!(
                    e,
                    StoreError::Identity(IdentityError::Statement(
                        SignatureRefusal::SameOperator { .. }
                    ))
                )
            },
        ),
        (own_name, "the requester's name cannot approve", |e| {
            matches!(
                e,
                StoreError::Identity(IdentityError::SecondPerson(
                    TwoPersonRefusal::SameName { .. }
                ))
            )
        }),
    ];
    for (approval, what, refused_as) in refusals {
        let refused = submit(approval).await;
        assert!(
            refused.as_ref().is_err_and(refused_as),
            "{what}: {refused:?}"
        );
        no_change(&fixture).await;
    }

    let record = submit(approve(APPROVER, &digest).await)
        .await
        .expect("approval by a second operator");
    assert_eq!(
        (record.approved_by.as_str(), record.digest.as_str()),
        (APPROVER, digest.as_str())
    );
    let second = submit(approve("operator-c", &digest).await).await;
    assert_matches!(
        second,
        Err(StoreError::Approval(ApprovalError::AlreadyApproved { .. }))
    );
    assert_eq!(
        store
            .approval_of(fixture.request_id)
            .await
            .expect("approval"),
        Some(record)
    );
    assert_eq!(fixture.stage().await, Stage::Approved);
}

#[tokio::test]
async fn abort_after_the_irreversible_point_is_refused() {
    let store = store().await;
    let fixture = drained(&store, 0, 3, 10).await;
    fixture.mark_irreversible().await;
    let abort = AbortRequest {
        actor: APPROVER.into(),
        reason: "changed my mind".into(),
        signed: None,
    };
    fixture.assert_abort_refused_past_the_marker(&abort).await;
    let fence = fixture.fence_status().await.expect("row");
    assert_eq!(fence.state, FenceState::Fenced);
    store
        .verify_fence(&fixture.token)
        .await
        .expect("fence still held");
}

#[tokio::test]
async fn abort_before_the_irreversible_point_lifts_the_fence_and_stales_every_attempt() {
    let store = store().await;
    let fixture = fenced(&store, 1).await;
    let fenced_at = fixture.fence_status().await.expect("row");
    let abort = AbortRequest {
        actor: APPROVER.into(),
        reason: "wrong tenant".into(),
        signed: None,
    };
    let generation = store
        .unfence_for_abort(fixture.request_id, &abort)
        .await
        .expect("abort");
    assert_eq!(generation, fenced_at.generation + 1);
    assert_eq!(
        store
            .unfence_for_abort(fixture.request_id, &abort)
            .await
            .expect("idempotent"),
        generation
    );

    let request = fixture.request().await;
    assert_eq!(request.stage, "aborted");
    assert!(request.completed_at.is_some());
    // Who aborted and why is in the audit trail, once (the repeated abort records nothing).
    let aborted: Vec<_> = fixture.events_named("aborted").await;
    assert_eq!(aborted.len(), 1, "{aborted:?}");
    assert_eq!(aborted[0].actor, APPROVER);
    assert_eq!(aborted[0].detail["reason"], "wrong tenant");
    assert_eq!(aborted[0].detail["actor"], APPROVER);
    assert_eq!(aborted[0].detail["aborted_at_stage"], "fenced");
    let stale = store.verify_token(&fixture.token).await;
    assert_matches!(
        stale,
        Err(StoreError::Request(RequestError::StaleGeneration { .. }))
    );
    demo::seed_rows(&store, fixture.community.id, 1)
        .await
        .expect("served again");
    let lease = fixture.lease("s3_put", "relay-a").await;
    assert_eq!(lease.fence_generation, generation);
    store
        .register_community_request(
            &register_input(Uuid::new_v4(), &fixture.community.host, REQUESTER).await,
            CONSUMER,
        )
        .await
        .expect("an aborted request is no longer the open one");
}

#[tokio::test]
async fn tampered_frozen_inventory_is_refused_on_read() {
    let store = store().await;
    let (fixture, digest) = inventoried(&store, 2).await;
    let loaded = store
        .load_frozen_inventory(fixture.request_id)
        .await
        .expect("load");
    assert_eq!(loaded.digest(), digest);

    sqlx::query(
        "UPDATE deletion.requests SET inventory = jsonb_set(inventory, '{redis_keys}', to_jsonb(1000)) \
         WHERE id = $1",
    )
    .bind(fixture.request_id)
    .execute(store.pool())
    .await
    .expect("tamper");
    let refused = store.load_frozen_inventory(fixture.request_id).await;
    match refused {
        Err(error @ StoreError::Approval(ApprovalError::DigestMismatch { .. })) => {
            assert_eq!(error.severity(), Severity::Permanent);
        }
        other => panic!("expected DigestMismatch, got {other:?}"),
    }
}

#[tokio::test]
async fn purge_deletes_every_row_of_the_community_and_leaves_another_byte_identical() {
    let store = store().await;
    let bystander = seeded_community(&store, 5).await;
    let before = store.snapshot_rows(bystander.id).await.expect("snapshot");

    let mut fixture = drained(&store, 23, 0, 10).await;
    store
        .mark_bindings_removed(&fixture.token, serde_json::json!({ "deleted": 0 }))
        .await
        .expect("empty manifest");
    let stale = fixture.claim(&[Stage::BindingsRemoved]).await;
    let token = fixture.claim(&[Stage::BindingsRemoved]).await;

    let refused = store.purge_postgres(&stale, 7, |_, _| {}).await;
    assert_matches!(
        refused,
        Err(StoreError::Request(RequestError::StaleGeneration { .. }))
    );
    let counts = store
        .count_community_rows(fixture.community.id)
        .await
        .expect("counts");
    assert!(
        counts.iter().all(|count| count.rows > 0),
        "a stale purge deleted nothing"
    );

    let mut heartbeats = 0;
    let report = store
        .purge_postgres(&token, 7, |_, _| heartbeats += 1)
        .await
        .expect("purge");
    assert!(
        heartbeats >= 6 * 4,
        "one progress call per batch, got {heartbeats}"
    );
    assert_eq!(report.rows_deleted, 6 * 23 + 1);
    assert!(
        report
            .tables
            .iter()
            .any(|t| t.table == "buzz.communities" && t.rows == 1)
    );
    assert_no_rows_left(&store, fixture.community.id).await;
    assert!(
        store
            .community_by_id(fixture.community.id)
            .await
            .expect("lookup")
            .is_none()
    );
    assert_eq!(fixture.stage().await, Stage::PostgresPurged);

    let after = store.snapshot_rows(bystander.id).await.expect("snapshot");
    assert_eq!(before, after, "another community's rows are byte-identical");

    fixture.advance_to_verified().await;
    // The verification facts about the scope (recorded by the verify activity): every
    // inventoried relation re-found and empty.
    let scope = store.verify_scope(&token).await.expect("verify scope");
    assert!(
        scope.iter().any(|c| c.table == "buzz.communities") && scope.iter().all(|c| c.rows == 0),
        "{scope:?}"
    );
    // The last step has no generic advance: it issues the signed receipt, and refuses to finish
    // without a signing key. (The stack's own key: the log is shared by every test.)
    match store
        .complete_with_receipt(&token, serde_json::json!({}))
        .await
    {
        Err(StoreError::Certificate(CertificateStoreError::NoSigningKey)) => {}
        other => panic!("finishing without a signing key must be refused: {other:?}"),
    }
    assert_eq!(fixture.stage().await, Stage::LogicallyVerified);
    let signing = store.clone().with_receipt_key(testkit::env::receipt_key());
    let receipt = fixture.complete_with_receipt(&signing).await;
    assert_eq!(
        receipt.purge.rows_total,
        6 * 23 + 1,
        "the receipt states the purge"
    );
    fixture.assert_certificate_audits_clean(&signing).await;
    let inspection = store.inspect(fixture.request_id).await.expect("inspect");
    assert!(inspection.request.completed_at.is_some());
    assert!(inspection.approval.is_some());
    let reached: Vec<&str> = inspection
        .checkpoints
        .iter()
        .map(|c| c.stage.as_str())
        .collect();
    for stage in Stage::ALL.iter().filter(|stage| **stage != Stage::Aborted) {
        assert!(
            reached.contains(&stage.as_str()),
            "checkpoint {stage} missing: {reached:?}"
        );
    }
    assert_eq!(
        inspection.purged.iter().map(|t| t.rows).sum::<u64>(),
        6 * 23 + 1
    );
}

#[tokio::test]
async fn a_blocked_request_cannot_be_claimed_until_unblocked() {
    let store = store().await;
    let (fixture, _) = inventoried(&store, 0).await;
    store
        .record_event(
            &EventInput {
                request_id: fixture.request_id,
                event: RequestEvent::Blocked {
                    phase: "preflight".into(),
                    reason: "s3:ListBucketVersions denied".into(),
                },
            },
            CONSUMER,
        )
        .await
        .expect("block");
    let claimed = store.claim(fixture.request_id, &[Stage::Inventoried]).await;
    assert_matches!(
        claimed,
        Err(StoreError::Request(RequestError::Blocked { .. }))
    );
    let blocked = store
        .list_requests(RequestFilter::Blocked, 1000)
        .await
        .expect("list");
    assert!(
        blocked
            .iter()
            .any(|request| request.id == fixture.request_id)
    );

    let unblock = UnblockRequest {
        actor: APPROVER.into(),
        reason: "granted the permission".into(),
        signed: Some(operators::operator(APPROVER).await.sign(
            Action::Unblock,
            Kind::Community,
            fixture.request_id,
            &fixture.community.host,
            None,
        )),
    };
    store
        .record_unblock(fixture.request_id, &unblock, CONSUMER)
        .await
        .expect("unblock");
    let again = store
        .record_unblock(fixture.request_id, &unblock, "store-test/another")
        .await;
    assert_matches!(
        again,
        Err(StoreError::Request(RequestError::NotBlocked { .. }))
    );
    store
        .claim(fixture.request_id, &[Stage::Inventoried])
        .await
        .expect("claimable again");
    let events: Vec<String> = store
        .audit_events(fixture.request_id)
        .await
        .expect("audit")
        .into_iter()
        .map(|event| event.event)
        .collect();
    assert!(events.contains(&"blocked".to_owned()) && events.contains(&"unblocked".to_owned()));
    // The unblock names the operator (the signing key's registered name), the remediation given
    // and the block it lifted.
    let unblocked: Vec<_> = fixture.events_named("unblocked").await;
    assert_eq!(unblocked.len(), 1, "{unblocked:?}");
    assert_eq!(unblocked[0].actor, APPROVER);
    assert_eq!(unblocked[0].detail["remediation"], "granted the permission");
    assert_eq!(
        unblocked[0].detail["blocked_reason"],
        "s3:ListBucketVersions denied"
    );
    assert_eq!(unblocked[0].detail["phase"], "preflight");
}

#[tokio::test]
async fn taxonomy_sweeps_are_recorded_and_listed_newest_first() {
    let store = store().await;
    let sample = vec![format!("junk/{}", Uuid::new_v4())];
    let recorded = store
        .record_taxonomy_sweep(&TaxonomySweepInput {
            started_at: chrono::Utc::now(),
            object_cap: 1000,
            listed_objects: 42,
            unknown_object_count: 1,
            unknown_key_sample: sample.clone(),
            reached_cap: false,
        })
        .await
        .expect("record");
    assert_eq!(recorded.found.unknown_key_sample, sample);
    let latest = store.latest_sweeps(1000).await.expect("latest");
    assert!(latest.iter().any(|sweep| sweep.id == recorded.id));
}

#[tokio::test]
async fn late_chunks_are_appended_after_the_frozen_ones_only_after_the_purges_and_stamped_apart() {
    use activities::store::ChunkSet;
    use activities::taxonomy::{ManifestEntry, VersionKind};

    let store = store().await;
    let mut fixture = drained(&store, 0, 2, 2).await;
    let community = fixture.community.id;
    let [media, _, _] = tenant_prefixes(community);
    let late_key = format!("media/{}/{:064x}", community.hyphenated(), 0xfeed_u32);
    let late = ManifestEntry::new(late_key.clone(), "v-late", VersionKind::Object);
    let frozen = ManifestEntry::decode(&media_entries(community, 2)[0]).expect("decode");

    // Not while the frozen manifest is being deleted.
    let early = store
        .append_late_chunk(&fixture.token, &media, &[late.encode()])
        .await;
    assert_matches!(
        early,
        Err(StoreError::Request(RequestError::WrongStage { .. }))
    );

    fixture.mark_irreversible().await;
    let ack = chunk_ack(2, 0);
    assert!(fixture.stamp(0, ack).await);
    store
        .mark_bindings_removed(&fixture.token, serde_json::json!({}))
        .await
        .expect("bindings removed");
    let token = fixture.claim(&[Stage::BindingsRemoved]).await;
    store
        .purge_postgres(&token, 100, |_, _| {})
        .await
        .expect("purge");
    fixture.record_cache_purged().await;
    let token = fixture.claim(&[Stage::CachePurged]).await;
    let manifest_before = store
        .load_destructive_manifest(fixture.request_id)
        .await
        .expect("manifest");

    // What the manifest holds, and what it does not.
    assert!(
        store
            .manifest_lists_version(fixture.request_id, &media, &frozen)
            .await
            .expect("q")
    );
    assert!(
        !store
            .manifest_lists_version(fixture.request_id, &media, &late)
            .await
            .expect("q")
    );
    // A neighbour's key is refused, and so is a key of the wrong shape.
    let neighbour = format!("media/{}/{:064x}", Uuid::new_v4().hyphenated(), 1);
    for foreign in [
        ManifestEntry::new(neighbour, "v", VersionKind::Object).encode(),
        ManifestEntry::new(
            format!("media/{community}/notes.txt"),
            "v",
            VersionKind::Object,
        )
        .encode(),
    ] {
        let refused = store.append_late_chunk(&token, &media, &[foreign]).await;
        assert_matches!(
            refused,
            Err(StoreError::Manifest(ManifestError::Mismatch { .. }))
        );
    }

    let chunk = store
        .append_late_chunk(&token, &media, &[late.encode()])
        .await
        .expect("append late chunk");
    assert_eq!(chunk.chunk_no, 1, "numbered after every frozen chunk");
    assert_eq!(chunk.versions, 1);
    assert!(
        store
            .manifest_lists_version(fixture.request_id, &media, &late)
            .await
            .expect("q")
    );
    // Frozen chunks are not readable in this stage; the late one is.
    let frozen_read = store
        .pending_chunks_of(&token, ChunkSet::Frozen, None, 10)
        .await;
    assert_matches!(
        frozen_read,
        Err(StoreError::Request(RequestError::WrongStage { .. }))
    );
    let pending = store
        .pending_chunks_of(&token, ChunkSet::Late, None, 10)
        .await
        .expect("pending late");
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].entries, vec![late.encode()]);
    // A late chunk is stamped only as a late chunk, and only once.
    let one = chunk_ack(1, 0);
    let wrong_set = store.stamp_chunk_of(&token, ChunkSet::Frozen, 1, one).await;
    assert!(wrong_set.is_err(), "{wrong_set:?}");
    assert!(
        store
            .stamp_chunk_of(&token, ChunkSet::Late, 1, one)
            .await
            .expect("stamp late")
    );
    assert!(
        !store
            .stamp_chunk_of(&token, ChunkSet::Late, 1, one)
            .await
            .expect("restamp")
    );
    assert_eq!(
        store
            .late_chunk_progress(fixture.request_id)
            .await
            .expect("p"),
        (1, 1, 1)
    );
    assert!(
        store
            .pending_chunks_of(&token, ChunkSet::Late, None, 10)
            .await
            .expect("pending")
            .is_empty()
    );

    // The bound manifest (summary and digest) is what it was; the trail names the late chunk.
    assert_eq!(
        store
            .load_destructive_manifest(fixture.request_id)
            .await
            .expect("manifest"),
        manifest_before
    );
    let events = fixture.audit_events().await;
    let appended = events
        .iter()
        .find(|e| e.event == "late_chunk_appended")
        .expect("late_chunk_appended");
    assert_eq!(appended.detail["chunk_no"], 1);
    assert_eq!(appended.detail["digest"], chunk.digest.as_str());
    assert_eq!(appended.detail["entries"][0], late.encode().as_str());
    let stamps: Vec<_> = events
        .iter()
        .filter(|e| e.event == "chunk_stamped")
        .collect();
    assert_eq!(stamps.len(), 2);
    assert_eq!(stamps[1].detail["late"], true);
    assert_eq!(stamps[0].detail["late"], false);
}

/// Chunk entries are stored lz4-compressed when the server has lz4 (migration 0022), and stay
/// readable exactly as written; a server without lz4 keeps pglz and the migrations still ran.
#[tokio::test]
async fn chunk_entries_are_stored_with_lz4_when_the_server_has_it_and_read_back_unchanged() {
    let store = store().await;
    let mut fixture = fenced(&store, 0).await;
    let entries = media_entries(fixture.community.id, 400);
    let [media, _, _] = tenant_prefixes(fixture.community.id);
    store
        .append_manifest_chunk(&fixture.token, 0, &media, &entries, &ChunkTail::default())
        .await
        .expect("chunk");
    // Whether this server was built with lz4: a temporary column asking for it is refused if not.
    let mut conn = store.pool().acquire().await.expect("connection");
    let has_lz4 =
        sqlx::query("CREATE TEMPORARY TABLE IF NOT EXISTS lz4_probe (x text COMPRESSION lz4)")
            .execute(&mut *conn)
            .await
            .is_ok();
    let (declared, stored): (String, Option<String>) = sqlx::query_as(
        "SELECT (SELECT attcompression::text FROM pg_attribute \
                 WHERE attrelid = 'deletion.manifest_chunks'::regclass AND attname = 'entries'), \
                pg_column_compression(entries) \
         FROM deletion.manifest_chunks WHERE request_id = $1 AND chunk_no = 0",
    )
    .bind(fixture.request_id)
    .fetch_one(&mut *conn)
    .await
    .expect("the chunk's compression");
    if has_lz4 {
        assert_eq!(declared, "l", "the column asks for lz4");
        assert_eq!(
            stored.as_deref(),
            Some("lz4"),
            "the chunk was stored with lz4"
        );
    } else {
        assert_eq!(
            declared, "",
            "without lz4 the column keeps the default (pglz)"
        );
    }
    let summary = media_manifest(fixture.community.id, &entries, entries.len());
    store
        .bind_destructive_manifest(&fixture.token, &summary)
        .await
        .expect("the chunk binds against its digest");
    let drained = fixture.claim(&[Stage::Drained]).await;
    let chunks = store.pending_chunks(&drained, 10).await.expect("chunks");
    let read: Vec<String> = chunks.into_iter().flat_map(|c| c.entries).collect();
    assert_eq!(read, entries, "every entry read back as written");
}
