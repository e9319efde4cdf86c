//! A worker whose S3 policy lacks a permission the destructive phase needs (issue 30): preflight
//! proves every one of them on every tenant prefix without deleting anything, so the request
//! blocks at preflight naming the permission, the prefix and the IAM statement to add, before
//! the fence and the irreversible marker; abort serves the community again; once the policy is
//! fixed a resubmitted deletion completes. And should the permission be revoked after preflight,
//! a first DeleteObjects refused whole leaves the irreversible marker unset and the request
//! abortable.
//!
//! The denial is a bucket policy on the shared bucket (as in `uploads`), scoped to the target's
//! prefixes and lifted before any assertion; `bucket_policy_lock` keeps policy tests apart.

use std::time::Duration;

use activities::s3::{S3Permission, probe_key};
use activities::serving::acquire_serving_write;
use activities::store::FenceState;
use activities::taxonomy::PrefixRoot;
use serde_json::Value;
use testkit::bucket_policy::{lift_test_policy, put_test_policy};
use uuid::Uuid;

use testkit::prelude::*;
use testkit::records::{fence_state, read};
use testkit::refusal::request_row;

/// A bucket policy denying `action` on the objects under `prefixes`.
fn deny_policy(bucket: &str, action: &str, prefixes: &[String]) -> String {
    let resources: Vec<String> = prefixes
        .iter()
        .map(|prefix| format!("arn:aws:s3:::{bucket}/{prefix}*"))
        .collect();
    serde_json::json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Sid": "e2e-deny-destructive-permission",
            "Effect": "Deny",
            "Principal": "*",
            "Action": [action],
            "Resource": resources,
        }],
    })
    .to_string()
}

/// `community status` once `done` holds, or `None` after `secs` (never panics, so the caller can
/// lift the policy first).
async fn poll_status(
    cli: &Cli,
    id: &str,
    secs: u64,
    done: impl Fn(&Value) -> bool,
) -> Option<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while tokio::time::Instant::now() < deadline {
        let run = cli.run(&["community", "status", id]).await;
        if let Ok(status) = serde_json::from_str::<Value>(&run.stdout)
            && done(&status)
        {
            return Some(status);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    None
}

async fn abort(cli: &Cli, id: &str) -> CliRun {
    cli.abort(id, "carol", "the worker lacks an S3 permission")
        .await
}

/// `(irreversible_at set, irreversible_pending_at set)` of the request.
async fn marker_columns(stack: &Stack, id: &str) -> (bool, bool) {
    sqlx::query_as(
        "SELECT irreversible_at IS NOT NULL, irreversible_pending_at IS NOT NULL \
         FROM deletion.requests WHERE id = $1",
    )
    .bind(id.parse::<Uuid>().unwrap_or_default())
    .fetch_one(stack.store.pool())
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

async fn audit_events(cli: &Cli, id: &str) -> Vec<String> {
    cli.inspected_audit(id)
        .await
        .iter()
        .filter_map(|e| e["event"].as_str().map(str::to_owned))
        .collect()
}

/// The community is served again: no fence held, a serving write admitted, rows writable.
async fn assert_served(stack: &Stack, community: Uuid) {
    let fence = fence_state(stack, community).await;
    assert!(
        fence.is_none_or(|f| f == FenceState::Serving),
        "the fence must be lifted: {fence:?}"
    );
    let guard = acquire_serving_write(&stack.serving, community, "after_abort")
        .await
        .unwrap_or_else(|e| panic!("after an abort serving writes must be admitted: {e}"));
    guard.finish().await.unwrap_or_else(|e| panic!("{e}"));
}

/// What a test saw while its policy was in place.
struct UnderPolicy {
    blocked: Option<Value>,
    markers: (bool, bool),
    target_while_blocked: Snapshot,
    abort: CliRun,
    aborted: Option<Value>,
}

impl UnderPolicy {
    /// Watches request `id` of `community` under the policy, panicking at nothing (the caller
    /// lifts the policy first): waits for its block, reads its markers and the target, aborts it
    /// and waits for the abort.
    async fn watch(stack: &Stack, cli: &Cli, id: &str, community: Uuid) -> UnderPolicy {
        let blocked = poll_status(cli, id, 120, |s| !s["blocked"].is_null()).await;
        UnderPolicy {
            blocked,
            markers: marker_columns(stack, id).await,
            target_while_blocked: snapshot(stack, community).await,
            abort: abort(cli, id).await,
            aborted: poll_status(cli, id, 60, |s| s["phase"] == "aborted").await,
        }
    }
}

/// The must-show story for one permission: blocks at preflight naming it, abort serves the
/// community again, and after the policy is lifted a resubmission completes.
async fn missing_permission_story(permission: S3Permission, tag: &str) {
    let (stack, cli, _worker) = with_policy_worker(tag, &[]).await;
    let target = Tenant::seed(&stack, tag, small_plan()).await;
    let neighbour = Tenant::seed(&stack, "kept", small_plan()).await;
    let community = target.id;
    let media = PrefixRoot::Media.prefix(community);
    // An upload in progress: what the abort permission is for.
    let upload_key = format!("{media}{:032x}{:032x}", Uuid::new_v4().as_u128(), 0u128);
    stack
        .objects
        .start_upload(&upload_key)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let target_before = snapshot(&stack, community).await;
    let neighbour_before = neighbour.kept(&stack).await;
    assert_eq!(
        target_before.uploads.len(),
        1,
        "{:?}",
        target_before.uploads
    );

    let (id, digest) = cli.submit(&target.host, "alice", &[]).await;
    let bucket = stack.objects.bucket().to_owned();
    put_test_policy(
        &stack,
        &deny_policy(&bucket, permission.action(), std::slice::from_ref(&media)),
    )
    .await;
    // Nothing below panics until the policy is lifted.
    let approve = cli.approve(&id, "bob", &digest).await;
    let seen = UnderPolicy::watch(&stack, &cli, &id, community).await;
    lift_test_policy(&stack).await;

    approve.expect_exit(0);
    let status = seen
        .blocked
        .unwrap_or_else(|| panic!("request {id} never blocked on the missing {permission}"));
    assert_eq!(status["blocked"]["phase"], "approved", "{status}");
    let reason = status["blocked"]["reason"].as_str().unwrap_or_default();
    let statement = permission.statement(&bucket, &media);
    for named in [permission.action(), media.as_str(), statement.as_str()] {
        assert!(
            reason.contains(named),
            "the block must name {named}: {reason}"
        );
    }
    assert!(
        !reason.contains(&PrefixRoot::Thumbs.prefix(community)),
        "only the denied prefix is named: {reason}"
    );
    assert_eq!(
        seen.markers,
        (false, false),
        "blocked before the irreversible marker, nothing pending"
    );
    assert_identical(
        &target_before,
        &seen.target_while_blocked,
        "the target while blocked",
    );
    seen.abort.expect_exit(0);
    let aborted = seen
        .aborted
        .unwrap_or_else(|| panic!("request {id} was not aborted"));
    assert_eq!(aborted["abort"]["actor"], "carol", "{aborted}");
    assert_served(&stack, community).await;
    let request = request_row(&stack, id.parse().unwrap_or_default()).await;
    assert_eq!(request.stage, "aborted");
    assert!(request.irreversible_at.is_none());
    assert!(request.irreversible_pending_at.is_none());
    let inspected = cli
        .run(&["--output", "table", "community", "inspect", &id])
        .await
        .expect_code(0);
    assert!(
        inspected.stdout.contains("no: S3 acknowledged no deletion"),
        "inspect says the request never crossed the irreversible point:\n{}",
        inspected.stdout
    );
    let events = audit_events(&cli, &id).await;
    assert!(!events.iter().any(|e| e == "irreversible"), "{events:?}");

    // The policy is fixed: a resubmitted deletion completes, the neighbour is untouched.
    let (again, digest) = cli.submit(&target.host, "alice", &[]).await;
    cli.approve_and_finish(&again, &digest).await;
    target.assert_gone(&stack, "the target").await;
    neighbour_before
        .assert_unchanged(&stack, "the neighbour")
        .await;
    let probe = probe_key(&media);
    let probes = read("the probes", stack.objects.snapshot_prefix(&probe)).await;
    assert!(probes.is_empty(), "the probes leave nothing behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_version_delete_permission_the_request_blocks_at_preflight_and_aborts() {
    missing_permission_story(S3Permission::DeleteObjectVersion, "no-delete").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_upload_abort_permission_the_request_blocks_at_preflight_and_aborts() {
    missing_permission_story(S3Permission::AbortMultipartUpload, "no-abort").await;
}

/// The marker rule through the CLI: the permission is revoked after preflight (a serving write
/// holds the fence meanwhile), so every DeleteObjects call is refused whole. The request blocks
/// in `deleting_objects` with the marker unset, and abort serves the community again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_delete_refused_whole_leaves_the_marker_unset_and_the_request_abortable() {
    let (stack, cli, _worker) =
        with_policy_worker("revoked", &[("BUZZ_FENCE_WAIT_SECS", "1")]).await;
    let target = Tenant::seed(&stack, "revoked", small_plan()).await;
    let community = target.id;
    let target_before = snapshot(&stack, community).await;
    let (id, digest) = cli
        .submit(&target.host, "alice", &["--retry-max-secs", "2"])
        .await;

    // Preflight passes; the fence waits for this lease.
    let lease = acquire_serving_write(&stack.serving, community, "slow_upload")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    cli.approve(&id, "bob", &digest).await.expect_code(0);
    cli.wait_status(&id, 60, |s| s["phase"] == "fencing").await;
    let bucket = stack.objects.bucket().to_owned();
    let prefixes: Vec<String> = activities::taxonomy::tenant_prefixes(community).to_vec();
    put_test_policy(
        &stack,
        &deny_policy(&bucket, "s3:DeleteObjectVersion", &prefixes),
    )
    .await;
    // Nothing below panics until the policy is lifted.
    let released = lease.finish().await;
    let seen = UnderPolicy::watch(&stack, &cli, &id, community).await;
    lift_test_policy(&stack).await;

    released.unwrap_or_else(|e| panic!("{e}"));
    let status = seen
        .blocked
        .unwrap_or_else(|| panic!("request {id} never blocked on the refused deletes"));
    assert_eq!(status["blocked"]["phase"], "deleting_objects", "{status}");
    let reason = status["blocked"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("AccessDenied"), "{reason}");
    assert_eq!(
        seen.markers,
        (false, false),
        "every DeleteObjects was refused whole: no marker, nothing pending"
    );
    assert_identical(
        &target_before,
        &seen.target_while_blocked,
        "the target while blocked",
    );
    seen.abort.expect_exit(0);
    assert!(seen.aborted.is_some(), "request {id} was not aborted");
    assert_served(&stack, community).await;
    let events = audit_events(&cli, &id).await;
    assert!(
        events.iter().any(|e| e == "destructive_calls_refused"),
        "{events:?}"
    );
    assert!(!events.iter().any(|e| e == "irreversible"), "{events:?}");
    assert!(events.iter().any(|e| e == "aborted"), "{events:?}");
    assert_unchanged(&stack, community, &target_before, "the aborted target").await;
}
