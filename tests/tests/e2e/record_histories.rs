//! Records the workflow histories `workflows/tests/histories/` replays: one closed history per
//! path a deployed worker may have in flight, made by today's workflow code on the real local
//! stack, saved in the Rust client's own history JSON (`WorkflowHistory::to_json`).
//!
//! Every test here is `#[ignore]`d: it is a recording tool, not part of the suite. Run it with
//! `bash deploy/local/record-histories` (or `cargo test -p e2e --test e2e record_histories:: --
//! --ignored`). A file that exists is kept and never rewritten: a recorded history is evidence of
//! what an older build did, and regenerating it to make a change pass would destroy exactly what
//! it protects (see `docs/upgrades.md`). To add a path, add a test here with a new file name.
//!
//! Each test drives the path through the real `buzz-deletion` CLI and a real
//! `buzz-deletion-worker` process on a task queue of its own (`record-…`), with the e2e operator
//! keys (`testkit::operators`), then waits until the workflow is closed and saves every run.

use std::path::PathBuf;
use std::time::Duration;

use activities::s3::ObjectVersionRef;
use temporalio_client::{
    Client, UntypedWorkflowHandle, WorkflowCancelOptions, WorkflowExecutionInfo,
    WorkflowExecutionStatus,
};
use temporalio_common::protos::temporal::api::history::v1::HistoryEvent;
use temporalio_common::protos::temporal::api::history::v1::history_event::Attributes;
use testkit::env::temporal_namespace;
use testkit::poll;
use testkit::prelude::*;
use testkit::seed::tiny_plan;
use testkit::temporal::{dev_client, web_ui_signal};
use testkit::user::wait_for_database_deadline;
use uuid::Uuid;
use workflows::user::inventory::DEMO_FORMER_PARTICIPANT_COMMUNITY;

/// Longest a recording waits for its workflow to close.
const CLOSE_PATIENCE: Duration = Duration::from_secs(240);

/// Where the histories go: `BUZZ_HISTORIES_DIR`, else `workflows/tests/histories/`.
fn histories_dir() -> PathBuf {
    std::env::var("BUZZ_HISTORIES_DIR")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("workflows/tests/histories"))
}

/// True when `name` is already recorded: the recording is then skipped (never rewritten).
fn already_recorded(name: &str) -> bool {
    let path = histories_dir().join(name);
    let exists = path.exists();
    if exists {
        eprintln!(
            "kept {} (a recorded history is never regenerated; record a new path under a new name)",
            path.display()
        );
    }
    exists
}

/// What every recording starts with: the stack, the Temporal client, and a worker on the
/// path's own task queue with the CLI bound to it.
struct Recording {
    /// The history file this recording writes.
    name: &'static str,
    /// The path recorded, in its queue's and its hosts' names.
    path: &'static str,
    stack: Stack,
    client: Client,
    queue: String,
    cli: Cli,
    _worker: WorkerProcess,
}

/// Starts recording `name` on a queue of its own for `path`, its worker given `worker_env`;
/// `None` when the file exists already (a recorded history is never rewritten).
async fn begin(
    name: &'static str,
    path: &'static str,
    worker_env: &[(&str, &str)],
) -> Option<Recording> {
    if already_recorded(name) {
        return None;
    }
    let stack = stack().await;
    let client = dev_client().await;
    let queue = format!("record-{path}-{}", Uuid::new_v4().simple());
    let worker = WorkerProcess::start(&queue, worker_env).await;
    Some(Recording {
        name,
        path,
        stack,
        client,
        cli: Cli::new(&queue),
        queue,
        _worker: worker,
    })
}

impl Recording {
    /// A tiny community on a host of this recording's own (`record-PATH-…`).
    async fn community(&self) -> Tenant {
        let tag = format!("record-{}", self.path);
        Tenant::seed(&self.stack, &tag, tiny_plan()).await
    }

    /// A tiny community of its own, submitted by alice with `extra`: (request id, digest).
    async fn submitted(&self, extra: &[&str]) -> (String, String) {
        let host = self.community().await.host;
        self.cli.submit(&host, "alice", extra).await
    }

    /// Saves the single closed run of `workflow_id` as this recording's file.
    async fn save_only_run(&self, workflow_id: &str) {
        save_only_run(&self.client, workflow_id, self.name).await;
    }
}

/// An `#[ignore]`d recording test named `$test`, writing `$test.json` (or `$name`) for path
/// `$path` with a worker given `$env`; the body runs with the [`Recording`] bound to
/// `$recording`, unless the file exists already.
macro_rules! recording {
    ($test:ident, $path:literal, $env:expr, |$recording:ident| $body:block) => {
        recording!($test => concat!(stringify!($test), ".json"), $path, $env, |$recording| $body);
    };
    ($test:ident => $name:expr, $path:literal, $env:expr, |$recording:ident| $body:block) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[ignore = "records a history on the local stack: deploy/local/record-histories"]
        async fn $test() {
            if let Some($recording) = begin($name, $path, $env).await {
                $body
            }
        }
    };
}

fn handle(
    client: &Client,
    workflow_id: &str,
    run_id: Option<&str>,
) -> UntypedWorkflowHandle<Client> {
    WorkflowExecutionInfo::builder()
        .namespace(temporal_namespace())
        .workflow_id(workflow_id)
        .maybe_run_id(run_id.map(str::to_owned))
        .build()
        .bind_untyped(client.clone())
}

async fn events(client: &Client, workflow_id: &str, run_id: &str) -> Vec<HistoryEvent> {
    handle(client, workflow_id, Some(run_id))
        .fetch_history(Default::default())
        .into_events()
        .await
        .unwrap_or_else(|e| panic!("history of {workflow_id} run {run_id}: {e}"))
}

/// Whether `event` closes its run the way a recording may end: completed, failed, cancelled, or
/// continued as new (never terminated or timed out: those are not paths the code took).
fn closes_run(event: &HistoryEvent) -> bool {
    matches!(
        event.attributes,
        Some(
            Attributes::WorkflowExecutionCompletedEventAttributes(_)
                | Attributes::WorkflowExecutionFailedEventAttributes(_)
                | Attributes::WorkflowExecutionCanceledEventAttributes(_)
                | Attributes::WorkflowExecutionContinuedAsNewEventAttributes(_)
        )
    )
}

/// Waits until the latest run of `workflow_id` is closed; returns every run id of its
/// continue-as-new chain, first to last.
async fn wait_closed(client: &Client, workflow_id: &str) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + CLOSE_PATIENCE;
    let last = loop {
        let description = handle(client, workflow_id, None)
            .describe(Default::default())
            .await
            .unwrap_or_else(|e| panic!("describe {workflow_id}: {e}"));
        if description.status() != WorkflowExecutionStatus::Running {
            break description.run_id().to_owned();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{workflow_id} still runs after {CLOSE_PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let mut runs = vec![last];
    loop {
        let first = runs.first().cloned().unwrap_or_default();
        let history = events(client, workflow_id, &first).await;
        let previous = history.first().and_then(|e| match &e.attributes {
            Some(Attributes::WorkflowExecutionStartedEventAttributes(started))
                if !started.continued_execution_run_id.is_empty() =>
            {
                Some(started.continued_execution_run_id.clone())
            }
            _ => None,
        });
        match previous {
            Some(run) => runs.insert(0, run),
            None => return runs,
        }
    }
}

/// Saves run `run_id` of `workflow_id` as `name`, after checking the run is closed by a
/// recording-worthy event and decodes back. Prints the file, its size and its event count.
async fn save(client: &Client, workflow_id: &str, run_id: &str, name: &str) {
    let history = events(client, workflow_id, run_id).await;
    let last = history
        .last()
        .unwrap_or_else(|| panic!("{workflow_id} run {run_id} has no events"));
    assert!(
        closes_run(last),
        "{workflow_id} run {run_id} did not reach its end (last event type {})",
        last.event_type
    );
    let count = history.len();
    let json = handle(client, workflow_id, Some(run_id))
        .fetch_history(Default::default())
        .to_json()
        .await
        .unwrap_or_else(|e| panic!("history JSON of {workflow_id}: {e}"));
    let decoded = temporalio_client::WorkflowHistory::from_json(&json)
        .unwrap_or_else(|e| panic!("the saved JSON of {workflow_id} does not decode: {e}"))
        .into_events()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(decoded.len(), count, "the JSON holds every event");
    let dir = histories_dir();
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let path = dir.join(name);
    assert!(
        !path.exists(),
        "{} exists: it is never rewritten",
        path.display()
    );
    std::fs::write(&path, &json).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    eprintln!(
        "recorded {} ({} bytes, {count} events, workflow {workflow_id})",
        path.display(),
        json.len()
    );
}

/// Saves the single closed run of `workflow_id` as `name`.
async fn save_only_run(client: &Client, workflow_id: &str, name: &str) {
    let runs = wait_closed(client, workflow_id).await;
    assert_eq!(runs.len(), 1, "{workflow_id} continued as new: {runs:?}");
    save(client, workflow_id, &runs[0], name).await;
}

fn community_workflow(id: &str) -> String {
    workflows::community::workflow_id(id.parse().unwrap_or_else(|e| panic!("{id}: {e}")))
}

recording!(community_happy_path, "happy", &[], |recording| {
    let (id, digest) = recording.submitted(&["--reason", "recording"]).await;
    recording.cli.approve_and_finish(&id, &digest).await;
    recording.save_only_run(&community_workflow(&id)).await;
});

recording!(
    community_blocked_then_unblocked,
    "blocked",
    &[],
    |recording| {
        let (stack, cli) = (&recording.stack, &recording.cli);
        let target = recording.community().await;
        // A key no writer makes blocks the inventory until an operator removes it and unblocks.
        let (stray, version) = plant_stray_key(stack, target.id).await;
        let (id, submitted) = cli.submit_blocked(&target.host, &[]).await;
        let id = id.to_string();
        assert!(
            submitted["blocked"]["reason"]
                .as_str()
                .is_some_and(|r| r.contains(&stray)),
            "the inventory must block on the stray key: {submitted}"
        );
        let stray = ObjectVersionRef {
            key: stray,
            version_id: version,
        };
        let removed = stack.objects.delete_versions(&[stray]).await;
        removed.unwrap_or_else(|e| panic!("{e}"));
        let status = cli
            .unblock_until_awaiting_approval(&id, "carol", "removed the stray upload")
            .await;
        cli.approve_and_finish(&id, &inventory_digest(&status))
            .await;
        recording.save_only_run(&community_workflow(&id)).await;
    }
);

recording!(
    community_aborted_before_irreversible_point,
    "aborted",
    &[],
    |recording| {
        let (id, _digest) = recording.submitted(&[]).await;
        let aborted = recording
            .cli
            .abort(&id, "carol", "tenant withdrew the request")
            .await;
        let aborted = aborted.expect_code(0);
        assert!(aborted.stdout.contains("aborted"), "{}", aborted.stdout);
        recording.save_only_run(&community_workflow(&id)).await;
    }
);

recording!(community_cancelled, "cancelled", &[], |recording| {
    let client = &recording.client;
    let (id, _digest) = recording.submitted(&[]).await;
    let workflow_id = community_workflow(&id);
    // The Web UI's "Cancel": before the irreversible point it is an abort by temporal-cancel.
    let reason = "cancelled from the Web UI".to_owned();
    handle(client, &workflow_id, None)
        .cancel(WorkflowCancelOptions::builder().reason(reason).build())
        .await
        .unwrap_or_else(|e| panic!("cancel {workflow_id}: {e}"));
    let runs = wait_closed(client, &workflow_id).await;
    let history = events(client, &workflow_id, &runs[0]).await;
    assert!(
        matches!(
            history.last().and_then(|e| e.attributes.as_ref()),
            Some(Attributes::WorkflowExecutionCanceledEventAttributes(_))
        ),
        "a cancellation before the irreversible point ends the run cancelled"
    );
    recording.save_only_run(&workflow_id).await;
});

// Four versions per manifest chunk, one chunk per call, two calls per run: the deletion continues
// as new until every chunk is stamped; run N is saved as `community_continue_as_new_runN.json`.
recording!(
    community_continue_as_new => "community_continue_as_new_run0.json",
    "chain",
    &[("BUZZ_MANIFEST_CHUNK_ENTRIES", "4")],
    |recording| {
        let pacing = ["--chunks-per-call", "1", "--delete-rounds-per-run", "2"];
        let (id, digest) = recording.submitted(&pacing).await;
        recording.cli.approve_and_finish(&id, &digest).await;
        let (client, workflow_id) = (&recording.client, community_workflow(&id));
        let runs = wait_closed(client, &workflow_id).await;
        assert!(
            runs.len() >= 2,
            "the deletion never continued as new: {runs:?}"
        );
        for (number, run) in runs.iter().enumerate() {
            let name = format!("community_continue_as_new_run{number}.json");
            save(client, &workflow_id, run, &name).await;
        }
    }
);

recording!(community_web_ui_signals, "signals", &[], |recording| {
    let cli = &recording.cli;
    let (id, digest) = recording.submitted(&[]).await;
    let workflow_id = community_workflow(&id);
    let approval = async |digest: &str, by: &str, extra: &[&str]| {
        let mut args = vec![
            "approve",
            &id,
            "--inventory-digest",
            digest,
            "--approved-by",
            by,
        ];
        args.extend_from_slice(extra);
        cli.signed_payload(&args).await
    };

    // Refused, each recorded before the next is sent: the requester approving her own request,
    // an approval of another digest, a payload that is not an approval, an unblock of a request
    // that is not blocked.
    let unblock = [
        "unblock",
        &id,
        "--reason",
        "nothing blocks",
        "--unblocked-by",
        "carol",
    ];
    let refused = [
        (
            "approve",
            approval(&digest, "alice", &[]).await,
            "approval_rejected",
            1,
        ),
        (
            "approve",
            approval(&"0".repeat(digest.len()), "bob", &[]).await,
            "approval_rejected",
            2,
        ),
        (
            "approve",
            r#"{"approved_by":"bob"}"#.to_owned(),
            "approval_rejected",
            3,
        ),
        (
            "unblock",
            cli.signed_payload(&unblock).await,
            "unblock_rejected",
            1,
        ),
    ];
    for (signal, payload, event, count) in refused {
        web_ui_signal(&workflow_id, signal, &payload).await;
        cli.wait_audit(&id, event, count).await;
    }

    // Then the approval that counts, through the same dialog.
    let approval = approval(&digest, "bob", &["--note", "ticket 42"]).await;
    web_ui_signal(&workflow_id, "approve", &approval).await;
    cli.watch_to_end(&id).await;
    recording.save_only_run(&workflow_id).await;
});

/// `user submit` by alice and `user approve` by bob; returns the request id.
async fn user_request(cli: &Cli, label: &str) -> String {
    let target = format!("demo:{label}-{}", Uuid::new_v4().simple());
    cli.user_submit_and_approve(&target, "alice", "bob").await
}

fn user_workflow(id: &str) -> String {
    workflows::user::workflow_id(id.parse().unwrap_or_else(|e| panic!("{id}: {e}")))
}

recording!(
    user_step_mode_failed_stage_retried,
    "user-steps",
    &[],
    |recording| {
        let cli = &recording.cli;
        let id = user_request(cli, "record-steps").await;
        let step = async |extra: &[&str]| {
            let mut args = vec!["user", "run", id.as_str(), "--next-step"];
            args.extend_from_slice(extra);
            cli.run(&args).await
        };
        step(&[]).await.expect_code(0);
        step(&["--fail-stage", "purge_db"])
            .await
            .expect_refusal_naming(1, "purge_db");
        // Refused: the saved retry deadline (30 s after the failure) has not passed.
        step(&[]).await.expect_refusal_naming(1, "retry deadline");
        let request: Uuid = id.parse().unwrap_or_default();
        wait_for_database_deadline(recording.stack.store.pool(), request).await;
        // The retry of the failed row, still one step at a time, then the rest in one run.
        step(&[]).await.expect_code(0);
        cli.user_run(&id).await.expect_code(0);
        recording.save_only_run(&user_workflow(&id)).await;
    }
);

recording!(user_no_agents, "user-no-agents", &[], |recording| {
    let cli = &recording.cli;
    let id = user_request(cli, "record-no-agents").await;
    let c = DEMO_FORMER_PARTICIPANT_COMMUNITY.to_string();
    cli.run(&["user", "run", &id, "--demo-no-agents-in", &c])
        .await
        .expect_code(0);
    recording.save_only_run(&user_workflow(&id)).await;
});

recording!(taxonomy_sweep, "sweep", &[], |recording| {
    let (client, cli, queue) = (&recording.client, &recording.cli, &recording.queue);
    // Exit 1 only says the shared bucket holds unknown keys; the record is JSON either way.
    let swept = cli.run(&["sweep", "run", "--max-objects", "50"]).await;
    assert!(matches!(swept.code, 0 | 1), "{}", swept.stderr);
    let record = swept.json();
    assert_eq!(record["object_cap"], 50, "{record}");
    // The CLI names its workflow `buzz-taxonomy-sweep-<uuid>`; it is the only one on this queue.
    let query = format!("TaskQueue = '{queue}' AND WorkflowType = 'TaxonomySweep'");
    let every = Duration::from_millis(500);
    let workflow_id = poll::until(Duration::from_secs(30), every, async || {
        let found: Vec<String> = futures::TryStreamExt::try_collect::<Vec<_>>(
            client.list_workflows(query.clone(), Default::default()),
        )
        .await
        .unwrap_or_else(|e| panic!("list {query}: {e}"))
        .iter()
        .map(|w| w.id().to_owned())
        .collect();
        assert!(
            found.len() <= 1,
            "expected one sweep on {queue}, found {found:?}"
        );
        match found.as_slice() {
            [one] => Ok(one.clone()),
            _ => Err(format!("expected one sweep on {queue}, found {found:?}")),
        }
    })
    .await;
    recording.save_only_run(&workflow_id).await;
});
