//! `buzz-deletion user …`: submit, approve, run and inspect user deletions.
//!
//! Each command is one Temporal interaction with the request's `UserDeletion` workflow (start +
//! `registration` update, `approve` update, `run` update) followed by a read of what Postgres
//! saved; `status` and a rerun of a finished request only read Postgres.

use anyhow::Context;
use serde::Serialize;
use serde_json::json;
use temporalio_client::{Client, RpcOptions, WorkflowIdConflictPolicy, WorkflowStartOptions};
use temporalio_common::search_attributes::SearchAttributes;
use uuid::Uuid;

use activities::user::{StageRowView, UserRequestView, UserStore, UserStoreError};
use workflows::user::policy::{Position, lifecycle_problem, reconstruct};
use workflows::user::{ChildCommunityDeletion, TargetError, UserTarget, parse_target};
use workflows::user::{
    HandlerAtStop, HandlerDirectives, Registration, RunOptions, RunOutcome, RunReport, StageKind,
    UserAbortRecord, UserAbortRequest, UserApprovalRecord, UserApproveRequest, UserDeletion,
    UserDeletionInput, UserInventory, UserUnblockRecord, UserUnblockRequest, workflow_id,
};

use workflows::operator::{Action, Kind};

use crate::cli::UserActionArgs;
use crate::cli::UserCommand;
use crate::error::{CliError, CliResult};
use crate::output::{Report, Table, current_names, current_names_at, key_values};
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
                let target = env
                    .store
                    .request_view(id)
                    .await
                    .map_err(|e| CliError::Other(e.into()))?
                    .and_then(|r| r.target)
                    .unwrap_or_default();
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
            let (requested_by, signed) = sign_user_action(env, &args, Action::Abort).await?;
            let abort = UserAbortRequest {
                requested_by,
                reason: args.reason,
                signed: Some(signed),
            };
            abort_request(env, args.id, abort).await
        }
        UserCommand::Unblock(args) => {
            let (requested_by, signed) = sign_user_action(env, &args, Action::Unblock).await?;
            let unblock = UserUnblockRequest {
                requested_by,
                reason: args.reason,
                signed: Some(signed),
            };
            unblock_request(env, args.id, unblock).await
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
    let text = key_values(
        "user deletion submitted",
        &[
            ("request_id", registration.id.to_string()),
            ("workflow_id", registration.workflow_id.clone()),
            ("target", registration.target.clone()),
            ("inventory_digest", registration.inventory_digest.clone()),
        ],
    );
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
        .map_err(|e| CliError::Other(anyhow::anyhow!("encoding the result: {e}")))
}

/// A snapshot document: the request object carries `request_id` next to its deprecated `id`.
fn request_named(document: serde_json::Value) -> serde_json::Value {
    current_names_at(document, "request")
}

async fn approve(env: &UserCliEnv, id: Uuid, approval: UserApproveRequest) -> CliResult {
    if env.store.request_view(id).await?.is_none() {
        return Err(refuse(1, &format!("no user-deletion request {id}")));
    }
    let handle = env
        .client
        .get_workflow_handle::<UserDeletion>(workflow_id(id));
    let record: UserApprovalRecord = update::execute(
        &env.waits,
        &handle,
        "approval",
        UserDeletion::approve,
        approval,
    )
    .await
    .map_err(|failure| failure.into_cli("approval", NOT_RUNNING))?;
    let snapshot = RequestSnapshot::read(&env.store, id).await?;
    let document = request_named(
        json!({"approval": record, "request": snapshot.request, "stages": snapshot.stages}),
    );
    Report::new(&document, snapshot.render())
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

/// Signs `action` on request `id` with the operator's key; returns the key's registered name
/// (checked against `--requested-by` when given) and the signed statement.
async fn sign_user_action(
    env: &UserCliEnv,
    args: &UserActionArgs,
    action: Action,
) -> Result<(String, workflows::operator::SignedAction), CliError> {
    let signer = SigningKey::from_args(&args.key)?;
    let id = args.id;
    let target = env
        .store
        .request_view(id)
        .await
        .map_err(|e| CliError::Other(e.into()))?
        .and_then(|r| r.target)
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

async fn unblock_request(env: &UserCliEnv, id: Uuid, unblock: UserUnblockRequest) -> CliResult {
    let handle = env
        .client
        .get_workflow_handle::<UserDeletion>(workflow_id(id));
    let record: UserUnblockRecord = update::execute(
        &env.waits,
        &handle,
        "unblock",
        UserDeletion::unblock,
        unblock,
    )
    .await
    .map_err(|failure| failure.into_cli("unblock", NOT_RUNNING))?;
    let snapshot = RequestSnapshot::read(&env.store, id).await?;
    let document = request_named(json!({"unblock": record, "request": snapshot.request}));
    Report::new(&document, snapshot.render())
}

async fn abort_request(env: &UserCliEnv, id: Uuid, abort: UserAbortRequest) -> CliResult {
    let handle = env
        .client
        .get_workflow_handle::<UserDeletion>(workflow_id(id));
    let record: UserAbortRecord =
        update::execute(&env.waits, &handle, "abort", UserDeletion::abort, abort)
            .await
            .map_err(|failure| failure.into_cli("abort", NOT_RUNNING))?;
    let snapshot = RequestSnapshot::read(&env.store, id).await?;
    let document = request_named(json!({"abort": record, "request": snapshot.request}));
    Report::new(&document, snapshot.render())
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
    let Some(request) = env.store.request_view(id).await? else {
        return Err(refuse(1, &format!("no user-deletion request {id}")));
    };
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
        let handle = env
            .client
            .get_workflow_handle::<UserDeletion>(workflow_id(id));
        let sent = update::send(
            &env.waits,
            &handle,
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
    let document = request_named(json!({
        "run": run,
        "request": snapshot.request,
        "approval": snapshot.approval,
        "progress": snapshot.progress,
        "stages": snapshot.stages,
    }));
    let summary = describe_outcome(&run.outcome);
    let text = format!("{}run: {summary}\n", snapshot.render());
    let report = Report::new(&document, text)?;
    if run.outcome.needs_attention() {
        return Ok(report.failing(1, summary));
    }
    Ok(report)
}

async fn status(env: &UserCliEnv, id: Uuid) -> CliResult {
    if env.store.request_view(id).await?.is_none() {
        return Err(refuse(1, &format!("no user-deletion request {id}")));
    }
    let snapshot = RequestSnapshot::read(&env.store, id).await?;
    let document = serde_json::to_value(&snapshot)
        .map(request_named)
        .map_err(|e| CliError::Other(anyhow::anyhow!("encoding the result: {e}")))?;
    let report = Report::new(&document, snapshot.render())?;
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

    fn render(&self) -> String {
        let mut out = String::new();
        if let Some(r) = &self.request {
            let optional = |v: Option<String>| v.unwrap_or_default();
            out.push_str(&key_values(
                "request",
                &[
                    ("request_id", r.id.to_string()),
                    ("target", optional(r.target.clone())),
                    ("stage", r.stage.clone()),
                    ("requested_by", r.requested_by.clone()),
                    ("inventory_digest", optional(r.inventory_digest.clone())),
                    ("exec_generation", r.exec_generation.to_string()),
                    ("retry_count", r.retry_count.to_string()),
                    (
                        "next_attempt_at",
                        optional(r.next_attempt_at.map(|t| t.to_rfc3339())),
                    ),
                    ("last_error", optional(r.last_error.clone())),
                    (
                        "completed_at",
                        optional(r.completed_at.map(|t| t.to_rfc3339())),
                    ),
                ],
            ));
        }
        out.push('\n');
        match &self.approval {
            Some(a) => out.push_str(&key_values(
                "approval",
                &[
                    ("approved_by", a.approved_by.clone()),
                    ("approved_at", a.approved_at.clone()),
                    ("inventory_digest", a.inventory_digest.clone()),
                ],
            )),
            None => out.push_str("approval: none\n"),
        }
        out.push('\n');
        let mut table = Table::new(
            format!("stages ({} rows)", self.stages.len()),
            &[
                "#",
                "id",
                "stage",
                "community",
                "status",
                "current",
                "attempt",
                "gen",
                "first_started_at",
                "started_at",
                "finished_at",
                "decision",
                "last_error",
            ],
        );
        for (n, row) in self.stages.iter().enumerate() {
            let time = |t: Option<chrono::DateTime<chrono::Utc>>| {
                t.map(|t| t.format("%H:%M:%S%.3f").to_string())
                    .unwrap_or_default()
            };
            let decision = row
                .transition
                .as_ref()
                .and_then(|t| t.get("decision"))
                .and_then(|d| d.as_str())
                .unwrap_or_default()
                .to_string();
            table.row(vec![
                (n + 1).to_string(),
                row.id.to_string(),
                row.stage.clone(),
                row.community_id.map(|c| c.to_string()).unwrap_or_default(),
                row.status.clone(),
                row.is_current.to_string(),
                row.attempt.to_string(),
                row.exec_generation
                    .map(|g| g.to_string())
                    .unwrap_or_default(),
                time(row.first_started_at),
                time(row.started_at),
                time(row.finished_at),
                decision,
                row.last_error.clone().unwrap_or_default(),
            ]);
        }
        out.push_str(&table.render());
        if let ProgressView::Unreadable { error } = &self.progress {
            out.push_str(&format!("progress: unreadable: {error}\n"));
        }
        out
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

/// One line an operator can act on.
fn describe_outcome(outcome: &RunOutcome) -> String {
    match outcome {
        RunOutcome::Paused {
            stage,
            community_id,
            ..
        } => match community_id {
            Some(c) => format!("paused; current stage {stage} in {c} (pending)"),
            None => format!("paused; current stage {stage} (pending)"),
        },
        RunOutcome::HandlerBudgetReached {
            limit,
            stage,
            community_id,
            ..
        } => match community_id {
            Some(c) => format!(
                "paused after {limit} handlers, the budget of one run; current stage {stage} in {c} (pending); run again to continue"
            ),
            None => format!(
                "paused after {limit} handlers, the budget of one run; current stage {stage} (pending); run again to continue"
            ),
        },
        RunOutcome::Completed => "completed".into(),
        RunOutcome::AlreadyCompleted => "already completed; nothing changed".into(),
        RunOutcome::HandlerFailed {
            stage,
            error,
            retry,
            ..
        } => format!(
            "handler {stage} failed: {error}; retry {} saved, next attempt at {}",
            retry.retry_count, retry.next_attempt_at
        ),
        RunOutcome::RetryNotDue { retry } => format!(
            "run refused: the saved retry deadline has not passed; next attempt at {}",
            retry.next_attempt_at
        ),
        RunOutcome::RunInProgress => {
            "run refused: another run is in progress; wait for it to pause, or stop it with \
             `buzz-deletion user stop ID`"
                .into()
        }
        RunOutcome::NotApproved => "run refused: the request is not approved".into(),
        RunOutcome::Stopped {
            stage,
            community_id,
            handler,
            ..
        } => {
            let at = match (stage, community_id) {
                (Some(stage), Some(c)) => format!("{stage} in {c}"),
                (Some(stage), None) => stage.clone(),
                (None, _) => "no stage row yet".into(),
            };
            let handler = match handler {
                HandlerAtStop::NotStarted => "its handler had not started in this run",
                HandlerAtStop::Interrupted => {
                    "its handler was interrupted; the next run starts it again"
                }
                HandlerAtStop::ResultSaved => {
                    "its handler's result is saved; the next run commits its transition without \
                     running it again"
                }
            };
            format!("stopped; current stage {at} ({handler}); `user run` continues from it")
        }
        RunOutcome::Blocked { reason } => format!("blocked: {reason}"),
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
