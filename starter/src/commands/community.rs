//! `buzz-deletion community …`: submit, approve, abort, unblock, status, watch, list, inspect.
//!
//! Commands that change a deletion talk to its workflow (Updates, so a refusal comes back with
//! the reason and changes nothing); commands that read history talk to Postgres, which keeps the
//! evidence after Temporal's retention has dropped the workflow.

use std::io::IsTerminal;
use std::time::Duration;

use temporalio_client::{
    Client, WorkflowHandle, WorkflowQueryOptions, WorkflowStartOptions, errors::WorkflowQueryError,
};
use temporalio_common::search_attributes::SearchAttributes;
use temporalio_common::{HasWorkflowDefinition, MemoValues, UpdateDefinition};
use uuid::Uuid;
use workflows::community::input::{CommunityDeletionInput, workflow_id};
use workflows::community::status::DeletionStatus;
use workflows::community::{
    AbortRequest, ApproveRequest, CommunityDeletion, Phase, UnblockRequest,
};
use workflows::search;

use activities::store::{AwaitedLease, RequestFilter, Store, StoreError};
use workflows::operator::{Action, Kind, SignedAction};

use crate::cli::{CommunityCommand, ListArgs, ListState, SignCommand, TuningArgs};
use crate::connect::{self, TemporalTarget};
use crate::error::{CliError, CliResult};
use crate::host;
use crate::output::{Report, Table, current_names, current_names_at, key_values, object_table};
use crate::signing::{KeyArgs, SigningKey};
use crate::update;
use crate::worker_wait::{Pollers, WorkerWait};

/// Runs one `community` subcommand.
pub async fn run(waits: &WorkerWait, command: CommunityCommand) -> CliResult {
    match command {
        CommunityCommand::Submit {
            host,
            requested_by,
            reason,
            key,
            wait_secs,
            tuning,
        } => {
            let submission = Submission {
                host,
                requested_by,
                reason,
                key,
            };
            submit(waits, submission, wait_secs, tuning).await
        }
        CommunityCommand::Sign(command) => sign(command).await,
        CommunityCommand::Approve {
            id,
            approved_by,
            inventory_digest,
            note,
            key,
        } => {
            let request = signed_approval(id, approved_by, inventory_digest, note, &key).await?;
            let handle = existing_workflow(id).await?;
            let record = execute(
                waits,
                &handle,
                "approval",
                id,
                CommunityDeletion::approve_update,
                request,
            )
            .await?;
            let document = current_names(serde_json::to_value(&record).map_err(encoding)?);
            Report::new(
                &document,
                object_table("approval recorded", &document) + "\n",
            )
        }
        CommunityCommand::Abort {
            id,
            aborted_by,
            reason,
            key,
        } => {
            let request = signed_abort(id, aborted_by, reason, &key).await?;
            let handle = existing_workflow(id).await?;
            let outcome = execute(
                waits,
                &handle,
                "abort",
                id,
                CommunityDeletion::abort_update,
                request,
            )
            .await?;
            let document = serde_json::to_value(outcome).map_err(encoding)?;
            Report::new(&document, object_table("abort", &document) + "\n")
        }
        CommunityCommand::Unblock {
            id,
            unblocked_by,
            reason,
            key,
        } => {
            let request = signed_unblock(id, unblocked_by, reason, &key).await?;
            let handle = existing_workflow(id).await?;
            let outcome = execute(
                waits,
                &handle,
                "unblock",
                id,
                CommunityDeletion::unblock_update,
                request,
            )
            .await?;
            let document = serde_json::to_value(outcome).map_err(encoding)?;
            Report::new(&document, object_table("unblock", &document) + "\n")
        }
        CommunityCommand::Status { id } => {
            let handle = existing_workflow(id).await?;
            let Some(status) = query_status(waits, &handle, id).await? else {
                return unanswered(waits, &handle, id).await;
            };
            let pending = pending_activity(&handle).await;
            let awaited = awaited_leases(&status).await?;
            Ok(
                status_report(&status, pending.as_ref(), awaited.as_deref())?
                    .with_exit_code(status_exit_code(&status)),
            )
        }
        CommunityCommand::Watch {
            id,
            interval_ms,
            timeout_secs,
        } => watch(waits, id, interval_ms, timeout_secs).await,
        CommunityCommand::List(args) => list(args).await,
        CommunityCommand::Inspect { id } => inspect(id).await,
        CommunityCommand::Certificate(args) => super::certificate::export(args, "community").await,
    }
}

/// The host every signature of the request names: the one its submit signature named.
async fn recorded_host(store: &Store, id: Uuid) -> Result<String, CliError> {
    let request = store.find_request(id).await.map_err(store_failure)?;
    match request {
        Some(request) if request.kind == "community" => Ok(store
            .signed_target(id)
            .await
            .map_err(store_failure)?
            .or(request.host)
            .unwrap_or_default()),
        Some(request) => Err(CliError::Refused(format!(
            "request {id} is a {} deletion: use `buzz-deletion {} …`",
            request.kind, request.kind
        ))),
        None => Err(CliError::Refused(format!(
            "no deletion request has id {id}: list requests with `buzz-deletion community list`"
        ))),
    }
}

/// A community action on request `id` signed with `--key`: the operator's registered name (the
/// optional name flag `label_flag` must match it) and the signed statement.
async fn sign_action(
    action: Action,
    id: Uuid,
    digest: Option<&str>,
    label_flag: &str,
    label: Option<&str>,
    key: &KeyArgs,
) -> Result<(String, SignedAction), CliError> {
    let signer = SigningKey::from_args(key)?;
    let store = connect::store().await?;
    let host = recorded_host(&store, id).await?;
    let name = signer
        .operator_name(store.pool(), label_flag, label)
        .await?;
    let signed = signer.sign(
        action,
        Kind::Community,
        id,
        &host,
        digest,
        key.signed_at.as_deref(),
    )?;
    Ok((name, signed))
}

/// An approval of `digest` signed with `--key`, under the key's registered name.
async fn signed_approval(
    id: Uuid,
    approved_by: Option<String>,
    digest: String,
    note: Option<String>,
    key: &KeyArgs,
) -> Result<ApproveRequest, CliError> {
    let digest = required("--inventory-digest", digest)?;
    let (approved_by, signed) = sign_action(
        Action::Approve,
        id,
        Some(&digest),
        "--approved-by",
        approved_by.as_deref(),
        key,
    )
    .await?;
    Ok(ApproveRequest {
        approved_by,
        digest,
        note,
        signed: Some(signed),
    })
}

/// An abort signed with `--key`.
async fn signed_abort(
    id: Uuid,
    aborted_by: Option<String>,
    reason: String,
    key: &KeyArgs,
) -> Result<AbortRequest, CliError> {
    let reason = required("--reason", reason)?;
    let (actor, signed) = sign_action(
        Action::Abort,
        id,
        None,
        "--aborted-by",
        aborted_by.as_deref(),
        key,
    )
    .await?;
    Ok(AbortRequest {
        actor,
        reason,
        signed: Some(signed),
    })
}

/// An unblock signed with `--key`.
async fn signed_unblock(
    id: Uuid,
    unblocked_by: Option<String>,
    reason: String,
    key: &KeyArgs,
) -> Result<UnblockRequest, CliError> {
    let reason = required("--reason", reason)?;
    let (actor, signed) = sign_action(
        Action::Unblock,
        id,
        None,
        "--unblocked-by",
        unblocked_by.as_deref(),
        key,
    )
    .await?;
    Ok(UnblockRequest {
        actor,
        reason,
        signed: Some(signed),
    })
}

/// `community sign …`: prints the signed payload as one JSON line, for the Web UI's "Send a
/// Signal" dialog (or `temporal workflow signal --input`).
async fn sign(command: SignCommand) -> CliResult {
    let payload = match command {
        SignCommand::Approve {
            id,
            inventory_digest,
            approved_by,
            note,
            key,
        } => Report::json_line(
            &signed_approval(id, approved_by, inventory_digest, note, &key).await?,
        ),
        SignCommand::Abort {
            id,
            reason,
            aborted_by,
            key,
        } => Report::json_line(&signed_abort(id, aborted_by, reason, &key).await?),
        SignCommand::Unblock {
            id,
            reason,
            unblocked_by,
            key,
        } => Report::json_line(&signed_unblock(id, unblocked_by, reason, &key).await?),
    };
    // The payload is the workflow's signal input: its field names are the workflow's contract
    // (recorded histories replay it), so it is printed as is, in every output format.
    payload
}

fn encoding(error: serde_json::Error) -> CliError {
    CliError::Other(anyhow::anyhow!("encoding the result: {error}"))
}

fn required(flag: &str, value: String) -> Result<String, CliError> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err(CliError::Usage(format!("{flag} must not be empty")));
    }
    Ok(trimmed.to_owned())
}

/// 0 while the deletion is healthy or done, 1 when it is blocked or was aborted.
fn status_exit_code(status: &DeletionStatus) -> i32 {
    if status.blocked.is_some() || status.phase == Phase::Aborted {
        1
    } else {
        0
    }
}

/// What `community submit` was asked for.
struct Submission {
    host: Option<String>,
    requested_by: Option<String>,
    reason: Option<String>,
    key: KeyArgs,
}

async fn submit(
    waits: &WorkerWait,
    submission: Submission,
    wait_secs: u64,
    tuning: TuningArgs,
) -> CliResult {
    if tuning.retry_max_secs < tuning.retry_initial_secs.max(1) {
        return Err(CliError::Usage(format!(
            "--retry-max-secs {} is below --retry-initial-secs {}: give a longest delay at least \
             as long as the first",
            tuning.retry_max_secs, tuning.retry_initial_secs
        )));
    }
    let relay_url = std::env::var("RELAY_URL").ok();
    let host = host::resolve(submission.host.as_deref(), relay_url.as_deref())?;
    let signer = SigningKey::from_args(&submission.key)?;
    let reason = submission.reason;
    let store = connect::store().await?;
    let requested_by = signer
        .operator_name(
            store.pool(),
            "--requested-by",
            submission.requested_by.as_deref(),
        )
        .await?;
    let community = store
        .community_by_host(&host)
        .await
        .map_err(store_failure)?
        .ok_or_else(|| {
            CliError::Refused(format!(
                "no community has host {host:?}: check the spelling, or create it with \
                 `buzz-deletion demo seed --host {host}`"
            ))
        })?;
    if let Some(open) = store
        .find_open_request_for_community(community.id)
        .await
        .map_err(store_failure)?
    {
        return Err(CliError::Refused(format!(
            "community {host} already has open deletion request {} (stage {}): follow it with \
             `buzz-deletion community watch {}` or abort it first",
            open.id, open.stage, open.id
        )));
    }
    let client = connect::temporal(&TemporalTarget::from_env()?).await?;
    // Nothing is started while no worker polls: the request would wait unregistered.
    waits.require_worker(&client, "deletion request").await?;
    let request_id = Uuid::new_v4();
    // The recorded host (canonical) is what the signature names.
    let host = community.host.clone();
    let signed = signer.sign(
        Action::Submit,
        Kind::Community,
        request_id,
        &host,
        None,
        submission.key.signed_at.as_deref(),
    )?;
    let mut input =
        CommunityDeletionInput::new(request_id, host.clone(), requested_by.clone(), reason);
    input.signed = Some(signed);
    input.tuning.retry_initial_secs = tuning.retry_initial_secs.max(1);
    input.tuning.retry_max_secs = tuning.retry_max_secs;
    input.tuning.heartbeat_timeout_secs = tuning.heartbeat_timeout_secs.max(1);
    input.tuning.delete_parallelism = tuning.delete_parallelism.max(1);
    input.tuning.chunks_per_call = tuning.chunks_per_call.max(1);
    input.tuning.delete_rounds_per_run = tuning.delete_rounds_per_run.max(1);
    let workflow_id = workflow_id(request_id);
    let mut memo = MemoValues::new();
    memo.insert("host", host.clone());
    memo.insert("requested_by", requested_by.clone());
    client
        .start_workflow(
            CommunityDeletion::run,
            input,
            WorkflowStartOptions::new(connect::task_queue(), workflow_id.clone())
                .memo(memo)
                .search_attributes(SearchAttributes::new([
                    search::KIND.value_set("community".to_owned()),
                    search::STAGE.value_set(Phase::Submitted.as_str().to_owned()),
                    search::COMMUNITY_ID.value_set(community.id.to_string()),
                    search::BLOCKED.value_set(false),
                ]))
                .build(),
        )
        .await
        .map_err(|e| {
            CliError::Other(anyhow::anyhow!(
                "could not start the deletion workflow: {e}"
            ))
        })?;
    let handle = client.get_workflow_handle::<CommunityDeletion>(workflow_id.clone());
    let status = wait_for_inventory(waits, &handle, &store, request_id, wait_secs).await?;
    let digest = status.inventory.as_ref().map(|i| i.digest.clone());
    let summary = submitted_document(request_id, &workflow_id, &host, community.id, &status);
    let mut text = format!(
        "{}\n",
        key_values(
            "deletion submitted",
            &[
                ("request_id", request_id.to_string()),
                ("host", host.clone()),
                ("phase", status.phase.to_string()),
                ("inventory_digest", digest.unwrap_or_default()),
            ],
        )
    );
    if let Some(inventory) = &status.inventory {
        text.push_str(&inventory_text(inventory));
    }
    Ok(Report::new(&summary, text)?.with_exit_code(status_exit_code(&status)))
}

/// The JSON answer of `community submit`: the request, its frozen inventory and what to do next.
/// `digest` is the deprecated name of `inventory_digest` (see [`crate::output::DEPRECATED_FIELDS`]).
pub(crate) fn submitted_document(
    request_id: Uuid,
    workflow_id: &str,
    host: &str,
    community_id: Uuid,
    status: &DeletionStatus,
) -> serde_json::Value {
    let digest = status.inventory.as_ref().map(|i| i.digest.clone());
    current_names(serde_json::json!({
        "request_id": request_id,
        "workflow_id": workflow_id,
        "host": host,
        "community_id": community_id,
        "phase": status.phase,
        "digest": digest,
        "inventory": status.inventory,
        "blocked": status.blocked,
        "next": match &digest {
            Some(d) => format!(
                "a second operator approves with: buzz-deletion community approve {request_id} --approved-by <operator> --inventory-digest {d}"
            ),
            None => format!("inspect the block with: buzz-deletion community status {request_id}"),
        },
    }))
}

/// Polls the workflow until the inventory is frozen (or the request blocks, or ends).
async fn wait_for_inventory(
    waits: &WorkerWait,
    handle: &WorkflowHandle<Client, CommunityDeletion>,
    store: &Store,
    request_id: Uuid,
    wait_secs: u64,
) -> Result<DeletionStatus, CliError> {
    let started = tokio::time::Instant::now();
    let deadline = started + Duration::from_secs(wait_secs.max(1));
    let mut answered = false;
    loop {
        match bounded_query(waits, handle).await {
            Ok(Some(status))
                if status.inventory.is_some()
                    || status.blocked.is_some()
                    || status.phase.is_terminal() =>
            {
                return Ok(status);
            }
            Ok(Some(_)) => answered = true,
            Ok(None) => {}
            Err(WorkflowQueryError::NotFound(_)) => {}
            Err(e) => return Err(CliError::Other(anyhow::anyhow!("status query failed: {e}"))),
        }
        // A workflow that failed at registration (say, a concurrent request won the race)
        // leaves no request row; its failure message is the answer.
        if let Ok(description) = handle.describe(Default::default()).await
            && description.status() != temporalio_client::WorkflowExecutionStatus::Running
        {
            let row = store.find_request(request_id).await.ok().flatten();
            let why = match handle.get_result(Default::default()).await {
                Err(temporalio_client::errors::WorkflowGetResultError::Failed(failure)) => {
                    format!(": {failure}")
                }
                _ => String::new(),
            };
            return Err(CliError::Refused(format!(
                "the deletion workflow ended ({:?}{why}) before freezing an inventory; request \
                 row: {}",
                description.status(),
                row.map(|r| format!("stage {}", r.stage))
                    .unwrap_or_else(|| "none (registration was refused)".to_owned())
            )));
        }
        if !answered && started.elapsed() >= waits.wait {
            let pollers = waits.pollers(handle.client()).await;
            return Err(CliError::NoWorker(format!(
                "deletion request {request_id} was started (workflow {}) but {}; it registers \
                 and freezes its inventory once a worker polls",
                handle.info().workflow_id,
                waits.explain(&pollers)
            )));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CliError::Other(anyhow::anyhow!(
                "the inventory was not frozen within {wait_secs} s: is a worker running? \
                 (`buzz-deletion-worker`); the request continues, check it with \
                 `buzz-deletion community status {request_id}`"
            )));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The handle of an existing request's workflow; an unknown id is refused with a hint.
async fn existing_workflow(
    id: Uuid,
) -> Result<WorkflowHandle<Client, CommunityDeletion>, CliError> {
    let store = connect::store().await?;
    let request = store.find_request(id).await.map_err(store_failure)?;
    let Some(request) = request else {
        return Err(CliError::Refused(format!(
            "no deletion request has id {id}: list requests with `buzz-deletion community list`"
        )));
    };
    if request.kind != "community" {
        return Err(CliError::Refused(format!(
            "request {id} is a {} deletion: use `buzz-deletion {} …`",
            request.kind, request.kind
        )));
    }
    let client = connect::temporal(&TemporalTarget::from_env()?).await?;
    Ok(client.get_workflow_handle::<CommunityDeletion>(request.workflow_id))
}

/// The `status` query, bounded by the worker wait: `None` when no worker answered in time.
async fn query_status(
    waits: &WorkerWait,
    handle: &WorkflowHandle<Client, CommunityDeletion>,
    id: Uuid,
) -> Result<Option<DeletionStatus>, CliError> {
    bounded_query(waits, handle).await.map_err(|e| match e {
        WorkflowQueryError::NotFound(_) => CliError::Refused(format!(
            "request {id} has no workflow in Temporal any more (retention passed?): \
             its evidence is in Postgres, see `buzz-deletion community inspect {id}`"
        )),
        other => CliError::Other(anyhow::anyhow!("status query failed: {other}")),
    })
}

/// Asks the workflow's `status` query, giving up after the worker wait (`Ok(None)`): a query
/// needs a worker, and without one Temporal would hold it until its own deadline.
async fn bounded_query(
    waits: &WorkerWait,
    handle: &WorkflowHandle<Client, CommunityDeletion>,
) -> Result<Option<DeletionStatus>, WorkflowQueryError> {
    let options = WorkflowQueryOptions::builder()
        .rpc_options(waits.rpc_options())
        .build();
    let query = handle.query(CommunityDeletion::status, (), options);
    match tokio::time::timeout(waits.wait, query).await {
        Ok(Ok(status)) => Ok(Some(status)),
        Ok(Err(WorkflowQueryError::Rpc(status)))
            if status.code() == temporalio_client::tonic::Code::DeadlineExceeded =>
        {
            Ok(None)
        }
        Ok(Err(error)) => Err(error),
        Err(_elapsed) => Ok(None),
    }
}

/// Sends an update through [`update::execute`]; a refusal carries the workflow's reason.
async fn execute<U>(
    waits: &WorkerWait,
    handle: &WorkflowHandle<Client, CommunityDeletion>,
    what: &str,
    id: Uuid,
    update: U,
    input: U::Input,
) -> Result<U::Output, CliError>
where
    U: UpdateDefinition<Workflow = <CommunityDeletion as HasWorkflowDefinition>::Run>,
    U::Input: Send,
    U::Output: temporalio_common::data_converters::TemporalDeserializable + 'static,
{
    update::execute(waits, handle, what, update, input)
        .await
        .map_err(|failure| {
            failure.into_cli(
                what,
                &format!(
                    "request {id}'s workflow is not running any more \
                     (see `buzz-deletion community inspect {id}`)"
                ),
            )
        })
}

/// What `status` shows when no worker answers: the request as Postgres records it and the
/// execution as Temporal records it (DescribeWorkflowExecution needs no worker), marked as
/// such. Prints it, then fails with the no-worker message (exit 1).
async fn unanswered(
    waits: &WorkerWait,
    handle: &WorkflowHandle<Client, CommunityDeletion>,
    id: Uuid,
) -> CliResult {
    let pollers = waits.pollers(handle.client()).await;
    let message = format!(
        "the status query of request {id} got no answer: {}. Shown instead: what Postgres and \
         Temporal's own records know (not the workflow's live state)",
        waits.explain(&pollers)
    );
    let recorded = RecordedStatus::read(handle, id, pollers).await?;
    Ok(Report::new(&recorded, recorded.render())?.failing(1, message))
}

/// A deletion as recorded outside the workflow: the `status` fallback without a worker.
#[derive(Debug, serde::Serialize)]
struct RecordedStatus {
    /// Always `false`: the workflow itself did not answer.
    answered_by_workflow: bool,
    /// Where this view comes from.
    source: &'static str,
    /// Who polls the task queue.
    worker: Pollers,
    /// The task queue.
    task_queue: String,
    /// The request row, approval and chunk progress in Postgres.
    postgres: Option<PostgresRecord>,
    /// The execution as Temporal records it.
    temporal: Option<TemporalRecord>,
}

/// The request as Postgres records it.
#[derive(Debug, serde::Serialize)]
struct PostgresRecord {
    stage: String,
    blocked_stage: Option<String>,
    blocked_reason: Option<String>,
    blocked_at: Option<String>,
    last_error: Option<String>,
    irreversible_at: Option<String>,
    irreversible_pending_at: Option<String>,
    approved_by: Option<String>,
    approved_at: Option<String>,
    chunks_stamped: u64,
    chunks_total: u64,
    updated_at: String,
}

/// The execution as Temporal records it (DescribeWorkflowExecution).
#[derive(Debug, serde::Serialize)]
struct TemporalRecord {
    execution_status: String,
    /// `BuzzDeletionStage` as last published by the workflow.
    stage: Option<String>,
    /// `BuzzBlocked` as last published by the workflow.
    blocked: Option<bool>,
    history_length: usize,
    pending_activity: Option<PendingActivityView>,
}

impl RecordedStatus {
    async fn read(
        handle: &WorkflowHandle<Client, CommunityDeletion>,
        id: Uuid,
        worker: Pollers,
    ) -> Result<Self, CliError> {
        let store = connect::store().await?;
        let postgres = match store.inspect(id).await {
            Ok(i) => Some(PostgresRecord {
                stage: i.request.stage,
                blocked_stage: i.request.blocked_stage,
                blocked_reason: i.request.blocked_reason,
                blocked_at: i.request.blocked_at.map(|t| t.to_rfc3339()),
                last_error: i.request.last_error,
                irreversible_at: i.request.irreversible_at.map(|t| t.to_rfc3339()),
                irreversible_pending_at: i.request.irreversible_pending_at.map(|t| t.to_rfc3339()),
                approved_by: i.approval.as_ref().map(|a| a.approved_by.clone()),
                approved_at: i.approval.as_ref().map(|a| a.approved_at.to_string()),
                chunks_stamped: i.chunks.chunks_stamped,
                chunks_total: i.chunks.chunks_total,
                updated_at: i.request.updated_at.to_rfc3339(),
            }),
            Err(StoreError::NotFound { .. }) => None,
            Err(e) => return Err(store_failure(e)),
        };
        let description = handle.describe(Default::default()).await.ok();
        let task_queue = description
            .as_ref()
            .map(|d| d.task_queue().to_owned())
            .unwrap_or_default();
        let temporal = description.map(|d| {
            let attributes = d.search_attributes();
            TemporalRecord {
                execution_status: format!("{:?}", d.status()),
                stage: attributes.get(&search::STAGE),
                blocked: attributes.get(&search::BLOCKED),
                history_length: d.history_length(),
                pending_activity: pending_view(&d),
            }
        });
        Ok(RecordedStatus {
            answered_by_workflow: false,
            source: "no worker answered; Postgres and Temporal's own records, not the workflow's \
                     live state",
            worker,
            task_queue,
            postgres,
            temporal,
        })
    }

    fn render(&self) -> String {
        let mut pairs: Vec<(&str, String)> = vec![
            ("source", self.source.to_owned()),
            ("task queue", self.task_queue.clone()),
            (
                "worker",
                serde_json::to_string(&self.worker).unwrap_or_default(),
            ),
        ];
        if let Some(p) = &self.postgres {
            pairs.push(("postgres stage", p.stage.clone()));
            pairs.push((
                "postgres blocked",
                p.blocked_reason.clone().unwrap_or_else(|| "no".to_owned()),
            ));
            pairs.push((
                "postgres approval",
                p.approved_by.clone().unwrap_or_default(),
            ));
            pairs.push((
                "postgres chunks",
                format!("{} of {} stamped", p.chunks_stamped, p.chunks_total),
            ));
        }
        if let Some(t) = &self.temporal {
            pairs.push(("temporal execution", t.execution_status.clone()));
            pairs.push(("temporal stage", t.stage.clone().unwrap_or_default()));
            pairs.push((
                "temporal blocked",
                t.blocked.map(|b| b.to_string()).unwrap_or_default(),
            ));
            pairs.push((
                "pending activity",
                t.pending_activity
                    .as_ref()
                    .map(|a| {
                        format!(
                            "{} attempt {}, last heartbeat {}",
                            a.activity,
                            a.attempt,
                            a.last_heartbeat_at
                                .clone()
                                .unwrap_or_else(|| "none".to_owned())
                        )
                    })
                    .unwrap_or_default(),
            ));
        }
        key_values("deletion status (recorded, no worker answered)", &pairs)
    }
}

fn store_failure(error: StoreError) -> CliError {
    CliError::Other(anyhow::anyhow!("Postgres: {error}"))
}

fn inventory_text(inventory: &workflows::community::InventorySummary) -> String {
    let mut text = String::new();
    let mut tables = Table::new("tenant tables", &["table", "rows"]);
    for t in &inventory.tables {
        tables.row(vec![t.table.clone(), t.rows.to_string()]);
    }
    text.push_str(&format!("{}\n", tables.render()));
    let mut prefixes = Table::new(
        "tenant prefixes",
        &["prefix", "versions", "bytes", "digest"],
    );
    for p in &inventory.prefixes {
        prefixes.row(vec![
            p.prefix.clone(),
            p.versions.to_string(),
            p.bytes.to_string(),
            p.keys_digest.chars().take(16).collect(),
        ]);
    }
    text.push_str(&format!("{}\n", prefixes.render()));
    let mut uploads = Table::new(
        "multipart uploads in progress",
        &["prefix", "uploads", "digest"],
    );
    for u in &inventory.uploads {
        uploads.row(vec![
            u.prefix.clone(),
            u.uploads.to_string(),
            u.uploads_digest.chars().take(16).collect(),
        ]);
    }
    text.push_str(&format!("{}\n", uploads.render()));
    text.push_str(&format!("redis keys: {}\n", inventory.redis_keys));
    text
}

/// The activity the workflow is waiting on, as the Web UI shows it: attempt, last failure and
/// the latest heartbeat progress. Transient failures are retried inside Temporal and never reach
/// the workflow's state, so this is where an operator sees them.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PendingActivityView {
    /// Activity type, e.g. `community.drain`.
    pub activity: String,
    /// Attempt number (1 = first try).
    pub attempt: i32,
    /// Message of the last failed attempt, if any.
    pub last_failure: Option<String>,
    /// Latest heartbeat details (progress), decoded from JSON.
    pub heartbeat: Option<serde_json::Value>,
    /// When the latest heartbeat arrived (RFC 3339).
    pub last_heartbeat_at: Option<String>,
}

async fn pending_activity(
    handle: &WorkflowHandle<Client, CommunityDeletion>,
) -> Option<PendingActivityView> {
    let description = handle.describe(Default::default()).await.ok()?;
    pending_view(&description)
}

/// The first pending activity of a described execution.
fn pending_view(
    description: &temporalio_client::WorkflowExecutionDescription,
) -> Option<PendingActivityView> {
    let pending = description.raw().pending_activities.first()?.clone();
    let heartbeat = pending
        .heartbeat_details
        .as_ref()
        .and_then(|p| p.payloads.first())
        .and_then(|p| serde_json::from_slice(&p.data).ok());
    let last_heartbeat_at = pending.last_heartbeat_time.and_then(|t| {
        chrono::DateTime::from_timestamp(t.seconds, u32::try_from(t.nanos).unwrap_or(0))
            .map(|t| t.to_rfc3339())
    });
    Some(PendingActivityView {
        activity: pending.activity_type.map(|t| t.name).unwrap_or_default(),
        attempt: pending.attempt,
        last_failure: pending.last_failure.map(|f| f.message),
        heartbeat,
        last_heartbeat_at,
    })
}

/// The JSON answer of `community status`: the workflow's status, the pending activity, and
/// `inventory_digest` (the frozen digest, also at `inventory.digest`); the approval carries
/// `inventory_digest` next to its deprecated `digest`.
pub(crate) fn status_document(
    status: &DeletionStatus,
    pending: Option<&PendingActivityView>,
) -> Result<serde_json::Value, CliError> {
    let mut value = serde_json::to_value(status).map_err(encoding)?;
    if let serde_json::Value::Object(map) = &mut value {
        map.insert(
            "pending_activity".to_owned(),
            serde_json::to_value(pending).map_err(encoding)?,
        );
        map.insert(
            "inventory_digest".to_owned(),
            serde_json::to_value(status.inventory.as_ref().map(|i| &i.digest)).map_err(encoding)?,
        );
    }
    Ok(current_names_at(value, "approval"))
}

fn status_report(
    status: &DeletionStatus,
    pending: Option<&PendingActivityView>,
    awaited: Option<&[AwaitedLease]>,
) -> CliResult {
    let mut document = status_document(status, pending)?;
    let mut text = status_text(status, pending);
    if let Some(leases) = awaited {
        if let serde_json::Value::Object(map) = &mut document {
            map.insert(
                "awaited_leases".to_owned(),
                serde_json::to_value(leases).map_err(encoding)?,
            );
        }
        text.push_str(&awaited_leases_text(status.phase, leases));
    }
    Report::new(&document, text)
}

/// Most leases `status` lists; the count says when there are more.
const AWAITED_LEASES_SHOWN: u32 = 50;

/// While the deletion waits to fence (approved, fencing) or to freeze the manifest (draining),
/// the serving-write leases it waits for, read from Postgres; `None` in every other phase.
async fn awaited_leases(status: &DeletionStatus) -> Result<Option<Vec<AwaitedLease>>, CliError> {
    let (Some(community_id), Phase::Approved | Phase::Fencing | Phase::Draining) =
        (status.community_id, status.phase)
    else {
        return Ok(None);
    };
    let store = connect::store().await?;
    let leases = store
        .awaited_serving_leases(
            community_id,
            activities::serving::MAX_PROTECTED_OPERATION,
            AWAITED_LEASES_SHOWN,
        )
        .await
        .map_err(store_failure)?;
    Ok(Some(leases))
}

/// The awaited leases as a table an operator can act on: which writer, which operation, until
/// when (unless renewed).
fn awaited_leases_text(phase: Phase, leases: &[AwaitedLease]) -> String {
    if leases.is_empty() {
        return format!("\nawaited leases: none ({phase} waits for no serving write)\n");
    }
    let mut table = Table::new(
        format!(
            "awaited leases: {phase} waits for {} serving write(s){}",
            leases.len(),
            if leases.len() >= AWAITED_LEASES_SHOWN as usize {
                " (the first shown)"
            } else {
                ""
            }
        ),
        &[
            "lease",
            "holds",
            "operation",
            "owner",
            "user",
            "expires_at",
            "until",
        ],
    );
    for lease in leases {
        table.row(vec![
            lease.id.to_string(),
            lease.holds.clone(),
            lease.operation.clone(),
            lease.owner.clone(),
            lease.user_pubkey.clone().unwrap_or_default(),
            lease.expires_at.to_rfc3339(),
            lease.until.to_rfc3339(),
        ]);
    }
    format!("\n{}", table.render())
}

fn status_text(status: &DeletionStatus, pending: Option<&PendingActivityView>) -> String {
    let p = &status.progress;
    format!(
        "{}\n",
        key_values(
            "deletion status",
            &[
                ("request_id", status.request_id.to_string()),
                ("host", status.host.clone()),
                ("phase", status.phase.to_string()),
                (
                    "blocked",
                    status
                        .blocked
                        .as_ref()
                        .map(|b| format!("in {} since {}: {}", b.phase, b.since, b.reason))
                        .unwrap_or_else(|| "no".to_owned()),
                ),
                ("last_error", status.last_error.clone().unwrap_or_default()),
                (
                    "approval",
                    status
                        .approval
                        .as_ref()
                        .map(|a| format!("{} at {}", a.approved_by, a.approved_at))
                        .unwrap_or_default(),
                ),
                (
                    "inventory_digest",
                    status
                        .inventory
                        .as_ref()
                        .map(|i| i.digest.clone())
                        .unwrap_or_default(),
                ),
                (
                    "objects",
                    format!(
                        "{} of {} versions deleted",
                        p.versions_deleted, p.versions_total
                    ),
                ),
                ("chunks", format!("{} of {}", p.chunks_done, p.chunks_total)),
                ("rows purged", p.rows_purged.to_string()),
                ("keys purged", p.keys_purged.to_string()),
                (
                    "pending activity",
                    pending
                        .map(|a| {
                            format!(
                                "{} attempt {}{}",
                                a.activity,
                                a.attempt,
                                a.last_failure
                                    .as_ref()
                                    .map(|f| format!(", last failure: {f}"))
                                    .unwrap_or_default()
                            )
                        })
                        .unwrap_or_default(),
                ),
            ],
        )
    )
}

/// One line describing where a deletion stands, for `watch`.
fn progress_line(status: &DeletionStatus, pending: Option<&PendingActivityView>) -> String {
    let p = &status.progress;
    let mut line = format!(
        "{:<18} objects {}/{}  chunks {}/{}  rows {}  keys {}",
        status.phase.as_str(),
        p.versions_deleted,
        p.versions_total,
        p.chunks_done,
        p.chunks_total,
        p.rows_purged,
        p.keys_purged
    );
    if let Some(blocked) = &status.blocked {
        line.push_str(&format!("  BLOCKED: {}", blocked.reason));
    } else if let Some(activity) = pending {
        if let Some(step) = activity.heartbeat.as_ref().and_then(|h| h["step"].as_str()) {
            line.push_str(&format!("  {step}"));
        }
        if let Some(failure) = &activity.last_failure {
            line.push_str(&format!(
                "  retrying {} (attempt {}): {failure}",
                activity.activity, activity.attempt
            ));
        }
    }
    line
}

/// A text progress bar of `done` over `total`, `width` cells wide.
fn bar(done: u64, total: u64, width: usize) -> String {
    let filled = (done.min(total) * width as u64)
        .checked_div(total)
        .map_or(width, |cells| usize::try_from(cells).unwrap_or(width));
    format!("[{}{}]", "#".repeat(filled), "-".repeat(width - filled))
}

/// `community watch`: its live progress lines are written to stdout as they change (a bar
/// redrawn in place on a terminal); its result, where the deletion ended, is a [`Report`].
async fn watch(waits: &WorkerWait, id: Uuid, interval_ms: u64, timeout_secs: u64) -> CliResult {
    let handle = existing_workflow(id).await?;
    let interactive = std::io::stdout().is_terminal();
    let started = tokio::time::Instant::now();
    let mut last_line = String::new();
    loop {
        let Some(status) = query_status(waits, &handle, id).await? else {
            if interactive {
                println!();
            }
            return unanswered(waits, &handle, id).await;
        };
        let pending = pending_activity(&handle).await;
        let line = progress_line(&status, pending.as_ref());
        if interactive {
            let p = &status.progress;
            print!(
                "\r\x1b[2K{} {}",
                bar(p.versions_deleted, p.versions_total, 30),
                line
            );
            use std::io::Write;
            let _ = std::io::stdout().flush();
        } else if line != last_line {
            println!("{line}");
        }
        last_line = line;
        let done = status.phase == Phase::RetentionPending;
        if done || status.blocked.is_some() || status.phase == Phase::Aborted {
            if interactive {
                println!();
            }
            return watched_report(&status);
        }
        if timeout_secs > 0 && started.elapsed() >= Duration::from_secs(timeout_secs) {
            if interactive {
                println!();
            }
            return Err(CliError::Other(anyhow::anyhow!(
                "still {} after {timeout_secs} s",
                status.phase
            )));
        }
        tokio::time::sleep(Duration::from_millis(interval_ms.max(100))).await;
    }
}

/// Where a watched deletion ended: exit 0 when done (with what verification checked), 1 when
/// blocked or aborted.
fn watched_report(status: &DeletionStatus) -> CliResult {
    let done = status.phase == Phase::RetentionPending;
    let verified = status.verification.as_ref().filter(|_| done).map(|v| {
        format!(
            "{} tenant tables empty, {} prefixes list no version, {} empty Redis SCAN passes",
            v.tables_checked, v.prefixes_checked, v.redis_empty_passes
        )
    });
    let document = serde_json::json!({
        "request_id": status.request_id,
        "phase": status.phase,
        "blocked": status.blocked,
        "verified": verified,
        "verification": status.verification,
    });
    let text = verified
        .as_ref()
        .map(|v| format!("verified: {v}\n"))
        .unwrap_or_default();
    Ok(Report::new(&document, text)?.with_exit_code(if done { 0 } else { 1 }))
}

/// What Temporal's visibility says about a running deletion (its search attributes).
#[derive(Debug, Clone, serde::Serialize)]
struct LivePhase {
    phase: Option<String>,
    blocked: Option<bool>,
}

/// Running community deletions by workflow id, from Temporal visibility. A list is a read, so
/// an unreachable Temporal is a warning, not a failure: Postgres still answers.
async fn live_phases() -> std::collections::HashMap<String, LivePhase> {
    use futures::StreamExt;
    let mut live = std::collections::HashMap::new();
    let target = TemporalTarget::from_env();
    let connected = match &target {
        Ok(target) => connect::temporal(target).await,
        Err(e) => Err(CliError::Usage(e.to_string())),
    };
    let client = match connected {
        Ok(client) => client,
        Err(e) => {
            eprintln!("warning: live phases unavailable ({e}); showing Postgres only");
            return live;
        }
    };
    let query = "BuzzDeletionKind = 'community' AND ExecutionStatus = 'Running'";
    let mut stream = client.list_workflows(
        query,
        temporalio_client::WorkflowListOptions::builder()
            .limit(1000)
            .build(),
    );
    while let Some(entry) = stream.next().await {
        match entry {
            Ok(execution) => {
                let attributes = execution.search_attributes();
                live.insert(
                    execution.id().to_owned(),
                    LivePhase {
                        phase: attributes.get(&search::STAGE),
                        blocked: attributes.get(&search::BLOCKED),
                    },
                );
            }
            Err(e) => {
                eprintln!("warning: Temporal visibility query failed: {e}");
                break;
            }
        }
    }
    live
}

async fn list(args: ListArgs) -> CliResult {
    let store = connect::store().await?;
    let filter = match args.state {
        ListState::Open => RequestFilter::Open,
        ListState::Blocked => RequestFilter::Blocked,
        ListState::Completed => RequestFilter::Completed,
        ListState::All => RequestFilter::All,
    };
    let requests = store
        .list_requests(filter, u32::from(args.limit))
        .await
        .map_err(store_failure)?;
    let live = if requests.iter().any(|r| r.is_open()) {
        live_phases().await
    } else {
        Default::default()
    };
    let rows: Vec<serde_json::Value> = requests
        .iter()
        .map(|r| {
            let mut row = serde_json::to_value(r).unwrap_or_default();
            if let serde_json::Value::Object(map) = &mut row {
                map.insert(
                    "live".to_owned(),
                    serde_json::to_value(live.get(&r.workflow_id)).unwrap_or_default(),
                );
            }
            current_names(row)
        })
        .collect();
    let mut table = Table::new(
        "deletion requests",
        &[
            "request_id",
            "kind",
            "target",
            "stage",
            "live phase",
            "requested_by",
            "blocked",
            "created_at",
        ],
    );
    for r in &requests {
        let phase = live
            .get(&r.workflow_id)
            .and_then(|l| l.phase.clone())
            .unwrap_or_default();
        table.row(vec![
            r.id.to_string(),
            r.kind.clone(),
            r.host
                .clone()
                .or_else(|| r.target.clone())
                .unwrap_or_default(),
            r.stage.clone(),
            phase,
            r.requested_by.clone(),
            r.blocked_reason.clone().unwrap_or_default(),
            r.created_at.to_rfc3339(),
        ]);
    }
    Report::new(&rows, table.render())
}

async fn inspect(id: Uuid) -> CliResult {
    let store = connect::store().await?;
    let inspection = match store.inspect(id).await {
        Ok(i) => i,
        Err(StoreError::NotFound { .. }) => {
            return Err(CliError::Refused(format!(
                "no deletion request has id {id}: list requests with `buzz-deletion community list`"
            )));
        }
        Err(e) => return Err(store_failure(e)),
    };
    let document = inspection_document(&inspection)?;
    let r = &inspection.request;
    let mut text = format!(
        "{}\n",
        key_values(
            "request",
            &[
                ("request_id", r.id.to_string()),
                ("host", r.host.clone().unwrap_or_default()),
                ("stage", r.stage.clone()),
                ("requested_by", r.requested_by.clone()),
                (
                    "inventory_digest",
                    r.inventory_digest.clone().unwrap_or_default()
                ),
                ("blocked", r.blocked_reason.clone().unwrap_or_default()),
                (
                    "irreversible",
                    match (r.irreversible_at, r.irreversible_pending_at) {
                        (Some(at), _) => format!("since {at} (S3 acknowledged a deletion)"),
                        (None, Some(pending)) => format!(
                            "pending since {pending}: a destructive S3 call was sent and not yet \
                             acknowledged; abort is held until the next attempt settles it"
                        ),
                        (None, None) => "no: S3 acknowledged no deletion".to_owned(),
                    },
                ),
                (
                    "approval",
                    inspection
                        .approval
                        .as_ref()
                        .map(|a| format!("{} at {} ({})", a.approved_by, a.approved_at, a.digest))
                        .unwrap_or_default(),
                ),
                (
                    "chunks",
                    format!(
                        "{} of {} stamped, {} of {} versions",
                        inspection.chunks.chunks_stamped,
                        inspection.chunks.chunks_total,
                        inspection.chunks.versions_stamped,
                        inspection.chunks.versions_total
                    ),
                ),
            ],
        )
    );
    let mut checkpoints = Table::new("checkpoints", &["stage", "reached_at", "detail"]);
    for c in &inspection.checkpoints {
        checkpoints.row(vec![
            c.stage.clone(),
            c.reached_at.to_rfc3339(),
            c.detail.to_string(),
        ]);
    }
    text.push_str(&format!("{}\n", checkpoints.render()));
    if let Some(world) = &inspection.closed_world {
        text.push_str(&closed_world_text(world));
    }
    let mut audit = Table::new("audit trail", &["at", "actor", "event", "detail"]);
    for e in &inspection.audit {
        audit.row(vec![
            e.at.to_rfc3339(),
            e.actor.clone(),
            e.event.clone(),
            e.detail.to_string(),
        ]);
    }
    text.push_str(&audit.render());
    let chain = &inspection.audit_chain;
    text.push_str(&match &chain.first_bad_row {
        None => format!(
            "\naudit chain: intact, {} event(s), head {}\n",
            chain.length, chain.head_hash
        ),
        Some(first_bad) => format!("\naudit chain: BROKEN at {first_bad}\n"),
    });
    if let Some(receipt) = &inspection.receipt {
        text.push_str(&format!(
            "receipt: signed by {} at {}, log leaf {}, digest {} \
             (`buzz-deletion community certificate {}`)\n",
            receipt.key_id,
            receipt.signed_at.to_rfc3339(),
            receipt
                .leaf_index
                .map_or_else(|| "MISSING".to_owned(), |i| i.to_string()),
            receipt.receipt_digest,
            inspection.request.id
        ));
    }
    Report::new(&document, text)
}

/// The closed world the approval covers, as `community inspect` prints it: every purge-set
/// relation with its role, and every declaration the inventory relied on.
fn closed_world_text(
    world: &activities::store::closed_world::summary::ClosedWorldSummary,
) -> String {
    let mut relations = Table::new(
        "relations the deletion purges (frozen inventory)",
        &["relation", "role", "tenant column"],
    );
    for r in &world.relations {
        relations.row(vec![
            r.relation.clone(),
            r.role.clone(),
            r.tenant_column.clone().unwrap_or_default(),
        ]);
    }
    let mut declarations = Table::new(
        "declarations relied on (buzz-deletion: comments)",
        &["object", "declared"],
    );
    for d in &world.declarations {
        declarations.row(vec![d.object.clone(), d.declaration.clone()]);
    }
    format!("{}\n{}\n", relations.render(), declarations.render())
}

/// The JSON answer of `community inspect`: the request carries `request_id` next to its
/// deprecated `id`, the approval `inventory_digest` next to its deprecated `digest`.
pub(crate) fn inspection_document(
    inspection: &activities::store::RequestInspection,
) -> Result<serde_json::Value, CliError> {
    let value = serde_json::to_value(inspection).map_err(encoding)?;
    Ok(current_names_at(
        current_names_at(value, "request"),
        "approval",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_bar_is_full_when_nothing_to_delete_and_proportional_otherwise() {
        assert_eq!(bar(0, 0, 4), "[####]");
        assert_eq!(bar(1, 4, 4), "[#---]");
        assert_eq!(bar(9, 4, 4), "[####]");
    }

    #[test]
    fn blank_required_flags_are_usage_errors() {
        assert!(matches!(
            required("--reason", "  ".into()),
            Err(CliError::Usage(_))
        ));
        assert_eq!(
            required("--reason", " x ".into()).ok().as_deref(),
            Some("x")
        );
    }
}
