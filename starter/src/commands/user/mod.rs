//! `buzz-deletion user …`: submit, approve, abort, unblock, run, stop, resume, status, list.
//!
//! Each command is one Temporal interaction with the request's `UserDeletion` workflow (start +
//! `registration` update, `approve` update, `run` update) followed by a read of what Postgres
//! saved; `status` and a rerun of a finished request only read Postgres. One file a command,
//! behind the dispatch here; this module holds what they share: the connections, the request's
//! row and target, sending an update, and the refusals.

use temporalio_client::{Client, WorkflowHandle};
use temporalio_common::data_converters::TemporalDeserializable;
use temporalio_common::{HasWorkflowDefinition, UpdateDefinition};
use uuid::Uuid;

use activities::user::{UserRequestView, UserStore};
use workflows::operator::Action;
use workflows::user::{HandlerDirectives, RunOptions, StageKind, UserDeletion, workflow_id};

use crate::cli::UserCommand;
use crate::connect;
use crate::error::{CliError, CliResult};
use crate::update::{self, DurableCopy};
use crate::worker_wait::WorkerWait;

mod approve;
mod list;
mod operator_action;
mod recover;
mod run;
mod snapshot;
mod status;
mod submit;

use approve::approve;
use list::list;
use operator_action::reasoned_action;
use run::run_stages;
use snapshot::RequestSnapshot;
use status::status;
use submit::submit;

// The output tests render this document.
#[cfg(test)]
pub(crate) use submit::registration_document;

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
            let owned = &delete_owned_communities;
            approve(env, id, approved_by, inventory_digest, note, owned, &key).await
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
        UserCommand::List(args) => list(env, args).await,
        UserCommand::Certificate(args) => crate::commands::certificate::export(args, "user").await,
    }
}

/// What a refused update says when the request's workflow is gone.
const NOT_RUNNING: &str = "the request's workflow is not running";

/// The target request `id` names (`None` for an unknown request).
async fn request_target(env: &UserCliEnv, id: Uuid) -> Result<Option<String>, CliError> {
    Ok(env
        .store
        .request_view(id)
        .await
        .map_err(|e| CliError::Other(e.into()))?
        .and_then(|r| r.target))
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
    U::Input: Send + serde::Serialize,
    U::Output: TemporalDeserializable + 'static,
{
    // `approve`, `abort` and `unblock`: each has a signal twin that makes it durable.
    let copy = DurableCopy::of(&update, &input)?;
    update::execute(
        &env.waits,
        &env.workflow(id),
        what,
        update,
        input,
        Some(copy),
    )
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

/// A refusal with the exit code the command has always used: 2 for a usage error, else 1.
fn refuse(code: i32, message: &str) -> CliError {
    if code == 2 {
        CliError::Usage(message.to_owned())
    } else {
        CliError::Refused(message.to_owned())
    }
}
