//! How most end-to-end stories begin: the shared side of the outage lock, the stack, a worker
//! process on a task queue of the test's own, and the operator CLI bound to that queue.

use tokio::sync::RwLockReadGuard;

use crate::cli::Cli;
use crate::stack::{Stack, outage_lock, stack};
use crate::workers::{WorkerProcess, unique_queue};

/// The worker a story started on its own queue, and the shared outage lock it holds: keep it
/// bound (`_worker`) for the whole test. Dropping it stops the worker, then releases the lock.
pub struct QueueWorker {
    /// The worker process (killed when this is dropped).
    pub process: WorkerProcess,
    /// The task queue of this story alone.
    pub queue: String,
    _shared: RwLockReadGuard<'static, ()>,
}

/// Takes the shared outage lock, connects to the stack, starts a worker with `env` on a fresh
/// queue named after `tag`, and returns the stack, the CLI bound to that queue and the worker.
pub async fn with_worker(tag: &str, env: &[(&str, &str)]) -> (Stack, Cli, QueueWorker) {
    let shared = outage_lock().read().await;
    let stack = stack().await;
    let queue = unique_queue(tag);
    let process = WorkerProcess::start(&queue, env).await;
    let cli = Cli::new(&queue);
    let worker = QueueWorker {
        process,
        queue,
        _shared: shared,
    };
    (stack, cli, worker)
}
