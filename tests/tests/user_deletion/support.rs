//! The stack a user-deletion test runs on: the real Postgres of the local stack (migrated), a
//! fresh time-skipping Temporal test server per test, in-process workers on their own threads
//! (so one can be killed abruptly), and the real `buzz-deletion` binary as the operator's CLI.

use std::path::PathBuf;
use std::time::Duration;

use activities::user::faults::FaultPoints;
use activities::user::{StageRowView, UserActivities, UserRequestView, UserStore};
use serde_json::Value;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use temporalio_client::{
    Client, ClientOptions, ConnectionOptions, UntypedSignal, WorkflowDescribeOptions,
    WorkflowQueryOptions, WorkflowSignalOptions, WorkflowTerminateOptions,
};
use temporalio_common::data_converters::RawValue;
use temporalio_common::protos::temporal::api::enums::v1::IndexedValueType;
use temporalio_common::protos::temporal::api::operatorservice::v1::AddSearchAttributesRequest;
use temporalio_common::protos::temporal::api::testservice::v1::SleepRequest;
use temporalio_sdk::{Runtime, Worker, WorkerOptions};
use temporalio_sdk_core::ephemeral_server::{EphemeralExe, EphemeralServer, TestServerConfig};
use tokio::sync::oneshot;
use uuid::Uuid;
use workflows::user::{UserApprovalRecord, UserDeletion, UserDeletionStatus, workflow_id};

const STACK_HINT: &str = "run `bash deploy/local/up && source .state/env`";

/// Postgres, a Temporal test server and a client; workers are spawned per test.
pub struct Stack {
    /// The user-deletion store over the local stack's Postgres, as the schema owner (migration,
    /// snapshots).
    pub store: UserStore,
    /// The worker role's URL (DATABASE_URL): workers and the CLI connect with it.
    database_url: String,
    server: EphemeralServer,
    client: Client,
}

impl Stack {
    /// Connects Postgres (migrating it), starts a time-skipping test server with the search
    /// attributes registered. Panics, naming the missing server and how to start it.
    pub async fn start() -> Stack {
        let store = migrated_store().await;
        let database_url = database_url();
        let exe = std::env::var("TEMPORAL_TEST_SERVER_EXE").unwrap_or_else(|_| {
            panic!(
                "TEMPORAL_TEST_SERVER_EXE is not set: the user-deletion tests need the Temporal \
                 time-skipping test server; {STACK_HINT}"
            )
        });
        let server = TestServerConfig::builder()
            .exe(EphemeralExe::ExistingPath(exe.clone()))
            .build()
            .start_server()
            .await
            .unwrap_or_else(|e| {
                panic!("the Temporal test server {exe} did not start ({e}); {STACK_HINT}")
            });
        let client = connect(&server.target).await;
        let search_attributes = workflows::search::ALL
            .iter()
            .map(|(name, kind)| {
                let kind = match *kind {
                    "Bool" => IndexedValueType::Bool,
                    _ => IndexedValueType::Keyword,
                };
                ((*name).to_string(), kind as i32)
            })
            .collect();
        client
            .connection()
            .operator_service()
            .add_search_attributes(tonic::Request::new(AddSearchAttributesRequest {
                search_attributes,
                namespace: "default".into(),
            }))
            .await
            .expect("registering the search attributes on the test server");
        Stack {
            store,
            database_url,
            server,
            client,
        }
    }

    /// Stops the test server.
    pub async fn stop(mut self) {
        let _ = self.server.shutdown().await;
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

    /// Runs `buzz-deletion <args>` against this stack and waits for it.
    /// A signed command naming its operator signs with that operator's e2e key.
    pub async fn cli(&self, args: &[&str]) -> CliRun {
        let args = crate::operators::with_operator_key(args, None).await;
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = self
            .cli_command(&args)
            .output()
            .await
            .expect("running the buzz-deletion binary");
        CliRun {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// The `buzz-deletion <args>` command against this stack, not yet started.
    pub fn cli_command(&self, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(cli_binary());
        command
            .args(args)
            .env("TEMPORAL_ADDRESS", &self.server.target)
            .env("TEMPORAL_NAMESPACE", "default")
            .env("DATABASE_URL", &self.database_url)
            .kill_on_drop(true);
        command
    }

    /// What Postgres holds about request `id`: request row, approval, stage rows in chain order.
    pub async fn snapshot(&self, id: Uuid) -> Snapshot {
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
        Snapshot {
            request,
            approval,
            approvals,
            rows,
        }
    }
}

/// The worker role's connection string (DATABASE_URL).
fn database_url() -> String {
    required_url("DATABASE_URL")
}

fn required_url(name: &'static str) -> String {
    activities::stack_env::StackEnv::process()
        .required(name)
        .unwrap_or_else(|e| panic!("the user-deletion tests need PostgreSQL: {e}"))
}

/// The user-deletion store over the local stack's Postgres as the schema owner
/// (BUZZ_OWNER_DATABASE_URL), migrated. Panics, naming the server and how to start it, when
/// Postgres is unreachable.
pub async fn migrated_store() -> UserStore {
    let pool: PgPool = PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(5))
        .connect(&required_url("BUZZ_OWNER_DATABASE_URL"))
        .await
        .unwrap_or_else(|e| {
            panic!("PostgreSQL is not reachable at BUZZ_OWNER_DATABASE_URL ({e}); {STACK_HINT}")
        });
    activities::store::MIGRATOR
        .run(&pool)
        .await
        .unwrap_or_else(|e| panic!("migrating the test database failed: {e}"));
    UserStore::new(pool)
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
    let client = connect(&address).await;
    let runtime = Runtime::from_current_tokio(Default::default()).expect("temporal runtime");
    let options = WorkerOptions::new(workflows::TASK_QUEUE)
        .client_identity_override(name)
        // By default no workflow cache, hence no sticky queue: the Java test server never hands a
        // dead worker's sticky tasks to another worker. Every task then replays the whole
        // history, which also proves the workflow deterministic.
        .max_cached_workflows(cached_workflows)
        .register_workflow::<UserDeletion>()
        .expect("registering UserDeletion")
        .register_activities(UserActivities::new(pool).with_fault_points(faults))
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

async fn connect(address: &str) -> Client {
    let url = url::Url::parse(&format!("http://{address}")).expect("server address");
    let connection = ConnectionOptions::new(url)
        .identity("user-deletion-e2e".to_string())
        .build();
    Client::connect(connection, ClientOptions::new("default").build())
        .await
        .unwrap_or_else(|e| panic!("Temporal test server at {address} is not reachable: {e}"))
}

/// The `buzz-deletion` binary: `BUZZ_DELETION_BIN`, else `target/debug/buzz-deletion` next to
/// this test binary.
fn cli_binary() -> PathBuf {
    if let Ok(path) = std::env::var("BUZZ_DELETION_BIN") {
        return PathBuf::from(path);
    }
    let test_binary = std::env::current_exe().expect("test binary path");
    let path = test_binary
        .parent()
        .and_then(|deps| deps.parent())
        .map(|debug| debug.join("buzz-deletion"))
        .expect("target directory");
    assert!(
        path.exists(),
        "{} does not exist: build it first with `cargo build -p starter`",
        path.display()
    );
    path
}

/// One finished CLI invocation.
#[derive(Debug)]
pub struct CliRun {
    /// Exit code.
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl CliRun {
    /// Standard output parsed as the JSON document the CLI prints.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}); exit {}\nstdout: {}\nstderr: {}",
                self.code, self.stdout, self.stderr
            )
        })
    }

    /// Panics with the full output unless the exit code is `code`.
    pub fn expect_exit(&self, code: i32) -> &Self {
        assert_eq!(
            self.code, code,
            "unexpected exit code\nstdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        self
    }
}

/// What Postgres holds about one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// The request row.
    pub request: UserRequestView,
    /// The approval evidence.
    pub approval: Option<UserApprovalRecord>,
    /// Approval rows (evidence is one per request).
    pub approvals: i64,
    /// Stage rows, initial stage first, following `previous_stage_id`.
    pub rows: Vec<StageRowView>,
}

impl Snapshot {
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
pub async fn approve(stack: &Stack, id: Uuid, by: &str, digest: &str) -> CliRun {
    let id = id.to_string();
    stack
        .cli(&[
            "user",
            "approve",
            &id,
            "--approved-by",
            by,
            "--inventory-digest",
            digest,
        ])
        .await
}

/// `user submit` then `user approve` with a second operator; asserts the approval created no
/// stage rows.
pub async fn submit_and_approve(stack: &Stack, target: &str) -> ApprovedRequest {
    let submitted = stack
        .cli(&[
            "user",
            "submit",
            "--target",
            target,
            "--requested-by",
            "operator-a",
        ])
        .await;
    submitted.expect_exit(0);
    let document = submitted.json();
    let id: Uuid = document["id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("submit printed no id: {document}"));
    let digest = document["inventory_digest"]
        .as_str()
        .unwrap_or_else(|| panic!("submit printed no inventory_digest: {document}"))
        .to_string();
    approve(stack, id, "operator-b", &digest)
        .await
        .expect_exit(0);
    ApprovedRequest { id }
}
