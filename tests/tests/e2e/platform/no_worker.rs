//! With the worker stopped, every command that needs one says so within its bound, naming the
//! task queue and how to start a worker; `status` shows what Postgres and Temporal's own records
//! know; and the messages sent meanwhile (each as the update and, once unanswered, as the
//! durable signal of the same name) take effect exactly once when a worker comes back.

use std::time::{Duration, Instant};

use serde_json::Value;
use uuid::Uuid;

use activities::store::AuditEvent;
use testkit::poll;
use testkit::prelude::*;
use testkit::refusal::{approved_by, audit_trail};

/// `--worker-wait` of the bounded runs.
const WAIT_SECS: u64 = 3;
/// What a command may take beyond its worker wait: process start, Postgres, asking Temporal who
/// polls and whether it holds the update.
const SLACK: Duration = Duration::from_secs(12);

/// Runs `args` with `--worker-wait WAIT_SECS`, asserts exit 1 within the bound and a message
/// naming the task queue and how to start a worker; returns the run.
async fn bounded(cli: &Cli, queue: &str, args: &[&str]) -> CliRun {
    let wait = WAIT_SECS.to_string();
    let mut all = args.to_vec();
    all.extend(["--worker-wait", &wait]);
    let started = Instant::now();
    let run = cli.run(&all).await;
    let took = started.elapsed();
    assert!(
        took <= Duration::from_secs(WAIT_SECS) + SLACK,
        "{args:?} took {took:?}, bound {WAIT_SECS} s + {SLACK:?}\n{}",
        run.stderr
    );
    let run = run.expect_code(1);
    assert!(
        run.stderr.contains(queue)
            && run.stderr.contains("buzz-deletion-worker")
            && run.stderr.contains("BUZZ_TASK_QUEUE"),
        "{args:?}: the message names the task queue and how to start a worker: {}",
        run.stderr
    );
    assert!(
        !run.stderr.contains("Timeout expired"),
        "no raw transport error: {}",
        run.stderr
    );
    run
}

/// Panics unless every `event` in `audit` is the refusal of a second copy of a statement that
/// already acted (the update and its durable signal both arrived).
pub(crate) fn assert_only_copies_refused(audit: &[AuditEvent], event: &str) {
    for refused in audit.iter().filter(|e| e.event == event) {
        let reason = refused.detail["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("already used") && reason.contains("copy changes nothing"),
            "only a copy may be refused: {refused:#?}"
        );
    }
}

fn field<'a>(value: &'a Value, path: &[&str]) -> &'a Value {
    path.iter().fold(value, |v, key| &v[*key])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_worker_every_command_answers_in_bounded_time_and_held_updates_apply_once() {
    let (stack, cli, worker, target) = with_target("noworker", &[]).await;
    let queue = worker.queue.clone();
    let before = target.kept(&stack).await;
    let (id, digest) = cli.submit(&target.host, "alice", &[]).await;
    let request_id: Uuid = id.parse().unwrap_or_default();
    let abort_target = Tenant::seed(&stack, "noworker-abort", small_plan()).await;
    let abort_before = abort_target.kept(&stack).await;
    let (abort_id, _) = cli.submit(&abort_target.host, "alice", &[]).await;
    let user_request = |target: String| {
        let cli = cli.clone();
        async move { cli.user_submit(&target, "alice").await }
    };
    let (user_id, user_digest) =
        user_request(format!("demo:noworker-{}", Uuid::new_v4().simple())).await;
    let (unapproved_user, _) =
        user_request(format!("demo:noworker-{}", Uuid::new_v4().simple())).await;
    let other = Tenant::seed(&stack, "noworker-other", small_plan()).await;

    worker.process.crash().await;

    // Updates Temporal holds until a worker returns: reported as sent, not yet processed.
    let approve = bounded(
        &cli,
        &queue,
        &[
            "community",
            "approve",
            &id,
            "--approved-by",
            "bob",
            "--inventory-digest",
            &digest,
        ],
    )
    .await;
    assert!(
        approve.stderr.contains("approval sent, not yet processed"),
        "{}",
        approve.stderr
    );
    let abort = bounded(
        &cli,
        &queue,
        &[
            "community",
            "abort",
            &abort_id,
            "--aborted-by",
            "carol",
            "--reason",
            "changed our mind",
        ],
    )
    .await;
    assert!(
        abort.stderr.contains("abort sent, not yet processed"),
        "{}",
        abort.stderr
    );
    // Not blocked: once processed, the validator refuses it and nothing changes.
    bounded(
        &cli,
        &queue,
        &[
            "community",
            "unblock",
            &id,
            "--unblocked-by",
            "dave",
            "--reason",
            "nothing to do",
        ],
    )
    .await;

    // Reads: what Postgres and Temporal's own records know, marked as such.
    let status = bounded(&cli, &queue, &["community", "status", &id]).await;
    let recorded = status.json();
    assert_eq!(recorded["answered_by_workflow"], false, "{recorded}");
    assert_eq!(
        field(&recorded, &["postgres", "stage"]),
        "inventoried",
        "{recorded}"
    );
    assert_eq!(
        field(&recorded, &["temporal", "stage"]),
        "awaiting_approval",
        "{recorded}"
    );
    assert_eq!(
        field(&recorded, &["temporal", "blocked"]),
        false,
        "{recorded}"
    );
    assert_eq!(
        field(&recorded, &["temporal", "execution_status"]),
        "Running",
        "{recorded}"
    );
    assert!(
        recorded["source"]
            .as_str()
            .unwrap_or_default()
            .contains("not the workflow's live state"),
        "{recorded}"
    );
    let watched = bounded(&cli, &queue, &["community", "watch", &id]).await;
    assert_eq!(watched.json()["answered_by_workflow"], false);

    // The default bound is 15 s.
    let started = Instant::now();
    let default = cli.run(&["community", "status", &id]).await.expect_code(1);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(15) && took <= Duration::from_secs(15) + SLACK,
        "default bound: took {took:?}: {}",
        default.stderr
    );
    assert!(default.stderr.contains(&queue), "{}", default.stderr);

    let submitted = bounded(
        &cli,
        &queue,
        &[
            "community",
            "submit",
            "--host",
            &other.host,
            "--requested-by",
            "alice",
        ],
    )
    .await;
    assert!(
        submitted.stderr.contains("not sent") || submitted.stderr.contains("was started"),
        "{}",
        submitted.stderr
    );

    // The user commands.
    let user_approve = bounded(
        &cli,
        &queue,
        &[
            "user",
            "approve",
            &user_id,
            "--approved-by",
            "bob",
            "--inventory-digest",
            &user_digest,
        ],
    )
    .await;
    assert!(
        user_approve
            .stderr
            .contains("approval sent, not yet processed"),
        "{}",
        user_approve.stderr
    );
    bounded(&cli, &queue, &["user", "run", &unapproved_user]).await;
    let user_target = format!("demo:noworker-{}", Uuid::new_v4().simple());
    bounded(
        &cli,
        &queue,
        &[
            "user",
            "submit",
            "--target",
            &user_target,
            "--requested-by",
            "alice",
        ],
    )
    .await;
    // `user status` reads Postgres only and needs no worker.
    cli.run(&["user", "status", &user_id]).await.expect_code(0);

    // Nothing moved meanwhile.
    assert_eq!(approved_by(&stack, request_id).await, None);
    before.assert_unchanged(&stack, "target").await;

    // A worker comes back: each held update is applied once.
    let _worker = WorkerProcess::start(&queue, &[]).await;
    cli.watch_to_end(&id).await;
    let audit = audit_trail(&stack, request_id).await;
    let count = |event: &str| audit.iter().filter(|e| e.event == event).count();
    assert_eq!(count("approved"), 1, "approved exactly once: {audit:#?}");
    assert_eq!(count("unblocked"), 0, "the refused unblock changed nothing");
    // The CLI also wrote each message to the history as a signal: when the held update
    // survived too, the later copy is refused as a signature already used, on record.
    assert_only_copies_refused(&audit, "approval_rejected");
    let approver = approved_by(&stack, request_id).await;
    assert_eq!(approver.as_deref(), Some("bob"));
    target.assert_gone(&stack, "the target").await;

    let aborted = cli
        .wait_status(&abort_id, 120, |s| s["phase"] == "aborted")
        .await;
    assert_eq!(aborted["abort"]["actor"], "carol", "{aborted}");
    let abort_audit = audit_trail(&stack, abort_id.parse().unwrap_or_default()).await;
    assert_eq!(
        abort_audit.iter().filter(|e| e.event == "aborted").count(),
        1,
        "aborted exactly once: {abort_audit:#?}"
    );
    assert_only_copies_refused(&abort_audit, "abort_refused");
    let kept = "aborted before the irreversible point: everything kept";
    abort_before.assert_unchanged(&stack, kept).await;
    let user = poll::until(
        Duration::from_secs(60),
        Duration::from_millis(300),
        async || {
            let status = cli.run(&["user", "status", &user_id]).await;
            let user = status.expect_code(0).json();
            match user["approval"].is_null() {
                false => Ok(user),
                true => Err(format!(
                    "the user approval sent meanwhile was never applied: {user}"
                )),
            }
        },
    )
    .await;
    assert_eq!(user["approval"]["approved_by"], "bob", "{user}");
}
