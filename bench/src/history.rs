//! Temporal history size of every run of a workflow's continue-as-new chain, read with the
//! `temporal` CLI (`TEMPORAL_CLI_EXE`, else `temporal` on PATH) from the first run onwards.

use anyhow::{Context, Result, bail};
use serde_json::Value;
use testkit::process::checked_output;
use tokio::process::Command;

use crate::stack::env;

/// Most runs followed: far beyond any chain the benchmark's sizes produce.
const MAX_RUNS: usize = 10_000;

/// One run of the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunHistory {
    /// The run id.
    pub run_id: String,
    /// Events in its history.
    pub events: u64,
    /// Activity attempts that failed before the one that completed (from each started event's
    /// attempt number), and the failures they ended with.
    pub failed_attempts: Vec<String>,
}

/// Every run of `workflow_id`, first to last, with its event count.
pub async fn run_chain(workflow_id: &str) -> Result<Vec<RunHistory>> {
    let described = temporal_json(&["workflow", "describe", "-w", workflow_id]).await?;
    let mut run_id = described["workflowExecutionInfo"]["firstRunId"]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("describe {workflow_id} has no firstRunId"))?;
    let mut chain = Vec::new();
    for _ in 0..MAX_RUNS {
        let history =
            temporal_json(&["workflow", "show", "-w", workflow_id, "-r", &run_id]).await?;
        let events = history["events"]
            .as_array()
            .with_context(|| format!("history of run {run_id} has no events"))?;
        let next = continued_as(events);
        chain.push(RunHistory {
            run_id: run_id.clone(),
            events: events.len() as u64,
            failed_attempts: failed_attempts(events),
        });
        match next {
            Some(next) => run_id = next,
            None => return Ok(chain),
        }
    }
    bail!("{workflow_id} has more than {MAX_RUNS} runs")
}

/// The run a history continued as, when its last event is a continue-as-new.
fn continued_as(events: &[Value]) -> Option<String> {
    let last = events.last()?;
    if last["eventType"] != "EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW" {
        return None;
    }
    last["workflowExecutionContinuedAsNewEventAttributes"]["newExecutionRunId"]
        .as_str()
        .map(str::to_owned)
}

/// The failures of every activity attempt that was retried: an activity's started event records
/// its attempt number and the failure of the attempt before it (Temporal writes no event for a
/// failed attempt that is retried).
fn failed_attempts(events: &[Value]) -> Vec<String> {
    let mut failures = Vec::new();
    for event in events {
        let started = &event["activityTaskStartedEventAttributes"];
        let attempt = started["attempt"].as_u64().unwrap_or(1);
        if attempt > 1 {
            let message = started["lastFailure"]["message"]
                .as_str()
                .unwrap_or("(no failure recorded)");
            // Only the last failure is recorded; the attempts before it count alike.
            for _ in 1..attempt {
                failures.push(message.to_owned());
            }
        }
    }
    failures
}

/// Runs `temporal ARGS… --output json` against the stack's server and parses stdout.
async fn temporal_json(args: &[&str]) -> Result<Value> {
    let exe = stack_config::env::StackEnv::process()
        .optional("TEMPORAL_CLI_EXE")
        .unwrap_or_else(|| "temporal".to_owned());
    let address = env("TEMPORAL_ADDRESS")?;
    let namespace = stack_config::env::StackEnv::process().temporal_namespace();
    let mut command = Command::new(&exe);
    command.args(args).args([
        "--output",
        "json",
        "--address",
        &address,
        "--namespace",
        &namespace,
    ]);
    let what = format!("{exe} {}", args.join(" "));
    let cannot_run = format!("run {exe} (set TEMPORAL_CLI_EXE; `source .state/env`)");
    let output = checked_output(&mut command, &what, &cannot_run).await?;
    serde_json::from_slice(&output.stdout)
        .with_context(|| format!("{exe} {} printed no JSON", args.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_chain_continues_only_through_a_final_continue_as_new_event() {
        let continued = vec![
            json!({"eventType": "EVENT_TYPE_WORKFLOW_EXECUTION_STARTED"}),
            json!({
                "eventType": "EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW",
                "workflowExecutionContinuedAsNewEventAttributes": {"newExecutionRunId": "run-2"}
            }),
        ];
        assert_eq!(continued_as(&continued).as_deref(), Some("run-2"));
        let completed = vec![json!({"eventType": "EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED"})];
        assert_eq!(continued_as(&completed), None);
        assert_eq!(continued_as(&[]), None);
    }

    #[test]
    fn retried_attempts_are_counted_from_the_started_events_attempt_numbers() {
        let events = vec![
            json!({"activityTaskStartedEventAttributes": {"attempt": 1}}),
            json!({"activityTaskStartedEventAttributes": {
                "attempt": 3, "lastFailure": {"message": "S3 DeleteObjects is throttled"}}}),
            json!({"eventType": "EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED"}),
        ];
        assert_eq!(
            failed_attempts(&events),
            vec!["S3 DeleteObjects is throttled"; 2]
        );
    }
}
