//! The one way a command sends a workflow Update: bounded by `--worker-wait` (see
//! [`crate::worker_wait`]), and a refusal reported as the workflow's own reason.
//!
//! Commands never signal a workflow: `community sign …` prints the signed payload for the
//! operator to send from the Web UI, so there is no signal helper.

use temporalio_client::errors::WorkflowUpdateError;
use temporalio_client::{Client, RpcOptions, WorkflowHandle, WorkflowUpdateHandle, tonic};
use temporalio_common::data_converters::TemporalDeserializable;
use temporalio_common::{HasWorkflowDefinition, UpdateDefinition};

use uuid::Uuid;

use crate::error::CliError;
use crate::worker_wait::WorkerWait;

/// Why an update got no result.
#[derive(Debug)]
pub enum UpdateFailure {
    /// No worker answered within the bound ([`CliError::NoWorker`], which says whether the
    /// update was sent).
    NoWorker(CliError),
    /// The workflow (or Temporal) refused or failed it.
    Rejected(WorkflowUpdateError),
}

impl UpdateFailure {
    /// As the operator reads it: `{what} refused: {the workflow's reason}`; `not_running` is the
    /// reason when the workflow is gone (what to look at instead).
    pub fn into_cli(self, what: &str, not_running: &str) -> CliError {
        match self {
            UpdateFailure::NoWorker(e) => e,
            UpdateFailure::Rejected(WorkflowUpdateError::Failed(failure)) => {
                CliError::Refused(format!("{what} refused: {}", failure.message))
            }
            UpdateFailure::Rejected(WorkflowUpdateError::NotFound(_)) => {
                CliError::Refused(format!("{what} refused: {not_running}"))
            }
            UpdateFailure::Rejected(other) => {
                CliError::Other(anyhow::anyhow!("{what} failed: {other}"))
            }
        }
    }
}

/// Sends `update` (named `what` in messages) and returns once a worker accepted it; the caller
/// waits for the result (with a timeout, or interruptible). A worker must accept (or reject) it
/// within the bound; without an answer in time the error says whether Temporal holds it (see
/// [`WorkerWait::unanswered_update`]).
pub async fn send<W, U>(
    waits: &WorkerWait,
    handle: &WorkflowHandle<Client, W>,
    what: &str,
    update: U,
    input: U::Input,
) -> Result<WorkflowUpdateHandle<Client, U::Output>, UpdateFailure>
where
    W: HasWorkflowDefinition,
    U: UpdateDefinition<Workflow = W::Run>,
    U::Input: Send,
{
    let update_id = Uuid::new_v4().to_string();
    let options = waits.update_options(&update_id);
    let started = tokio::time::timeout(waits.wait, handle.start_update(update, input, options));
    match started.await {
        Ok(Ok(sent)) => return Ok(sent),
        Ok(Err(WorkflowUpdateError::Rpc(status)))
            if status.code() == tonic::Code::DeadlineExceeded => {}
        Ok(Err(error)) => return Err(UpdateFailure::Rejected(error)),
        Err(_elapsed) => {}
    }
    let workflow_id = &handle.info().workflow_id;
    let unanswered = waits.unanswered_update(handle.client(), workflow_id, &update_id, what);
    Err(UpdateFailure::NoWorker(unanswered.await))
}

/// Sends `update` and waits for the workflow's answer.
pub async fn execute<W, U>(
    waits: &WorkerWait,
    handle: &WorkflowHandle<Client, W>,
    what: &str,
    update: U,
    input: U::Input,
) -> Result<U::Output, UpdateFailure>
where
    W: HasWorkflowDefinition,
    U: UpdateDefinition<Workflow = W::Run>,
    U::Input: Send,
    U::Output: TemporalDeserializable + 'static,
{
    let sent = send(waits, handle, what, update, input).await?;
    sent.get_result(RpcOptions::default())
        .await
        .map_err(UpdateFailure::Rejected)
}
