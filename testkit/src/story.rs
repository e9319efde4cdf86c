//! How most end-to-end stories begin: the shared side of the outage lock, the stack, a worker
//! process on a task queue of the test's own, and the operator CLI bound to that queue; and the
//! deletion paced slowly enough to be interrupted, for the stories that stop its worker.

use std::time::Duration;

use activities::store::ChunkProgress;
use tokio::sync::{MutexGuard, RwLockReadGuard};
use uuid::Uuid;

use crate::cli::Cli;
use crate::poll;
use crate::records::chunk_progress;
use crate::seed::{ONE_DELETE_AT_A_TIME, Tenant, paced_plan, small_plan};
use crate::stack::{Stack, bucket_policy_lock, outage_lock, stack};
use crate::workers::{WorkerProcess, unique_queue};

/// The worker a story started on its own queue, and the shared outage lock it holds: keep it
/// bound (`_worker`) for the whole test. Dropping it stops the worker, then releases the locks.
pub struct QueueWorker {
    /// The worker process (killed when this is dropped).
    pub process: WorkerProcess,
    /// The task queue of this story alone.
    pub queue: String,
    _policy: Option<MutexGuard<'static, ()>>,
    _shared: RwLockReadGuard<'static, ()>,
}

/// Takes the shared outage lock, connects to the stack, starts a worker with `env` on a fresh
/// queue named after `tag`, and returns the stack, the CLI bound to that queue and the worker.
pub async fn with_worker(tag: &str, env: &[(&str, &str)]) -> (Stack, Cli, QueueWorker) {
    let shared = outage_lock().read().await;
    start(tag, env, shared, None).await
}

/// [`with_worker`] for a story that sets the (one, shared) bucket policy: it also holds the
/// bucket-policy lock, taken after the outage lock.
pub async fn with_policy_worker(tag: &str, env: &[(&str, &str)]) -> (Stack, Cli, QueueWorker) {
    let shared = outage_lock().read().await;
    let policy = bucket_policy_lock().lock().await;
    start(tag, env, shared, Some(policy)).await
}

/// [`with_worker`], and the story's target: a community of [`small_plan`] seeded on a host
/// named after `tag`.
pub async fn with_target(tag: &str, env: &[(&str, &str)]) -> (Stack, Cli, QueueWorker, Tenant) {
    let (stack, cli, worker) = with_worker(tag, env).await;
    let target = Tenant::seed(&stack, tag, small_plan()).await;
    (stack, cli, worker, target)
}

async fn start(
    tag: &str,
    env: &[(&str, &str)],
    shared: RwLockReadGuard<'static, ()>,
    policy: Option<MutexGuard<'static, ()>>,
) -> (Stack, Cli, QueueWorker) {
    let stack = stack().await;
    let queue = unique_queue(tag);
    let process = WorkerProcess::start(&queue, env).await;
    let cli = Cli::new(&queue);
    let worker = QueueWorker {
        process,
        queue,
        _policy: policy,
        _shared: shared,
    };
    (stack, cli, worker)
}

/// A deletion slow enough to interrupt, approved and running: a community of
/// [`paced_plan`]`(objects)` submitted by alice with [`ONE_DELETE_AT_A_TIME`] and approved by bob,
/// on a worker of its own started with `env`.
pub struct PacedDeletion {
    /// The stack.
    pub stack: Stack,
    /// The CLI bound to the worker's queue.
    pub cli: Cli,
    /// The worker deleting (stop it to interrupt the deletion).
    pub worker: QueueWorker,
    /// The community being deleted.
    pub target: Tenant,
    /// The request id as the CLI prints it.
    pub id: String,
    /// The request id.
    pub request: Uuid,
}

impl PacedDeletion {
    /// Starts the worker, seeds, submits and approves.
    pub async fn start(tag: &str, env: &[(&str, &str)], objects: u32) -> PacedDeletion {
        let (stack, cli, worker) = with_worker(tag, env).await;
        let target = Tenant::seed(&stack, tag, paced_plan(objects)).await;
        let (id, digest) = cli
            .submit(&target.host, "alice", &ONE_DELETE_AT_A_TIME)
            .await;
        cli.approve(&id, "bob", &digest).await.expect_code(0);
        let request = id
            .parse()
            .unwrap_or_else(|e| panic!("request id {id}: {e}"));
        PacedDeletion {
            stack,
            cli,
            worker,
            target,
            id,
            request,
        }
    }

    /// Waits (up to 120 s) until at least one manifest chunk is stamped; the progress seen then.
    pub async fn wait_for_a_stamped_chunk(&self) -> ChunkProgress {
        let every = Duration::from_millis(100);
        poll::until(Duration::from_secs(120), every, async || {
            let progress = chunk_progress(&self.stack, self.request).await;
            match progress.chunks_stamped {
                0 => Err("no chunk was ever stamped".to_owned()),
                _ => Ok(progress),
            }
        })
        .await
    }
}
