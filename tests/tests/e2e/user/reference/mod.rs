//! User deletion (reference 003 on Temporal), end to end: the operator's `buzz-deletion user …`
//! commands against real Postgres, a time-skipping Temporal test server and in-process workers.
//!
//! Modules:
//! The stack (Postgres, test server, worker threads, the CLI binary) and the request snapshots
//! are `testkit::user` of the harness library.
//! - `store`: the store's exclusion-proof guarantees, without Temporal.
//! - `inventory_bounds`: the approved inventory as the source, the resource bounds, the store's
//!   refusal of an early start, `user list`.
//! - `recovery`: stop, resume from Postgres, one handler per step across crashes, continue-as-new.
//! - `lifecycle`: a request row that disagrees with its stage chain blocks before any handler.

mod inventory_bounds;
mod lifecycle;
mod recovery;
mod store;

use std::time::Duration;

use serde_json::json;
use testkit::cli::CliRun;
use testkit::user::{
    ApprovedRequest, RequestSnapshot, UserStack, approve, submit_and_approve,
    wait_for_database_deadline,
};
use uuid::Uuid;
use workflows::user::UserPhase;
use workflows::user::inventory::{
    DEMO_FORMER_PARTICIPANT_COMMUNITY as C, DEMO_PARTICIPANT_COMMUNITY as B,
};

/// Longest any single scenario may take before the test fails instead of hanging.
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(180);

/// A stage of the demo chain: its name and its community (`None`: the gate).
type Stage = (&'static str, Option<Uuid>);

const GATE: Stage = ("gate_user", None);
const B_DB: Stage = ("purge_db", Some(B));
const B_AGENTS: Stage = ("purge_agents", Some(B));
const C_DB: Stage = ("purge_db", Some(C));
const C_AGENTS: Stage = ("purge_agents", Some(C));

/// The five stages of the demo inventory, in chain order.
const CHAIN: [Stage; 5] = [GATE, B_DB, B_AGENTS, C_DB, C_AGENTS];

/// A stage row's position: stage, community, status, whether it is current.
type Position = (String, Option<Uuid>, String, bool);

fn target(label: &str) -> String {
    format!("demo:{label}-{}", Uuid::new_v4().simple())
}

fn row(stage: &str, community: Option<Uuid>, status: &str, current: bool) -> Position {
    (stage.to_string(), community, status.to_string(), current)
}

/// `stages`, each completed and not current.
fn completed(stages: &[Stage]) -> Vec<Position> {
    let done = |(stage, community): &Stage| row(stage, *community, "completed", false);
    stages.iter().map(done).collect()
}

/// `stages` completed, then `current` in `status`, the current row.
fn up_to(stages: &[Stage], (stage, community): Stage, status: &str) -> Vec<Position> {
    let mut rows = completed(stages);
    rows.push(row(stage, community, status, true));
    rows
}

/// The request as Postgres holds it, once its rows are asserted to stand at `expected`.
async fn assert_positions(
    stack: &UserStack,
    id: Uuid,
    expected: Vec<Position>,
    what: &str,
) -> RequestSnapshot {
    let snapshot = stack.snapshot(id).await;
    assert_eq!(snapshot.positions(), expected, "{what}");
    snapshot
}

async fn run(stack: &UserStack, id: Uuid, extra: &[&str]) -> CliRun {
    let id = id.to_string();
    let mut args = vec!["user", "run", id.as_str()];
    args.extend_from_slice(extra);
    stack.cli(&args).await
}

/// Runs `body` on a fresh stack with one worker (`worker-a`), within [`SCENARIO_TIMEOUT`].
async fn with_one_worker(body: impl AsyncFnOnce(&UserStack)) {
    with_stack(async |stack| {
        let worker = stack.spawn_worker("worker-a");
        body(stack).await;
        worker.shutdown();
    })
    .await;
}

/// Runs `body` with one worker on a request for a fresh demo target named after `label`,
/// submitted by `operator-a` and approved by `operator-b`.
async fn with_approved(label: &str, body: impl AsyncFnOnce(&UserStack, Uuid)) {
    with_one_worker(async |stack| {
        let ApprovedRequest { id } = submit_and_approve(stack, &target(label)).await;
        body(stack, id).await;
    })
    .await;
}

/// Runs `body` on a fresh stack (no worker yet), within [`SCENARIO_TIMEOUT`].
async fn with_stack(body: impl AsyncFnOnce(&UserStack)) {
    let stack = UserStack::start().await;
    tokio::time::timeout(SCENARIO_TIMEOUT, body(&stack))
        .await
        .expect("the scenario did not finish within its time limit");
    stack.stop().await;
}

/// `user submit --target TARGET --requested-by operator-a EXTRA…`.
async fn submit(stack: &UserStack, target: &str, extra: &[&str]) -> CliRun {
    let mut args = vec!["user", "submit", "--target", target];
    args.extend_from_slice(&["--requested-by", "operator-a"]);
    args.extend_from_slice(extra);
    stack.cli(&args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_refuses_non_demo_targets_and_approval_binds_the_frozen_digest() {
    with_one_worker(async |stack| {
        let refused = submit(stack, "npub1realuser", &[]).await;
        refused.expect_refusal_naming(2, "names no kind of user");

        let submitted = submit(stack, &target("digest"), &[]).await;
        submitted.expect_exit(0);
        let document = submitted.json();
        let id: Uuid = document["request_id"].as_str().unwrap().parse().unwrap();
        let digest = document["inventory_digest"].as_str().unwrap().to_string();
        assert_eq!(
            document["inventory"]["communities"],
            json!([
                {"community_id": B, "role": "participant"},
                {"community_id": C, "role": "former_participant"},
            ])
        );
        let before = stack.snapshot(id).await;
        assert_eq!(before.request.stage, "inventoried");
        assert_eq!(
            before.request.inventory_digest.as_deref(),
            Some(digest.as_str())
        );

        let wrong_digest = approve(stack, id, "operator-b", &"0".repeat(64)).await;
        wrong_digest.expect_refusal_naming(1, "does not match the frozen digest");
        let self_approval = approve(stack, id, "operator-a", &digest).await;
        self_approval.expect_refusal_naming(1, "two-person rule");
        let refused = "refused approvals change nothing";
        assert_eq!(stack.snapshot(id).await, before, "{refused}");

        approve(stack, id, "operator-b", &digest)
            .await
            .expect_exit(0);
        let approved = stack.snapshot(id).await;
        assert_eq!(approved.request.stage, "approved");
        assert_eq!(approved.approvals, 1);
        let approval = approved.approval.as_ref().unwrap();
        let (by, frozen) = (&approval.approved_by, &approval.inventory_digest);
        assert_eq!(
            (by.as_str(), frozen.as_str()),
            ("operator-b", digest.as_str())
        );
        assert!(approved.rows.is_empty(), "approval creates no stage rows");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_step_advances_one_stage_at_a_time_as_in_reference_003_and_a_rerun_changes_nothing() {
    with_approved("steps", async |stack, id| {
        // The invocation table of reference 003: after each `--next-step`, the handler that ran is
        // completed and non-current, and its successor is pending and current.
        let expected: Vec<Vec<Position>> = (0..CHAIN.len())
            .map(|ran| match CHAIN.get(ran + 1) {
                Some(next) => up_to(&CHAIN[..=ran], *next, "pending"),
                None => completed(&CHAIN),
            })
            .collect();
        let expected_decisions = [
            "enter_communities",
            "purge_agents",
            "community_complete",
            "purge_agents",
            "community_complete",
        ];
        let mut generation = stack.snapshot(id).await.request.exec_generation;
        for (invocation, rows) in expected.into_iter().enumerate() {
            let step = run(stack, id, &["--next-step"]).await;
            step.expect_exit(0);
            let what = format!("rows after invocation {}", invocation + 1);
            let snapshot = assert_positions(stack, id, rows, &what).await;
            assert_eq!(
                snapshot.decision(invocation).as_deref(),
                Some(expected_decisions[invocation])
            );
            let finished = &snapshot.rows[invocation];
            assert_eq!(finished.attempt, 1, "each handler ran once");
            assert_eq!(finished.first_started_at, finished.started_at);
            assert!(
                snapshot.request.exec_generation > generation,
                "every step claims a new generation"
            );
            generation = snapshot.request.exec_generation;
            let last = invocation == CHAIN.len() - 1;
            let request = &snapshot.request;
            assert_eq!(request.stage, if last { "completed" } else { "running" });
            assert_eq!(request.completed_at.is_some(), last);
            assert_eq!((request.retry_count, request.next_attempt_at), (0, None));
            assert_eq!(snapshot.approvals, 1);
            let outcome = &step.json()["run"]["outcome"];
            assert_eq!(
                outcome["outcome"],
                if last { "completed" } else { "paused" }
            );
        }
        let final_decision = stack.snapshot(id).await.rows[4].transition.clone().unwrap();
        assert_eq!(
            final_decision["next"],
            json!(null),
            "C purge_agents finishes the request"
        );

        let completed = stack.snapshot(id).await;
        let rerun = run(stack, id, &["--next-step"]).await;
        rerun.expect_exit(0);
        assert_eq!(
            rerun.json()["run"]["outcome"]["outcome"],
            "already_completed"
        );
        let rerun_without_step = run(stack, id, &[]).await;
        rerun_without_step.expect_exit(0);
        assert_eq!(
            stack.snapshot(id).await,
            completed,
            "a rerun of a completed request is read-only"
        );

        let status = stack.cli(&["user", "status", &id.to_string()]).await;
        status.expect_exit(0);
        let document = status.json();
        assert_eq!(document["progress"]["state"], "finished");
        let chain: Vec<&str> = document["stages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["stage"].as_str().unwrap())
            .collect();
        assert_eq!(
            chain,
            CHAIN.map(|(stage, _)| stage),
            "status lists the rows along the predecessor chain"
        );
        let table = stack
            .cli(&["--output", "table", "user", "status", &id.to_string()])
            .await;
        table.expect_exit(0);
        assert!(table.stdout.contains("stages (5 rows)"), "{}", table.stdout);
    })
    .await;
}

/// The request as Postgres holds it after a run told `--demo-no-agents-in` each of
/// `no_agents`, once asserted: every other stage completed, no `purge_agents` row for those
/// communities, each of their `purge_db` rows deciding `community_complete` with no agents
/// found, the request completed.
async fn assert_agents_skipped(
    stack: &UserStack,
    id: Uuid,
    no_agents: &[Uuid],
    what: &str,
) -> RequestSnapshot {
    let without_agents = |(_, community): &Stage| community.is_some_and(|c| no_agents.contains(&c));
    let skipped = |stage: &&Stage| stage.0 == "purge_agents" && without_agents(stage);
    let stages: Vec<Stage> = CHAIN.iter().filter(|s| !skipped(s)).copied().collect();
    let snapshot = assert_positions(stack, id, completed(&stages), what).await;
    for (index, stage) in stages.iter().enumerate() {
        if stage.0 == "purge_db" && without_agents(stage) {
            let result = snapshot.rows[index].result.as_ref().unwrap();
            assert_eq!(result["has_agents"], json!(false), "row {index}");
            let decision = snapshot.decision(index);
            assert_eq!(
                decision.as_deref(),
                Some("community_complete"),
                "row {index}"
            );
        }
    }
    assert_eq!(snapshot.request.stage, "completed");
    snapshot
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_agents_in_c_finishes_with_four_completed_rows_and_c_decided_community_complete() {
    with_approved("branch-c", async |stack, id| {
        let c = C.to_string();
        let flags = ["--executor-id", "worker-a", "--demo-no-agents-in", &c];
        run(stack, id, &flags).await.expect_exit(0);
        let snapshot = assert_agents_skipped(stack, id, &[C], "no purge_agents row for C").await;
        let last = snapshot.rows[3].transition.as_ref().unwrap();
        assert_eq!(last["next"], json!(null));
        let executors = snapshot.rows.iter().map(|r| r.executor_id.as_deref());
        assert!(executors.into_iter().all(|e| e == Some("worker-a")));
    })
    .await;
}

/// `--demo-no-agents-in` given twice: both communities take effect in the one run, so neither
/// gets a `purge_agents` row (a parser that kept only the last value would leave B's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_agents_in_b_and_c_given_together_skips_both_agent_purges() {
    with_approved("branch-bc", async |stack, id| {
        let (b, c) = (B.to_string(), C.to_string());
        let flags = ["--demo-no-agents-in", &b, "--demo-no-agents-in", &c];
        run(stack, id, &flags).await.expect_exit(0);
        let what = "no purge_agents row for B nor for C";
        assert_agents_skipped(stack, id, &[B, C], what).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_user_deletion_has_a_certificate_that_verifies_offline_and_names_no_one() {
    let who = target("certified");
    with_one_worker(async |stack| {
        let ApprovedRequest { id } = submit_and_approve(stack, &who).await;
        run(stack, id, &["--executor-id", "worker-a"])
            .await
            .expect_exit(0);
        assert_eq!(stack.snapshot(id).await.request.stage, "completed");
        let dir = std::env::temp_dir().join(format!("buzz-user-certificate-{id}"));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let file = dir.join("certificate.json");
        let id_arg = id.to_string();
        let file_arg = file.display().to_string();
        stack
            .cli(&["user", "certificate", &id_arg, "--out", &file_arg])
            .await
            .expect_exit(0);
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            !text.contains(who.trim_start_matches("demo:")),
            "the certificate must not carry the target: {text}"
        );
        let public_key = testkit::env::required("BUZZ_RECEIPT_PUBLIC_KEY_FILE");
        let verify = |extra: &[&str]| {
            let mut command = std::process::Command::new(testkit::env::bin("buzz-deletion"));
            command
                .env_clear()
                .args(["certificate", "verify", &file_arg])
                .args(["--public-key", &public_key])
                .args(extra);
            CliRun::from_output(&command.output().unwrap_or_else(|e| panic!("{e}")))
        };
        let verified = verify(&[]).expect_code(0).json();
        assert_eq!(verified["kind"], "user", "{verified}");
        // Whoever holds the target can confirm whom it is about; another target is refused.
        verify(&["--target", &who]).expect_code(0);
        verify(&["--target", &target("someone-else")]).expect_refusal_naming(1, "target_hash");
        stack
            .cli(&["certificate", "audit", &id_arg])
            .await
            .expect_exit(0);
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_no_agents_decision_for_b_stands_when_the_run_resumes_without_the_flag() {
    with_approved("branch-b", async |stack, id| {
        run(stack, id, &["--next-step"]).await.expect_exit(0);
        let b = B.to_string();
        run(stack, id, &["--next-step", "--demo-no-agents-in", &b])
            .await
            .expect_exit(0);
        let direct = "B purge_db transitions directly to C purge_db";
        let b_done = up_to(&[GATE, B_DB], C_DB, "pending");
        let after_b = assert_positions(stack, id, b_done, direct).await;
        assert_eq!(after_b.decision(1).as_deref(), Some("community_complete"));
        let b_decision = after_b.rows[1].clone();

        run(stack, id, &[]).await.expect_exit(0);
        let no_b_agents = "no B purge_agents row appears after the resume";
        let all_but_b_agents = completed(&[GATE, B_DB, C_DB, C_AGENTS]);
        let finished = assert_positions(stack, id, all_but_b_agents, no_b_agents).await;
        assert_eq!(
            finished.rows[1], b_decision,
            "the saved B row and decision are unchanged"
        );
        assert_eq!(finished.request.stage, "completed");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_handler_keeps_its_row_current_refuses_early_runs_and_resumes_after_the_deadline()
{
    with_approved("retry", async |stack, id| {
        let failing = ["--executor-id", "worker-a", "--fail-stage", "purge_db"];
        let failed = run(stack, id, &failing).await;
        failed.expect_exit(1);

        let failed_b = "the gate transitioned; B purge_db is failed and current";
        let failed_rows = up_to(&[GATE], B_DB, "failed");
        let after_failure = assert_positions(stack, id, failed_rows, failed_b).await;
        let failed_row = after_failure.rows[1].clone();
        let request = &after_failure.request;
        assert_eq!(request.stage, "retry_wait");
        assert_eq!(request.retry_count, 1);
        let error = request.last_error.as_deref().unwrap();
        assert!(error.contains("--fail-stage purge_db"));
        assert_eq!(failed_row.last_error, request.last_error);
        let deadline = request.next_attempt_at.expect("a saved retry deadline");
        assert_eq!(
            (deadline - failed_row.finished_at.unwrap()).num_milliseconds(),
            30_000,
            "the deadline is 30 s after the failure"
        );
        let deadline_text = activities::user::store::rfc3339(deadline);
        assert!(
            failed.stderr.contains(&deadline_text),
            "exit 1 names the saved deadline: {}",
            failed.stderr
        );
        assert_eq!(
            failed.json()["run"]["outcome"]["retry"]["next_attempt_at"],
            json!(deadline_text)
        );

        let early = run(stack, id, &["--executor-id", "worker-b"]).await;
        early.expect_refusal_naming(1, "retry deadline has not passed");
        assert_eq!(
            stack.snapshot(id).await,
            after_failure,
            "a refused run changes nothing"
        );
        let workflow = stack.workflow_status(id).await;
        assert_eq!(workflow.phase, UserPhase::RetryWait);
        assert_eq!(
            workflow.retry.map(|r| r.next_attempt_at),
            Some(deadline_text.clone()),
            "the workflow gates runs on the saved deadline"
        );

        stack.skip_time(Duration::from_secs(31)).await;
        // The store enforces the deadline with the database's clock, which the test server's
        // time skipping does not move: wait until Postgres says the deadline has passed.
        wait_for_database_deadline(stack.store.pool(), id).await;
        run(stack, id, &["--executor-id", "worker-b"])
            .await
            .expect_exit(0);
        let finished = stack.snapshot(id).await;
        let resumed = &finished.rows[1];
        assert_eq!(resumed.id, failed_row.id, "the same row resumed");
        assert_eq!(resumed.status, "completed");
        assert_eq!(resumed.attempt, 2);
        assert_eq!(
            resumed.first_started_at, failed_row.first_started_at,
            "original first start kept"
        );
        assert!(resumed.started_at > failed_row.started_at);
        assert_eq!(resumed.executor_id.as_deref(), Some("worker-b"));
        assert_all_completed(&finished);
        let request = &finished.request;
        assert_eq!(request.stage, "completed");
        assert_eq!(
            (
                request.retry_count,
                request.next_attempt_at,
                request.last_error.as_deref()
            ),
            (0, None, None),
            "a successful transition clears the retry state"
        );
    })
    .await;
}

/// Five stage rows, every one completed and none current.
fn assert_all_completed(finished: &RequestSnapshot) {
    assert_eq!(finished.rows.len(), 5);
    let done = |r: &activities::user::StageRowView| r.status == "completed" && !r.is_current;
    assert!(finished.rows.iter().all(done));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_handler_is_replaced_and_the_same_row_finishes_then_reruns_are_read_only()
 {
    with_stack(async |stack| {
        let worker_a = stack.spawn_worker("worker-a");
        let ApprovedRequest { id } = submit_and_approve(stack, &target("kill")).await;
        let id_arg = id.to_string();
        let runner = stack
            .cli_command(&[
                "user",
                "run",
                &id_arg,
                "--stage-delay-ms",
                "2000",
                "--executor-id",
                "worker-a",
            ])
            .output();
        let runner = tokio::spawn(runner);

        let interrupted = wait_for(stack, id, |s| row_running(s, 0)).await;
        let gate_attempt_1 = interrupted.rows[0].clone();
        assert_eq!(gate_attempt_1.attempt, 1);
        tokio::time::sleep(Duration::from_millis(500)).await;
        worker_a.kill();
        let worker_b = stack.spawn_worker("worker-b");

        let output = runner.await.expect("the CLI task").expect("the CLI ran");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(0),
            "the interrupted run still finishes: {stderr}"
        );
        let finished = stack.snapshot(id).await;
        let gate = &finished.rows[0];
        assert_eq!(
            gate.id, gate_attempt_1.id,
            "the same unfinished row resumed"
        );
        assert_eq!(gate.attempt, 2, "a second attempt started it");
        assert!(
            gate.exec_generation > gate_attempt_1.exec_generation,
            "under a higher generation"
        );
        assert_eq!(gate.first_started_at, gate_attempt_1.first_started_at);
        assert!(gate.started_at > gate_attempt_1.started_at);
        assert_all_completed(&finished);
        assert!(finished.rows[1..].iter().all(|r| r.attempt == 1));
        assert_eq!(finished.request.stage, "completed");

        let rerun = run(stack, id, &["--stage-delay-ms", "2000"]).await;
        rerun.expect_exit(0);
        assert_eq!(
            stack.snapshot(id).await,
            finished,
            "a terminal request rerun is read-only"
        );
        worker_b.shutdown();
    })
    .await;
}

/// No handler ran since `before` was taken: the request's rows and its execution generation
/// are as they were.
async fn assert_no_handler_ran(stack: &UserStack, id: Uuid, before: &RequestSnapshot, what: &str) {
    let after = stack.snapshot(id).await;
    assert_eq!(after.rows, before.rows, "{what}");
    assert_eq!(
        after.request.exec_generation,
        before.request.exec_generation
    );
}

/// Whether the request's row at `index` (in chain order) is running.
fn row_running(snapshot: &RequestSnapshot, index: usize) -> bool {
    snapshot
        .rows
        .get(index)
        .is_some_and(|r| r.status == "running")
}

/// Polls Postgres until `ready` holds for request `id`.
async fn wait_for(
    stack: &UserStack,
    id: Uuid,
    ready: impl Fn(&RequestSnapshot) -> bool,
) -> RequestSnapshot {
    loop {
        if let Some(snapshot) = try_snapshot(stack, id).await
            && ready(&snapshot)
        {
            return snapshot;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn try_snapshot(stack: &UserStack, id: Uuid) -> Option<RequestSnapshot> {
    stack.store.request_view(id).await.ok().flatten()?;
    Some(stack.snapshot(id).await)
}
