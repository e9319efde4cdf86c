//! The report a run prints: the seed and the command that replays it, the fault timeline, each
//! deletion's outcome and time, the figures, and every violation.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use crate::run::{EndState, RunRecord};

/// The figures of a run.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Figures {
    /// Deletions run.
    pub deletions: usize,
    /// Completed (target erased and verified).
    pub completed: usize,
    /// Aborted.
    pub aborted: usize,
    /// Faults injected per kind.
    pub faults_by_kind: BTreeMap<String, usize>,
    /// Faults injected.
    pub faults: usize,
    /// Faults whose injection or healing failed.
    pub fault_errors: usize,
    /// Broken invariants.
    pub violations: usize,
    /// Time from the last fault healed to each request's end (0 when it ended earlier): median.
    pub recovery_median_ms: u64,
    /// The same: worst.
    pub recovery_worst_ms: u64,
    /// Serving writes admitted / refused / failed across all communities.
    pub serving_admitted: u64,
    /// Refused (fenced or quiescing: expected during a deletion).
    pub serving_refused: u64,
    /// Failed (a fault hit them).
    pub serving_failed: u64,
    /// Worker exits no fault caused.
    pub unplanned_worker_exits: usize,
}

/// The figures of `record`.
pub fn figures(record: &RunRecord) -> Figures {
    let ended = |state: fn(&EndState) -> bool| {
        record
            .deletions
            .iter()
            .filter(|d| d.end.as_ref().is_some_and(|e| state(&e.state)))
            .count()
    };
    let mut faults_by_kind = BTreeMap::new();
    for entry in &record.timeline {
        *faults_by_kind
            .entry(entry.fault.kind.to_string())
            .or_insert(0) += 1;
    }
    let mut recovery: Vec<u64> = record
        .deletions
        .iter()
        .filter_map(|d| d.end.as_ref())
        .map(|e| e.at_ms.saturating_sub(record.last_fault_healed_ms))
        .collect();
    recovery.sort_unstable();
    let totals = record.traffic.communities.iter().map(|c| c.totals);
    Figures {
        deletions: record.deletions.len(),
        completed: ended(|s| *s == EndState::Completed),
        aborted: ended(|s| *s == EndState::Aborted),
        faults: record.timeline.len(),
        fault_errors: record.timeline.iter().filter(|r| r.error.is_some()).count(),
        faults_by_kind,
        violations: record.violations.len(),
        recovery_median_ms: recovery.get(recovery.len() / 2).copied().unwrap_or(0),
        recovery_worst_ms: recovery.last().copied().unwrap_or(0),
        serving_admitted: totals.clone().map(|t| t.admitted).sum(),
        serving_refused: totals.clone().map(|t| t.refused).sum(),
        serving_failed: totals.map(|t| t.failed).sum(),
        unplanned_worker_exits: record.unplanned_worker_exits.len(),
    }
}

fn secs(ms: u64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

/// The human-readable report.
pub fn render(record: &RunRecord, replay: &str) -> String {
    let f = figures(record);
    let mut out = String::new();
    let _ = writeln!(out, "== chaos run, seed {} ==", record.schedule.seed);
    let _ = writeln!(out, "replay: {replay}");
    let _ = writeln!(
        out,
        "\n-- fault timeline (planned start, actual start .. healed) --"
    );
    for entry in &record.timeline {
        let fault = &entry.fault;
        let worker = if matches!(
            fault.kind,
            crate::schedule::FaultKind::WorkerKill | crate::schedule::FaultKind::WorkerTerm
        ) {
            format!(" worker {}", fault.worker)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "#{:<3} {:>7} {:>7} .. {:>7}  {}{worker}{}",
            fault.index,
            secs(fault.at_ms),
            secs(entry.began_ms),
            secs(entry.healed_ms),
            fault.kind,
            entry
                .error
                .as_ref()
                .map(|e| format!("  FAILED: {e}"))
                .unwrap_or_default()
        );
    }
    let _ = writeln!(out, "\n-- deletions --");
    for d in &record.deletions {
        let end = match &d.end {
            Some(end) => match &end.state {
                EndState::Completed => format!("completed at {}", secs(end.at_ms)),
                EndState::Aborted => format!("aborted at {}", secs(end.at_ms)),
                EndState::Blocked(reason) => format!("BLOCKED at {}: {reason}", secs(end.at_ms)),
            },
            None => "NO END".to_owned(),
        };
        let how = match d.plan.abort {
            Some(crate::schedule::AbortPoint::BeforeApproval) => "abort before approval".to_owned(),
            Some(crate::schedule::AbortPoint::AfterApproval) => {
                format!("approve by {:?}, then abort at once", d.plan.route)
            }
            None => format!("approve by {:?}", d.plan.route),
        };
        let _ = writeln!(
            out,
            "{:>3} {} [{how}] request {} submitted {} decided {} ({} send(s)) -> {end}{}",
            d.plan.index,
            d.target_host,
            d.request
                .as_ref()
                .map_or("-".to_owned(), |r| r.request_id.to_string()),
            d.submitted_ms.map_or("-".to_owned(), secs),
            d.decided_ms.map_or("-".to_owned(), secs),
            d.sends,
            d.driver_error
                .as_ref()
                .map(|e| format!("  DRIVER: {e}"))
                .unwrap_or_default()
        );
    }
    if !record.unplanned_worker_exits.is_empty() {
        let _ = writeln!(out, "\n-- worker exits no fault caused (restarted) --");
        for exit in &record.unplanned_worker_exits {
            let _ = writeln!(
                out,
                "worker {} at {}: {}",
                exit.worker,
                secs(exit.at_ms),
                exit.status
            );
        }
    }
    let _ = writeln!(out, "\n-- figures --");
    let _ = writeln!(
        out,
        "deletions {} (completed {}, aborted {}); faults injected {} ({} failed to inject or heal); violations {}",
        f.deletions, f.completed, f.aborted, f.faults, f.fault_errors, f.violations
    );
    let kinds: Vec<String> = f
        .faults_by_kind
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    let _ = writeln!(out, "faults by kind: {}", kinds.join(", "));
    let _ = writeln!(
        out,
        "time from the last fault healed ({}) to each request's end: median {}, worst {} (bound {})",
        secs(record.last_fault_healed_ms),
        secs(f.recovery_median_ms),
        secs(f.recovery_worst_ms),
        secs(record.end_bound_ms)
    );
    let _ = writeln!(
        out,
        "serving writes: {} admitted, {} refused (fenced), {} failed under faults; worker starts per slot {:?}",
        f.serving_admitted, f.serving_refused, f.serving_failed, record.worker_starts
    );
    if record.violations.is_empty() {
        let _ = writeln!(out, "\nno invariant violated");
    } else {
        let _ = writeln!(out, "\n-- VIOLATIONS ({}) --", record.violations.len());
        for v in &record.violations {
            let _ = writeln!(out, "[{}] {}: {}", v.invariant, v.subject, v.detail);
        }
        let _ = writeln!(out, "replay the same schedule with: {replay}");
    }
    out
}
