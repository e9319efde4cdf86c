//! `buzz-deletion-worker` processes: the one way the tests launch the worker binary (its own
//! startup code, as deployed), each on a task queue of its own so tests run in parallel and a test
//! may SIGKILL or SIGTERM its worker without touching anyone else's.

use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};
use uuid::Uuid;

use crate::env::bin;

/// A loopback port for a worker's metrics endpoint that nothing else in this run can hold.
///
/// Asking the kernel for port 0 and handing the number on is racy here: the number is in the
/// ephemeral range, and between the probe and the worker's bind any outgoing connection of the
/// parallel tests (Postgres, Temporal, S3, Redis) may take it as its local port. Ports are drawn
/// instead from 20000–29999, below the ephemeral range (32768–60999 by default), one per call in
/// this process, starting at an offset of the process id, and skipped while something listens.
pub fn metrics_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    const BASE: u32 = 20_000;
    const SPAN: u32 = 10_000;
    let _ = NEXT.compare_exchange(
        u32::MAX,
        (std::process::id() * 37) % SPAN,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..SPAN {
        let offset = NEXT.fetch_add(1, Ordering::SeqCst) % SPAN;
        let port = u16::try_from(BASE + offset).unwrap_or(20_000);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in 20000–29999 for a metrics endpoint")
}

/// A task queue no other test uses.
pub fn unique_queue(tag: &str) -> String {
    format!("test-{tag}-{}", Uuid::new_v4().simple())
}

/// The worker binary with the stack's environment (inherited), a metrics port of its own, stdin
/// and stdout closed and `extra_env` on top; stderr (and `RUST_LOG`) are the caller's choice.
pub fn worker_command(extra_env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(bin("buzz-deletion-worker"));
    command
        .env("BUZZ_METRICS_PORT", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    for (k, v) in extra_env {
        command.env(k, v);
    }
    command
}

/// Runs the worker binary with the stack's environment plus `overrides` and without `remove`,
/// until it exits (it must, within 60 s: these are startup refusals); its exit code and stderr.
pub async fn worker_exit(overrides: &[(&str, &str)], remove: &[&str]) -> (i32, String) {
    let mut command = worker_command(&[("RUST_LOG", "warn")]);
    command.stderr(Stdio::piped());
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

/// Runs a worker that must refuse to start, with `set` added to and `remove` taken out of its
/// environment: it exits 1 and its stderr holds every `expected` fragment. Returns the whole
/// stderr.
pub async fn refused_naming(set: &[(&str, &str)], remove: &[&str], expected: &[&str]) -> String {
    let (code, stderr) = worker_exit(set, remove).await;
    assert_eq!(code, 1, "{stderr}");
    for fragment in expected {
        assert!(
            stderr.contains(fragment),
            "{fragment:?} missing from:\n{stderr}"
        );
    }
    stderr
}

/// Runs a worker that must refuse to start, with `set` added to and `remove` taken out of its
/// environment: it exits 1 and its stderr ends with one `error:` line holding every `expected`
/// fragment. Returns the whole stderr.
pub async fn refused_in_one_line(
    set: &[(&str, &str)],
    remove: &[&str],
    expected: &[&str],
) -> String {
    let stderr = refused_naming(set, remove, &[]).await;
    let error = stderr
        .rfind("error: ")
        .map(|at| stderr[at..].trim_end())
        .unwrap_or_else(|| panic!("no error line: {stderr}"));
    assert!(!error.contains('\n'), "not one line:\n{error}");
    for fragment in expected {
        assert!(
            error.contains(fragment),
            "{fragment:?} missing from:\n{error}"
        );
    }
    stderr
}

/// A `buzz-deletion-worker` process on its own task queue.
pub struct WorkerProcess {
    child: Child,
}

impl WorkerProcess {
    /// Starts a worker on `task_queue` with extra environment, and waits until it polls.
    pub async fn start(task_queue: &str, extra_env: &[(&str, &str)]) -> WorkerProcess {
        WorkerProcess::start_without(task_queue, extra_env, &[]).await
    }

    /// [`WorkerProcess::start`] with the variables `remove` taken out of the inherited
    /// environment.
    pub async fn start_without(
        task_queue: &str,
        extra_env: &[(&str, &str)],
        remove: &[&str],
    ) -> WorkerProcess {
        let mut command = worker_command(&[("BUZZ_TASK_QUEUE", task_queue), ("RUST_LOG", "warn")]);
        for (k, v) in extra_env {
            command.env(k, v);
        }
        for k in remove {
            command.env_remove(k);
        }
        let child = command
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("could not start buzz-deletion-worker: {e}"));
        // Connecting takes about a second; workflow tasks wait on the queue meanwhile anyway.
        tokio::time::sleep(Duration::from_millis(500)).await;
        WorkerProcess { child }
    }

    /// SIGTERMs the worker, as a deployment's stop does, and waits (up to 60 s) for it to drain
    /// and exit; whether it exited 0.
    pub async fn terminate(mut self) -> bool {
        let pid = self
            .child
            .id()
            .unwrap_or_else(|| panic!("the worker exited before it was sent SIGTERM"));
        let sent = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await
            .unwrap_or_else(|e| panic!("kill -TERM {pid}: {e}"));
        assert!(sent.success(), "kill -TERM {pid} failed");
        tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("the worker did not exit within 60 s of SIGTERM"))
            .unwrap_or_else(|e| panic!("waiting for the worker: {e}"))
            .success()
    }

    /// SIGKILLs the worker (no drain, no cleanup): a crash.
    pub async fn crash(mut self) {
        self.child
            .kill()
            .await
            .unwrap_or_else(|e| panic!("kill worker: {e}"));
        let _ = self.child.wait().await;
    }
}

/// A worker built in this process by the worker's own startup code
/// (`worker::startup::build_worker`: every workflow and activity the binary registers), on
/// `task_queue` of `client`'s server, over the stores of `stack`.
pub fn startup_worker(
    runtime: &temporalio_sdk::Runtime,
    stack: &crate::stack::Stack,
    client: &temporalio_client::Client,
    task_queue: &str,
    shutdown_grace: Duration,
) -> temporalio_sdk::Worker {
    let deps = worker::startup::Dependencies {
        store: stack.store.clone(),
        objects: stack.objects.clone(),
        cache: stack.cache.clone(),
        client: client.clone(),
        receipt_key: crate::env::receipt_key(),
        receipt_archive: None,
        user_row_batch: activities::user::erasure::DEFAULT_ROW_BATCH,
    };
    worker::startup::build_worker(
        runtime,
        &deps,
        task_queue,
        Default::default(),
        shutdown_grace,
    )
    .unwrap_or_else(|e| panic!("building the worker: {e}"))
}
