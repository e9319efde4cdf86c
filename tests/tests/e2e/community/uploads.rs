//! Multipart uploads in progress are tenant data (inventoried, aborted after the irreversible
//! point, required absent by verification), and a per-key `AccessDenied` from DeleteObjects
//! blocks naming the key instead of retrying forever.

use std::collections::BTreeSet;

use activities::s3::{MultipartUpload, ObjectStore, ObjectStoreError, UploadedPart};
use activities::taxonomy::{PrefixRoot, VersionKind, tenant_prefixes};
use serde_json::Value;
use uuid::Uuid;

use testkit::bucket_policy::{lift_test_policy, put_test_policy};
use testkit::prelude::*;
use testkit::records::read;
use testkit::refusal::request_row;

/// The smallest non-final part S3 accepts: a real large upload's first part.
const PART_BYTES: usize = 5 * 1024 * 1024;

/// A fresh key of the exact writer shape of `root` (64 lowercase hex digits as the hash).
fn writer_key(community: Uuid, root: PrefixRoot) -> String {
    let hash = format!(
        "{:032x}{:032x}",
        Uuid::new_v4().as_u128(),
        Uuid::new_v4().as_u128()
    );
    let suffix = match root {
        PrefixRoot::Media => "",
        PrefixRoot::Thumbs => ".webp",
        PrefixRoot::Meta => ".json",
    };
    format!("{}{hash}{suffix}", root.prefix(community))
}

/// Under each tenant prefix: one upload that never got a part and one with a 5 MiB part.
/// Returns every upload with the ETag of its part, if it has one.
async fn start_uploads(
    objects: &ObjectStore,
    community: Uuid,
    fill: u8,
) -> Vec<(MultipartUpload, Option<String>)> {
    let mut started = Vec::new();
    for root in PrefixRoot::ALL {
        let bare = objects
            .start_upload(&writer_key(community, root))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        started.push((bare, None));
        let with_part = objects
            .start_upload(&writer_key(community, root))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let e_tag = objects
            .upload_part(&with_part, 1, vec![fill; PART_BYTES])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        started.push((with_part, Some(e_tag)));
    }
    started
}

/// Every upload in progress under the community's three prefixes, with its parts.
async fn uploads_with_parts(
    objects: &ObjectStore,
    community: Uuid,
) -> Vec<(MultipartUpload, Vec<UploadedPart>)> {
    let mut all = Vec::new();
    for prefix in tenant_prefixes(community) {
        for upload in objects
            .snapshot_uploads(&prefix)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
        {
            let parts = objects
                .list_parts(&upload)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            all.push((upload, parts));
        }
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfinished_multipart_uploads_are_inventoried_aborted_and_verified_gone_while_a_neighbours_stay()
 {
    let (stack, cli, _worker) = with_worker("uploads", &[]).await;

    let target = Tenant::seed(&stack, "uploads-target", small_plan()).await;
    let neighbour = Tenant::seed(&stack, "uploads-neighbour", small_plan()).await;
    let started = start_uploads(&stack.objects, target.id, 0x5a).await;
    start_uploads(&stack.objects, neighbour.id, 0xa5).await;
    let neighbour_before = neighbour.kept(&stack).await;
    let neighbour_uploads_before = uploads_with_parts(&stack.objects, neighbour.id).await;
    assert_eq!(neighbour_uploads_before.len(), 6);
    let target_uploads: BTreeSet<(String, String)> = started
        .iter()
        .map(|(u, _)| (u.key.clone(), u.upload_id.clone()))
        .collect();
    assert_eq!(target_uploads.len(), 6);

    let (id, digest) = cli.submit(&target.host, "alice", &[]).await;
    let status = cli.status(&id, 0).await;
    assert_eq!(status["inventory"]["digest"], digest.as_str());
    let inventoried = status["inventory"]["uploads"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let per_prefix: BTreeSet<(String, u64)> = inventoried
        .iter()
        .map(|u| {
            (
                u["prefix"].as_str().unwrap_or_default().to_owned(),
                u["uploads"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    let expected: BTreeSet<(String, u64)> = tenant_prefixes(target.id)
        .into_iter()
        .map(|prefix| (prefix, 2))
        .collect();
    assert_eq!(per_prefix, expected, "inventory: {}", status["inventory"]);

    cli.approve(&id, "bob", &digest).await.expect_code(0);
    cli.watch_to_end_printing(&id).await;

    // Rows, versions, delete markers, keys and the unfinished uploads under every prefix.
    target.assert_gone(&stack, "the target").await;
    // The reproduced bug: a stalled serving process completing its upload after the deletion.
    for (upload, e_tag) in &started {
        if let Some(e_tag) = e_tag {
            let late = stack
                .objects
                .complete_upload(upload, &[(1, e_tag.clone())])
                .await;
            // S3 answers NoSuchUpload, Ceph RGW an HTTP 500 (see `ObjectStore::complete_upload`).
            assert!(
                matches!(
                    late,
                    Err(ObjectStoreError::NoSuchUpload { .. }
                        | ObjectStoreError::ServerError { .. })
                ),
                "completing {} after the deletion must fail: {late:?}",
                upload.key
            );
        }
    }
    assert!(snapshot(&stack, target.id).await.versions.is_empty());

    let inspection = cli.inspect(&id).await;
    assert_eq!(inspection["request"]["stage"], "retention_pending");
    let aborted: Vec<Value> = audit_of(&inspection)
        .into_iter()
        .filter(|e| e["event"] == "upload_aborted")
        .collect();
    let aborted_set: BTreeSet<(String, String)> = aborted
        .iter()
        .map(|e| {
            (
                e["detail"]["key"].as_str().unwrap_or_default().to_owned(),
                e["detail"]["upload_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(aborted_set, target_uploads, "audit: {aborted:?}");
    assert!(
        aborted.iter().all(|e| e["detail"]["outcome"] == "aborted"),
        "{aborted:?}"
    );

    // The neighbour: rows, versions (with delete markers) and keys, and its uploads with their
    // parts' ETags (MD5 of the bytes), all as they were.
    neighbour_before.assert_unchanged(&stack, "neighbour").await;
    assert_eq!(
        uploads_with_parts(&stack.objects, neighbour.id).await,
        neighbour_uploads_before
    );
    for (upload, _) in neighbour_uploads_before {
        stack
            .objects
            .abort_upload(&upload)
            .await
            .unwrap_or_else(|e| panic!("cleanup: {e}"));
    }
}

/// A bucket policy denying version deletes of exactly `key`, as a JSON document.
fn deny_delete_policy(bucket: &str, key: &str) -> String {
    serde_json::json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Sid": "e2e-deny-one-key",
            "Effect": "Deny",
            "Principal": "*",
            "Action": ["s3:DeleteObjectVersion", "s3:DeleteObject"],
            "Resource": [format!("arn:aws:s3:::{bucket}/{key}")],
        }],
    })
    .to_string()
}

/// The version ids `snapshot` holds of `key`.
fn version_ids(snapshot: &Snapshot, key: &str) -> BTreeSet<String> {
    let of_key = snapshot.versions.iter().filter(|v| v.key == key);
    of_key.map(|v| v.version_id.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_key_access_denial_blocks_naming_the_key_until_the_policy_is_lifted() {
    let (stack, cli, _worker) = with_policy_worker("denied", &[]).await;
    let target = Tenant::seed(&stack, "denied", small_plan()).await;
    let before = snapshot(&stack, target.id).await;
    let denied_key = before
        .versions
        .iter()
        .find(|v| v.kind == VersionKind::Object && v.key.starts_with("media/"))
        .map(|v| v.key.clone())
        .unwrap_or_else(|| panic!("the seed wrote no media object: {:?}", before.versions));
    let denied_versions = version_ids(&before, &denied_key);

    let (id, digest) = cli.submit(&target.host, "alice", &[]).await;
    // The bucket is shared: never replace someone else's policy; deny only our own key.
    let bucket = stack.objects.bucket().to_owned();
    put_test_policy(&stack, &deny_delete_policy(&bucket, &denied_key)).await;
    cli.approve(&id, "bob", &digest).await.expect_code(0);
    // Wait for the block without panicking, so the policy is lifted whatever happens.
    let mut blocked = None;
    for _ in 0..120 {
        let run = cli.run(&["community", "status", &id]).await;
        if let Ok(status) = serde_json::from_str::<Value>(&run.stdout)
            && !status["blocked"].is_null()
        {
            blocked = Some(status);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    let left_while_blocked = snapshot(&stack, target.id).await;
    lift_test_policy(&stack).await;

    let status = blocked.unwrap_or_else(|| panic!("request {id} never blocked on AccessDenied"));
    let reason = status["blocked"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&denied_key) && reason.contains("AccessDenied"),
        "the block must name the key and the code: {status}"
    );
    assert!(
        denied_versions.iter().any(|v| reason.contains(v.as_str())),
        "the block must name the denied version ({denied_versions:?}): {reason}"
    );
    let persisted = request_row(&stack, id.parse().unwrap_or_default()).await;
    assert!(
        persisted
            .blocked_reason
            .unwrap_or_default()
            .contains(&denied_key),
        "the reason must be persisted in Postgres"
    );
    assert_eq!(
        version_ids(&left_while_blocked, &denied_key),
        denied_versions,
        "the denied key's versions survive the denial"
    );

    cli.unblock_and_finish(&id, "carol", "lifted the bucket policy on the key")
        .await;
    let after = snapshot(&stack, target.id).await;
    assert!(
        after.versions.is_empty(),
        "versions left: {:?}",
        after.versions
    );
    assert!(after.row_count() == 0 && after.keys.is_empty());
    let events: Vec<String> = audit_of(&cli.inspect(&id).await)
        .iter()
        .filter_map(|e| e["event"].as_str().map(str::to_owned))
        .collect();
    assert!(events.iter().any(|e| e == "blocked"), "{events:?}");
    assert!(events.iter().any(|e| e == "unblocked"), "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_of_unknown_key_shape_blocks_the_inventory_naming_it_until_aborted() {
    let (stack, cli, _worker, target) = with_target("stray-upload", &[]).await;
    // No version lists it, but it sits under the tenant prefix and is no writer's shape.
    let key = format!("thumbs/{}/upload-in-progress.tmp", target.id);
    let stray = read("the stray upload", stack.objects.start_upload(&key)).await;

    let (id, json) = cli.submit_blocked(&target.host, &[]).await;
    let id = id.to_string();
    let reason = json["blocked"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&stray.key),
        "the block must name the upload's key: {json}"
    );

    // The operator aborts the stray upload, then unblocks; the inventory is taken again.
    stack
        .objects
        .abort_upload(&stray)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let status = cli
        .unblock_until_awaiting_approval(&id, "carol", "aborted the stray upload")
        .await;
    let digest = inventory_digest(&status);
    let uploads: u64 = status["inventory"]["uploads"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|u| u["uploads"].as_u64().unwrap_or_default())
        .sum();
    assert_eq!(uploads, 0, "{}", status["inventory"]);
    cli.approve_and_finish(&id, &digest).await;
    target.assert_gone(&stack, "the target").await;
}
