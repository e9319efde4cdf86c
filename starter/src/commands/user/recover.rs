//! The recovery commands of a user deletion: `user stop`, `user resume`, and what `user run` does
//! when it is interrupted (SIGINT, SIGTERM) or finds no workflow running for its request.

use std::future::Future;
use std::time::Duration;

use anyhow::Context;
use serde_json::json;
use temporalio_client::errors::WorkflowInteractionError;
use temporalio_client::{
    RpcOptions, WorkflowDescribeOptions, WorkflowExecutionStatus, WorkflowIdConflictPolicy,
    WorkflowStartOptions,
};
use temporalio_common::search_attributes::SearchAttributes;
use tokio::signal::unix::{SignalKind, signal};
use uuid::Uuid;

use activities::user::UserRequestView;
use workflows::user::{
    ResumeCause, StartMode, StopAnswer, StopRequest, UserDeletion, UserDeletionInput, UserTuning,
    workflow_id,
};

use super::{NOT_RUNNING, RequestSnapshot, UserCliEnv, existing_request, refuse};
use crate::error::{CliError, CliResult};
use crate::output::Report;
use crate::render::user::describe_outcome;
use crate::update::{self, UpdateFailure};

/// The signal that interrupted `user run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Interrupt {
    /// Ctrl-C.
    Int,
    /// A service manager or `kill`.
    Term,
}

impl Interrupt {
    fn name(self) -> &'static str {
        match self {
            Interrupt::Int => "SIGINT",
            Interrupt::Term => "SIGTERM",
        }
    }

    /// The shell's convention: 128 + the signal number.
    fn exit_code(self) -> i32 {
        match self {
            Interrupt::Int => 130,
            Interrupt::Term => 143,
        }
    }
}

/// Awaits `work` unless SIGINT or SIGTERM comes first. The handlers are installed only here, so
/// before this point a signal ends the command as usual.
pub(super) async fn until_interrupted<F: Future>(
    work: F,
) -> anyhow::Result<Result<F::Output, Interrupt>> {
    let mut terminate = signal(SignalKind::terminate()).context("installing a SIGTERM handler")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("installing a SIGINT handler")?;
    tokio::select! {
        output = work => Ok(Ok(output)),
        _ = interrupt.recv() => Ok(Err(Interrupt::Int)),
        _ = terminate.recv() => Ok(Err(Interrupt::Term)),
    }
}

/// After SIGINT or SIGTERM: asks the run to stop after the handler in flight, waits up to `wait`
/// for the acknowledgement and says what happened. Exits 130 or 143 once the run stopped.
pub(super) async fn stop_after_interrupt(
    env: &UserCliEnv,
    id: Uuid,
    interrupt: Interrupt,
    wait: Duration,
) -> CliResult {
    eprintln!(
        "{}: asking the run of request {id} to stop (no further handler, no further transition); \
         waiting up to {} s for it to acknowledge",
        interrupt.name(),
        wait.as_secs()
    );
    let report = stop_and_report(env, id, wait, interrupt.name()).await?;
    Ok(if report.exit_code() == 0 {
        report.with_exit_code(interrupt.exit_code())
    } else {
        report
    })
}

/// `user stop ID`: the same stop, from another terminal.
pub(super) async fn stop(env: &UserCliEnv, id: Uuid, wait: Duration) -> CliResult {
    existing_request(env, id).await?;
    stop_and_report(env, id, wait, "operator").await
}

async fn stop_and_report(
    env: &UserCliEnv,
    id: Uuid,
    wait: Duration,
    requested_by: &str,
) -> CliResult {
    let handle = env.workflow(id);
    let request = StopRequest {
        requested_by: Some(requested_by.to_string()),
    };
    let sent = update::send(
        &env.waits,
        &handle,
        "stop",
        UserDeletion::stop,
        request,
        None,
    )
    .await
    .map_err(|failure| failure.into_cli("stop", NOT_RUNNING))?;
    let answer = match tokio::time::timeout(wait, sent.get_result(RpcOptions::default())).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => return Err(UpdateFailure::Rejected(e).into_cli("stop", NOT_RUNNING)),
        Err(_elapsed) => {
            return Err(refuse(
                1,
                &format!(
                    "the stop was accepted, but the run did not acknowledge it within {} s: no \
                     worker has processed it yet, or the run is inside a store call. No further \
                     handler or transition will start. Check that a worker runs, wait with \
                     `buzz-deletion user stop {id}` again, and read the rows with \
                     `buzz-deletion user status {id}`",
                    wait.as_secs()
                ),
            ));
        }
    };
    let summary = match &answer {
        StopAnswer::Stopped { report } => describe_outcome(&report.outcome),
        StopAnswer::NothingRunning { phase } => {
            format!(
                "no run in progress (phase {}); nothing changed",
                phase.as_str()
            )
        }
    };
    let snapshot = RequestSnapshot::read(&env.store, id).await?;
    let document = snapshot.document("stop", &answer, &["progress", "stages"])?;
    let text = format!("{}stop: {summary}\n", snapshot.text());
    eprintln!("stop: {summary}");
    Report::new(&document, text)
}

/// `user resume ID`: starts a new workflow for the request from what Postgres holds, after
/// checking that none is running.
pub(super) async fn resume(env: &UserCliEnv, id: Uuid, tuning: UserTuning) -> CliResult {
    let request = existing_request(env, id).await?;
    if request.stage == "completed" {
        return Err(refuse(
            1,
            &format!("request {id} is completed; there is nothing to resume"),
        ));
    }
    if let Some(run_id) = running_workflow(env, id).await? {
        return Err(refuse(
            1,
            &format!(
                "resume refused: workflow {} (run {run_id}) is running for request {id}. Use \
                 `buzz-deletion user run {id}` or `buzz-deletion user stop {id}`; resume only \
                 replaces a workflow that was terminated or lost",
                workflow_id(id)
            ),
        ));
    }
    let run_id = start_resumed(env, &request, tuning).await?;
    let snapshot = RequestSnapshot::read(&env.store, id).await?;
    let resumed = json!({"workflow_id": workflow_id(id), "run_id": run_id});
    let fields = ["approval", "progress", "stages"];
    let document = snapshot.document("resumed", &resumed, &fields)?;
    let text = format!(
        "{}resumed: workflow {} run {run_id}\n",
        snapshot.text(),
        workflow_id(id)
    );
    Report::new(&document, text)
}

/// Before `user run` sends its update: when no workflow runs for the request (terminated from
/// the Web UI, lost with a namespace), resumes it from Postgres; refused when that was.
pub(super) async fn ensure_workflow(
    env: &UserCliEnv,
    request: &UserRequestView,
) -> Result<(), CliError> {
    if running_workflow(env, request.id).await?.is_some() {
        return Ok(());
    }
    eprintln!(
        "no workflow is running for request {}; resuming it from Postgres (as `user resume`)",
        request.id
    );
    start_resumed(env, request, UserTuning::default()).await?;
    Ok(())
}

/// The run id of the request's running workflow, if one runs.
async fn running_workflow(env: &UserCliEnv, id: Uuid) -> anyhow::Result<Option<String>> {
    match env
        .workflow(id)
        .describe(WorkflowDescribeOptions::default())
        .await
    {
        Ok(description) if description.status() == WorkflowExecutionStatus::Running => {
            Ok(Some(description.run_id().to_string()))
        }
        Ok(_) | Err(WorkflowInteractionError::NotFound(_)) => Ok(None),
        Err(e) => Err(e).context("describing the request's workflow"),
    }
}

/// Starts a `UserDeletion` in resume mode and waits until it has taken up the request; its run
/// id. A concurrent resume that won the start is accepted.
async fn start_resumed(
    env: &UserCliEnv,
    request: &UserRequestView,
    tuning: UserTuning,
) -> Result<String, CliError> {
    if let Err(no_worker) = env
        .waits
        .require_worker(&env.client, "user deletion resume")
        .await
    {
        return Err(refuse(1, &format!("resume refused: {no_worker}")));
    }
    let id = request.id;
    let input = UserDeletionInput {
        request_id: id,
        target: request.target.clone().unwrap_or_default(),
        requested_by: request.requested_by.clone(),
        reason: request.reason.clone(),
        // A resumed execution reads the approved inventory from Postgres.
        demo_communities: None,
        // The submit signature was verified at registration and is stored with the request.
        signed: None,
        start: StartMode::Resume {
            cause: ResumeCause::Operator,
        },
        tuning,
    };
    let options = WorkflowStartOptions::new(env.task_queue.clone(), workflow_id(id))
        .id_conflict_policy(WorkflowIdConflictPolicy::Fail)
        .search_attributes(SearchAttributes::new([
            workflows::search::KIND.value_set("user".to_string())
        ]))
        .build();
    let handle = match env
        .client
        .start_workflow(UserDeletion::run, input, options)
        .await
    {
        Ok(handle) => handle,
        Err(e) => {
            // Another `user run` or `user resume` may have started it a moment ago.
            return match running_workflow(env, id).await? {
                Some(run_id) => Ok(run_id),
                None => Err(CliError::Other(
                    anyhow::Error::new(e).context("starting the resumed UserDeletion workflow"),
                )),
            };
        }
    };
    update::execute(
        &env.waits,
        &handle,
        "resume",
        UserDeletion::registration,
        (),
        None,
    )
    .await
    .map_err(|failure| match failure {
        UpdateFailure::NoWorker(e) => refuse(1, &format!("resume refused: {e}")),
        rejected => rejected.into_cli("resume", NOT_RUNNING),
    })?;
    Ok(handle.info().run_id.clone().unwrap_or_default())
}
