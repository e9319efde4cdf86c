//! Fencing under live serving traffic: the fence holds while the relay keeps writing.
//!
//! - the serving simulator (`buzz-deletion demo serve`) writes to a target and two neighbours
//!   throughout a deletion: the target ends empty, its writes are refused from the fence on, and
//!   every neighbour write admitted is still there;
//! - a slow serving write admitted before quiescing holds the fence until it finishes, and what it
//!   wrote is frozen into the manifest and deleted;
//! - a lease abandoned by a crashed serving process holds the fence only until it expires;
//! - a serving process that loses its database has its protected write cancelled, and the fence
//!   proceeds once the orphaned lease expires. (The library-level claim, that a lost heartbeat
//!   cancels the protected future, is `protect_cancels_the_write_when_the_heartbeat_is_lost` in
//!   `activities/tests/serving_it.rs`; this test adds the deletion around it.)

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use activities::serving::{ServingLeaseConfig, acquire_serving_write_with};
use activities::store::{FenceState, Store};
use activities::taxonomy::{ManifestEntry, PrefixRoot};
use demo::simulator::{SimulationReport, missing_admitted_writes};
use demo::{content_hash, writer_key};
use sqlx::types::chrono::{DateTime, Utc};
use temporalio_client::{WorkflowDescribeOptions, WorkflowExecutionDescription};
use tokio::process::{Child, Command};
use uuid::Uuid;
use workflows::community::CommunityDeletion;

use testkit::poll;
use testkit::prelude::*;
use testkit::records::{community_exists, fence_state, read};
use testkit::refusal::{audit_trail, request_row};
use testkit::seed::abandoned_s3_put_lease;

/// Temporal's name of the fence activity.
const FENCE_ACTIVITY: &str = "community.fence";

/// What the fence reports while one lease is still live (heartbeat step and failure message).
const WAITING_ON_ONE_LEASE: &str = "waiting on 1 live serving-write lease";

/// A `buzz-deletion demo serve` process.
struct ServeProcess {
    child: Child,
}

impl ServeProcess {
    /// Serves `hosts` at `rate` writes/s each, recording every admitted write.
    fn start(hosts: &[&str], rate: u32) -> ServeProcess {
        let child = Command::new(bin("buzz-deletion"))
            .args([
                "demo",
                "serve",
                "--hosts",
                &hosts.join(","),
                "--rate",
                &rate.to_string(),
                "--record-admitted",
                "100000",
            ])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("could not start buzz-deletion demo serve: {e}"));
        ServeProcess { child }
    }

    /// Sends SIGTERM, waits for the report, and returns it with the exit code.
    async fn stop(self) -> (i32, SimulationReport) {
        let pid = self
            .child
            .id()
            .unwrap_or_else(|| panic!("demo serve already exited"));
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap_or_else(|e| panic!("kill -TERM {pid}: {e}"));
        assert!(status.success(), "kill -TERM {pid} failed");
        let output = tokio::time::timeout(Duration::from_secs(60), self.child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("demo serve did not stop within 60 s of SIGTERM"))
            .unwrap_or_else(|e| panic!("demo serve: {e}"));
        let stdout = String::from_utf8_lossy(&output.stdout);
        let report = serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!(
                "demo serve printed no report ({e})\nstdout: {stdout}\nstderr: {}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
        (output.status.code().unwrap_or(-1), report)
    }
}

/// Approves as bob and watches the deletion to its end; panics unless it verified.
async fn approve_and_watch(cli: &Cli, id: &str, digest: &str) {
    approve(cli, id, digest).await;
    watch(cli, id).await;
}

async fn approve(cli: &Cli, id: &str, digest: &str) {
    cli.approve(id, "bob", digest).await.expect_code(0);
}

async fn watch(cli: &Cli, id: &str) {
    let watched = cli.watch_within(id, 300, 300).await;
    assert!(watched.stdout.contains("verified"), "{}", watched.stdout);
}

fn request_id(id: &str) -> Uuid {
    id.parse()
        .unwrap_or_else(|e| panic!("request id {id:?}: {e}"))
}

/// When the request's audit trail first recorded `event`.
async fn audit_time(stack: &Stack, id: &str, event: &str) -> DateTime<Utc> {
    let trail = audit_trail(stack, request_id(id)).await;
    trail
        .iter()
        .find(|e| e.event == event)
        .map(|e| e.at)
        .unwrap_or_else(|| {
            let events: Vec<&str> = trail.iter().map(|e| e.event.as_str()).collect();
            panic!("no {event:?} event in the audit trail: {events:?}")
        })
}

/// Waits until the community's fence is in `state` (a plain loop: the slow write's spawned task
/// waits here too, and must be `Send`).
async fn wait_fence_state(store: &Store, community: Uuid, state: FenceState, secs: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let status = read("fence status", store.fence_status(community)).await;
        if status.as_ref().is_some_and(|s| s.state == state) {
            return;
        }
        let waited = tokio::time::Instant::now() < deadline;
        assert!(
            waited,
            "the fence of {community} never reached {state}: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The request's workflow as Temporal describes it (pending activities, heartbeats, failures).
async fn describe(stack: &Stack, id: &str) -> WorkflowExecutionDescription {
    let request = request_row(stack, request_id(id)).await;
    let client = testkit::temporal::dev_client().await;
    client
        .get_workflow_handle::<CommunityDeletion>(request.workflow_id)
        .describe(WorkflowDescribeOptions::default())
        .await
        .unwrap_or_else(|e| panic!("describe workflow of {id}: {e}"))
}

/// What the Web UI shows of the pending fence activity: (attempt, last heartbeat details, last
/// failure message).
async fn pending_fence(stack: &Stack, id: &str) -> Option<(i32, String, String)> {
    let description = describe(stack, id).await;
    description
        .raw_description
        .pending_activities
        .iter()
        .find(|a| {
            a.activity_type
                .as_ref()
                .is_some_and(|t| t.name == FENCE_ACTIVITY)
        })
        .map(|a| {
            let details = a
                .heartbeat_details
                .as_ref()
                .map(|p| {
                    p.payloads
                        .iter()
                        .map(|payload| String::from_utf8_lossy(&payload.data).into_owned())
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_default();
            let failure = a
                .last_failure
                .as_ref()
                .map(|f| f.message.clone())
                .unwrap_or_default();
            (a.attempt, details, failure)
        })
}

/// Polls the pending fence activity until `seen` holds (panics after `secs`).
async fn wait_pending_fence(
    stack: &Stack,
    id: &str,
    secs: u64,
    seen: impl Fn(i32, &str, &str) -> bool,
) -> (i32, String, String) {
    poll::until(
        Duration::from_secs(secs),
        Duration::from_millis(250),
        async || match pending_fence(stack, id).await {
            Some((attempt, details, failure)) if seen(attempt, &details, &failure) => {
                Ok((attempt, details, failure))
            }
            last => Err(format!(
                "the pending fence activity never showed the expected state; last: {last:?}"
            )),
        },
    )
    .await
}

/// Every version of `key` in the bucket.
async fn versions_of(stack: &Stack, key: &str) -> usize {
    let listed = read(
        format_args!("list {key}"),
        stack.objects.snapshot_prefix(key),
    )
    .await;
    listed.iter().filter(|v| v.key == key).count()
}

/// The destructive manifest frozen for the request, decoded.
async fn frozen_manifest(stack: &Stack, id: &str) -> Vec<ManifestEntry> {
    let chunks: Vec<serde_json::Value> = sqlx::query_scalar(
        "SELECT entries FROM deletion.manifest_chunks WHERE request_id = $1 ORDER BY chunk_no",
    )
    .bind(request_id(id))
    .fetch_all(stack.store.pool())
    .await
    .unwrap_or_else(|e| panic!("read manifest: {e}"));
    chunks
        .iter()
        .flat_map(|chunk| chunk.as_array().cloned().unwrap_or_default())
        .map(|entry| {
            let encoded = entry.as_str().unwrap_or_default().to_owned();
            ManifestEntry::decode(&encoded).unwrap_or_else(|e| panic!("{encoded}: {e}"))
        })
        .collect()
}

/// (released_at, expires_at) of one lease row.
async fn lease_times(stack: &Stack, lease: Uuid) -> (Option<DateTime<Utc>>, DateTime<Utc>) {
    sqlx::query_as(
        "SELECT released_at, expires_at FROM deletion.serving_write_leases WHERE id = $1",
    )
    .bind(lease)
    .fetch_one(stack.store.pool())
    .await
    .unwrap_or_else(|e| panic!("lease {lease}: {e}"))
}

/// The key a serving writer puts content number `n` of `community` under, below `root`.
fn served_key(root: PrefixRoot, community: Uuid, n: u32) -> String {
    writer_key(root, community, &content_hash(community, n))
}

/// A lease of `ttl` held by `owner` that its heartbeat renews every half second.
fn heartbeating_lease(ttl: Duration, owner: &str) -> ServingLeaseConfig {
    ServingLeaseConfig {
        ttl,
        renew_every: Duration::from_millis(500),
        owner: owner.to_owned(),
    }
}

/// Panics unless the community holds nothing in any store and its row is gone.
async fn assert_erased(stack: &Stack, community: Uuid) {
    let after = snapshot(stack, community).await;
    after.assert_gone("the target");
    let row_gone = !community_exists(stack, community).await;
    assert!(row_gone, "the community row itself must be gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_is_erased_under_live_traffic_and_every_admitted_neighbour_write_survives() {
    let (stack, cli, _worker) = with_worker("serving-load", &[]).await;

    let target_host = unique_host("served-target");
    let target = seed(&stack, &target_host, small_plan()).await;
    let neighbours = [unique_host("served-left"), unique_host("served-right")];
    for host in &neighbours {
        seed(&stack, host, small_plan()).await;
    }
    let started = tokio::time::Instant::now();
    let serving = ServeProcess::start(&[&target_host, &neighbours[0], &neighbours[1]], 50);
    // Traffic reaches every community before the deletion starts.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let (id, digest) = cli
        .submit(&target_host, "alice", &["--reason", "tenant asked"])
        .await;
    approve_and_watch(&cli, &id, &digest).await;
    let deleted_in = started.elapsed();
    // Writes keep coming after the deletion: they must be refused too.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (code, report) = serving.stop().await;
    eprintln!(
        "deletion under load finished {:.1} s after traffic started; simulator: {}",
        deleted_in.as_secs_f64(),
        serde_json::to_string(
            &report
                .communities
                .iter()
                .map(|c| (&c.host, c.totals, &c.failure_samples))
                .collect::<Vec<_>>()
        )
        .unwrap_or_default()
    );
    assert_eq!(code, 0, "no serving write may fail (samples above)");

    assert_erased(&stack, target.community_id).await;

    let served = report
        .community(&target_host)
        .unwrap_or_else(|| panic!("no report for the target"));
    assert!(
        served.totals.admitted > 0,
        "the target was served before the deletion: {:?}",
        served.totals
    );
    assert_eq!(served.totals.failed, 0, "{:?}", served.failure_samples);
    for (kind, counts) in [
        ("rows", served.by_kind.rows),
        ("new objects", served.by_kind.new_objects),
        ("new versions", served.by_kind.new_versions),
        ("cache keys", served.by_kind.cache_keys),
    ] {
        assert!(
            counts.refused > 0,
            "target {kind} writes were never refused: {counts:?}"
        );
    }
    let quiescing_at = audit_time(&stack, &id, "quiescing").await;
    let first_refusal = served
        .first_refused_at
        .unwrap_or_else(|| panic!("no refusal time recorded"));
    assert!(
        first_refusal >= quiescing_at,
        "a target write was refused at {first_refusal}, before quiescing began at {quiescing_at}"
    );

    for host in &neighbours {
        let served = report
            .community(host)
            .unwrap_or_else(|| panic!("no report for {host}"));
        assert!(served.totals.admitted > 0, "{host}: {:?}", served.totals);
        assert_eq!(
            served.totals.refused, 0,
            "neighbour {host} must never be refused"
        );
        assert_eq!(served.totals.failed, 0, "{:?}", served.failure_samples);
        let admitted = served.admitted.clone().unwrap_or_default();
        assert!(!admitted.truncated, "the run must record every write");
        assert_eq!(
            (admitted.rows.len() + admitted.objects.len() + admitted.keys.len()) as u64,
            served.totals.admitted
        );
        let missing = missing_admitted_writes(&stack.store, &stack.objects, &stack.cache, served)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            missing.is_empty(),
            "admitted writes of neighbour {host} are gone: {missing:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_write_admitted_before_quiescing_holds_the_fence_and_its_object_is_deleted() {
    let (stack, cli, _worker, target) = with_target("slow-write", &[]).await;
    let community = target.id;
    let (id, digest) = cli.submit(&target.host, "alice", &[]).await;

    // Admitted now, before quiescing; its put happens well after quiescing began and outlives the
    // lease's TTL, so only the heartbeat's renewals keep it admitted.
    let lease = heartbeating_lease(Duration::from_secs(3), "slow-relay");
    let guard = acquire_serving_write_with(&stack.serving, community, "slow_s3_put", &lease)
        .await
        .unwrap_or_else(|e| panic!("admission before quiescing: {e}"));
    let lease_id = guard.lease().id;
    let key = served_key(PrefixRoot::Media, community, 9_999);
    let slow_write = {
        let store = stack.store.clone();
        let objects = stack.objects.clone();
        let key = key.clone();
        tokio::spawn(async move {
            let written = guard
                .protect(async {
                    wait_fence_state(&store, community, FenceState::Quiescing, 120).await;
                    tokio::time::sleep(Duration::from_secs(10)).await;
                    objects.put_object(&key, b"slow upload".to_vec()).await
                })
                .await;
            (written, guard.finish().await)
        })
    };

    approve(&cli, &id, &digest).await;
    wait_fence_state(&stack.store, community, FenceState::Quiescing, 120).await;
    let (_, details, _) = wait_pending_fence(&stack, &id, 8, |_, details, _| {
        details.contains(WAITING_ON_ONE_LEASE)
    })
    .await;
    assert!(
        !slow_write.is_finished(),
        "the slow write must still be running: {details}"
    );
    assert_eq!(
        fence_state(&stack, community).await,
        Some(FenceState::Quiescing),
        "the fence must not close while an admitted write runs"
    );

    let (written, finished) = slow_write.await.unwrap_or_else(|e| panic!("{e}"));
    let version_id = written
        .unwrap_or_else(|e| panic!("the admitted write lost its lease: {e}"))
        .unwrap_or_else(|e| panic!("the slow put failed: {e}"));
    finished.unwrap_or_else(|e| panic!("the admitted write could not finish: {e}"));
    // Read now: a worker's reaper deletes the row once it is past its window.
    let (released_at, _) = lease_times(&stack, lease_id).await;
    watch(&cli, &id).await;

    let released_at = released_at.unwrap_or_else(|| panic!("the lease was never released"));
    let fenced_at = audit_time(&stack, &id, "fenced").await;
    assert!(
        fenced_at >= released_at,
        "fenced at {fenced_at}, before the slow write released its lease at {released_at}"
    );
    let manifest = frozen_manifest(&stack, &id).await;
    assert!(
        manifest
            .iter()
            .any(|e| e.key == key && e.version_id == version_id),
        "the slow write's version {key}@{version_id} is not in the frozen manifest"
    );
    assert_eq!(versions_of(&stack, &key).await, 0, "{key} was not deleted");
    assert_erased(&stack, community).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_abandoned_by_a_crashed_serving_process_holds_the_fence_only_until_it_expires() {
    // A short fence wait makes the fence activity fail and retry while the lease lives.
    let fence_wait = [("BUZZ_FENCE_WAIT_SECS", "2")];
    let (stack, cli, _worker, target) = with_target("abandoned-lease", &fence_wait).await;
    let community = target.id;
    let (id, digest) = cli.submit(&target.host, "alice", &[]).await;

    // A serving process admitted a write and died: nobody renews or releases this lease.
    let crashed = "crashed-relay:4242";
    let abandoned = abandoned_s3_put_lease(&stack, community, crashed, Duration::from_secs(15));
    let abandoned = abandoned.await;
    approve(&cli, &id, &digest).await;

    let (attempt, _, failure) = wait_pending_fence(&stack, &id, 14, |attempt, _, failure| {
        attempt >= 2 && failure.contains(WAITING_ON_ONE_LEASE)
    })
    .await;
    eprintln!("fence attempt {attempt} retrying after: {failure}");
    assert_eq!(
        fence_state(&stack, community).await,
        Some(FenceState::Quiescing),
        "the fence must not close while the abandoned lease lives"
    );
    // `community status` names the lease the fence waits for, its writer and until when.
    let status = cli.wait_status(&id, 10, |s| s["phase"] == "fencing").await;
    let awaited = status["awaited_leases"]
        .as_array()
        .unwrap_or_else(|| panic!("status lists no awaited leases while fencing: {status}"));
    assert_eq!(awaited.len(), 1, "{status}");
    assert_eq!(awaited[0]["id"], abandoned.id.to_string());
    assert_eq!(awaited[0]["holds"], "fence");
    assert_eq!(awaited[0]["owner"], "crashed-relay:4242");
    assert_eq!(awaited[0]["operation"], "s3_put");
    let table = cli
        .run(&["--output", "table", "community", "status", &id])
        .await;
    assert!(
        table
            .stdout
            .contains("awaited leases: fencing waits for 1 serving write(s)")
            && table.stdout.contains(&abandoned.id.to_string())
            && table.stdout.contains("crashed-relay:4242"),
        "the table names the lease and its writer:\n{}",
        table.stdout
    );

    // Read now (nobody renews or releases it any more: its times are final): a worker's reaper
    // deletes the row once it is past its window.
    let (released_at, expires_at) = lease_times(&stack, abandoned.id).await;
    watch(&cli, &id).await;
    let fenced_at = audit_time(&stack, &id, "fenced").await;
    assert_eq!(released_at, None, "nobody released the abandoned lease");
    assert!(
        fenced_at >= expires_at,
        "fenced at {fenced_at}, before the abandoned lease expired at {expires_at}"
    );
    assert_erased(&stack, community).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serving_process_cut_off_from_its_database_abandons_its_write_before_the_fence_closes() {
    let (stack, cli, _worker, target) = with_target("lost-heartbeat", &[]).await;
    let community = target.id;
    let (id, digest) = cli.submit(&target.host, "alice", &[]).await;

    // The serving process has its own connection pool: closing it cuts only that process off.
    let database_url = testkit::env::required(stack_config::env::SERVING_DATABASE_URL);
    let serving_store = Store::connect(&database_url)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL: {e}"));
    let lease = heartbeating_lease(Duration::from_secs(4), "partitioned-relay");
    let guard = acquire_serving_write_with(&serving_store, community, "s3_put", &lease)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let lease_id = guard.lease().id;
    let key = served_key(PrefixRoot::Thumbs, community, 8_888);
    let dropped = Arc::new(AtomicBool::new(false));
    let protected = {
        let objects = stack.objects.clone();
        let key = key.clone();
        let dropped = Arc::clone(&dropped);
        tokio::spawn(async move {
            let outcome = guard
                .protect(async move {
                    let _dropped = DropFlag(dropped);
                    // Long enough that only a cancellation ends it before the deletion does.
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    objects.put_object(&key, b"late upload".to_vec()).await
                })
                .await;
            let lost = guard.is_lost();
            (outcome.map(|_| ()), lost)
        })
    };

    approve(&cli, &id, &digest).await;
    wait_fence_state(&stack.store, community, FenceState::Quiescing, 120).await;
    serving_store.pool().close().await;
    let cut_off = tokio::time::Instant::now();
    let (outcome, lost) = tokio::time::timeout(Duration::from_secs(10), protected)
        .await
        .unwrap_or_else(|_| panic!("the protected write was not cancelled within 10 s"))
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "protected write cancelled {:.1} s after the database was cut off",
        cut_off.elapsed().as_secs_f64()
    );
    assert!(
        outcome.as_ref().is_err_and(|e| e.is_lease_lost()),
        "the write must end with a lost lease: {outcome:?}"
    );
    assert!(lost, "the guard must report its lease lost");
    assert!(
        dropped.load(Ordering::SeqCst),
        "the protected future was dropped"
    );
    assert_eq!(
        versions_of(&stack, &key).await,
        0,
        "the cancelled write landed"
    );

    // Read now (the lost lease is renewed no more: its expiry is final): a worker's reaper
    // deletes the row once it is past its window.
    let (_, expires_at) = lease_times(&stack, lease_id).await;
    watch(&cli, &id).await;
    let fenced_at = audit_time(&stack, &id, "fenced").await;
    assert!(
        fenced_at >= expires_at,
        "fenced at {fenced_at}, before the orphaned lease expired at {expires_at}"
    );
    assert_eq!(
        versions_of(&stack, &key).await,
        0,
        "the cancelled write landed"
    );
    assert_erased(&stack, community).await;
}

/// Sets its flag when dropped: proves a future was dropped (cancelled), not left running.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}
