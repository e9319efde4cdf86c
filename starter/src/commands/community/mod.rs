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

mod inspect;
mod list;
mod signing;
mod status;
mod submit;
mod watch;

use inspect::*;
use list::*;
use signing::*;
use status::*;
use submit::*;
use watch::*;

// The output tests render these documents.
#[cfg(test)]
pub(crate) use status::status_document;
#[cfg(test)]
pub(crate) use submit::submitted_document;

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

fn store_failure(error: StoreError) -> CliError {
    CliError::Other(anyhow::anyhow!("Postgres: {error}"))
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
