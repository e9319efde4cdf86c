//! `buzz-deletion sweep …`: the bucket-wide taxonomy sweep, once or on a Temporal Schedule.
//!
//! The sweep is observational (it never gates a deletion); its records live in Postgres, so
//! `sweep list` shows them after Temporal's retention has dropped the runs.

use std::time::{Duration, SystemTime};

use chrono::{DateTime, SecondsFormat, Utc};
use temporalio_client::Client;
use temporalio_client::schedules::{
    CreateScheduleOptions, ScheduleAction, ScheduleDescription, ScheduleDescriptionAction,
    ScheduleError, ScheduleOverlapPolicy, ScheduleSpec,
};
use temporalio_client::tonic::Code;
use uuid::Uuid;
use workflows::sweep::{
    SWEEP_UNKNOWN_KEY_SAMPLE, SWEEP_WORKFLOW_ID_PREFIX, SweepInput, SweepRecord, TaxonomySweep,
};

use crate::cli::SweepCommand;
use crate::connect::{self, TemporalTarget};
use crate::error::{CliError, CliResult};
use crate::output::Report;
use crate::render::{Table, key_values};

/// Runs one `sweep` subcommand.
pub async fn run(command: SweepCommand) -> CliResult {
    match command {
        SweepCommand::Run { max_objects } => run_once(max_objects).await,
        SweepCommand::Schedule {
            every,
            schedule_id,
            max_objects,
        } => schedule(&schedule_id, every, max_objects).await,
        SweepCommand::Unschedule { schedule_id } => unschedule(&schedule_id).await,
        SweepCommand::List { limit } => list(limit).await,
    }
}

fn input(max_objects: u64) -> SweepInput {
    SweepInput {
        object_cap: max_objects,
        unknown_sample: SWEEP_UNKNOWN_KEY_SAMPLE,
    }
}

async fn run_once(max_objects: u64) -> CliResult {
    let workflow_id = format!("{SWEEP_WORKFLOW_ID_PREFIX}-{}", Uuid::new_v4());
    let run = TaxonomySweep::run;
    let record =
        connect::run_workflow(run, input(max_objects), &workflow_id, "TaxonomySweep").await?;
    // Like the predecessor: unknown shapes are something for an operator to look at.
    let code = i32::from(record.unknown_object_count > 0);
    Ok(Report::new(&record, record_text(&record))?.with_exit_code(code))
}

fn record_text(record: &SweepRecord) -> String {
    let mut text = format!(
        "{}\n",
        key_values(
            "taxonomy sweep",
            &[
                ("id", record.id.to_string()),
                ("started_at", record.started_at.clone()),
                ("finished_at", record.finished_at.clone()),
                ("listed_objects", record.listed_objects.to_string()),
                ("object_cap", record.object_cap.to_string()),
                ("reached_cap", record.reached_cap.to_string()),
                ("unknown_objects", record.unknown_object_count.to_string()),
            ],
        )
    );
    if !record.unknown_key_sample.is_empty() {
        text.push_str(&format!(
            "unknown key shapes (first {}):\n",
            record.unknown_key_sample.len()
        ));
        for key in &record.unknown_key_sample {
            text.push_str(&format!("  {key}\n"));
        }
    }
    text
}

async fn schedule(id: &str, every: Duration, max_objects: u64) -> CliResult {
    let id = required_id(id)?;
    let client = connect::temporal(&TemporalTarget::from_env()?).await?;
    let task_queue = connect::task_queue();
    let action = ScheduleAction::start_workflow(
        TaxonomySweep::run,
        input(max_objects),
        task_queue,
        SWEEP_WORKFLOW_ID_PREFIX,
    );
    let spec = ScheduleSpec::from_interval(every);
    let options = CreateScheduleOptions::builder()
        .action(action.clone())
        .spec(spec.clone())
        // One sweep at a time: a slow sweep makes the next one skip, not pile up.
        .overlap_policy(ScheduleOverlapPolicy::Skip)
        .note("buzz-deletion taxonomy sweep (observational; never gates a deletion)")
        .build();
    let outcome = match client.create_schedule(id.clone(), options).await {
        Ok(_) => "created",
        Err(ScheduleError::Rpc(status)) if status.code() == Code::AlreadyExists => {
            client
                .get_schedule_handle(id.clone())
                .update(
                    move |update| {
                        update
                            .set_spec(spec)
                            .set_action(action)
                            .set_overlap_policy(ScheduleOverlapPolicy::Skip);
                    },
                    Default::default(),
                )
                .await
                .map_err(|e| schedule_failure("update", &id, e))?;
            "updated"
        }
        Err(e) => return Err(schedule_failure("create", &id, e)),
    };
    let description = describe(&client, &id).await?;
    let summary = schedule_summary(&id, outcome, &description);
    let pairs: Vec<(&str, String)> = summary
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.as_str(), display_value(v)))
                .collect()
        })
        .unwrap_or_default();
    Report::new(
        &summary,
        format!("{}\n", key_values("sweep schedule", &pairs)),
    )
}

async fn describe(client: &Client, id: &str) -> Result<ScheduleDescription, CliError> {
    client
        .get_schedule_handle(id)
        .describe(Default::default())
        .await
        .map_err(|e| schedule_failure("describe", id, e))
}

/// What the server now holds for the schedule, read back rather than echoed.
fn schedule_summary(
    id: &str,
    outcome: &str,
    description: &ScheduleDescription,
) -> serde_json::Value {
    // non_exhaustive: a future SDK may describe other action kinds.
    let (workflow_type, task_queue) = match description.action() {
        ScheduleDescriptionAction::StartWorkflow(action) => (
            action.workflow_type().to_owned(),
            action.task_queue().to_owned(),
        ),
        _ => (String::new(), String::new()),
    };
    let every_secs: Vec<i64> = description
        .raw()
        .schedule
        .as_ref()
        .and_then(|s| s.spec.as_ref())
        .map(|spec| {
            spec.interval
                .iter()
                .filter_map(|i| i.interval.as_ref().map(|d| d.seconds))
                .collect()
        })
        .unwrap_or_default();
    let next_runs: Vec<String> = description
        .future_action_times()
        .into_iter()
        .map(rfc3339)
        .collect();
    serde_json::json!({
        "schedule_id": id,
        "outcome": outcome,
        "workflow_type": workflow_type,
        "task_queue": task_queue,
        "every_secs": every_secs,
        "paused": description.paused(),
        "next_runs": next_runs,
    })
}

async fn unschedule(id: &str) -> CliResult {
    let id = required_id(id)?;
    let client = connect::temporal(&TemporalTarget::from_env()?).await?;
    match client
        .get_schedule_handle(id.clone())
        .delete(Default::default())
        .await
    {
        Ok(()) => {}
        Err(ScheduleError::Rpc(status)) if status.code() == Code::NotFound => {
            return Err(CliError::Refused(format!(
                "there is no schedule {id:?}: nothing to delete"
            )));
        }
        Err(e) => return Err(schedule_failure("delete", &id, e)),
    }
    let summary = serde_json::json!({"schedule_id": id, "outcome": "deleted"});
    Report::new(&summary, format!("schedule {id} deleted\n"))
}

async fn list(limit: u32) -> CliResult {
    let store = connect::store().await?;
    let sweeps = store
        .latest_sweeps(limit)
        .await
        .map_err(|e| CliError::Other(anyhow::anyhow!(e)))?;
    let records: Vec<SweepRecord> = sweeps
        .into_iter()
        .map(activities::sweep::as_record)
        .collect();
    let mut table = Table::new(
        "taxonomy sweeps",
        &[
            "finished_at",
            "listed",
            "unknown",
            "reached_cap",
            "first unknown key",
        ],
    );
    for r in &records {
        table.row(vec![
            r.finished_at.clone(),
            r.listed_objects.to_string(),
            r.unknown_object_count.to_string(),
            r.reached_cap.to_string(),
            r.unknown_key_sample.first().cloned().unwrap_or_default(),
        ]);
    }
    Report::new(&records, table.render())
}

fn required_id(id: &str) -> Result<String, CliError> {
    let id = id.trim();
    if id.is_empty() {
        Err(CliError::Usage(
            "--schedule-id must not be empty".to_owned(),
        ))
    } else {
        Ok(id.to_owned())
    }
}

fn schedule_failure(what: &str, id: &str, error: ScheduleError) -> CliError {
    CliError::Other(anyhow::anyhow!("could not {what} schedule {id:?}: {error}"))
}

fn rfc3339(at: SystemTime) -> String {
    DateTime::<Utc>::from(at).to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn display_value(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(items) => items
            .iter()
            .map(display_value)
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}
