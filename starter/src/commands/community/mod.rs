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

use activities::store::{AwaitedLease, Store, StoreError};
use workflows::operator::{Action, Kind, SignedAction};

use crate::cli::{
    AbortArgs, ApproveArgs, CommunityCommand, ListArgs, SignCommand, TuningArgs, UnblockArgs,
};
use crate::connect::{self, TemporalTarget};
use crate::error::{CliError, CliResult};
use crate::host;
use crate::output::{Report, current_names, current_names_at, encoding_error};
use crate::render::{self, object_table};
use crate::signing::{KeyArgs, SigningKey};
use crate::update::{self, DurableCopy};
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

// The renderers read these views.
pub(crate) use status::{AWAITED_LEASES_SHOWN, PendingActivityView, RecordedStatus};

// The output tests render these documents.
#[cfg(test)]
pub(crate) use status::status_document;
#[cfg(test)]
pub(crate) use submit::submitted_document;
#[cfg(test)]
pub(crate) use watch::watch_ends;

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
        CommunityCommand::Approve(args) => {
            let id = args.id;
            let request = signed_approval(args).await?;
            let approval = Answer {
                what: "approval",
                title: "approval recorded",
                named: current_names,
            };
            let update = CommunityDeletion::approve_update;
            answer_report(waits, id, approval, update, request).await
        }
        CommunityCommand::Abort(args) => {
            let id = args.id;
            let request = signed_abort(args).await?;
            let abort = Answer::titled("abort");
            answer_report(waits, id, abort, CommunityDeletion::abort_update, request).await
        }
        CommunityCommand::Unblock(args) => {
            let id = args.id;
            let request = signed_unblock(args).await?;
            let unblock = Answer::titled("unblock");
            let update = CommunityDeletion::unblock_update;
            answer_report(waits, id, unblock, update, request).await
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

/// How an update's answer is reported: the update's name in messages, the title of the table
/// of its fields, and the current JSON field names it gains (see [`current_names`]).
struct Answer {
    what: &'static str,
    title: &'static str,
    named: fn(serde_json::Value) -> serde_json::Value,
}

impl Answer {
    /// An answer titled with the update's name, its fields as the workflow wrote them.
    fn titled(what: &'static str) -> Answer {
        Answer {
            what,
            title: what,
            named: std::convert::identity,
        }
    }
}

/// Sends `update` to request `id`'s workflow through [`update::execute`] and reports the
/// workflow's answer as one object; a refusal carries the workflow's reason.
async fn answer_report<U>(
    waits: &WorkerWait,
    id: Uuid,
    answer: Answer,
    update: U,
    input: U::Input,
) -> CliResult
where
    U: UpdateDefinition<Workflow = <CommunityDeletion as HasWorkflowDefinition>::Run>,
    U::Input: Send + serde::Serialize,
    U::Output:
        temporalio_common::data_converters::TemporalDeserializable + serde::Serialize + 'static,
{
    let handle = existing_workflow(id).await?;
    // Every community update a command sends is an operator's signed message with a signal twin.
    let copy = DurableCopy::of(&update, &input)?;
    let output = update::execute(waits, &handle, answer.what, update, input, Some(copy))
        .await
        .map_err(|failure| {
            failure.into_cli(
                answer.what,
                &format!(
                    "request {id}'s workflow is not running any more \
                     (see `buzz-deletion community inspect {id}`)"
                ),
            )
        })?;
    let document = (answer.named)(serde_json::to_value(&output).map_err(encoding_error)?);
    Report::new(&document, object_table(answer.title, &document) + "\n")
}

fn store_failure(error: StoreError) -> CliError {
    CliError::Other(anyhow::anyhow!("Postgres: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
