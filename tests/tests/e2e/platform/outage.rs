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
