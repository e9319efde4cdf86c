//! The one way a command sends a workflow Update: bounded by `--worker-wait` (see
//! [`crate::worker_wait`]), and a refusal reported as the workflow's own reason.
//!
//! An operator's signed message (`approve`, `abort`, `unblock`) that no worker answered within
//! the bound is made durable: the same input is sent as the signal of the same name (see
//! [`DurableCopy`]), because Temporal keeps an unanswered update in memory only.

use serde::Serialize;
use temporalio_client::errors::WorkflowUpdateError;
use temporalio_client::{
    Client, RpcOptions, UntypedSignal, WorkflowHandle, WorkflowSignalOptions, WorkflowUpdateHandle,
    tonic,
};
use temporalio_common::data_converters::{RawValue, TemporalDeserializable};
use temporalio_common::protos::temporal::api::common::v1::Payload;
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

/// An update's input as the signal of the same name: sent when no worker answered the update
/// within the bound, so the operator's message is in the workflow's history (the workflow acts
/// on one signed statement once, whichever copy arrives first).
pub struct DurableCopy {
    signal: String,
    payload: Payload,
}

impl DurableCopy {
    /// The copy of `update` with `input`, as one `json/plain` payload (what the workflow's
    /// signal decoder accepts, and what the Web UI's dialog sends).
    pub fn of<U: UpdateDefinition>(update: &U, input: &impl Serialize) -> Result<Self, CliError> {
        let data = serde_json::to_vec(input)
            .map_err(|e| CliError::Other(anyhow::anyhow!("encoding the {}: {e}", update.name())))?;
        Ok(DurableCopy {
            signal: update.name().to_owned(),
            payload: Payload {
                metadata: [("encoding".to_owned(), b"json/plain".to_vec())].into(),
                data,
                external_payloads: vec![],
            },
        })
    }

    /// Sends the copy; true once Temporal wrote it to the history.
    async fn send<W: HasWorkflowDefinition>(
        self,
        waits: &WorkerWait,
        handle: &WorkflowHandle<Client, W>,
    ) -> bool {
        let signal = UntypedSignal::<W::Run>::new(self.signal);
        let options = WorkflowSignalOptions::default();
        let sent = handle.signal(signal, RawValue::new(vec![self.payload]), options);
        matches!(tokio::time::timeout(waits.wait, sent).await, Ok(Ok(())))
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
    copy: Option<DurableCopy>,
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
    if let Some(copy) = copy {
        let signal = copy.signal.clone();
        if copy.send(waits, handle).await {
            let sent = waits.sent_as_signal(handle.client(), what, &signal);
            return Err(UpdateFailure::NoWorker(sent.await));
        }
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
    copy: Option<DurableCopy>,
) -> Result<U::Output, UpdateFailure>
where
    W: HasWorkflowDefinition,
    U: UpdateDefinition<Workflow = W::Run>,
    U::Input: Send,
    U::Output: TemporalDeserializable + 'static,
{
    let sent = send(waits, handle, what, update, input, copy).await?;
    sent.get_result(RpcOptions::default())
        .await
        .map_err(UpdateFailure::Rejected)
}

#[cfg(test)]
mod tests {
    use temporalio_common::data_converters::RawValue;
    use uuid::Uuid;
    use workflows::community::CommunityDeletion;
    use workflows::community::contracts::{AbortRequest, ApproveRequest};
    use workflows::community::decode::decode;
    use workflows::operator::{Action, Kind, SignedAction};
    use workflows::user::UserDeletion;
    use workflows::user::contracts::{UserApproveRequest, UserOperatorRequest};
    use workflows::user::signals::{AbortMessage, UnblockMessage};

    use super::DurableCopy;

    fn statement(action: Action, kind: Kind) -> SignedAction {
        SignedAction {
            action,
            kind,
            request_id: Uuid::nil(),
            target: "example.test".into(),
            digest: None,
            operator: "SHA256:abc".into(),
            signed_at: "2026-12-03T00:00:00Z".into(),
            nonce: "0123456789abcdef0123456789abcdef".into(),
            signature: "-----BEGIN SSH SIGNATURE-----".into(),
        }
    }

    fn raw(copy: DurableCopy) -> RawValue {
        RawValue::new(vec![copy.payload])
    }

    #[test]
    fn a_community_copy_is_the_signal_of_the_same_name_and_decodes_to_the_same_message() {
        let approval = ApproveRequest {
            approved_by: "bob".into(),
            digest: "d".repeat(64),
            note: None,
            signed: Some(statement(Action::Approve, Kind::Community)),
        };
        let copy = DurableCopy::of(&CommunityDeletion::approve_update, &approval).unwrap();
        assert_eq!(copy.signal, "approve");
        assert_eq!(decode::<ApproveRequest>(&raw(copy)).unwrap(), approval);

        let abort = AbortRequest {
            actor: "carol".into(),
            reason: "changed our mind".into(),
            signed: Some(statement(Action::Abort, Kind::Community)),
        };
        let copy = DurableCopy::of(&CommunityDeletion::abort_update, &abort).unwrap();
        assert_eq!(copy.signal, "abort");
        assert_eq!(decode::<AbortRequest>(&raw(copy)).unwrap(), abort);
    }

    #[test]
    fn a_user_copy_is_the_signal_of_the_same_name_and_decodes_to_the_same_message() {
        let approval = UserApproveRequest {
            approved_by: "bob".into(),
            inventory_digest: "d".repeat(64),
            note: Some("checked".into()),
            child_deletions: Vec::new(),
            signed: Some(statement(Action::Approve, Kind::User)),
        };
        let copy = DurableCopy::of(&UserDeletion::approve, &approval).unwrap();
        assert_eq!(copy.signal, "approve");
        assert_eq!(decode::<UserApproveRequest>(&raw(copy)).unwrap(), approval);

        let request = UserOperatorRequest {
            requested_by: "carol".into(),
            reason: "remedied".into(),
            signed: Some(statement(Action::Unblock, Kind::User)),
        };
        let copy = DurableCopy::of(&UserDeletion::unblock, &request).unwrap();
        assert_eq!(copy.signal, "unblock");
        let UnblockMessage(decoded) = decode::<UnblockMessage>(&raw(copy)).unwrap();
        assert_eq!(decoded, request);
        let copy = DurableCopy::of(&UserDeletion::abort, &request).unwrap();
        assert_eq!(copy.signal, "abort");
        let AbortMessage(decoded) = decode::<AbortMessage>(&raw(copy)).unwrap();
        assert_eq!(decoded, request);
    }
}
