//! Several community deletions at once on a small fleet of workers: every tenant is submitted
//! and approved together through the real CLI, the workers poll one task queue, and the fleet is
//! timed from the first approval to the last `retention_pending`.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use futures::future::try_join_all;
use tokio::process::Child;
use uuid::Uuid;

use crate::double::DeletedCounter;
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
    /// When each tenant reached the stages around its deletion, in the order of `hosts`
    /// (`None` if a checkpoint is missing).
    pub tenant_stages: Vec<Option<TenantStages>>,
    /// While every tenant was deleting at once (from the last `drained` to the first
    /// `bindings_removed`): the versions the double deleted and over how long, measured between
    /// the samples inside that window; `None` if the tenants never all deleted at once for at
    /// least two samples, or the double's counter was not sampled.
    pub all_deleting: Option<Overlap>,
}

/// When one tenant was approved, its freeze ended (`drained`) and its objects were deleted
/// (`bindings_removed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantStages {
    /// Its `approved` checkpoint.
    pub approved: DateTime<Utc>,
    /// Its `drained` checkpoint: the freeze done, its deleting stage begins.
    pub drained: DateTime<Utc>,
    /// Its `bindings_removed` checkpoint: every object version deleted.
    pub bindings_removed: DateTime<Utc>,
}

/// Versions the double deleted over a stretch of time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Overlap {
    /// The stretch's length.
    pub seconds: f64,
    /// Versions deleted over it.
    pub versions: u64,
}

impl Overlap {
    /// Versions per second.
    pub fn per_second(&self) -> f64 {
        self.versions as f64 / self.seconds.max(f64::MIN_POSITIVE)
    }
}

/// The double's deleted-versions counter, read every [`CPU_SAMPLE_EVERY`].
#[derive(Debug, Default)]
pub struct DeletedTrace {
    samples: Vec<(DateTime<Utc>, u64)>,
}

impl DeletedTrace {
    /// Adds a sample (in time order).
    pub fn push(&mut self, at: DateTime<Utc>, deleted: u64) {
        self.samples.push((at, deleted));
    }

    /// What was deleted inside `from`..`to`: from the first sample at or after `from` to the
    /// last at or before `to` (so no time outside the window counts); `None` unless two samples
    /// lie inside it.
    pub fn within(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Option<Overlap> {
        let (first_at, first) = self.samples.iter().find(|(at, _)| *at >= from)?;
        let (last_at, last) = self.samples.iter().rev().find(|(at, _)| *at <= to)?;
        let seconds = (*last_at - *first_at).to_std().ok()?.as_secs_f64();
        (seconds > 0.0).then(|| Overlap {
            seconds,
            versions: last.saturating_sub(*first),
        })
    }
}

/// How often the machine's CPU counters are read while the fleet runs.
pub const CPU_SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// Reads the machine's CPU counters, and the double's deleted versions when given its counter,
/// every [`CPU_SAMPLE_EVERY`] until `stop` fires (or is dropped), then returns both traces.
async fn sample(
    mut stop: tokio::sync::oneshot::Receiver<()>,
    deleted: Option<DeletedCounter>,
) -> (CpuTrace, DeletedTrace) {
    let mut cpu = CpuTrace::default();
    let mut counted = DeletedTrace::default();
    let mut every = tokio::time::interval(CPU_SAMPLE_EVERY);
    let mut stopped = false;
    loop {
        if let Ok(times) = CpuTimes::now() {
            cpu.push(Utc::now(), times);
        }
        if let Some(counter) = &deleted
            && let Ok(count) = counter.read().await
        {
            counted.push(Utc::now(), count);
        }
        if stopped {
            return (cpu, counted);
        }
        tokio::select! {
            _ = every.tick() => {}
            _ = &mut stop => stopped = true,
        }
    }
}

/// Deletes the communities served at `hosts` together on `workers` worker processes sharing
/// one task queue; `watched` are other processes (the S3 double …) whose CPU over the wall is
/// reported beside the workers'; `deleted`, the double's counter, sampled to measure the
/// aggregate while every tenant deletes at once.
pub async fn run_fleet(
    stack: &Stack,
    hosts: &[String],
    variant: &WorkflowVariant,
    workers: usize,
    watched: &[u32],
    deleted: Option<DeletedCounter>,
) -> Result<FleetTimings> {
    if workers == 0 || hosts.is_empty() {
        bail!("a fleet needs at least one worker and one tenant");
    }
    let task_queue = format!("bench-fleet-{}", Uuid::new_v4().simple());
    let mut processes = Vec::with_capacity(workers);
    for _ in 0..workers {
        processes.push(start_worker(variant, &task_queue)?);
    }
    let measured = drive(
        stack,
        hosts,
        variant,
        &task_queue,
        &processes,
        watched,
        deleted,
    )
    .await;
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
    deleted: Option<DeletedCounter>,
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
    let sampler = tokio::spawn(sample(stop, deleted));
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
    let (trace, counted) = sampler.await.context("the sampler")?;
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
    let mut tenant_stages = Vec::with_capacity(submitted.len());
    for request in &submitted {
        let inspection = stack.store.inspect(request.request_id).await?;
        let reached = |stage: &str| {
            inspection
                .checkpoints
                .iter()
                .find(|checkpoint| checkpoint.stage == stage)
                .map(|checkpoint| checkpoint.reached_at)
        };
        tenant_stages.push(
            match (
                reached("approved"),
                reached("drained"),
                reached("bindings_removed"),
            ) {
                (Some(approved), Some(drained), Some(bindings_removed)) => Some(TenantStages {
                    approved,
                    drained,
                    bindings_removed,
                }),
                _ => None,
            },
        );
        for checkpoint in &inspection.checkpoints {
            windows.note(&checkpoint.stage, checkpoint.reached_at);
        }
        runs.extend(run_chain(&request.workflow_id).await?);
    }
    let all_deleting = windows
        .overlap("drained", "bindings_removed")
        .and_then(|(from, to)| counted.within(from, to));
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
        tenant_stages,
        all_deleting,
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

    /// While every tenant was between `from` and `to`: from the last tenant reaching `from` to
    /// the first reaching `to`; `None` if that stretch is empty (some tenant was done before the
    /// last began) or a stage is missing.
    fn overlap(&self, from: &str, to: &str) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        let (_, last_in) = self.reached.get(from)?;
        let (first_out, _) = self.reached.get(to)?;
        (first_out > last_in).then_some((*last_in, *first_out))
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
        // Every tenant deleting at once: from the last drained (10) to the first done (30).
        assert_eq!(
            windows.overlap("drained", "bindings_removed"),
            Some((at(10), at(30)))
        );
        windows.note("drained", at(35));
        assert_eq!(
            windows.overlap("drained", "bindings_removed"),
            None,
            "a tenant that began after another finished: they never all deleted at once"
        );
    }

    #[test]
    fn the_overlap_counts_only_samples_inside_the_window() {
        let at = |ms: i64| {
            Utc.timestamp_millis_opt(1_000_000 + ms)
                .single()
                .unwrap_or_default()
        };
        let mut trace = DeletedTrace::default();
        for (ms, deleted) in [
            (0, 0),
            (250, 100),
            (500, 1_100),
            (750, 2_100),
            (1_000, 2_200),
        ] {
            trace.push(at(ms), deleted);
        }
        let overlap = trace.within(at(200), at(800)).expect("two samples inside");
        assert_eq!(overlap.versions, 2_000);
        assert!((overlap.seconds - 0.5).abs() < 1e-9);
        assert!((overlap.per_second() - 4_000.0).abs() < 1e-6);
        assert_eq!(
            trace.within(at(260), at(490)),
            None,
            "no sample inside: nothing measured"
        );
    }
}
