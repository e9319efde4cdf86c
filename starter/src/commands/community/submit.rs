//! `community submit`: registering the request, starting its workflow and waiting for the
//! frozen inventory an approver reviews.

use super::*;

/// What `community submit` was asked for.
pub(super) struct Submission {
    pub(super) host: Option<String>,
    pub(super) requested_by: Option<String>,
    pub(super) reason: Option<String>,
    pub(super) key: KeyArgs,
}

pub(super) async fn submit(
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
    input.tuning.purge_batch_rows = tuning.purge_batch_rows.max(1);
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
    let summary = submitted_document(request_id, &workflow_id, &host, community.id, &status);
    let text = render::community::submitted_text(request_id, &host, &status);
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
pub(super) async fn wait_for_inventory(
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
