//! `buzz-deletion user …`: submit, approve, run and inspect user deletions.
//!
//! Each command is one Temporal interaction with the request's `UserDeletion` workflow (start +
//! `registration` update, `approve` update, `run` update) followed by a read of what Postgres
//! saved; `status` and a rerun of a finished request only read Postgres.

use anyhow::Context;
use serde::Serialize;
use temporalio_client::{
    Client, RpcOptions, WorkflowHandle, WorkflowIdConflictPolicy, WorkflowStartOptions,
};
use temporalio_common::data_converters::TemporalDeserializable;
use temporalio_common::search_attributes::SearchAttributes;
use temporalio_common::{HasWorkflowDefinition, UpdateDefinition};
use uuid::Uuid;

use activities::user::{StageRowView, UserRequestView, UserStore, UserStoreError};
use workflows::user::policy::{Position, lifecycle_problem, reconstruct};
use workflows::user::{ChildCommunityDeletion, TargetError, UserTarget, parse_target};
use workflows::user::{
    HandlerDirectives, Registration, RunOptions, RunOutcome, RunReport, StageKind,
    UserApprovalRecord, UserApproveRequest, UserDeletion, UserDeletionInput, UserInventory,
    UserOperatorRequest, workflow_id,
};

use workflows::operator::{Action, Kind, SignedAction};

use crate::cli::UserActionArgs;
use crate::cli::UserCommand;
use crate::connect;
use crate::error::{CliError, CliResult};
use crate::output::{Report, current_names, current_names_at, encoding_error};
use crate::render;
use crate::signing::{KeyArgs, SigningKey};
use crate::update::{self, UpdateFailure};
use crate::worker_wait::WorkerWait;

mod list;
mod recover;

/// What the `user` commands need: a Temporal client, the task queue, the user-deletion store.
#[derive(Debug, Clone)]
pub struct UserCliEnv {
    /// Connected Temporal client (namespace of the workers).
    pub client: Client,
    /// Task queue the workers poll (`BUZZ_TASK_QUEUE`, default `buzz-deletion`).
    pub task_queue: String,
    /// How long the commands that need a worker wait for one (`--worker-wait`).
    pub waits: WorkerWait,
    /// The user-deletion store over the deletion database.
    pub store: UserStore,
}

impl UserCliEnv {
    /// Connects what the `user` commands need: the deletion database and Temporal.
    pub async fn connect(waits: WorkerWait) -> Result<UserCliEnv, CliError> {
        let store = connect::store().await?;
        Ok(UserCliEnv {
            client: connect::temporal(&connect::TemporalTarget::from_env()?).await?,
            task_queue: connect::task_queue(),
            waits,
            store: UserStore::new(store.pool().clone()),
        })
    }

    /// The handle of request `id`'s workflow.
    fn workflow(&self, id: Uuid) -> WorkflowHandle<Client, UserDeletion> {
        self.client
            .get_workflow_handle::<UserDeletion>(workflow_id(id))
    }
}

/// Runs one `user` command as invoked: exporting a certificate needs only Postgres; every other
/// command connects Temporal too (see [`UserCliEnv::connect`]).
pub async fn run_invoked(waits: WorkerWait, command: UserCommand) -> CliResult {
    match command {
        UserCommand::Certificate(args) => super::certificate::export(args, "user").await,
        command => run(command, &UserCliEnv::connect(waits).await?).await,
    }
}

/// Runs one `user` command and returns its exit code: 0 ok, 1 failed or refused, 2 usage.
pub async fn run(cmd: UserCommand, env: &UserCliEnv) -> CliResult {
    match cmd {
        UserCommand::Submit {
            target,
            requested_by,
            reason,
            demo_communities,
            key,
        } => submit(env, target, requested_by, reason, demo_communities, &key).await,
        UserCommand::Approve {
            id,
            approved_by,
            inventory_digest,
            note,
            delete_owned_communities,
            key,
        } => {
            let signed = async {
                let signer = SigningKey::from_args(&key)?;
                let target = request_target(env, id).await?.unwrap_or_default();
                let name = signer
                    .operator_name(env.store.pool(), "--approved-by", approved_by.as_deref())
                    .await?;
                let signed = signer.sign(
                    Action::Approve,
                    Kind::User,
                    id,
                    &target,
                    Some(&inventory_digest),
                    key.signed_at.as_deref(),
                )?;
                Ok::<_, CliError>((name, signed))
            };
            let (approved_by, signed) = signed.await?;
            let child_deletions = child_deletions(env, id, &key, &delete_owned_communities).await?;
            let approval = UserApproveRequest {
                approved_by,
                inventory_digest,
                note,
                signed: Some(signed),
                child_deletions,
            };
            approve(env, id, approval).await
        }
        UserCommand::Abort(args) => {
            reasoned_action(env, args, Action::Abort, UserDeletion::abort).await
        }
        UserCommand::Unblock(args) => {
            reasoned_action(env, args, Action::Unblock, UserDeletion::unblock).await
        }
        UserCommand::Run {
            id,
            next_step,
            fail_stage,
            demo_no_agents_in,
            stage_delay_ms,
            executor_id,
            stop_wait_secs,
        } => {
            let options = RunOptions {
                next_step,
                directives: HandlerDirectives {
                    fail_stage: fail_stage.map(StageKind::from),
                    no_agents_in: demo_no_agents_in,
                    stage_delay_ms,
                },
                executor_id,
            };
            let stop_wait = std::time::Duration::from_secs(stop_wait_secs);
            run_stages(env, id, options, stop_wait).await
        }
        UserCommand::Stop { id, stop_wait_secs } => {
            recover::stop(env, id, std::time::Duration::from_secs(stop_wait_secs)).await
        }
        UserCommand::Resume {
            id,
            runs_per_execution,
        } => {
            let tuning = workflows::user::UserTuning { runs_per_execution };
            recover::resume(env, id, tuning).await
        }
        UserCommand::Status { id } => status(env, id).await,
        UserCommand::List(args) => list::list(env, args).await,
        UserCommand::Certificate(args) => crate::commands::certificate::export(args, "user").await,
    }
}

async fn submit(
    env: &UserCliEnv,
    target: String,
    requested_by: Option<String>,
    reason: Option<String>,
    demo_communities: Option<u32>,
    key: &KeyArgs,
) -> CliResult {
    match parse_target(&target) {
        Err(refusal) => return Err(refuse(2, &refusal.to_string())),
        Ok(UserTarget::User { .. }) if demo_communities.is_some() => {
            return Err(refuse(2, &TargetError::SizedRealTarget.to_string()));
        }
        Ok(UserTarget::User { .. }) => {}
        Ok(UserTarget::Demo { .. }) => {
            if let Some(size) = demo_communities
                && let Err(refusal) = UserInventory::demo_sized(&target, size)
            {
                return Err(refuse(2, &format!("--demo-communities {size}: {refusal}")));
            }
        }
    }
    let signer = match SigningKey::from_args(key) {
        Ok(signer) => signer,
        Err(e) => return Err(e),
    };
    let requested_by = match signer
        .operator_name(env.store.pool(), "--requested-by", requested_by.as_deref())
        .await
    {
        Ok(name) => name,
        Err(e) => return Err(e),
    };
    // Nothing is started while no worker polls: the request would wait unregistered.
    env.waits
        .require_worker(&env.client, "user deletion request")
        .await?;
    let id = Uuid::new_v4();
    let signed = match signer.sign(
        Action::Submit,
        Kind::User,
        id,
        &target,
        None,
        key.signed_at.as_deref(),
    ) {
        Ok(signed) => signed,
        Err(e) => return Err(e),
    };
    let input = UserDeletionInput {
        request_id: id,
        target,
        requested_by,
        reason,
        demo_communities,
        start: Default::default(),
        tuning: Default::default(),
        signed: Some(signed),
    };
    let options = WorkflowStartOptions::new(env.task_queue.clone(), workflow_id(id))
        .id_conflict_policy(WorkflowIdConflictPolicy::Fail)
        .search_attributes(SearchAttributes::new([
            workflows::search::KIND.value_set("user".to_string())
        ]))
        .build();
    let handle = env
        .client
        .start_workflow(UserDeletion::run, input, options)
        .await
        .context("starting the UserDeletion workflow")?;
    let registered = update::execute(
        &env.waits,
        &handle,
        "registration",
        UserDeletion::registration,
        (),
    )
    .await;
    let registration: Registration = match registered {
        Ok(registration) => registration,
        Err(UpdateFailure::NoWorker(e)) => {
            return Err(refuse(
                1,
                &format!("user deletion {id} was started, but {e}"),
            ));
        }
        Err(failure) => {
            // A refused registration (a malformed inventory, an undeclared tenant table) ends the
            // workflow, sometimes before the update is answered: its failure is the reason.
            let ended = handle
                .describe(Default::default())
                .await
                .is_ok_and(|d| d.status() != temporalio_client::WorkflowExecutionStatus::Running);
            if ended
                && let Err(temporalio_client::errors::WorkflowGetResultError::Failed(why)) =
                    handle.get_result(Default::default()).await
            {
                return Err(refuse(2, &format!("registration refused: {why}")));
            }
            return Err(failure.into_cli("registration", NOT_RUNNING));
        }
    };
    let text = render::user::submitted_text(&registration);
    Report::new(&registration_document(&registration)?, text)
}

/// What a refused update says when the request's workflow is gone.
const NOT_RUNNING: &str = "the request's workflow is not running";

/// The JSON answer of `user submit`: the registration, with `request_id` next to its
/// deprecated `id`.
pub(crate) fn registration_document(
    registration: &Registration,
) -> Result<serde_json::Value, CliError> {
    serde_json::to_value(registration)
        .map(current_names)
        .map_err(encoding_error)
}

/// A snapshot document: the request object carries `request_id` next to its deprecated `id`.
fn request_named(document: serde_json::Value) -> serde_json::Value {
    current_names_at(document, "request")
}

async fn approve(env: &UserCliEnv, id: Uuid, approval: UserApproveRequest) -> CliResult {
    existing_request(env, id).await?;
    let record: UserApprovalRecord =
        execute(env, id, "approval", UserDeletion::approve, approval).await?;
    let snapshot = RequestSnapshot::read(&env.store, id).await?;
    let document = snapshot.document("approval", &record, &["stages"])?;
    Report::new(&document, snapshot.text())
}

/// The child community deletions `user approve --delete-owned-community HOST` asks for: each host
/// looked up in the request's frozen inventory, with a fresh child request id and the
/// approver's signed `submit` of it. The workflow refuses any the inventory does not show the
/// user owning alone.
async fn child_deletions(
    env: &UserCliEnv,
    id: Uuid,
    key: &KeyArgs,
    hosts: &[String],
) -> Result<Vec<ChildCommunityDeletion>, CliError> {
    if hosts.is_empty() {
        return Ok(Vec::new());
    }
    let inventory: Option<UserInventory> = env
        .store
        .request_view(id)
        .await
        .map_err(|e| CliError::Other(e.into()))?
        .and_then(|r| r.inventory)
        .and_then(|v| serde_json::from_value(v).ok());
    let Some(inventory) = inventory else {
        return Err(refuse(
            1,
            &format!("request {id} has no readable inventory"),
        ));
    };
    let signer = SigningKey::from_args(key)?;
    let mut children = Vec::with_capacity(hosts.len());
    for host in hosts {
        let wanted = host.trim().trim_end_matches('.').to_lowercase();
        let community = inventory
            .communities
            .iter()
            .find(|c| c.footprint.as_ref().is_some_and(|f| f.host == wanted));
        let Some(community) = community else {
            return Err(refuse(
                2,
                &format!(
                    "--delete-owned-community {host}: the request's inventory lists no \
                     community with that host"
                ),
            ));
        };
        let request_id = Uuid::new_v4();
        let signed = signer.sign(
            Action::Submit,
            Kind::Community,
            request_id,
            &wanted,
            None,
            key.signed_at.as_deref(),
        )?;
        children.push(ChildCommunityDeletion {
            community_id: community.community_id,
            host: wanted,
            request_id,
            signed: Some(signed),
        });
    }
    Ok(children)
}

/// The target request `id` names (`None` for an unknown request).
async fn request_target(env: &UserCliEnv, id: Uuid) -> Result<Option<String>, CliError> {
    Ok(env
        .store
        .request_view(id)
        .await
        .map_err(|e| CliError::Other(e.into()))?
        .and_then(|r| r.target))
}

/// Signs `action` on request `id` with the operator's key; returns the key's registered name
/// (checked against `--requested-by` when given) and the signed statement.
async fn sign_user_action(
    env: &UserCliEnv,
    args: &UserActionArgs,
    action: Action,
) -> Result<(String, SignedAction), CliError> {
    let signer = SigningKey::from_args(&args.key)?;
    let id = args.id;
    let target = request_target(env, id)
        .await?
        .ok_or_else(|| refuse(1, &format!("no user-deletion request {id}")))?;
    let name = signer
        .operator_name(
            env.store.pool(),
            "--requested-by",
            args.requested_by.as_deref(),
        )
        .await?;
    let signed = signer.sign(
        action,
        Kind::User,
        id,
        &target,
        None,
        args.key.signed_at.as_deref(),
    )?;
    Ok((name, signed))
}

/// `user abort` and `user unblock`: the operator's signed `action` with its reason, sent as
/// `update`; answered with the workflow's record (at the action's name) next to the request.
async fn reasoned_action<U>(
    env: &UserCliEnv,
    args: UserActionArgs,
    action: Action,
    update: U,
) -> CliResult
where
    U: UpdateDefinition<
            Workflow = <UserDeletion as HasWorkflowDefinition>::Run,
            Input = UserOperatorRequest,
        >,
    U::Output: TemporalDeserializable + Serialize + 'static,
{
    let what = action.as_str();
    let (requested_by, signed) = sign_user_action(env, &args, action).await?;
    let input = UserOperatorRequest {
        requested_by,
        reason: args.reason,
        signed: Some(signed),
    };
    let record = execute(env, args.id, what, update, input).await?;
    let snapshot = RequestSnapshot::read(&env.store, args.id).await?;
    Report::new(&snapshot.document(what, &record, &[])?, snapshot.text())
}

/// Sends `update` (named `what` in messages) to request `id`'s workflow and waits for its
/// answer; a refusal carries the workflow's reason.
async fn execute<U>(
    env: &UserCliEnv,
    id: Uuid,
    what: &str,
    update: U,
    input: U::Input,
) -> Result<U::Output, CliError>
where
    U: UpdateDefinition<Workflow = <UserDeletion as HasWorkflowDefinition>::Run>,
    U::Input: Send,
    U::Output: TemporalDeserializable + 'static,
{
    update::execute(&env.waits, &env.workflow(id), what, update, input)
        .await
        .map_err(|failure| failure.into_cli(what, NOT_RUNNING))
}

/// The request's row; an unknown id is refused (exit 1).
async fn existing_request(env: &UserCliEnv, id: Uuid) -> Result<UserRequestView, CliError> {
    env.store
        .request_view(id)
        .await?
        .ok_or_else(|| refuse(1, &format!("no user-deletion request {id}")))
}

/// Refuses (exit 1) a request whose row says `completed` while its stage chain, reconstructed
/// from the approved inventory, is not finished: `completed` is reported only when both agree.
async fn require_finished_chain(env: &UserCliEnv, id: Uuid) -> Result<(), CliError> {
    let approved = env.store.load_approved_inventory(id).await?;
    let snapshot = env.store.load_progress(id).await?;
    let progress = reconstruct(&approved.inventory, &snapshot.stages).map_err(|e| {
        refuse(
            1,
            &format!("stage history of request {id} cannot be reconstructed: {e}"),
        )
    })?;
    match lifecycle_problem(&snapshot.request_stage, progress.position) {
        None => Ok(()),
        Some(problem) => Err(refuse(1, &format!("request {id}: {problem}"))),
    }
}

async fn run_stages(
    env: &UserCliEnv,
    id: Uuid,
    options: RunOptions,
    stop_wait: std::time::Duration,
) -> CliResult {
    let request = existing_request(env, id).await?;
    // A finished request is answered from Postgres alone: a rerun cannot change anything. Its
    // stage chain must be finished too, or the row is not believed.
    let run = if request.stage == "completed" {
        require_finished_chain(env, id).await?;
        RunReport {
            run: 0,
            handlers_run: 0,
            outcome: RunOutcome::AlreadyCompleted,
        }
    } else {
        recover::ensure_workflow(env, &request).await?;
        let sent = update::send(
            &env.waits,
            &env.workflow(id),
            "run",
            UserDeletion::request_run,
            options,
        )
        .await
        .map_err(|failure| failure.into_cli("run", NOT_RUNNING))?;
        match recover::until_interrupted(sent.get_result(RpcOptions::default())).await? {
            Ok(answered) => {
                answered.map_err(|e| UpdateFailure::Rejected(e).into_cli("run", NOT_RUNNING))?
            }
            Err(interrupt) => {
                return recover::stop_after_interrupt(env, id, interrupt, stop_wait).await;
            }
        }
    };
    let snapshot = RequestSnapshot::read(&env.store, id).await?;
    let document = snapshot.document("run", &run, &["approval", "progress", "stages"])?;
    let summary = render::user::describe_outcome(&run.outcome);
    let text = format!("{}run: {summary}\n", snapshot.text());
    let report = Report::new(&document, text)?;
    if run.outcome.needs_attention() {
        return Ok(report.failing(1, summary));
    }
    Ok(report)
}

async fn status(env: &UserCliEnv, id: Uuid) -> CliResult {
    existing_request(env, id).await?;
    let snapshot = RequestSnapshot::read(&env.store, id).await?;
    let document = serde_json::to_value(&snapshot)
        .map(request_named)
        .map_err(encoding_error)?;
    let report = Report::new(&document, snapshot.text())?;
    if let ProgressView::Unreadable { error } = &snapshot.progress {
        return Ok(report.failing(
            1,
            format!("stage history of request {id} cannot be reconstructed: {error}"),
        ));
    }
    Ok(report)
}

/// Everything Postgres holds about one request, with the stage rows in chain order.
#[derive(Debug, Serialize)]
struct RequestSnapshot {
    request: Option<UserRequestView>,
    approval: Option<UserApprovalRecord>,
    progress: ProgressView,
    stages: Vec<StageRowView>,
    /// The operator signatures recorded for the request (submit, approve): statement, SSHSIG
    /// signature and registered key, for `deploy/local/verify-signatures` or `ssh-keygen`.
    signatures: Vec<activities::identity::StoredSignature>,
}

/// Progress as reconstructed from the predecessor chain.
#[derive(Debug, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
enum ProgressView {
    /// No stage row yet.
    NotStarted,
    /// The chain ends in a current row.
    Current {
        current_stage_id: Uuid,
        covered_communities: Vec<Uuid>,
    },
    /// The chain ends with a decision without successor.
    Finished { covered_communities: Vec<Uuid> },
    /// The history cannot be read as progress.
    Unreadable { error: String },
}

impl RequestSnapshot {
    async fn read(store: &UserStore, id: Uuid) -> anyhow::Result<Self> {
        let request = store.request_view(id).await?;
        let approval = store.approval(id).await?;
        // A history longer than the read bound is shown as unreadable, not as an empty request.
        let (mut stages, too_long) = match store.stage_rows(id).await {
            Ok(stages) => (stages, None),
            Err(refusal @ UserStoreError::TooManyStages { .. }) => {
                (Vec::new(), Some(refusal.to_string()))
            }
            Err(other) => return Err(other.into()),
        };
        let inventory: Option<UserInventory> = request
            .as_ref()
            .and_then(|r| r.inventory.clone())
            .map(serde_json::from_value)
            .transpose()
            .context("the saved inventory is unreadable")?;
        let progress = match (inventory, too_long) {
            (_, Some(error)) => ProgressView::Unreadable { error },
            (None, None) => ProgressView::Unreadable {
                error: "the request has no saved inventory".into(),
            },
            (Some(inventory), None) => progress_of(&inventory, &mut stages),
        };
        let signatures = activities::identity::signatures_of_request(store.pool(), id).await?;
        Ok(RequestSnapshot {
            request,
            approval,
            progress,
            stages,
            signatures,
        })
    }

    /// As `--output table` shows it.
    fn text(&self) -> String {
        let unreadable = match &self.progress {
            ProgressView::Unreadable { error } => Some(error.as_str()),
            _ => None,
        };
        render::user::snapshot_text(
            self.request.as_ref(),
            self.approval.as_ref(),
            &self.stages,
            unreadable,
        )
    }

    /// A command's `answer` (at `key`) next to the request it left and the snapshot's `fields`
    /// among `approval`, `progress` and `stages`; the request carries `request_id` next to its
    /// deprecated `id`.
    fn document(
        &self,
        key: &str,
        answer: &impl Serialize,
        fields: &[&str],
    ) -> Result<serde_json::Value, CliError> {
        let snapshot = serde_json::to_value(self).map_err(encoding_error)?;
        let mut document = serde_json::Map::new();
        document.insert("request".to_owned(), snapshot["request"].clone());
        for field in fields {
            document.insert((*field).to_owned(), snapshot[*field].clone());
        }
        document.insert(
            key.to_owned(),
            serde_json::to_value(answer).map_err(encoding_error)?,
        );
        Ok(request_named(serde_json::Value::Object(document)))
    }
}

/// Reconstructs progress and, when the chain is readable, reorders `stages` along it.
fn progress_of(inventory: &UserInventory, stages: &mut [StageRowView]) -> ProgressView {
    let records: Result<Vec<_>, _> = stages.iter().map(StageRowView::to_record).collect();
    let progress = match records {
        Ok(records) => reconstruct(inventory, &records),
        Err(e) => {
            return ProgressView::Unreadable {
                error: e.to_string(),
            };
        }
    };
    match progress {
        Err(e) => ProgressView::Unreadable {
            error: e.to_string(),
        },
        Ok(progress) => {
            let order: Vec<Uuid> = progress.chain.iter().map(|r| r.id).collect();
            stages.sort_by_key(|row| order.iter().position(|id| *id == row.id));
            let covered_communities = progress.covered.clone();
            match (progress.position, progress.current()) {
                (Position::NotStarted, _) => ProgressView::NotStarted,
                (Position::Current, Some(current)) => ProgressView::Current {
                    current_stage_id: current.id,
                    covered_communities,
                },
                (Position::Current, None) | (Position::Finished, _) => ProgressView::Finished {
                    covered_communities,
                },
            }
        }
    }
}

/// A refusal with the exit code the command has always used: 2 for a usage error, else 1.
fn refuse(code: i32, message: &str) -> CliError {
    if code == 2 {
        CliError::Usage(message.to_owned())
    } else {
        CliError::Refused(message.to_owned())
    }
}
