//! Recovery promises of reference 003, end to end: an interrupted run stops and leaves its current
//! row current; a request whose workflow is gone is resumed from Postgres; `--next-step` executes
//! exactly one handler whatever crashes in between; a long request continues as new and still
//! writes every stage row exactly once.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use activities::user::faults::{FaultHook, FaultPoint, FaultPoints};
use futures::FutureExt;
use serde_json::Value;
use tokio::sync::mpsc;
use uuid::Uuid;
use workflows::user::UserPhase;

use super::{
    B, B_AGENTS, B_DB, CHAIN, GATE, assert_positions, completed, row_running, run, target, up_to,
    wait_for, with_approved, with_stack,
};
use testkit::cli::CliRun;
use testkit::user::{ApprovedRequest, RequestSnapshot, UserStack, submit_and_approve};

/// Starts `user run ID <extra>` without waiting for it.
fn spawn_run(stack: &UserStack, id: Uuid, extra: &[&str]) -> tokio::process::Child {
    let id = id.to_string();
    let mut args = vec!["user", "run", id.as_str()];
    args.extend_from_slice(extra);
    stack
        .cli_command(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the CLI")
}

/// Starts `user run ID` with a 60 s delay in every handler, and waits until the row at `index`
/// (in chain order) is running; returns the run and what Postgres then holds.
async fn spawn_delayed_run(
    stack: &UserStack,
    id: Uuid,
    index: usize,
) -> (tokio::process::Child, RequestSnapshot) {
    let child = spawn_run(stack, id, &["--stage-delay-ms", "60000"]);
    let running = wait_for(stack, id, |s| row_running(s, index)).await;
    (child, running)
}

/// How many `user.resumed` audit events of `cause` the request has.
async fn resumes(stack: &UserStack, id: Uuid, cause: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM deletion.audit_events \
         WHERE request_id = $1 AND event = 'user.resumed' AND detail->>'cause' = $2",
    )
    .bind(id)
    .bind(cause)
    .fetch_one(stack.store.pool())
    .await
    .expect("counting resumes")
}

/// Saving `result` for `row` under `generation` is refused as stale: a fenced-out attempt.
async fn assert_stale_save(stack: &UserStack, id: Uuid, row: Uuid, generation: i64, result: Value) {
    let late = stack.store.save_stage_result(id, row, generation, &result);
    let late = late.await.expect_err("a fenced-out attempt cannot save");
    assert!(late.is_stale_generation(), "{late}");
}

/// Waits for a spawned CLI (bounded) and collects what it printed.
async fn finish(child: tokio::process::Child) -> CliRun {
    let output = tokio::time::timeout(Duration::from_secs(90), child.wait_with_output())
        .await
        .expect("the CLI did not end within 90 s")
        .expect("waiting for the CLI");
    CliRun {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Sends `signal` (e.g. `INT`) to the spawned CLI, as a terminal's Ctrl-C would.
fn send_signal(child: &tokio::process::Child, signal: &str) {
    let pid = child.id().expect("the CLI is still running");
    let status = std::process::Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .expect("running kill");
    assert!(status.success(), "kill -{signal} {pid} failed");
}

/// The request's rows are exactly the demo chain, each completed once and none current.
fn assert_every_row_exactly_once(snapshot: &RequestSnapshot) {
    let exactly_once = "every stage row exactly once, completed";
    assert_eq!(snapshot.positions(), completed(&CHAIN), "{exactly_once}");
    assert_eq!(snapshot.request.stage, "completed");
}

/// How many of the request's stage rows are completed.
fn completed_rows(snapshot: &RequestSnapshot) -> usize {
    let rows = snapshot.rows.iter();
    rows.filter(|r| r.status == "completed").count()
}

/// `user run ID` to the end (exit 0); the request as Postgres then holds it, every row of the
/// chain there exactly once.
async fn run_to_the_end(stack: &UserStack, id: Uuid) -> RequestSnapshot {
    run(stack, id, &[]).await.expect_exit(0);
    let finished = stack.snapshot(id).await;
    assert_every_row_exactly_once(&finished);
    finished
}

/// The current row's position, and that nothing follows it.
fn current_only(snapshot: &RequestSnapshot) -> (String, Option<Uuid>, String) {
    let current: Vec<_> = snapshot.rows.iter().filter(|r| r.is_current).collect();
    assert_eq!(current.len(), 1, "exactly one current row: {snapshot:?}");
    let last = snapshot.rows.last().expect("rows");
    assert_eq!(last.id, current[0].id, "nothing after the current row");
    (last.stage.clone(), last.community_id, last.status.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_during_a_delayed_handler_stops_at_that_row_and_the_next_run_completes() {
    with_approved("ctrl-c", async |stack, id| {
        run(stack, id, &["--next-step"]).await.expect_exit(0);

        let (child, running) = spawn_delayed_run(stack, id, 1).await;
        let interrupted_row = running.rows[1].clone();
        tokio::time::sleep(Duration::from_millis(500)).await;
        send_signal(&child, "INT");
        let interrupted = finish(child).await;
        interrupted.expect_exit(130);
        assert!(
            interrupted.stderr.contains("SIGINT") && interrupted.stderr.contains("stopped"),
            "the CLI says what it did: {}",
            interrupted.stderr
        );
        let report = &interrupted.json()["stop"]["report"]["outcome"];
        assert_eq!(report["outcome"], "stopped", "the run's report: {report}");
        assert_eq!(
            report["stage_id"],
            Value::from(interrupted_row.id.to_string())
        );
        assert_eq!(report["handler"], "interrupted");

        // Well within the 60 s handler: the stop ended the run, it did not wait for the handler.
        let only_it = "exactly the interrupted row is current, nothing after it";
        let stopped = assert_positions(stack, id, up_to(&[GATE], B_DB, "running"), only_it).await;
        assert_eq!(stopped.rows[1].id, interrupted_row.id);
        assert_eq!(stack.workflow_status(id).await.phase, UserPhase::Stopped);
        // The stop fenced the cancelled attempt out: whatever it still tries to save is refused.
        let attempt_generation = interrupted_row.exec_generation.expect("a started row");
        assert!(stopped.request.exec_generation > attempt_generation);
        let cancelled = interrupted_row.id;
        assert_stale_save(
            stack,
            id,
            cancelled,
            attempt_generation,
            serde_json::json!({}),
        )
        .await;
        // Nothing else executes after the stop.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(
            stack.snapshot(id).await,
            stopped,
            "the stopped run changes nothing"
        );

        // A new run is not refused as "in progress": it resumes the row and completes.
        let finished = run_to_the_end(stack, id).await;
        assert_eq!(
            finished.rows[1].id, interrupted_row.id,
            "the same row resumed"
        );
        assert_eq!(finished.rows[1].attempt, 2, "its handler started again");
        assert_eq!(
            finished.rows[1].first_started_at,
            interrupted_row.first_started_at
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_stop_from_another_terminal_stops_the_run_and_is_idempotent() {
    with_approved("stop", async |stack, id| {
        let id_arg = id.to_string();
        let (child, running) = spawn_delayed_run(stack, id, 0).await;
        let gate = running.rows[0].clone();

        let stop = stack.cli(&["user", "stop", &id_arg]).await;
        stop.expect_exit(0);
        let answer = stop.json();
        assert_eq!(answer["stop"]["answer"], "stopped", "{answer}");
        let outcome = &answer["stop"]["report"]["outcome"];
        assert_eq!(outcome["outcome"], "stopped");
        assert_eq!(outcome["stage"], "gate_user");
        assert_eq!(outcome["handler"], "interrupted");

        // The run's own caller gets the same report and exits 0 (the operator asked).
        let runner = finish(child).await;
        runner.expect_exit(0);
        assert_eq!(runner.json()["run"]["outcome"]["outcome"], "stopped");

        let stopped = stack.snapshot(id).await;
        assert_eq!(
            current_only(&stopped),
            ("gate_user".to_string(), None, "running".to_string())
        );
        assert_eq!(stopped.rows.len(), 1, "nothing after the stopped row");
        assert_eq!(stopped.request.stage, "running");

        let again = stack.cli(&["user", "stop", &id_arg]).await;
        again.expect_exit(0);
        assert_eq!(
            again.json()["stop"]["answer"],
            "nothing_running",
            "a second stop changes nothing"
        );
        assert_eq!(stack.snapshot(id).await, stopped);

        let finished = run_to_the_end(stack, id).await;
        assert_eq!(finished.rows[0].id, gate.id);
        assert_eq!(finished.rows[0].attempt, 2);
        assert!(finished.rows[1..].iter().all(|r| r.attempt == 1));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_ui_stop_signal_stops_the_run_like_user_stop() {
    with_approved("signal", async |stack, id| {
        let (child, _) = spawn_delayed_run(stack, id, 0).await;
        stack.signal_stop(id).await;
        let runner = finish(child).await;
        runner.expect_exit(0);
        let outcome = &runner.json()["run"]["outcome"];
        assert_eq!(outcome["outcome"], "stopped", "{outcome}");
        assert_eq!(outcome["handler"], "interrupted");
        let gate_current = "the gate stays current, nothing after it";
        assert_positions(stack, id, up_to(&[], GATE, "running"), gate_current).await;
        assert_eq!(stack.workflow_status(id).await.phase, UserPhase::Stopped);
        run_to_the_end(stack, id).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_the_run_and_exits_143() {
    with_approved("sigterm", async |stack, id| {
        let (child, _) = spawn_delayed_run(stack, id, 0).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        send_signal(&child, "TERM");
        let stopped = finish(child).await;
        stopped.expect_exit(143);
        assert_eq!(
            stopped.json()["stop"]["report"]["outcome"]["outcome"],
            "stopped"
        );
        assert_positions(
            stack,
            id,
            up_to(&[], GATE, "running"),
            "the gate stays current",
        )
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_after_the_result_was_saved_keeps_that_row_current_and_it_never_runs_again() {
    with_stack(async |stack| {
        let (faults, mut reached) = park_once_at(FaultPoint::ResultSaved);
        let worker = stack.spawn_worker_with_faults("stalls-after-save", faults);
        let ApprovedRequest { id } = submit_and_approve(stack, &target("stop-saved")).await;
        let id_arg = id.to_string();
        let child = spawn_run(stack, id, &[]);
        tokio::time::timeout(Duration::from_secs(60), reached.recv())
            .await
            .expect("the gate's result was saved")
            .expect("the hook reports");

        // The worker dies right after saving the gate's result; the stop reaches the run through
        // its replacement before the dead attempt is timed out, and does not wait for it.
        worker.kill();
        let _replacement = stack.spawn_worker("worker-b");
        let stop = stack.cli(&["user", "stop", &id_arg]).await;
        stop.expect_exit(0);
        let outcome = &stop.json()["stop"]["report"]["outcome"];
        assert_eq!(outcome["outcome"], "stopped", "{outcome}");
        assert_eq!(outcome["handler"], "result_saved");
        finish(child).await.expect_exit(0);
        let uncommitted = "completed and current: the transition is not committed after the stop";
        let gate_completed = up_to(&[], GATE, "completed");
        let stopped = assert_positions(stack, id, gate_completed, uncommitted).await;

        let finished = run_to_the_end(stack, id).await;
        assert_eq!(
            finished.rows[0].attempt, 1,
            "the saved result was reused, not recomputed"
        );
        assert_eq!(finished.rows[0].result, stopped.rows[0].result);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_workflow_is_resumed_from_postgres_and_the_old_run_is_fenced_out() {
    with_approved("resume", async |stack, id| {
        let id_arg = id.to_string();
        run(stack, id, &["--next-step"]).await.expect_exit(0);

        // Lost between runs: `user run` itself resumes from Postgres.
        stack.terminate(id).await;
        let resumed_by_run = run(stack, id, &["--next-step"]).await;
        resumed_by_run.expect_exit(0);
        let from_postgres = resumed_by_run.stderr.contains("resuming it from Postgres");
        assert!(from_postgres, "{}", resumed_by_run.stderr);
        let b_agents_next = up_to(&[GATE, B_DB], B_AGENTS, "pending");
        assert_positions(stack, id, b_agents_next, "resumed by the run").await;

        // Lost during a handler: the request is stranded with a running current row.
        let (child, running) = spawn_delayed_run(stack, id, 2).await;
        let old = running.rows[2].clone();
        let old_generation = old.exec_generation.expect("a started row has a generation");
        stack.terminate(id).await;
        let abandoned = finish(child).await;
        assert_ne!(
            abandoned.code, 0,
            "the run's caller learns its workflow is gone"
        );
        let stranded = stack.snapshot(id).await;
        assert_eq!(
            current_only(&stranded),
            ("purge_agents".to_string(), Some(B), "running".to_string())
        );

        let resumed = stack.cli(&["user", "resume", &id_arg]).await;
        resumed.expect_exit(0);
        assert!(resumed.json()["resumed"]["run_id"].is_string());
        let (_, running_now) = stack.latest_execution(id).await;
        assert!(running_now, "a new workflow runs for the request");
        let taken_up = stack.snapshot(id).await;
        assert!(
            taken_up.request.exec_generation > old_generation,
            "the resume bumped the generation"
        );
        assert_eq!(
            taken_up.positions(),
            stranded.positions(),
            "the resume changes no row"
        );

        // A late write of the terminated run's attempt is refused as stale.
        let late = serde_json::json!({"late": true});
        assert_stale_save(stack, id, old.id, old_generation, late).await;
        // So is a handler start on behalf of the terminated execution (an attempt it had already
        // dispatched), although a start claims a new generation of its own.
        let old_token = old
            .handler_run_token
            .clone()
            .expect("the old run saved its token");
        let late_start = stack
            .store
            .start_stage_for_run(id, old.id, Some("terminated"), Some(&old_token))
            .await
            .expect_err("the superseded execution cannot start a handler");
        assert!(
            late_start.to_string().contains("superseded"),
            "{late_start}"
        );
        assert_eq!(
            stack.snapshot(id).await,
            taken_up,
            "the refused writes changed nothing"
        );

        let again = stack.cli(&["user", "resume", &id_arg]).await;
        // A running workflow is never replaced.
        again.expect_refusal_naming(1, "is running for request");

        let finished = run_to_the_end(stack, id).await;
        assert_eq!(
            finished.rows[2].id, old.id,
            "the stranded row itself finished"
        );
        assert_eq!(finished.rows[2].attempt, 2);
        assert!(
            finished.rows[2]
                .result
                .as_ref()
                .is_some_and(|r| r.get("late").is_none())
        );
        assert_eq!(resumes(stack, id, "operator").await, 2);
    })
    .await;
}

/// A hook that parks the first attempt reaching `point` (forever, as a dead worker would) and
/// reports it on the returned channel; every other pass goes through.
fn park_once_at(point: FaultPoint) -> (FaultPoints, mpsc::UnboundedReceiver<FaultPoint>) {
    let (reached_tx, reached_rx) = mpsc::unbounded_channel();
    let fired = Arc::new(AtomicBool::new(false));
    let hook: FaultHook = Arc::new(move |at| {
        let park = at == point && !fired.swap(true, Ordering::SeqCst);
        let reached = reached_tx.clone();
        async move {
            if park {
                let _ = reached.send(at);
                std::future::pending::<()>().await;
            }
        }
        .boxed()
    });
    (FaultPoints::new(hook), reached_rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_step_executes_exactly_one_handler_when_the_worker_is_killed_at_each_point() {
    with_stack(async |stack| {
        let mut worker = stack.spawn_worker("worker-0");
        let ApprovedRequest { id } = submit_and_approve(stack, &target("crash-step")).await;
        let points = [
            Some(FaultPoint::HandlerStarted),
            Some(FaultPoint::ResultSaved),
            Some(FaultPoint::TransitionCommitted),
            None,
            None,
        ];
        for (step, point) in points.into_iter().enumerate() {
            let mut reached = None;
            if let Some(point) = point {
                worker.shutdown();
                let (faults, rx) = park_once_at(point);
                worker = stack.spawn_worker_with_faults(&format!("doomed-{step}"), faults);
                reached = Some(rx);
            }
            let child = spawn_run(stack, id, &["--next-step"]);
            if let Some(mut rx) = reached {
                let at = tokio::time::timeout(Duration::from_secs(60), rx.recv())
                    .await
                    .expect("the worker reached its crash point")
                    .expect("the hook reports");
                worker.kill();
                worker = stack.spawn_worker(&format!("worker-{}", step + 1));
                // Temporal times the dead attempt out (heartbeat 5 s; a store call 30 s) in
                // real time: the parked attempt keeps the test server from skipping time.
                assert_eq!(Some(at), point);
            }
            let output = finish(child).await;
            output.expect_exit(0);
            let snapshot = stack.snapshot(id).await;
            let completed = completed_rows(&snapshot);
            assert_eq!(
                completed,
                step + 1,
                "invocation {} ({point:?}) executed exactly one handler: {:?}",
                step + 1,
                snapshot.positions()
            );
            let (stage, community) = CHAIN[step];
            let done = &snapshot.rows[step];
            assert_eq!((done.stage.as_str(), done.community_id), (stage, community));
            assert!(!done.is_current && done.status == "completed");
            let expected_attempts = if point == Some(FaultPoint::HandlerStarted) {
                2
            } else {
                1
            };
            assert_eq!(
                done.attempt,
                expected_attempts,
                "{point:?}: a saved result is never recomputed; an unfinished handler is started again"
            );
            if step + 1 < CHAIN.len() {
                assert_eq!(snapshot.rows.len(), step + 2, "one pending successor");
                let next = &snapshot.rows[step + 1];
                assert_eq!(
                    (next.stage.as_str(), next.community_id, next.status.as_str()),
                    (CHAIN[step + 1].0, CHAIN[step + 1].1, "pending")
                );
                assert!(next.is_current);
                assert_eq!(
                    output.json()["run"]["outcome"]["outcome"],
                    "paused",
                    "step {}",
                    step + 1
                );
            }
        }
        assert_every_row_exactly_once(&stack.snapshot(id).await);
        worker.shutdown();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_as_new_after_every_run_completes_the_request_with_every_row_once() {
    with_approved("can", async |stack, id| {
        let id_arg = id.to_string();
        // The registered workflow serves 50 runs per execution; take it over with one that
        // continues as new after every run.
        stack.terminate(id).await;
        stack
            .cli(&["user", "resume", &id_arg, "--runs-per-execution", "1"])
            .await
            .expect_exit(0);
        let mut executions = vec![stack.latest_execution(id).await.0];
        for step in 0..CHAIN.len() {
            run(stack, id, &["--next-step"]).await.expect_exit(0);
            let snapshot = stack.snapshot(id).await;
            let completed = completed_rows(&snapshot);
            assert_eq!(
                completed,
                step + 1,
                "one handler per step across executions"
            );
            let (run_id, running) = wait_for_execution_change(stack, id, &executions).await;
            if step + 1 < CHAIN.len() {
                assert!(running, "the continued execution runs");
                executions.push(run_id);
            }
        }
        assert_eq!(
            executions.len(),
            CHAIN.len(),
            "a new execution after each of the first four runs: {executions:?}"
        );
        assert_every_row_exactly_once(&stack.snapshot(id).await);
        assert_eq!(
            resumes(stack, id, "continue_as_new").await,
            4,
            "each continued execution took the request up from Postgres"
        );
    })
    .await;
}

/// Waits until the latest execution differs from every one in `seen` (a continue-as-new), or
/// until the workflow closed; returns the latest execution.
async fn wait_for_execution_change(stack: &UserStack, id: Uuid, seen: &[String]) -> (String, bool) {
    for _ in 0..100 {
        let (run_id, running) = stack.latest_execution(id).await;
        if !seen.contains(&run_id) || !running {
            return (run_id, running);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stack.latest_execution(id).await
}
