use std::time::Duration;

use testkit::prelude::*;

/// Stops the local Redis (the process `deploy/local/up` started).
async fn stop_redis() {
    let url = testkit::env::required(stack_config::env::REDIS_URL);
    let port = url
        .rsplit(':')
        .next()
        .unwrap_or("56379")
        .trim_end_matches('/')
        .to_owned();
    let status = tokio::process::Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port, "shutdown", "nosave"])
        .status()
        .await
        .unwrap_or_else(|e| panic!("redis-cli: {e}"));
    // redis-cli reports the dropped connection of a successful SHUTDOWN as an error.
    let _ = status;
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// Starts whatever of the local stack is not running (Redis, here).
async fn restart_stack() {
    let status = tokio::process::Command::new("bash")
        .arg(repo_root().join("deploy/local/up"))
        .stdout(std::process::Stdio::null())
        .status()
        .await
        .unwrap_or_else(|e| panic!("deploy/local/up: {e}"));
    assert!(
        status.success(),
        "deploy/local/up failed to restart the stack"
    );
}

/// Brings the stack back even when the test fails half-way, so later tests find Redis up.
struct RestartOnDrop;

impl Drop for RestartOnDrop {
    fn drop(&mut self) {
        let _ = std::process::Command::new("bash")
            .arg(repo_root().join("deploy/local/up"))
            .stdout(std::process::Stdio::null())
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_mid_deletion_is_retried_and_the_deletion_completes() {
    let _exclusive = outage_lock().write().await;
    let stack = stack().await;
    let queue = unique_queue("outage");
    let _worker = WorkerProcess::start(&queue, &[]).await;
    let cli = Cli::new(&queue);
    let host = unique_host("outage");
    let target = seed(&stack, &host, small_plan()).await;
    let (id, digest) = cli.submit(&host, "alice", &[]).await;

    let _restart = RestartOnDrop;
    stop_redis().await;
    cli.approve(&id, "bob", &digest).await.expect_code(0);
    // Draining publishes DisconnectCommunity on Redis: with Redis down it fails and Temporal
    // retries it; `status` shows the pending activity and its last failure.
    let status = cli
        .wait_status(&id, 120, |s| {
            s["phase"] == "draining" && !s["pending_activity"]["last_failure"].is_null()
        })
        .await;
    assert!(
        status["blocked"].is_null(),
        "an outage is transient, never a block: {status}"
    );
    restart_stack().await;

    cli.watch_to_end(&id).await;
    // Fresh connections: the test's own Redis connection died with the server.
    let stack = testkit::prelude::stack().await;
    let after = snapshot(&stack, target.community_id).await;
    after.assert_gone("the target");
}

/// Stops the local Temporal server (the process `deploy/local/up` started; its data file is
/// kept, so running workflows survive and `deploy/local/up` brings it back).
async fn stop_temporal() {
    let status = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(
            "source \"$1/deploy/local/lib.sh\" && pid=$(buzz_live_pid temporal temporal) && \
             [ -n \"$pid\" ] && buzz_stop_pid \"$pid\" temporal 30",
        )
        .arg("stop_temporal")
        .arg(repo_root())
        .status()
        .await
        .unwrap_or_else(|e| panic!("stopping Temporal: {e}"));
    assert!(
        status.success(),
        "the local Temporal server was not running"
    );
}

/// Temporal keeps an update no worker has accepted in memory only: a server restart drops it.
/// The operator's signed approve, abort and user approve sent while no worker runs must still
/// act, exactly once, when a worker comes back after the restart, because the CLI also wrote
/// each to the workflow's history as the signal of the same name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_sent_while_no_worker_runs_survive_a_temporal_restart_and_act_once() {
    let _exclusive = outage_lock().write().await;
    let stack = stack().await;
    let queue = unique_queue("restart");
    let worker = WorkerProcess::start(&queue, &[]).await;
    let cli = Cli::new(&queue);
    let target = Tenant::seed(&stack, "restart", small_plan()).await;
    let (id, digest) = cli.submit(&target.host, "alice", &[]).await;
    let abort_target = Tenant::seed(&stack, "restart-abort", small_plan()).await;
    let abort_before = abort_target.kept(&stack).await;
    let (abort_id, _) = cli.submit(&abort_target.host, "alice", &[]).await;
    let user_target = format!("demo:restart-{}", uuid::Uuid::new_v4().simple());
    let (user_id, user_digest) = cli.user_submit(&user_target, "alice").await;
    worker.crash().await;

    let sent = |run: CliRun, what: &str| {
        let run = run.expect_code(1);
        assert!(
            run.stderr
                .contains(&format!("{what} sent, not yet processed"))
                && run.stderr.contains("written to the workflow's history"),
            "{}",
            run.stderr
        );
    };
    let wait = ["--worker-wait", "3"];
    let approve = [
        "community",
        "approve",
        &id,
        "--approved-by",
        "bob",
        "--inventory-digest",
        &digest,
    ];
    sent(
        cli.run(&[&approve[..], &wait[..]].concat()).await,
        "approval",
    );
    let abort = [
        "community",
        "abort",
        &abort_id,
        "--aborted-by",
        "carol",
        "--reason",
        "changed our mind",
    ];
    sent(cli.run(&[&abort[..], &wait[..]].concat()).await, "abort");
    let user_approve = [
        "user",
        "approve",
        &user_id,
        "--approved-by",
        "bob",
        "--inventory-digest",
        &user_digest,
    ];
    sent(
        cli.run(&[&user_approve[..], &wait[..]].concat()).await,
        "approval",
    );

    let _restart = RestartOnDrop;
    stop_temporal().await;
    restart_stack().await;
    let _worker = WorkerProcess::start(&queue, &[]).await;

    cli.watch_to_end(&id).await;
    let stack = testkit::prelude::stack().await;
    target.assert_gone(&stack, "the approved target").await;
    let request_id = id.parse().unwrap_or_default();
    let audit = testkit::refusal::audit_trail(&stack, request_id).await;
    let approvals = audit.iter().filter(|e| e.event == "approved").count();
    assert_eq!(approvals, 1, "approved exactly once: {audit:#?}");
    super::no_worker::assert_only_copies_refused(&audit, "approval_rejected");

    let aborted = cli
        .wait_status(&abort_id, 120, |s| s["phase"] == "aborted")
        .await;
    assert_eq!(aborted["abort"]["actor"], "carol", "{aborted}");
    abort_before
        .assert_unchanged(&stack, "aborted before the irreversible point")
        .await;

    let user = testkit::poll::until(
        Duration::from_secs(60),
        Duration::from_millis(300),
        async || {
            let status = cli.run(&["user", "status", &user_id]).await;
            let user = status.expect_code(0).json();
            match user["approval"].is_null() {
                false => Ok(user),
                true => Err(format!("the user approval never acted: {user}")),
            }
        },
    )
    .await;
    assert_eq!(user["approval"]["approved_by"], "bob", "{user}");
}
