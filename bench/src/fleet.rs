//! Several community deletions at once on a small fleet of workers: every tenant is submitted
//! and approved together through the real CLI, the workers poll one task queue, and the fleet is
//! timed from the first approval to the last `retention_pending`.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use futures::future::try_join_all;
use tokio::process::Child;
use uuid::Uuid;

use crate::history::{RunHistory, run_chain};
use crate::machine::{CpuTimes, CpuTrace, cpu_seconds, peak_rss_kib};
use crate::stack::Stack;
use crate::workflow::{
    WorkflowVariant, approve, operator_key, start_worker, stop_worker, submit, wait_until_retained,
};

/// What one worker process of the fleet used.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkerUse {
    /// Its peak resident set, KiB.
    pub peak_rss_kib: u64,
    /// Its CPU seconds (user + system) over the fleet's wall time.
    pub cpu_seconds: f64,
}

/// What the fleet measured.
#[derive(Debug, Clone)]
pub struct FleetTimings {
    /// From the first approval sent to the last tenant retained.
    pub wall: Duration,
    /// From the earliest `approved` checkpoint to the latest `drained` (the freezes).
    pub listing: Duration,
    /// From the earliest `drained` checkpoint to the latest `bindings_removed` (the object
    /// deletions, overlapping one another).
    pub deleting: Duration,
    /// Each worker, in start order.
    pub workers: Vec<WorkerUse>,
    /// Top-level statements of the worker role over the wall (`pg_stat_statements`), if counted.
    pub worker_statements: Option<u64>,
    /// Every run of every tenant's workflow.
    pub runs: Vec<RunHistory>,
    /// The whole machine's CPU time over the wall.
    pub machine: CpuTimes,
    /// The whole machine's CPU time over the deleting window (sampled every
    /// [`CPU_SAMPLE_EVERY`], so a little wider), when sampled.
    pub machine_deleting: Option<CpuTimes>,
    /// CPU seconds over the wall of each watched process (same order as `watched`).
    pub watched_cpu_seconds: Vec<Option<f64>>,
}

/// How often the machine's CPU counters are read while the fleet runs.
pub const CPU_SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// Reads the machine's CPU counters every [`CPU_SAMPLE_EVERY`] until `stop` fires (or is
/// dropped), then returns them.
async fn sample_cpu(mut stop: tokio::sync::oneshot::Receiver<()>) -> CpuTrace {
    let mut trace = CpuTrace::default();
    let mut every = tokio::time::interval(CPU_SAMPLE_EVERY);
    loop {
        if let Ok(times) = CpuTimes::now() {
            trace.push(Utc::now(), times);
        }
        tokio::select! {
            _ = every.tick() => {}
            _ = &mut stop => break,
        }
    }
    if let Ok(times) = CpuTimes::now() {
        trace.push(Utc::now(), times);
    }
    trace
}

/// Deletes the communities served at `hosts` together on `workers` worker processes sharing
/// one task queue; `watched` are other processes (the S3 double …) whose CPU over the wall is
/// reported beside the workers'.
pub async fn run_fleet(
    stack: &Stack,
    hosts: &[String],
    variant: &WorkflowVariant,
    workers: usize,
    watched: &[u32],
) -> Result<FleetTimings> {
    if workers == 0 || hosts.is_empty() {
        bail!("a fleet needs at least one worker and one tenant");
    }
    let task_queue = format!("bench-fleet-{}", Uuid::new_v4().simple());
    let mut processes = Vec::with_capacity(workers);
    for _ in 0..workers {
        processes.push(start_worker(variant, &task_queue)?);
    }
    let measured = drive(stack, hosts, variant, &task_queue, &processes, watched).await;
    for worker in &mut processes {
        stop_worker(worker).await;
    }
    measured
}

async fn drive(
    stack: &Stack,
    hosts: &[String],
    variant: &WorkflowVariant,
    task_queue: &str,
    processes: &[Child],
    watched: &[u32],
) -> Result<FleetTimings> {
    let requester = operator_key(variant, "bench-requester").await?;
    let approver = operator_key(variant, "bench-approver").await?;
    let submitted = try_join_all(
        hosts
            .iter()
            .map(|host| submit(variant, task_queue, host, &requester)),
    )
    .await?;

    let counter = crate::statements::StatementCounter::connect().await?;
    let statements_before = match &counter {
        Some(counter) => Some(counter.total().await?),
        None => None,
    };
    let machine_before = CpuTimes::now()?;
    let watched_before: Vec<Option<f64>> =
        watched.iter().map(|pid| cpu_seconds(*pid).ok()).collect();
    let mut workers_before = Vec::with_capacity(processes.len());
    for process in processes {
        let pid = process.id().context("a fleet worker exited")?;
        workers_before.push(cpu_seconds(pid)?);
    }
    let (stop_sampling, stop) = tokio::sync::oneshot::channel();
    let sampler = tokio::spawn(sample_cpu(stop));
    let started = Instant::now();
    try_join_all(
        submitted
            .iter()
            .map(|request| approve(variant, task_queue, request, &approver)),
    )
    .await?;
    try_join_all(
        submitted
            .iter()
            .map(|request| wait_until_retained(stack, request.request_id, variant.timeout)),
    )
    .await?;
    let wall = started.elapsed();
    let machine = CpuTimes::now()?.since(&machine_before);
    let _ = stop_sampling.send(());
    let trace = sampler.await.context("the CPU sampler")?;
    let watched_cpu_seconds = watched
        .iter()
        .zip(watched_before)
        .map(|(pid, before)| Some(cpu_seconds(*pid).ok()? - before?))
        .collect();
    let worker_statements = match (&counter, statements_before) {
        (Some(counter), Some(before)) => Some(counter.total().await?.saturating_sub(before)),
        _ => None,
    };
    let mut workers = Vec::with_capacity(processes.len());
    for (process, before) in processes.iter().zip(workers_before) {
        let pid = process.id().context("a fleet worker exited")?;
        workers.push(WorkerUse {
            peak_rss_kib: peak_rss_kib(pid)?,
            cpu_seconds: cpu_seconds(pid)? - before,
        });
    }

    let mut windows = StageWindows::default();
    let mut runs = Vec::new();
    for request in &submitted {
        let inspection = stack.store.inspect(request.request_id).await?;
        for checkpoint in &inspection.checkpoints {
            windows.note(&checkpoint.stage, checkpoint.reached_at);
        }
        runs.extend(run_chain(&request.workflow_id).await?);
    }
    let machine_deleting = windows
        .span("drained", "bindings_removed")
        .and_then(|(from, to)| trace.between(from, to));
    Ok(FleetTimings {
        machine_deleting,
        wall,
        listing: windows.between("approved", "drained"),
        deleting: windows.between("drained", "bindings_removed"),
        workers,
        worker_statements,
        runs,
        machine,
        watched_cpu_seconds,
    })
}

/// Per stage, the earliest and the latest time any tenant reached it.
#[derive(Debug, Default)]
struct StageWindows {
    reached: std::collections::BTreeMap<String, (DateTime<Utc>, DateTime<Utc>)>,
}

impl StageWindows {
    fn note(&mut self, stage: &str, at: DateTime<Utc>) {
        self.reached
            .entry(stage.to_owned())
            .and_modify(|(first, last)| {
                *first = (*first).min(at);
                *last = (*last).max(at);
            })
            .or_insert((at, at));
    }

    /// The first time a tenant reached `from` and the last time one reached `to`.
    fn span(&self, from: &str, to: &str) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        let (first, _) = self.reached.get(from)?;
        let (_, last) = self.reached.get(to)?;
        Some((*first, *last))
    }

    /// From the first tenant reaching `from` to the last reaching `to`; zero if either is
    /// missing.
    fn between(&self, from: &str, to: &str) -> Duration {
        self.span(from, to)
            .and_then(|(first, last)| (last - first).to_std().ok())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn a_stage_window_runs_from_the_first_tenant_in_to_the_last_out() {
        let at = |s: i64| Utc.timestamp_opt(1_000 + s, 0).single().unwrap_or_default();
        let mut windows = StageWindows::default();
        // Two tenants: one drained at 10 and done at 30, the other drained at 5, done at 40.
        windows.note("drained", at(10));
        windows.note("bindings_removed", at(30));
        windows.note("drained", at(5));
        windows.note("bindings_removed", at(40));
        assert_eq!(
            windows.between("drained", "bindings_removed"),
            Duration::from_secs(35)
        );
        assert_eq!(windows.between("approved", "drained"), Duration::ZERO);
    }
}
