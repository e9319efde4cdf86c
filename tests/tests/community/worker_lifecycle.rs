use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use crate::helpers::*;

/// Runs the worker binary with the stack's environment plus `overrides`, until it exits.
async fn worker_exit(overrides: &[(&str, &str)], remove: &[&str]) -> (i32, String) {
    let mut command = Command::new(bin("buzz-deletion-worker"));
    command
        .env("BUZZ_METRICS_PORT", "0")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in overrides {
        command.env(k, v);
    }
    for k in remove {
        command.env_remove(k);
    }
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .unwrap_or_else(|_| panic!("the worker neither started nor failed within 60 s"))
        .unwrap_or_else(|e| panic!("could not run the worker: {e}"));
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_refuses_to_start_naming_the_missing_variable_or_unreachable_service() {
    let _shared = outage_lock().read().await;
    let _stack = stack().await;
    let (code, stderr) = worker_exit(&[], &["BUZZ_S3_BUCKET"]).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("BUZZ_S3_BUCKET is not set"), "{stderr}");
    let (code, stderr) = worker_exit(&[("TEMPORAL_ADDRESS", "127.0.0.1:1")], &[]).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("Temporal is not reachable at 127.0.0.1:1"),
        "{stderr}"
    );
    let (code, stderr) = worker_exit(&[("REDIS_URL", "redis://127.0.0.1:1")], &[]).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("Redis is not reachable"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_refuses_an_unmigrated_schema_and_says_to_run_migrate() {
    let _shared = outage_lock().read().await;
    let stack = stack().await;
    let database = format!("buzz_unmigrated_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {database}")))
        .execute(stack.store.pool())
        .await
        .unwrap_or_else(|e| panic!("create scratch database: {e}"));
    let url = std::env::var("DATABASE_URL").unwrap_or_default();
    let scratch_url = format!(
        "{}/{database}",
        url.rsplit_once('/').map(|(base, _)| base).unwrap_or(&url)
    );
    let (code, stderr) = worker_exit(&[("DATABASE_URL", &scratch_url)], &[]).await;
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {database}"
    )))
    .execute(stack.store.pool())
    .await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("buzz-deletion migrate"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_the_worker_and_it_exits_cleanly() {
    let _shared = outage_lock().read().await;
    let _stack = stack().await;
    let mut child = Command::new(bin("buzz-deletion-worker"))
        .env("BUZZ_TASK_QUEUE", unique_queue("drain"))
        .env("BUZZ_METRICS_PORT", "0")
        .env("BUZZ_SHUTDOWN_GRACE_SECS", "5")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pid = child.id().unwrap_or_default().to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(killed.success());
    let output = tokio::time::timeout(Duration::from_secs(30), async {
        let status = child.wait().await;
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            use tokio::io::AsyncReadExt;
            let _ = pipe.read_to_string(&mut stderr).await;
        }
        (status, stderr)
    })
    .await
    .unwrap_or_else(|_| panic!("the worker did not stop within 30 s of SIGTERM"));
    let (status, stderr) = output;
    assert!(
        status.map(|s| s.success()).unwrap_or(false),
        "a drained worker exits 0: {stderr}"
    );
    assert!(stderr.contains("drained"), "{stderr}");
}
