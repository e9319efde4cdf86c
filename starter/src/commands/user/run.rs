//! `buzz-deletion user run`: lets the request's workflow execute stages until it pauses, and
//! prints the stage rows; a finished request is answered from Postgres alone.

use temporalio_client::RpcOptions;
use uuid::Uuid;

use workflows::user::policy::{lifecycle_problem, reconstruct};
use workflows::user::{RunOptions, RunOutcome, RunReport, UserDeletion};

use super::{NOT_RUNNING, RequestSnapshot, UserCliEnv, existing_request, recover, refuse};
use crate::error::{CliError, CliResult};
use crate::output::Report;
use crate::render;
use crate::update::{self, UpdateFailure};

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

/// `user run ID`: sends the `run` update with `options` and reports what the run left; after
/// SIGINT or SIGTERM, asks the run to stop and waits up to `stop_wait` for it.
pub(super) async fn run_stages(
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
            None,
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
