//! The S3 adapter against the real local Ceph RGW (`deploy/local/up`).
//!
//! Every test seeds its own random communities, so tests run in parallel and against a bucket
//! that other suites also use; each removes what it wrote.

use std::collections::BTreeSet;

use activities::failure::{Classified, Severity};
use activities::s3::{
    AbortOutcome, DeleteFailureKind, MAX_VERSIONS_PER_DELETE, MultipartUpload, ObjectStore,
    ObjectStoreError, ObjectVersion, ObjectVersionRef, S3Config, S3Credentials, S3Permission,
    probe_key,
};
use activities::stack_settings::StackSettings;
use activities::taxonomy::{PrefixRoot, VersionKind, is_tenant_owned_key, tenant_prefixes};
use sha2::{Digest, Sha256};
use testkit::env::HOW_TO_START;
use uuid::Uuid;

/// The local RGW's configuration, as the stack's environment names it.
fn config() -> S3Config {
    let env = stack_config::env::StackEnv::process();
    env.s3().unwrap_or_else(|e| panic!("{e}\n{HOW_TO_START}"))
}

/// A store on the configured bucket, proven reachable and versioned, or a panic saying how to
/// start the server.
async fn store() -> ObjectStore {
    let config = config();
    let store = ObjectStore::connect(&config)
        .await
        .unwrap_or_else(|error| panic!("S3 configuration rejected: {error}"));
    if let Err(error) = store.check_bucket().await {
        panic!(
            "RGW not reachable at {} (bucket {}): {error}; {HOW_TO_START}",
            config.endpoint, config.bucket
        );
    }
    store
}

/// The exact writer key of `root` for content `seed`.
fn tenant_key(community: Uuid, root: PrefixRoot, seed: &str) -> String {
    let h = hex::encode(Sha256::digest(seed.as_bytes()));
    let suffix = match root {
        PrefixRoot::Media => "",
        PrefixRoot::Thumbs => ".webp",
        PrefixRoot::Meta => ".json",
    };
    format!("{}{h}{suffix}", root.prefix(community))
}

/// What a seeding wrote: every (key, version id, kind).
type Seeded = BTreeSet<(String, String, VersionKind)>;

/// Seeds `objects` keys per root, the first key of each root with a second version and the last
/// with a delete marker on top, so listings hold several versions per key and delete markers.
async fn seed_community(store: &ObjectStore, community: Uuid, objects: usize) -> Seeded {
    let mut seeded = Seeded::new();
    for root in PrefixRoot::ALL {
        for i in 0..objects {
            let key = tenant_key(community, root, &format!("object-{i}"));
            let body = format!("{community}/{root}/{i}/v1").into_bytes();
            let v1 = store.put_object(&key, body).await.unwrap();
            seeded.insert((key.clone(), v1, VersionKind::Object));
            if i == 0 {
                let body = format!("{community}/{root}/{i}/v2").into_bytes();
                let v2 = store.put_object(&key, body).await.unwrap();
                seeded.insert((key.clone(), v2, VersionKind::Object));
            }
            if i + 1 == objects {
                let marker = store.put_delete_marker(&key).await.unwrap();
                seeded.insert((key, marker, VersionKind::DeleteMarker));
            }
        }
    }
    seeded
}

fn listed(versions: &[ObjectVersion]) -> Seeded {
    versions
        .iter()
        .map(|v| (v.key.clone(), v.version_id.clone(), v.kind))
        .collect()
}

async fn snapshot_community(store: &ObjectStore, community: Uuid) -> Vec<ObjectVersion> {
    let mut all = Vec::new();
    for prefix in tenant_prefixes(community) {
        all.extend(store.snapshot_prefix(&prefix).await.unwrap());
    }
    all
}

/// Every version's listing entry plus its body (empty for delete markers), for byte comparisons.
async fn contents(store: &ObjectStore, community: Uuid) -> Vec<(ObjectVersion, Vec<u8>)> {
    let mut out = Vec::new();
    for version in snapshot_community(store, community).await {
        let body = match version.kind {
            VersionKind::Object => store
                .get_object_version(&version.key, &version.version_id)
                .await
                .unwrap(),
            VersionKind::DeleteMarker => Vec::new(),
        };
        out.push((version, body));
    }
    out
}

/// Removes every version under the community's prefixes (test cleanup).
async fn erase_community(store: &ObjectStore, community: Uuid) {
    let refs: Vec<ObjectVersionRef> = snapshot_community(store, community)
        .await
        .iter()
        .map(ObjectVersion::version_ref)
        .collect();
    for chunk in refs.chunks(MAX_VERSIONS_PER_DELETE) {
        let outcome = store.delete_versions(chunk).await.unwrap();
        assert!(outcome.is_complete(), "cleanup incomplete: {outcome:?}");
    }
}

#[tokio::test]
async fn version_listing_pages_through_objects_and_delete_markers() {
    let store = store().await;
    let community = Uuid::new_v4();
    let seeded = seed_community(&store, community, 4).await;

    let mut all = Vec::new();
    for prefix in tenant_prefixes(community) {
        let mut marker = None;
        let mut pages = 0;
        loop {
            let page = store.list_versions_page(&prefix, marker, 2).await.unwrap();
            pages += 1;
            assert!(page.entries.len() <= 2, "max_keys=2 exceeded: {page:?}");
            all.extend(page.entries);
            match page.next {
                Some(next) => marker = Some(next),
                None => break,
            }
        }
        // 4 keys + 1 extra version + 1 delete marker = 6 entries, so at least 3 pages of 2.
        assert!(pages >= 3, "{prefix} listed in {pages} pages");
    }

    assert_eq!(
        all.len(),
        seeded.len(),
        "a version was listed twice or not at all"
    );
    assert_eq!(listed(&all), seeded);
    assert!(all.iter().all(|v| is_tenant_owned_key(community, &v.key)));
    let markers: Vec<_> = all
        .iter()
        .filter(|v| v.kind == VersionKind::DeleteMarker)
        .collect();
    assert_eq!(markers.len(), 3);
    assert!(markers.iter().all(|m| m.is_latest && m.size == 0));
    assert!(
        all.iter()
            .filter(|v| v.kind == VersionKind::Object)
            .all(|v| v.size > 0)
    );

    erase_community(&store, community).await;
}

/// What a resumed freeze relies on: a key marker without a version id marker lists from that key
/// on — never a key before it — and paging on from there lists every later version once. The
/// marker key's own versions are listed again by the local gateway (AWS S3 leaves them out), so
/// the freeze drops every entry at or before the key itself; this pins both halves.
#[tokio::test]
async fn listing_after_a_key_starts_at_that_key_and_pages_through_the_rest() {
    let store = store().await;
    let community = Uuid::new_v4();
    let seeded = seed_community(&store, community, 4).await;
    let prefix = PrefixRoot::Media.prefix(community);
    let mut media: Vec<(String, String, VersionKind)> = seeded
        .iter()
        .filter(|(key, _, _)| key.starts_with(&prefix))
        .cloned()
        .collect();
    media.sort();
    let keys: BTreeSet<&String> = media.iter().map(|(key, _, _)| key).collect();
    for after in keys {
        let mut all = Vec::new();
        let mut page = store
            .list_versions_after_key(&prefix, after.clone(), 2)
            .await
            .unwrap();
        loop {
            all.extend(page.entries);
            let Some(next) = page.next else { break };
            page = store
                .list_versions_page(&prefix, Some(next), 2)
                .await
                .unwrap();
        }
        assert!(
            all.iter().all(|v| v.key.as_str() >= after.as_str()),
            "after {after}, a key before it was listed: {all:?}"
        );
        let later: Vec<ObjectVersion> = all
            .into_iter()
            .filter(|v| v.key.as_str() > after.as_str())
            .collect();
        let expected: Seeded = media
            .iter()
            .filter(|(key, _, _)| key.as_str() > after.as_str())
            .cloned()
            .collect();
        assert_eq!(later.len(), expected.len(), "after {after}: {later:?}");
        assert_eq!(listed(&later), expected, "after {after}");
    }

    erase_community(&store, community).await;
}

#[tokio::test]
async fn delete_versions_removes_exactly_the_listed_versions_and_leaves_a_neighbour_byte_identical()
{
    let store = store().await;
    let target = Uuid::new_v4();
    let neighbour = Uuid::new_v4();
    // Same content names under both communities: only the prefix tells them apart.
    seed_community(&store, target, 3).await;
    seed_community(&store, neighbour, 3).await;
    let neighbour_before = contents(&store, neighbour).await;
    let target_before = snapshot_community(&store, target).await;

    // Delete all but the media prefix's versions: what was listed goes, the rest stays.
    let (kept, doomed): (Vec<_>, Vec<_>) = target_before
        .iter()
        .cloned()
        .partition(|v| v.key.starts_with("media/"));
    let refs: Vec<_> = doomed.iter().map(ObjectVersion::version_ref).collect();
    let outcome = store.delete_versions(&refs).await.unwrap();

    assert!(outcome.is_complete(), "{outcome:?}");
    assert_eq!(outcome.deleted, refs.len() as u64);
    assert_eq!(snapshot_community(&store, target).await, kept);
    assert_eq!(contents(&store, neighbour).await, neighbour_before);

    erase_community(&store, target).await;
    erase_community(&store, neighbour).await;
}

#[tokio::test]
async fn more_than_a_thousand_versions_are_refused_and_nothing_is_deleted() {
    let store = store().await;
    let community = Uuid::new_v4();
    let seeded = seed_community(&store, community, 1).await;
    let before = snapshot_community(&store, community).await;

    let mut refs: Vec<_> = before.iter().map(ObjectVersion::version_ref).collect();
    while refs.len() <= MAX_VERSIONS_PER_DELETE {
        refs.push(ObjectVersionRef {
            key: tenant_key(
                community,
                PrefixRoot::Media,
                &format!("absent-{}", refs.len()),
            ),
            version_id: "absent".to_owned(),
        });
    }
    let error = store.delete_versions(&refs).await.unwrap_err();

    assert_matches!(
        error,
        ObjectStoreError::TooManyVersions {
            requested: 1001,
            limit: 1000
        }
    );
    assert_eq!(error.severity(), Severity::Permanent);
    assert_eq!(snapshot_community(&store, community).await, before);
    assert_eq!(listed(&before), seeded);

    erase_community(&store, community).await;
}

/// Pins the RGW behaviour a replayed chunk relies on: deleting a version id that is already gone
/// (object version or delete marker) is acknowledged as deleted, not reported as an error.
#[tokio::test]
async fn re_deleting_already_deleted_versions_is_acknowledged_as_deleted() {
    let store = store().await;
    let community = Uuid::new_v4();
    seed_community(&store, community, 2).await;
    let refs: Vec<_> = snapshot_community(&store, community)
        .await
        .iter()
        .map(ObjectVersion::version_ref)
        .collect();

    let first = store.delete_versions(&refs).await.unwrap();
    let replay = store.delete_versions(&refs).await.unwrap();

    assert!(first.is_complete(), "{first:?}");
    assert!(replay.is_complete(), "{replay:?}");
    assert_eq!(replay.deleted, refs.len() as u64);
    assert!(snapshot_community(&store, community).await.is_empty());
}

#[tokio::test]
async fn prefix_is_empty_names_a_retained_version_until_every_version_is_deleted() {
    let store = store().await;
    let community = Uuid::new_v4();
    seed_community(&store, community, 2).await;
    let [media, thumbs, meta] = tenant_prefixes(community);

    let retained = store.prefix_is_empty(&thumbs).await.unwrap();
    let retained = retained.expect("a seeded prefix must report a retained version");
    assert!(retained.key.starts_with(&thumbs));

    // Only the delete markers left under `_meta/`: a marker alone still blocks the proof.
    let meta_objects: Vec<_> = store
        .snapshot_prefix(&meta)
        .await
        .unwrap()
        .into_iter()
        .filter(|v| v.kind == VersionKind::Object)
        .map(|v| v.version_ref())
        .collect();
    assert!(
        store
            .delete_versions(&meta_objects)
            .await
            .unwrap()
            .is_complete()
    );
    let marker = store.prefix_is_empty(&meta).await.unwrap();
    assert_eq!(marker.map(|m| m.kind), Some(VersionKind::DeleteMarker));

    erase_community(&store, community).await;
    for prefix in [&media, &thumbs, &meta] {
        assert_eq!(
            store.prefix_is_empty(prefix).await.unwrap(),
            None,
            "{prefix}"
        );
    }
}

#[tokio::test]
async fn preflight_passes_with_the_configured_credentials() {
    let store = store().await;
    for prefix in tenant_prefixes(Uuid::new_v4()) {
        store.preflight_list_versions(&prefix).await.unwrap();
    }
}

#[tokio::test]
async fn preflight_with_a_wrong_secret_is_a_permanent_access_denial() {
    store().await;
    let wrong = S3Config {
        credentials: match config().credentials {
            S3Credentials::Static { access_key, .. } => S3Credentials::Static {
                access_key,
                secret_key: "definitely-not-the-secret".to_owned(),
            },
            S3Credentials::DefaultChain => panic!("the local stack gives a static key pair"),
        },
        ..config()
    };
    let store = ObjectStore::connect(&wrong).await.unwrap();

    let error = store.preflight_list_versions("media/").await.unwrap_err();

    assert_matches!(error, ObjectStoreError::AccessDenied { .. });
    assert_eq!(error.severity(), Severity::Permanent);
}

#[tokio::test]
async fn check_bucket_names_a_missing_bucket_as_permanent() {
    store().await;
    let missing = S3Config {
        bucket: format!("buzz-missing-{}", Uuid::new_v4().simple()),
        ..config()
    };
    let store = ObjectStore::connect(&missing).await.unwrap();

    let error = store.check_bucket().await.unwrap_err();

    assert_matches!(error, ObjectStoreError::NoSuchBucket { .. });
    assert!(error.to_string().contains(&missing.bucket));
    assert_eq!(error.severity(), Severity::Permanent);
}

#[tokio::test]
async fn bucket_listing_pages_return_current_keys_and_skip_delete_marked_ones() {
    let store = store().await;
    let community = Uuid::new_v4();
    seed_community(&store, community, 2).await;
    let live = tenant_key(community, PrefixRoot::Thumbs, "object-0");
    let marked = tenant_key(community, PrefixRoot::Thumbs, "object-1");

    // Small pages first, to exercise the continuation token.
    let (first, token) = store.list_objects_page(None, 1).await.unwrap();
    assert_eq!(first.len(), 1);
    let token = token.expect("the bucket holds more than one key");
    let (second, _) = store.list_objects_page(Some(token), 1).await.unwrap();
    assert!(second[0] > first[0], "pages must advance in key order");

    let mut seen = BTreeSet::new();
    let mut token = None;
    loop {
        let (keys, next) = store.list_objects_page(token, 1000).await.unwrap();
        seen.extend(
            keys.into_iter()
                .filter(|k| k.contains(&community.to_string())),
        );
        match next {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    assert!(seen.contains(&live));
    assert!(
        !seen.contains(&marked),
        "a delete-marked key is not current"
    );
    assert_eq!(seen.len(), 3, "one live key per root: {seen:?}");

    erase_community(&store, community).await;
}

/// The smallest part S3 accepts as a non-final part, so the upload looks like a real large one.
const PART_BYTES: usize = 5 * 1024 * 1024;

/// Every upload in progress under `prefix`, paging one upload at a time.
async fn uploads_one_per_page(store: &ObjectStore, prefix: &str) -> Vec<MultipartUpload> {
    let mut all = Vec::new();
    let mut marker = None;
    loop {
        let page = store.list_uploads_page(prefix, marker, 1).await.unwrap();
        assert!(page.uploads.len() <= 1, "max-uploads=1 exceeded: {page:?}");
        all.extend(page.uploads);
        match page.next {
            Some(next) => marker = Some(next),
            None => break,
        }
    }
    all.sort();
    all
}

#[tokio::test]
async fn multipart_uploads_under_a_prefix_are_listed_and_aborted_with_and_without_parts() {
    let store = store().await;
    let community = Uuid::new_v4();
    let neighbour = Uuid::new_v4();
    let media = PrefixRoot::Media.prefix(community);
    let key = tenant_key(community, PrefixRoot::Media, "large");
    // Two uploads of the same key: one never got a part, one got a 5 MiB part.
    let bare = store.start_upload(&key).await.unwrap();
    let with_part = store.start_upload(&key).await.unwrap();
    let e_tag = store
        .upload_part(&with_part, 1, vec![7u8; PART_BYTES])
        .await
        .unwrap();
    let thumb = store
        .start_upload(&tenant_key(community, PrefixRoot::Thumbs, "large"))
        .await
        .unwrap();
    // Not under `media/{c}/`: the neighbour's upload of the same content, and a key whose id
    // segment merely starts with the community's id.
    let neighbours_upload = store
        .start_upload(&tenant_key(neighbour, PrefixRoot::Media, "large"))
        .await
        .unwrap();
    store
        .upload_part(&neighbours_upload, 1, vec![9u8; PART_BYTES])
        .await
        .unwrap();
    let neighbours_parts = store.list_parts(&neighbours_upload).await.unwrap();
    let lookalike = store
        .start_upload(&format!("media/{community}-x/{}", "a".repeat(64)))
        .await
        .unwrap();

    let mut expected = vec![bare.clone(), with_part.clone()];
    expected.sort();
    assert_eq!(uploads_one_per_page(&store, &media).await, expected);
    assert_eq!(store.snapshot_uploads(&media).await.unwrap(), expected);
    assert_eq!(
        store.first_upload(&media).await.unwrap().as_ref(),
        expected.first()
    );
    // An upload in progress is invisible to the version listing: that is the whole problem.
    assert!(store.snapshot_prefix(&media).await.unwrap().is_empty());
    let parts = store.list_parts(&with_part).await.unwrap();
    assert_eq!(parts.len(), 1);
    assert_eq!(
        (parts[0].part_number, parts[0].size),
        (1, PART_BYTES as u64)
    );
    assert_eq!(parts[0].e_tag, e_tag);

    // Aborting again, as a retried activity would, is fine.
    let aborts = [
        (&bare, AbortOutcome::Aborted),
        (&with_part, AbortOutcome::Aborted),
        (&with_part, AbortOutcome::AlreadyGone),
        (&bare, AbortOutcome::AlreadyGone),
    ];
    for (upload, outcome) in aborts {
        assert_eq!(store.abort_upload(upload).await.unwrap(), outcome);
    }
    assert_eq!(store.first_upload(&media).await.unwrap(), None);
    // A stalled writer can no longer complete the aborted upload into an object (S3 answers
    // NoSuchUpload; RGW an HTTP 500, see `complete_upload`): no version appears either way.
    let late = store
        .complete_upload(&with_part, &[(1, e_tag.clone())])
        .await;
    assert!(
        matches!(
            &late,
            Err(ObjectStoreError::NoSuchUpload { .. } | ObjectStoreError::ServerError { .. })
        ),
        "{late:?}"
    );
    assert!(store.snapshot_prefix(&media).await.unwrap().is_empty());
    assert_matches!(
        store.list_parts(&with_part).await,
        Err(ObjectStoreError::NoSuchUpload { .. })
    );

    // Everything else is still in progress, the neighbour's part byte-identical (its ETag).
    assert_eq!(
        store
            .first_upload(&PrefixRoot::Thumbs.prefix(community))
            .await
            .unwrap(),
        Some(thumb.clone())
    );
    assert_eq!(
        store
            .snapshot_uploads(&PrefixRoot::Media.prefix(neighbour))
            .await
            .unwrap(),
        vec![neighbours_upload.clone()]
    );
    assert_eq!(
        store.list_parts(&neighbours_upload).await.unwrap(),
        neighbours_parts
    );
    assert_eq!(
        store
            .snapshot_uploads(&format!("media/{community}-x/"))
            .await
            .unwrap(),
        vec![lookalike.clone()]
    );

    for upload in [thumb, neighbours_upload, lookalike] {
        assert_eq!(
            store.abort_upload(&upload).await.unwrap(),
            AbortOutcome::Aborted
        );
    }
}

/// Serialises the tests of this binary that set the (one, shared) bucket policy.
fn policy_lock() -> &'static tokio::sync::Mutex<()> {
    static LOCK: std::sync::OnceLock<tokio::sync::Mutex<()>> = std::sync::OnceLock::new();
    LOCK.get_or_init(|| tokio::sync::Mutex::new(()))
}

#[tokio::test]
async fn a_bucket_policy_denying_one_key_comes_back_as_a_per_key_access_denied() {
    let _policy = policy_lock().lock().await;
    let store = store().await;
    let community = Uuid::new_v4();
    let denied_key = tenant_key(community, PrefixRoot::Media, "protected");
    let free_key = tenant_key(community, PrefixRoot::Media, "free");
    let denied = store
        .put_object(&denied_key, b"keep".to_vec())
        .await
        .unwrap();
    let free = store.put_object(&free_key, b"go".to_vec()).await.unwrap();
    // The bucket is shared: never overwrite someone else's policy, and deny only our own key.
    if let Some(existing) = store.bucket_policy().await.unwrap() {
        panic!(
            "bucket {} already has a policy; refusing to replace it: {existing}",
            store.bucket()
        );
    }
    let policy = serde_json::json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Sid": "objects-it-deny-one-key",
            "Effect": "Deny",
            "Principal": "*",
            "Action": ["s3:DeleteObjectVersion", "s3:DeleteObject"],
            "Resource": [format!("arn:aws:s3:::{}/{denied_key}", store.bucket())],
        }],
    })
    .to_string();
    store.put_bucket_policy(&policy).await.unwrap();
    let outcome = store
        .delete_versions(&[
            ObjectVersionRef {
                key: denied_key.clone(),
                version_id: denied.clone(),
            },
            ObjectVersionRef {
                key: free_key.clone(),
                version_id: free.clone(),
            },
        ])
        .await;
    // Lift the policy before asserting anything, so a failed assertion leaves the bucket clean.
    store.delete_bucket_policy().await.unwrap();
    assert_eq!(store.bucket_policy().await.unwrap(), None);
    let outcome = outcome.unwrap();

    assert_eq!(outcome.deleted, 1, "{outcome:?}");
    assert!(outcome.unacknowledged.is_empty(), "{outcome:?}");
    assert_eq!(outcome.failed.len(), 1, "{outcome:?}");
    let failure = &outcome.failed[0];
    assert_eq!(failure.key, denied_key);
    assert_eq!(failure.version_id, denied);
    assert_eq!(failure.code, "AccessDenied");
    assert_eq!(failure.kind(), DeleteFailureKind::AccessDenied);
    let left = snapshot_community(&store, community).await;
    assert_eq!(
        listed(&left),
        Seeded::from([(denied_key.clone(), denied.clone(), VersionKind::Object)])
    );

    // With the policy gone the same version deletes.
    erase_community(&store, community).await;
    assert!(snapshot_community(&store, community).await.is_empty());
}

/// Every probe answer of `permission` on every tenant prefix of `community`, in order.
async fn probe_all(
    store: &ObjectStore,
    community: Uuid,
) -> Vec<(String, S3Permission, Result<(), ObjectStoreError>)> {
    let mut answers = Vec::new();
    for prefix in tenant_prefixes(community) {
        for permission in S3Permission::ALL {
            let answer = store.prove_permission(permission, &prefix).await;
            answers.push((prefix.clone(), permission, answer));
        }
    }
    answers
}

#[tokio::test]
async fn every_permission_probe_passes_with_full_rights_and_changes_nothing() {
    let store = store().await;
    let community = Uuid::new_v4();
    seed_community(&store, community, 2).await;
    let upload = store
        .start_upload(&tenant_key(community, PrefixRoot::Thumbs, "in-progress"))
        .await
        .unwrap();
    let versions_before = snapshot_community(&store, community).await;
    let mut uploads_before = Vec::new();
    for prefix in tenant_prefixes(community) {
        uploads_before.extend(store.snapshot_uploads(&prefix).await.unwrap());
    }

    for (prefix, permission, answer) in probe_all(&store, community).await {
        assert!(answer.is_ok(), "{permission} on {prefix}: {answer:?}");
    }

    // Nothing deleted, aborted or added (no delete marker on the probe key either).
    assert_eq!(snapshot_community(&store, community).await, versions_before);
    let mut uploads_after = Vec::new();
    for prefix in tenant_prefixes(community) {
        uploads_after.extend(store.snapshot_uploads(&prefix).await.unwrap());
        assert!(
            store
                .snapshot_prefix(&probe_key(&prefix))
                .await
                .unwrap()
                .is_empty(),
            "the probe key must stay absent under {prefix}"
        );
    }
    assert_eq!(uploads_after, uploads_before);
    assert_eq!(uploads_after, vec![upload.clone()]);
    store.abort_upload(&upload).await.unwrap();
    erase_community(&store, community).await;
}

#[tokio::test]
async fn a_denied_probe_names_the_permission_and_the_prefix_and_only_that_one() {
    let _policy = policy_lock().lock().await;
    let store = store().await;
    let bucket = store.bucket().to_owned();
    let community = Uuid::new_v4();
    let denied_prefix = PrefixRoot::Media.prefix(community);
    let object_deny = |action: &str| {
        serde_json::json!({
            "Sid": "objects-it-deny-probe",
            "Effect": "Deny",
            "Principal": "*",
            "Action": [action],
            "Resource": [format!("arn:aws:s3:::{bucket}/{denied_prefix}*")],
        })
    };
    let cases = [
        (
            S3Permission::DeleteObjectVersion,
            object_deny("s3:DeleteObjectVersion"),
        ),
        (
            S3Permission::AbortMultipartUpload,
            object_deny("s3:AbortMultipartUpload"),
        ),
        (
            S3Permission::ListBucketVersions,
            serde_json::json!({
                "Sid": "objects-it-deny-probe",
                "Effect": "Deny",
                "Principal": "*",
                "Action": ["s3:ListBucketVersions"],
                "Resource": [format!("arn:aws:s3:::{bucket}")],
                "Condition": {"StringLike": {"s3:prefix": format!("{denied_prefix}*")}},
            }),
        ),
    ];
    for (denied, statement) in cases {
        if let Some(existing) = store.bucket_policy().await.unwrap() {
            panic!("bucket {bucket} already has a policy; refusing to replace it: {existing}");
        }
        let policy = serde_json::json!({"Version": "2012-10-17", "Statement": [statement]});
        store.put_bucket_policy(&policy.to_string()).await.unwrap();
        let answers = probe_all(&store, community).await;
        // Lift the policy before asserting anything, so a failed assertion leaves it clean.
        store.delete_bucket_policy().await.unwrap();
        assert_eq!(store.bucket_policy().await.unwrap(), None);

        for (prefix, permission, answer) in answers {
            if prefix != denied_prefix || permission != denied {
                assert!(
                    answer.is_ok(),
                    "{permission} on {prefix} under a deny of {denied}: {answer:?}"
                );
                continue;
            }
            let error = answer.expect_err("the denied permission must be refused");
            let ObjectStoreError::PermissionMissing(missing) = &error else {
                panic!("{denied} on {prefix}: {error:?}");
            };
            assert_eq!(missing.permission, denied);
            assert_eq!(missing.prefix, denied_prefix);
            assert_eq!(error.severity(), Severity::Permanent);
            let text = error.to_string();
            for named in [
                denied.action(),
                denied_prefix.as_str(),
                &missing.statement(),
            ] {
                assert!(
                    text.contains(named),
                    "the refusal must name {named}: {text}"
                );
            }
        }
    }
}
