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

use super::{RequestSnapshot, UserCliEnv, describe_outcome, fail, update_message};
use crate::output::{OutputFormat, print_json};
use crate::worker_wait::SendError;

/// How long `user run` waits for its run to acknowledge a stop after SIGINT or SIGTERM, unless
/// `--stop-wait-secs` says otherwise.
pub const DEFAULT_STOP_WAIT_SECS: u64 = 30;

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
) -> anyhow::Result<i32> {
    eprintln!(
        "{}: asking the run of request {id} to stop (no further handler, no further transition); \
         waiting up to {} s for it to acknowledge",
        interrupt.name(),
        wait.as_secs()
    );
    let code = stop_and_report(env, id, wait, interrupt.name()).await?;
    Ok(if code == 0 {
        interrupt.exit_code()
    } else {
        code
    })
}

/// `user stop ID`: the same stop, from another terminal.
pub(super) async fn stop(env: &UserCliEnv, id: Uuid, wait: Duration) -> anyhow::Result<i32> {
    if env.store.request_view(id).await?.is_none() {
        return Ok(fail(1, &format!("no user-deletion request {id}")));
    }
    stop_and_report(env, id, wait, "operator").await
}

async fn stop_and_report(
    env: &UserCliEnv,
    id: Uuid,
    wait: Duration,
    requested_by: &str,
) -> anyhow::Result<i32> {
    let handle = env
        .client
        .get_workflow_handle::<UserDeletion>(workflow_id(id));
    let request = StopRequest {
        requested_by: Some(requested_by.to_string()),
    };
    let sent = env
        .waits
        .send_update(&env.client, &handle, "stop", UserDeletion::stop, request)
        .await;
    let sent = match sent {
        Ok(sent) => sent,
        Err(SendError::Update(e)) => {
            return Ok(fail(1, &format!("stop refused: {}", update_message(&e))));
        }
        Err(SendError::NoWorker(e)) => return Ok(fail(1, &e.to_string())),
    };
    let answer = match tokio::time::timeout(wait, sent.get_result(RpcOptions::default())).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => return Ok(fail(1, &format!("stop failed: {}", update_message(&e)))),
        Err(_elapsed) => {
            return Ok(fail(
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
    match env.output {
        OutputFormat::Json => print_json(&json!({
            "stop": answer,
            "request": snapshot.request,
            "progress": snapshot.progress,
            "stages": snapshot.stages,
        }))?,
        OutputFormat::Table => {
            print!("{}", snapshot.render());
            println!("stop: {summary}");
        }
    }
    eprintln!("stop: {summary}");
    Ok(0)
}

/// `user resume ID`: starts a new workflow for the request from what Postgres holds, after
/// checking that none is running.
pub(super) async fn resume(env: &UserCliEnv, id: Uuid, tuning: UserTuning) -> anyhow::Result<i32> {
    let Some(request) = env.store.request_view(id).await? else {
        return Ok(fail(1, &format!("no user-deletion request {id}")));
    };
    if request.stage == "completed" {
        return Ok(fail(
            1,
            &format!("request {id} is completed; there is nothing to resume"),
        ));
    }
    if let Some(run_id) = running_workflow(env, id).await? {
        return Ok(fail(
            1,
            &format!(
                "resume refused: workflow {} (run {run_id}) is running for request {id}. Use \
                 `buzz-deletion user run {id}` or `buzz-deletion user stop {id}`; resume only \
                 replaces a workflow that was terminated or lost",
                workflow_id(id)
            ),
        ));
    }
    let run_id = match start_resumed(env, &request, tuning).await? {
        Ok(run_id) => run_id,
        Err(refusal) => return Ok(fail(1, &format!("resume refused: {refusal}"))),
    };
    let snapshot = RequestSnapshot::read(&env.store, id).await?;
    match env.output {
        OutputFormat::Json => print_json(&json!({
            "resumed": {"workflow_id": workflow_id(id), "run_id": run_id},
            "request": snapshot.request,
            "approval": snapshot.approval,
            "progress": snapshot.progress,
            "stages": snapshot.stages,
        }))?,
        OutputFormat::Table => {
            print!("{}", snapshot.render());
            println!("resumed: workflow {} run {run_id}", workflow_id(id));
        }
    }
    Ok(0)
}

/// Before `user run` sends its update: when no workflow runs for the request (terminated from
/// the Web UI, lost with a namespace), resumes it from Postgres. Some(exit code) when that was
/// refused.
pub(super) async fn ensure_workflow(
    env: &UserCliEnv,
    request: &UserRequestView,
) -> anyhow::Result<Option<i32>> {
    if running_workflow(env, request.id).await?.is_some() {
        return Ok(None);
    }
    eprintln!(
        "no workflow is running for request {}; resuming it from Postgres (as `user resume`)",
        request.id
    );
    match start_resumed(env, request, UserTuning::default()).await? {
        Ok(_) => Ok(None),
        Err(refusal) => Ok(Some(fail(1, &format!("resume refused: {refusal}")))),
    }
}

/// The run id of the request's running workflow, if one runs.
async fn running_workflow(env: &UserCliEnv, id: Uuid) -> anyhow::Result<Option<String>> {
    let handle = env
        .client
        .get_workflow_handle::<UserDeletion>(workflow_id(id));
    match handle.describe(WorkflowDescribeOptions::default()).await {
        Ok(description) if description.status() == WorkflowExecutionStatus::Running => {
            Ok(Some(description.run_id().to_string()))
        }
        Ok(_) | Err(WorkflowInteractionError::NotFound(_)) => Ok(None),
        Err(e) => Err(e).context("describing the request's workflow"),
    }
}

/// Starts a `UserDeletion` in resume mode and waits until it has taken up the request. Ok(run
/// id), or Err(why it was refused). A concurrent resume that won the start is accepted.
async fn start_resumed(
    env: &UserCliEnv,
    request: &UserRequestView,
    tuning: UserTuning,
) -> anyhow::Result<Result<String, String>> {
    if let Err(no_worker) = env
        .waits
        .require_worker(&env.client, "user deletion resume")
        .await
    {
        return Ok(Err(no_worker.to_string()));
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
                Some(run_id) => Ok(Ok(run_id)),
                None => Err(e).context("starting the resumed UserDeletion workflow"),
            };
        }
    };
    let sent = env
        .waits
        .send_update(
            &env.client,
            &handle,
            "resume",
            UserDeletion::registration,
            (),
        )
        .await;
    let taken_up = match sent {
        Ok(sent) => sent.get_result(RpcOptions::default()).await,
        Err(SendError::Update(e)) => Err(e),
        Err(SendError::NoWorker(e)) => return Ok(Err(e.to_string())),
    };
    match taken_up {
        Ok(_) => Ok(Ok(handle.info().run_id.clone().unwrap_or_default())),
        Err(e) => Ok(Err(update_message(&e))),
    }
}
