//! `buzz-deletion sweep …`: the bucket-wide taxonomy sweep, once or on a Temporal Schedule.
//!
//! The sweep is observational (it never gates a deletion); its records live in Postgres, so
//! `sweep list` shows them after Temporal's retention has dropped the runs.

use std::time::{Duration, SystemTime};

use chrono::{DateTime, SecondsFormat, Utc};
use clap::Subcommand;
use temporalio_client::schedules::{
    CreateScheduleOptions, ScheduleAction, ScheduleDescription, ScheduleDescriptionAction,
    ScheduleError, ScheduleOverlapPolicy, ScheduleSpec,
};
use temporalio_client::tonic::Code;
use temporalio_client::{Client, WorkflowGetResultOptions, WorkflowStartOptions};
use uuid::Uuid;
use workflows::sweep::{
    DEFAULT_SWEEP_OBJECT_CAP, SWEEP_UNKNOWN_KEY_SAMPLE, SWEEP_WORKFLOW_ID_PREFIX, SweepInput,
    SweepRecord, TaxonomySweep,
};

use crate::connect::{self, TemporalTarget};
use crate::error::{CliError, CliResult};
use crate::output::{OutputFormat, Table, key_values, print_json};

/// Schedule id `sweep schedule` and `sweep unschedule` use unless told otherwise.
pub const DEFAULT_SCHEDULE_ID: &str = "buzz-taxonomy-sweep";

/// `sweep …` subcommands.
#[derive(Debug, Subcommand)]
pub enum SweepCommand {
    /// Sweep the whole bucket now and print the record (exit 1 when unknown shapes were found).
    Run {
        /// Stop listing after this many objects.
        #[arg(long, env = "BUZZ_SWEEP_MAX_OBJECTS", default_value_t = DEFAULT_SWEEP_OBJECT_CAP,
              value_parser = clap::value_parser!(u64).range(1..))]
        max_objects: u64,
    },
    /// Create (or update) a Temporal Schedule that runs TaxonomySweep periodically.
    Schedule {
        /// Interval between sweeps: a whole number with a unit, e.g. `24h`, `90m`, `1d`.
        #[arg(long, value_parser = parse_every)]
        every: Duration,
        /// Schedule id.
        #[arg(long, default_value = DEFAULT_SCHEDULE_ID)]
        id: String,
        /// Object cap of each scheduled sweep.
        #[arg(long, env = "BUZZ_SWEEP_MAX_OBJECTS", default_value_t = DEFAULT_SWEEP_OBJECT_CAP,
              value_parser = clap::value_parser!(u64).range(1..))]
        max_objects: u64,
    },
    /// Delete the sweep schedule (recorded sweeps stay in Postgres).
    Unschedule {
        /// Schedule id.
        #[arg(long, default_value = DEFAULT_SCHEDULE_ID)]
        id: String,
    },
    /// The latest recorded sweeps, newest first (from Postgres).
    List {
        /// At most this many.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: u32,
    },
}

/// Runs one `sweep` subcommand.
pub async fn run(format: OutputFormat, command: SweepCommand) -> CliResult {
    match command {
        SweepCommand::Run { max_objects } => run_once(format, max_objects).await,
        SweepCommand::Schedule {
            every,
            id,
            max_objects,
        } => schedule(format, &id, every, max_objects).await,
        SweepCommand::Unschedule { id } => unschedule(format, &id).await,
        SweepCommand::List { limit } => list(format, limit).await,
    }
}

fn input(max_objects: u64) -> SweepInput {
    SweepInput {
        object_cap: max_objects,
        unknown_sample: SWEEP_UNKNOWN_KEY_SAMPLE,
    }
}

/// Parses `<whole number><unit>` with unit `s`, `m`, `h` or `d`; zero is refused.
pub fn parse_every(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{text:?} has no unit: write e.g. 24h, 90m, 1d"))?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} does not start with a whole number"))?;
    let unit_secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 60 * 60,
        "d" => 24 * 60 * 60,
        other => return Err(format!("unknown unit {other:?}: use s, m, h or d")),
    };
    match number.checked_mul(unit_secs) {
        Some(0) => Err("the interval must be longer than zero".to_owned()),
        Some(secs) => Ok(Duration::from_secs(secs)),
        None => Err(format!("{text:?} is too long")),
    }
}

async fn run_once(format: OutputFormat, max_objects: u64) -> CliResult {
    let client = connect::temporal(&TemporalTarget::from_env()).await?;
    let workflow_id = format!("{SWEEP_WORKFLOW_ID_PREFIX}-{}", Uuid::new_v4());
    let handle = client
        .start_workflow(
            TaxonomySweep::run,
            input(max_objects),
            WorkflowStartOptions::new(connect::task_queue(), workflow_id.clone()).build(),
        )
        .await
        .map_err(|e| CliError::Other(anyhow::anyhow!("could not start TaxonomySweep: {e}")))?;
    let record = handle
        .get_result(WorkflowGetResultOptions::default())
        .await
        .map_err(|e| CliError::Other(anyhow::anyhow!("TaxonomySweep {workflow_id} failed: {e}")))?;
    match format {
        OutputFormat::Json => print_json(&record)?,
        OutputFormat::Table => print_record(&record),
    }
    // Like the predecessor: unknown shapes are something for an operator to look at.
    Ok(i32::from(record.unknown_object_count > 0))
}

fn print_record(record: &SweepRecord) {
    println!(
        "{}",
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
        println!(
            "unknown key shapes (first {}):",
            record.unknown_key_sample.len()
        );
        for key in &record.unknown_key_sample {
            println!("  {key}");
        }
    }
}

async fn schedule(format: OutputFormat, id: &str, every: Duration, max_objects: u64) -> CliResult {
    let id = required_id(id)?;
    let client = connect::temporal(&TemporalTarget::from_env()).await?;
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
    match format {
        OutputFormat::Json => print_json(&summary)?,
        OutputFormat::Table => {
            let pairs: Vec<(&str, String)> = summary
                .as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, v)| (k.as_str(), display_value(v)))
                        .collect()
                })
                .unwrap_or_default();
            println!("{}", key_values("sweep schedule", &pairs));
        }
    }
    Ok(0)
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

async fn unschedule(format: OutputFormat, id: &str) -> CliResult {
    let id = required_id(id)?;
    let client = connect::temporal(&TemporalTarget::from_env()).await?;
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
    match format {
        OutputFormat::Json => print_json(&summary)?,
        OutputFormat::Table => println!("schedule {id} deleted"),
    }
    Ok(0)
}

async fn list(format: OutputFormat, limit: u32) -> CliResult {
    let store = connect::store().await?;
    let sweeps = store
        .latest_sweeps(limit)
        .await
        .map_err(|e| CliError::Other(anyhow::anyhow!(e)))?;
    let records: Vec<SweepRecord> = sweeps
        .into_iter()
        .map(activities::sweep::as_record)
        .collect();
    match format {
        OutputFormat::Json => print_json(&records)?,
        OutputFormat::Table => {
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
            print!("{}", table.render());
        }
    }
    Ok(0)
}

fn required_id(id: &str) -> Result<String, CliError> {
    let id = id.trim();
    if id.is_empty() {
        Err(CliError::Usage("--id must not be empty".to_owned()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_accepts_a_whole_number_with_a_unit() {
        assert_eq!(parse_every("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_every("90m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse_every("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_every("45s"), Ok(Duration::from_secs(45)));
    }

    #[test]
    fn every_refuses_zero_a_missing_unit_and_an_unknown_one() {
        assert!(parse_every("0h").is_err());
        assert!(parse_every("24").is_err());
        assert!(parse_every("h").is_err());
        assert!(parse_every("2w").is_err());
        assert!(parse_every("1.5h").is_err());
    }
}
