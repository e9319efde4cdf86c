//! Bounded waits for a worker: a command that needs one says so within `--worker-wait`.
//!
//! Queries and updates are answered by a worker. With none polling the task queue, Temporal
//! holds the call until its own deadline: `status` ended in a raw transport timeout and `abort`
//! hung. Every call that needs a worker is therefore bounded by [`WorkerWait::wait`], and when
//! the bound passes the command asks Temporal itself (DescribeTaskQueue, which needs no worker)
//! who polls the task queue, so the message says whether no worker runs or one runs but does not
//! answer. Temporal keeps an update no worker accepted in memory only (admitted, not in the
//! history) and drops it on a server restart or cache eviction; so an operator's signed
//! `approve`, `abort` or `unblock` is then sent again as the signal of the same name, which is
//! written to the history, and reported as sent, not yet processed: a worker acts on it once
//! when it polls again (see `workflows::delivery`). Other updates say honestly that Temporal may
//! drop them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use temporalio_client::tonic;
use temporalio_client::{Client, NamespacedClient, RpcOptions, WorkflowStartUpdateOptions};
use temporalio_common::protos::temporal::api::common::v1::WorkflowExecution;
use temporalio_common::protos::temporal::api::enums::v1::{
    TaskQueueKind, TaskQueueType, UpdateWorkflowExecutionLifecycleStage,
};
use temporalio_common::protos::temporal::api::taskqueue::v1::TaskQueue;
use temporalio_common::protos::temporal::api::update::v1::{UpdateRef, WaitPolicy};
use temporalio_common::protos::temporal::api::workflowservice::v1::{
    DescribeTaskQueueRequest, PollWorkflowExecutionUpdateRequest,
};

use crate::error::CliError;

/// Default of `--worker-wait`, in seconds.
pub const DEFAULT_WORKER_WAIT_SECS: u64 = 15;
/// A poller is taken as live when its last poll is this recent: a live worker's long poll
/// returns (and polls again) at least once a minute.
const LIVE_POLL_AGE: Duration = Duration::from_secs(75);
/// How far past the wait a bounded call's transport deadline lies.
const RPC_DEADLINE_MARGIN: Duration = Duration::from_secs(5);
/// How long the CLI asks Temporal whether it holds an update that got no answer.
const ADMITTED_CHECK: Duration = Duration::from_secs(3);

/// How long a command waits for a worker, and on which task queue.
#[derive(Debug, Clone)]
pub struct WorkerWait {
    /// The task queue the workers poll (`BUZZ_TASK_QUEUE`).
    pub task_queue: String,
    /// The bound (`--worker-wait`).
    pub wait: Duration,
}

/// Who polls the task queue, as Temporal's own records say.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "workers", rename_all = "snake_case")]
pub enum Pollers {
    /// A worker polled within the last minute or so.
    Live {
        /// Its identity (`pid@host`).
        identity: String,
        /// Seconds since its last poll.
        last_poll_secs_ago: u64,
    },
    /// Workers polled, but none recently: they are gone.
    Gone {
        /// Seconds since the most recent poll.
        last_poll_secs_ago: u64,
    },
    /// No worker polled in the last minutes (Temporal forgets pollers after about five).
    None,
    /// Temporal could not be asked.
    Unknown {
        /// Why.
        error: String,
    },
}

impl Pollers {
    /// Whether a worker looks alive.
    pub fn live(&self) -> bool {
        matches!(self, Pollers::Live { .. })
    }
}

impl WorkerWait {
    /// Asks Temporal (DescribeTaskQueue, no worker needed) who polls the workflow task queue.
    pub async fn pollers(&self, client: &Client) -> Pollers {
        let request = DescribeTaskQueueRequest {
            namespace: client.namespace(),
            task_queue: Some(TaskQueue {
                name: self.task_queue.clone(),
                kind: TaskQueueKind::Normal as i32,
                ..Default::default()
            }),
            task_queue_type: TaskQueueType::Workflow as i32,
            ..Default::default()
        };
        let mut call = tonic::Request::new(request);
        call.set_timeout(Duration::from_secs(5));
        let response = match client
            .connection()
            .workflow_service()
            .describe_task_queue(call)
            .await
        {
            Ok(response) => response.into_inner(),
            Err(status) => {
                return Pollers::Unknown {
                    error: status.message().to_owned(),
                };
            }
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let newest = response
            .pollers
            .iter()
            .filter_map(|p| {
                let seconds = u64::try_from(p.last_access_time.as_ref()?.seconds).ok()?;
                Some((now.saturating_sub(seconds), p.identity.clone()))
            })
            .min_by_key(|(age, _)| *age);
        match newest {
            Some((age, identity)) if Duration::from_secs(age) <= LIVE_POLL_AGE => Pollers::Live {
                identity,
                last_poll_secs_ago: age,
            },
            Some((age, _)) => Pollers::Gone {
                last_poll_secs_ago: age,
            },
            None => Pollers::None,
        }
    }

    /// Waits up to the bound for a live worker; refuses (nothing was sent) when none appears.
    pub async fn require_worker(&self, client: &Client, what: &str) -> Result<(), CliError> {
        let deadline = tokio::time::Instant::now() + self.wait;
        loop {
            let pollers = self.pollers(client).await;
            if pollers.live() || matches!(pollers, Pollers::Unknown { .. }) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(CliError::NoWorker(format!(
                    "{what} not sent: {}",
                    self.explain(&pollers)
                )));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The options of an update sent under `update_id`, bounded by the wait.
    pub(crate) fn update_options(&self, update_id: &str) -> WorkflowStartUpdateOptions {
        WorkflowStartUpdateOptions::builder()
            .update_id(update_id.to_owned())
            .rpc_options(self.rpc_options())
            .build()
    }

    /// The error of update `update_id` (named `what`) of workflow `workflow_id` that no worker
    /// answered within the bound. Temporal is asked whether it holds the update: then it was
    /// sent and is applied exactly once when a worker polls again (its update id makes any
    /// re-send a no-op), and the command reports it as not yet processed.
    pub(crate) async fn unanswered_update(
        &self,
        client: &Client,
        workflow_id: &str,
        update_id: &str,
        what: &str,
    ) -> CliError {
        let held = self.update_held(client, workflow_id, update_id).await;
        let pollers = self.pollers(client).await;
        let explanation = self.explain(&pollers);
        let message = if held {
            format!(
                "{what} sent, not yet processed (update id {update_id}): {explanation}. Temporal \
                 holds the {what} in memory only until a worker accepts it, and drops it if the \
                 server restarts or evicts the workflow meanwhile: once a worker runs, check with \
                 `status` and send it again if it is not there"
            )
        } else {
            format!("{what} not sent: {explanation}")
        };
        CliError::NoWorker(message)
    }

    /// The error of update `what` that no worker answered within the bound and whose statement
    /// was then written to the workflow's history as signal `signal` (durable, unlike an
    /// admitted update): a worker acts on it once when it polls again.
    pub(crate) async fn sent_as_signal(
        &self,
        client: &Client,
        what: &str,
        signal: &str,
    ) -> CliError {
        let pollers = self.pollers(client).await;
        let explanation = self.explain(&pollers);
        CliError::NoWorker(format!(
            "{what} sent, not yet processed: {explanation}. The signed {what} is written to the \
             workflow's history (signal `{signal}`), so it survives until a worker polls again \
             and acts on it once (a second copy of the same signed statement changes nothing); \
             its outcome, taken or refused with the reason, shows in `status`. Do not send it \
             again"
        ))
    }

    /// RPC options for a call bounded by the wait: the transport deadline lies beyond the wait,
    /// so the bound is always the CLI's own and never a raw transport timeout.
    pub fn rpc_options(&self) -> RpcOptions {
        RpcOptions::builder()
            .timeout(self.wait + RPC_DEADLINE_MARGIN)
            .build()
    }

    /// Whether Temporal holds the update (admitted or further), asked with a short deadline.
    async fn update_held(&self, client: &Client, workflow_id: &str, update_id: &str) -> bool {
        let request = PollWorkflowExecutionUpdateRequest {
            namespace: client.namespace(),
            update_ref: Some(UpdateRef {
                workflow_execution: Some(WorkflowExecution {
                    workflow_id: workflow_id.to_owned(),
                    run_id: String::new(),
                }),
                update_id: update_id.to_owned(),
            }),
            identity: client.identity(),
            wait_policy: Some(WaitPolicy {
                lifecycle_stage: UpdateWorkflowExecutionLifecycleStage::Admitted as i32,
            }),
        };
        let mut call = tonic::Request::new(request);
        call.set_timeout(ADMITTED_CHECK);
        let mut service = client.connection().workflow_service();
        let poll = service.poll_workflow_execution_update(call);
        matches!(
            tokio::time::timeout(ADMITTED_CHECK + Duration::from_secs(1), poll).await,
            Ok(Ok(response)) if response.get_ref().stage
                >= UpdateWorkflowExecutionLifecycleStage::Admitted as i32
        )
    }

    /// What the operator reads when no worker answered within the bound: who polls, and how to
    /// start a worker or wait longer.
    pub fn explain(&self, pollers: &Pollers) -> String {
        let queue = &self.task_queue;
        let secs = self.wait.as_secs();
        let start = format!(
            "start one with `BUZZ_TASK_QUEUE={queue} buzz-deletion-worker` (same TEMPORAL_ADDRESS \
             and TEMPORAL_NAMESPACE), or wait longer with --worker-wait SECS"
        );
        match pollers {
            Pollers::Live {
                identity,
                last_poll_secs_ago,
            } => format!(
                "no worker answered within {secs} s on task queue {queue}; worker {identity} \
                 polled it {last_poll_secs_ago} s ago (a stopped worker stays listed for about a \
                 minute). If no buzz-deletion-worker runs, {start}; if one runs, its workflow \
                 tasks may fail (look for WorkflowTaskFailed in the Web UI history)"
            ),
            Pollers::Gone { last_poll_secs_ago } => format!(
                "no worker answered within {secs} s: no buzz-deletion-worker polls task queue \
                 {queue} (last poll {last_poll_secs_ago} s ago); {start}"
            ),
            Pollers::None => format!(
                "no worker answered within {secs} s: no buzz-deletion-worker polls task queue \
                 {queue}; {start}"
            ),
            Pollers::Unknown { error } => format!(
                "no worker answered within {secs} s on task queue {queue} (Temporal could not \
                 list its pollers: {error}); {start}"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_explanation_names_the_queue_and_how_to_start_a_worker() {
        let waits = WorkerWait {
            task_queue: "ops-queue".to_owned(),
            wait: Duration::from_secs(15),
        };
        for pollers in [
            Pollers::Live {
                identity: "buzz-deletion-worker@42".to_owned(),
                last_poll_secs_ago: 9,
            },
            Pollers::Gone {
                last_poll_secs_ago: 312,
            },
            Pollers::None,
            Pollers::Unknown {
                error: "unavailable".to_owned(),
            },
        ] {
            let text = waits.explain(&pollers);
            for needle in [
                "within 15 s",
                "task queue ops-queue",
                "BUZZ_TASK_QUEUE=ops-queue buzz-deletion-worker",
                "--worker-wait SECS",
            ] {
                assert!(
                    text.contains(needle),
                    "{pollers:?}: {needle:?} missing in {text}"
                );
            }
        }
    }
}
