//! The taxonomy sweep through the real CLI and worker: a stray key is counted and named in the
//! record Postgres keeps, and the record never holds back a deletion; the cap stops listing,
//! and a cap of zero is a usage error; `sweep schedule` leaves a Temporal Schedule the server
//! describes back, which `sweep unschedule` removes.

use std::time::Duration;

use activities::s3::ObjectVersionRef;
use activities::taxonomy::tenant_prefixes;
use serde_json::Value;
use temporalio_client::schedules::{ScheduleDescriptionAction, ScheduleError};
use temporalio_client::tonic::Code;
use uuid::Uuid;

use testkit::prelude::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_run_counts_a_stray_tenant_key_names_it_in_postgres_and_never_gates_a_deletion() {
    let (stack, cli, _worker) = with_worker("sweep", &[]).await;
    let host = unique_host("sweep");
    let target = seed(&stack, &host, small_plan()).await;
    // `_meta/` sorts before `media/` and `thumbs/`, so the stray lands early in listing order and
    // inside the 100-key sample even when other tests' strays exist.
    let stray = format!(
        "_meta/{}/sweep-stray-{}.tmp",
        target.community_id,
        Uuid::new_v4().simple()
    );
    let stray_version = stack
        .objects
        .put_object(&stray, b"stray".to_vec())
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let swept = cli.run(&["sweep", "run"]).await;
    // Remove the stray before asserting, so a failed assertion leaves the bucket clean.
    stack
        .objects
        .delete_versions(&[ObjectVersionRef {
            key: stray.clone(),
            version_id: stray_version,
        }])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let record = swept.expect_code(1).json();
    let sample: Vec<String> = record["unknown_key_sample"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|k| k.as_str().map(str::to_owned))
        .collect();
    assert!(
        sample.contains(&stray),
        "the sample must name the stray key: {record}"
    );
    let own_prefixes = tenant_prefixes(target.community_id);
    let own_unknown: Vec<&String> = sample
        .iter()
        .filter(|k| own_prefixes.iter().any(|p| k.starts_with(p.as_str())))
        .collect();
    assert_eq!(
        own_unknown,
        vec![&stray],
        "the community's exact-shape keys must not count as unknown"
    );
    let unknown = record["unknown_object_count"].as_u64().unwrap_or_default();
    let listed = record["listed_objects"].as_u64().unwrap_or_default();
    assert!(unknown >= sample.len() as u64, "{record}");
    assert!(
        listed > unknown,
        "the seeded keys were listed too: {record}"
    );
    assert_eq!(record["reached_cap"], false);

    let id: Uuid = record["id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("the record has no id: {record}"));
    let stored = stack
        .store
        .latest_sweeps(1000)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .find(|s| s.id == id)
        .unwrap_or_else(|| panic!("sweep {id} is not recorded in Postgres"));
    assert_eq!(stored.found.unknown_object_count, unknown);
    assert_eq!(stored.found.listed_objects, listed);
    assert!(stored.found.unknown_key_sample.contains(&stray));

    let listed_by_cli = cli
        .run(&["sweep", "list", "--limit", "1000"])
        .await
        .expect_code(0);
    assert!(
        listed_by_cli.stdout.contains(&id.to_string()),
        "`sweep list` must show the record"
    );

    // The sweep only observes: its record names a key under this very community's prefix
    // (removed since), and the community's deletion is still submitted, approved and finished.
    let (request, digest) = cli.submit(&host, "alice", &[]).await;
    cli.approve_and_finish(&request, &digest).await;
    snapshot(&stack, target.community_id)
        .await
        .assert_gone("the swept community");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_run_stops_at_the_object_cap_and_says_so() {
    let (stack, cli, _worker) = with_worker("sweep-cap", &[]).await;
    // Two objects at least, so a cap of one leaves something unlisted.
    seed(&stack, &unique_host("sweep-cap"), small_plan()).await;
    let record = cli
        .run(&["sweep", "run", "--max-objects", "1"])
        .await
        .json();
    assert_eq!(record["object_cap"], 1, "{record}");
    assert_eq!(record["listed_objects"], 1, "{record}");
    assert_eq!(record["reached_cap"], true, "{record}");
}

/// A cap of zero is a usage error (exit 2) before anything runs, whether it comes from the flag
/// or from `BUZZ_SWEEP_MAX_OBJECTS`; the predecessor's fallback to the default is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_cap_of_zero_is_refused_from_the_flag_and_from_the_environment() {
    let queue = unique_queue("sweep-zero");
    let cli = Cli::new(&queue);
    let from_env = Cli::new(&queue).with_env("BUZZ_SWEEP_MAX_OBJECTS", "0");
    for (cli, args) in [
        (&cli, &["sweep", "run", "--max-objects", "0"][..]),
        (&from_env, &["sweep", "run"][..]),
        (&from_env, &["sweep", "schedule", "--every", "24h"][..]),
    ] {
        let refused = cli.run(args).await.expect_code(2);
        assert!(
            refused.stderr.contains("--max-objects"),
            "{args:?}: {}",
            refused.stderr
        );
        assert!(refused.stdout.is_empty(), "{args:?}: {}", refused.stdout);
    }
}

/// Deletes the schedule even when an assertion fails half-way.
struct UnscheduleOnDrop {
    queue: String,
    id: String,
}

impl Drop for UnscheduleOnDrop {
    fn drop(&mut self) {
        let _ = std::process::Command::new(bin("buzz-deletion"))
            .args(["sweep", "unschedule", "--schedule-id", &self.id])
            .env("BUZZ_TASK_QUEUE", &self.queue)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// `sweep schedule --every EVERY --schedule-id ID` (must exit 0), which must answer `outcome`
/// with a period of `secs`; what it printed.
async fn schedule(cli: &Cli, id: &str, (every, secs): (&str, u64), outcome: &str) -> Value {
    let args = ["sweep", "schedule", "--every", every, "--schedule-id", id];
    let scheduled = cli.run(&args).await.expect_code(0).json();
    assert_eq!(scheduled["outcome"], outcome, "{scheduled}");
    let period = serde_json::json!([secs]);
    assert_eq!(scheduled["every_secs"], period, "{scheduled}");
    scheduled
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_schedule_creates_then_updates_a_schedule_the_server_describes_and_unschedule_removes_it()
 {
    let _shared = outage_lock().read().await;
    let queue = unique_queue("sweep-schedule");
    let cli = Cli::new(&queue);
    let id = format!("test-sweep-{}", Uuid::new_v4().simple());
    let _cleanup = UnscheduleOnDrop {
        queue: queue.clone(),
        id: id.clone(),
    };

    let created = schedule(&cli, &id, ("24h", 86_400), "created").await;
    assert_eq!(created["workflow_type"], "TaxonomySweep", "{created}");
    assert_eq!(created["task_queue"], queue.as_str(), "{created}");

    let client = testkit::temporal::dev_client().await;
    let handle = client.get_schedule_handle(id.clone());
    let description = handle
        .describe(Default::default())
        .await
        .unwrap_or_else(|e| panic!("the schedule {id} must exist: {e}"));
    let ScheduleDescriptionAction::StartWorkflow(action) = description.action() else {
        panic!("the schedule must start a workflow");
    };
    assert_eq!(action.workflow_type(), "TaxonomySweep");
    assert_eq!(action.task_queue(), queue);
    let first_run = description.future_action_times().first().copied();
    let in_a_day = std::time::SystemTime::now() + Duration::from_secs(86_400 + 60);
    assert!(
        first_run.is_some_and(|t| t <= in_a_day),
        "the next sweep must be due within a day: {first_run:?}"
    );

    schedule(&cli, &id, ("12h", 43_200), "updated").await;

    cli.run(&["sweep", "unschedule", "--schedule-id", &id])
        .await
        .expect_code(0);
    match handle.describe(Default::default()).await {
        Err(ScheduleError::Rpc(status)) if status.code() == Code::NotFound => {}
        other => panic!("the schedule must be gone after unschedule: {other:?}"),
    }
    cli.run(&["sweep", "unschedule", "--schedule-id", &id])
        .await
        .expect_code(1);
}
