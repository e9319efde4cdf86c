//! The stack a user-deletion test runs on: the real Postgres of the local stack (migrated), a
//! fresh time-skipping Temporal test server per test, in-process workers on their own threads
//! (so one can be killed abruptly), and the real `buzz-deletion` binary as the operator's CLI.
//!
//! The workers are built here rather than by `worker::startup`: they register only the user
//! workflow, pass crash points to the activities ([`FaultPoints`]) and run without a workflow
//! cache (see [`UserStack::spawn_worker_with_cache`]), none of which the deployed worker offers.

use std::time::Duration;

use activities::user::faults::FaultPoints;
use activities::user::{StageRowView, UserActivities, UserRequestView, UserStore};
use serde_json::Value;
use sqlx::postgres::PgPoolOptions;
use stack_config::env as stack_env;
use temporalio_client::{
    Client, UntypedSignal, WorkflowDescribeOptions, WorkflowQueryOptions, WorkflowSignalOptions,
    WorkflowTerminateOptions,
};
use temporalio_common::data_converters::RawValue;
use temporalio_common::protos::temporal::api::testservice::v1::SleepRequest;
use temporalio_sdk::{Runtime, Worker, WorkerOptions};
use tokio::sync::oneshot;
use uuid::Uuid;
use workflows::user::{UserApprovalRecord, UserDeletion, UserDeletionStatus, workflow_id};

use crate::cli::{Cli, CliRun};
use crate::env::required;
use crate::stack::owner_pool;
use crate::temporal::{connect, start_test_server};
use crate::test_server::TestServer;

/// The identity of the user-deletion tests' Temporal clients.
const IDENTITY: &str = "user-deletion-e2e";

/// Postgres, a Temporal test server and a client; workers are spawned per test.
pub struct UserStack {
    /// The user-deletion store over the local stack's Postgres, as the schema owner (migration,
    /// snapshots).
    pub store: UserStore,
    /// The worker role's URL (DATABASE_URL): workers and the CLI connect with it.
    database_url: String,
    server: TestServer,
    client: Client,
}

impl UserStack {
    /// Connects Postgres (migrating it), starts a time-skipping test server with the search
    /// attributes registered. Panics, naming the missing server and how to start it.
    pub async fn start() -> UserStack {
        let store = migrated_store().await;
        let database_url = required(stack_env::DATABASE_URL);
        let (server, client) = start_test_server(Some(IDENTITY)).await;
        UserStack {
            store,
            database_url,
            server,
            client,
        }
    }

    /// Stops the test server.
    pub async fn stop(mut self) {
        self.server.shutdown().await;
    }

    /// The workflow's answer to the `status` query.
    pub async fn workflow_status(&self, id: Uuid) -> UserDeletionStatus {
        self.client
            .get_workflow_handle::<UserDeletion>(workflow_id(id))
            .query(UserDeletion::status, (), WorkflowQueryOptions::default())
            .await
            .expect("querying the workflow status")
    }

    /// Terminates the request's workflow, as an operator would from the Web UI.
    pub async fn terminate(&self, id: Uuid) {
        self.client
            .get_workflow_handle::<UserDeletion>(workflow_id(id))
            .terminate(
                WorkflowTerminateOptions::builder()
                    .reason("e2e: the workflow is lost".to_string())
                    .build(),
            )
            .await
            .expect("terminating the workflow");
    }

    /// Sends the `stop` signal with no payload, as an operator would from the Web UI.
    pub async fn signal_stop(&self, id: Uuid) {
        self.client
            .get_workflow_handle::<UserDeletion>(workflow_id(id))
            .signal(
                UntypedSignal::new("stop"),
                RawValue::new(Vec::new()),
                WorkflowSignalOptions::default(),
            )
            .await
            .expect("signalling stop");
    }

    /// The run id of the request's latest workflow execution and whether it is running.
    pub async fn latest_execution(&self, id: Uuid) -> (String, bool) {
        let description = self
            .client
            .get_workflow_handle::<UserDeletion>(workflow_id(id))
            .describe(WorkflowDescribeOptions::default())
            .await
            .expect("describing the workflow");
        (
            description.run_id().to_string(),
            description.status() == temporalio_client::WorkflowExecutionStatus::Running,
        )
    }

    /// Starts a worker (workflow + user activities) on its own thread and runtime.
    pub fn spawn_worker(&self, name: &str) -> WorkerThread {
        self.spawn_worker_with_cache(name, 0)
    }

    /// Starts a worker whose user activities pass their crash points through `faults`.
    pub fn spawn_worker_with_faults(&self, name: &str, faults: FaultPoints) -> WorkerThread {
        self.spawn_worker_configured(name, 0, faults)
    }

    /// Starts a worker that caches up to `cached_workflows` workflows (0: none, every task replays
    /// the whole history). Only for a test with a single worker that never dies: the Java test
    /// server does not hand a dead worker's sticky tasks to another one.
    pub fn spawn_worker_with_cache(&self, name: &str, cached_workflows: usize) -> WorkerThread {
        self.spawn_worker_configured(name, cached_workflows, FaultPoints::default())
    }

    fn spawn_worker_configured(
        &self,
        name: &str,
        cached_workflows: usize,
        faults: FaultPoints,
    ) -> WorkerThread {
        let (stop_tx, stop_rx) = oneshot::channel();
        let address = self.server.target.clone();
        let database_url = self.database_url.clone();
        let worker_name = name.to_string();
        let join = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_stack_size(worker::startup::RUNTIME_THREAD_STACK_BYTES)
                    .enable_all()
                    .build()
                    .expect("worker tokio runtime");
                let worker = run_worker(
                    worker_name,
                    address,
                    database_url,
                    cached_workflows,
                    faults,
                    stop_rx,
                );
                match runtime.block_on(worker) {
                    // Drops every task (handlers mid-sleep included) without completing anything:
                    // to the server the worker just vanished.
                    Stop::Kill => runtime.shutdown_background(),
                    Stop::Graceful => drop(runtime),
                }
            })
            .expect("spawning a worker thread");
        WorkerThread {
            stop: Some(stop_tx),
            join: Some(join),
        }
    }

    /// Moves the test server's clock forward by `by` (nothing waits in real time).
    pub async fn skip_time(&self, by: Duration) {
        self.client
            .connection()
            .test_service()
            .unlock_time_skipping_with_sleep(tonic::Request::new(SleepRequest {
                duration: Some(by.try_into().expect("duration fits")),
            }))
            .await
            .expect("skipping time on the test server");
    }

    /// The operator CLI against this stack: its test server, the worker role's database.
    pub fn operator_cli(&self) -> Cli {
        Cli::inherited()
            .with_env(stack_env::TEMPORAL_ADDRESS, &self.server.target)
            .with_env(stack_env::TEMPORAL_NAMESPACE, "default")
            .with_env(stack_env::DATABASE_URL, &self.database_url)
    }

    /// Runs `buzz-deletion <args>` against this stack and waits for it.
    /// A signed command naming its operator signs with that operator's e2e key.
    pub async fn cli(&self, args: &[&str]) -> CliRun {
        self.operator_cli().run(args).await
    }

    /// The `buzz-deletion <args>` command against this stack, not yet started.
    pub fn cli_command(&self, args: &[&str]) -> tokio::process::Command {
        self.operator_cli().command(args)
    }

    /// What Postgres holds about request `id`: request row, approval, stage rows in chain order.
    pub async fn snapshot(&self, id: Uuid) -> RequestSnapshot {
        let request = self
            .store
            .request_view(id)
            .await
            .expect("reading the request")
            .unwrap_or_else(|| panic!("request {id} does not exist"));
        let approval = self.store.approval(id).await.expect("reading the approval");
        let approvals: i64 =
            sqlx::query_scalar("SELECT count(*) FROM deletion.approvals WHERE request_id = $1")
                .bind(id)
                .fetch_one(self.store.pool())
                .await
                .expect("counting approvals");
        let rows = chain_order(self.store.stage_rows(id).await.expect("reading stage rows"));
        RequestSnapshot {
            request,
            approval,
            approvals,
            rows,
        }
    }
}

/// The user-deletion store over the local stack's Postgres as the schema owner
/// (BUZZ_OWNER_DATABASE_URL), migrated. Panics, naming the server and how to start it, when
/// Postgres is unreachable.
pub async fn migrated_store() -> UserStore {
    UserStore::new(owner_pool(4).await)
}

/// A worker running on its own thread.
pub struct WorkerThread {
    stop: Option<oneshot::Sender<Stop>>,
    join: Option<std::thread::JoinHandle<()>>,
}

#[derive(Debug, Clone, Copy)]
enum Stop {
    Graceful,
    Kill,
}

impl WorkerThread {
    /// Stops the worker abruptly: no activity completion, no further heartbeat, no shutdown call.
    pub fn kill(mut self) {
        self.stop_with(Stop::Kill);
    }

    /// Shuts the worker down gracefully.
    pub fn shutdown(mut self) {
        self.stop_with(Stop::Graceful);
    }

    fn stop_with(&mut self, stop: Stop) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(stop);
        }
        if let Some(join) = self.join.take() {
            let _ = join.join();
        }
    }
}

impl Drop for WorkerThread {
    fn drop(&mut self) {
        self.stop_with(Stop::Kill);
    }
}

async fn run_worker(
    name: String,
    address: String,
    database_url: String,
    cached_workflows: usize,
    faults: FaultPoints,
    stop: oneshot::Receiver<Stop>,
) -> Stop {
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect(&database_url)
        .await
        .expect("worker connects to PostgreSQL");
    let client = connect(&address, "default", Some(IDENTITY)).await;
    let runtime = Runtime::from_current_tokio(Default::default()).expect("temporal runtime");
    let options = WorkerOptions::new(workflows::TASK_QUEUE)
        .client_identity_override(name)
        // By default no workflow cache, hence no sticky queue: the Java test server never hands a
        // dead worker's sticky tasks to another worker. Every task then replays the whole
        // history, which also proves the workflow deterministic.
        .max_cached_workflows(cached_workflows)
        .register_workflow::<UserDeletion>()
        .expect("registering UserDeletion")
        .register_activities(
            UserActivities::new(pool)
                .with_fault_points(faults)
                .with_receipt_key(crate::env::receipt_key()),
        )
        .build();
    let mut worker = Worker::new(&runtime, client, options).expect("building the worker");
    let shutdown = worker.shutdown_handle();
    let run = worker.run();
    tokio::pin!(run);
    tokio::select! {
        result = &mut run => {
            result.expect("the worker stopped by itself");
            Stop::Graceful
        }
        requested = stop => match requested.unwrap_or(Stop::Kill) {
            Stop::Kill => Stop::Kill,
            Stop::Graceful => {
                shutdown();
                let _ = run.await;
                Stop::Graceful
            }
        }
    }
}

/// What Postgres holds about one request.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestSnapshot {
    /// The request row.
    pub request: UserRequestView,
    /// The approval evidence.
    pub approval: Option<UserApprovalRecord>,
    /// Approval rows (evidence is one per request).
    pub approvals: i64,
    /// Stage rows, initial stage first, following `previous_stage_id`.
    pub rows: Vec<StageRowView>,
}

impl RequestSnapshot {
    /// `(stage, community, status, is_current)` of every row, in chain order.
    pub fn positions(&self) -> Vec<(String, Option<Uuid>, String, bool)> {
        self.rows
            .iter()
            .map(|r| {
                (
                    r.stage.clone(),
                    r.community_id,
                    r.status.clone(),
                    r.is_current,
                )
            })
            .collect()
    }

    /// The saved decision name of row `index`.
    pub fn decision(&self, index: usize) -> Option<String> {
        self.rows[index]
            .transition
            .as_ref()
            .and_then(|t| t.get("decision"))
            .and_then(Value::as_str)
            .map(str::to_string)
    }
}

/// Orders rows by following `previous_stage_id` from the row without predecessor (the tests'
/// own reading of the chain, independent of the workflow's reconstruction).
fn chain_order(mut rows: Vec<StageRowView>) -> Vec<StageRowView> {
    let mut ordered = Vec::with_capacity(rows.len());
    let mut previous: Option<Uuid> = None;
    while let Some(position) = rows.iter().position(|r| r.previous_stage_id == previous) {
        let row = rows.swap_remove(position);
        previous = Some(row.id);
        ordered.push(row);
    }
    assert!(
        rows.is_empty(),
        "stage rows outside the predecessor chain: {rows:?}"
    );
    ordered
}

/// A request submitted and approved through the CLI.
pub struct ApprovedRequest {
    /// Request id.
    pub id: Uuid,
}

/// `user approve ID --approved-by BY --inventory-digest DIGEST`.
pub async fn approve(stack: &UserStack, id: Uuid, by: &str, digest: &str) -> CliRun {
    stack
        .operator_cli()
        .user_approve(&id.to_string(), by, digest)
        .await
}

/// `user submit` by `operator-a` then `user approve` by `operator-b` (both must exit 0).
pub async fn submit_and_approve(stack: &UserStack, target: &str) -> ApprovedRequest {
    let id = stack
        .operator_cli()
        .user_submit_and_approve(target, "operator-a", "operator-b")
        .await;
    let id: Uuid = id
        .parse()
        .unwrap_or_else(|e| panic!("submit printed an id that is not a UUID ({e}): {id}"));
    ApprovedRequest { id }
}

/// Waits (in real time) until the database's clock has passed request `id`'s saved retry
/// deadline: the store enforces it with that clock, which a test server's time skipping does not
/// move. `pool` is any connection that may read `deletion.requests`.
pub async fn wait_for_database_deadline(pool: &sqlx::PgPool, id: Uuid) {
    loop {
        let due: bool = sqlx::query_scalar(
            "SELECT coalesce(next_attempt_at <= now(), true) FROM deletion.requests WHERE id = $1",
        )
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| panic!("reading the saved retry deadline: {e}"));
        if due {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
