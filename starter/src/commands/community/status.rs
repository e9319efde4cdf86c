//! `community status`: what the workflow answers (or, with no worker, what Postgres and
//! Temporal record), the pending activity, and the serving-write leases a fence or drain waits for.

use super::*;

/// The `status` query, bounded by the worker wait: `None` when no worker answered in time.
pub(super) async fn query_status(
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
pub(super) async fn bounded_query(
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

/// What `status` shows when no worker answers: the request as Postgres records it and the
/// execution as Temporal records it (DescribeWorkflowExecution needs no worker), marked as
/// such. Prints it, then fails with the no-worker message (exit 1).
pub(super) async fn unanswered(
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
    let text = render::community::recorded_status_text(&recorded);
    Ok(Report::new(&recorded, text)?.failing(1, message))
}

/// A deletion as recorded outside the workflow: the `status` fallback without a worker.
#[derive(Debug, serde::Serialize)]
pub(crate) struct RecordedStatus {
    /// Always `false`: the workflow itself did not answer.
    answered_by_workflow: bool,
    /// Where this view comes from.
    pub(crate) source: &'static str,
    /// Who polls the task queue.
    pub(crate) worker: Pollers,
    /// The task queue.
    pub(crate) task_queue: String,
    /// The request row, approval and chunk progress in Postgres.
    pub(crate) postgres: Option<PostgresRecord>,
    /// The execution as Temporal records it.
    pub(crate) temporal: Option<TemporalRecord>,
}

/// The request as Postgres records it.
#[derive(Debug, serde::Serialize)]
pub(crate) struct PostgresRecord {
    pub(crate) stage: String,
    blocked_stage: Option<String>,
    pub(crate) blocked_reason: Option<String>,
    blocked_at: Option<String>,
    last_error: Option<String>,
    irreversible_at: Option<String>,
    irreversible_pending_at: Option<String>,
    pub(crate) approved_by: Option<String>,
    approved_at: Option<String>,
    pub(crate) chunks_stamped: u64,
    pub(crate) chunks_total: u64,
    updated_at: String,
}

/// The execution as Temporal records it (DescribeWorkflowExecution).
#[derive(Debug, serde::Serialize)]
pub(crate) struct TemporalRecord {
    pub(crate) execution_status: String,
    /// `BuzzDeletionStage` as last published by the workflow.
    pub(crate) stage: Option<String>,
    /// `BuzzBlocked` as last published by the workflow.
    pub(crate) blocked: Option<bool>,
    history_length: usize,
    pub(crate) pending_activity: Option<PendingActivityView>,
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

pub(super) async fn pending_activity(
    handle: &WorkflowHandle<Client, CommunityDeletion>,
) -> Option<PendingActivityView> {
    let description = handle.describe(Default::default()).await.ok()?;
    pending_view(&description)
}

/// The first pending activity of a described execution.
pub(super) fn pending_view(
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
    let mut value = serde_json::to_value(status).map_err(encoding_error)?;
    if let serde_json::Value::Object(map) = &mut value {
        map.insert(
            "pending_activity".to_owned(),
            serde_json::to_value(pending).map_err(encoding_error)?,
        );
        map.insert(
            "inventory_digest".to_owned(),
            serde_json::to_value(status.inventory.as_ref().map(|i| &i.digest))
                .map_err(encoding_error)?,
        );
    }
    Ok(current_names_at(value, "approval"))
}

pub(super) fn status_report(
    status: &DeletionStatus,
    pending: Option<&PendingActivityView>,
    awaited: Option<&[AwaitedLease]>,
) -> CliResult {
    let mut document = status_document(status, pending)?;
    let mut text = render::community::status_text(status, pending);
    if let Some(leases) = awaited {
        if let serde_json::Value::Object(map) = &mut document {
            map.insert(
                "awaited_leases".to_owned(),
                serde_json::to_value(leases).map_err(encoding_error)?,
            );
        }
        text.push_str(&render::community::awaited_leases_text(
            status.phase,
            leases,
        ));
    }
    Report::new(&document, text)
}

/// Most leases `status` lists; the count says when there are more.
pub(crate) const AWAITED_LEASES_SHOWN: u32 = 50;

/// While the deletion waits to fence (approved, fencing) or to freeze the manifest (draining),
/// the serving-write leases it waits for, read from Postgres; `None` in every other phase.
pub(super) async fn awaited_leases(
    status: &DeletionStatus,
) -> Result<Option<Vec<AwaitedLease>>, CliError> {
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
