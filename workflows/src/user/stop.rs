//! Stopping a run (`user stop`, Ctrl-C or SIGTERM on `user run`, the `stop` signal from the Web
//! UI): the run in progress ends before it starts another handler or commits another transition.
//! A handler in flight is cancelled through its heartbeat, as reference 003's Ctrl-C interrupts
//! it, and `user.interrupt_stage` bumps the execution generation so that the cancelled attempt
//! can save nothing afterwards, whether its worker is alive or dead. The row stays current
//! (running, or completed when its result was saved first) and the next run resumes it, reusing a
//! saved result without running the handler again.

/// The contract of `user.interrupt_stage`, declared with every user activity.
pub use super::contracts::InterruptStage;
use super::contracts::StageRecord;
use super::messages::{RunOutcome, RunReport, UserPhase};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Payload of the `stop` update and signal.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopRequest {
    /// Who or what asked (`operator`, `SIGINT`, …), for the reader.
    #[serde(default)]
    pub requested_by: Option<String>,
}

/// Answer of the `stop` update.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum StopAnswer {
    /// A run was in progress; this is its report once it ended.
    Stopped {
        /// The stopped run's report.
        report: RunReport,
    },
    /// No run was in progress; nothing changed.
    NothingRunning {
        /// Where the workflow stands.
        phase: UserPhase,
    },
}

/// What the handler of the current row had done when the run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HandlerAtStop {
    /// The run stopped before it started the row's handler.
    NotStarted,
    /// The handler was in flight and was cancelled; the next run starts it again.
    Interrupted,
    /// The handler's result is saved; the next run commits its transition without running it.
    ResultSaved,
}

/// The outcome of a run stopped at `row` (None: before the first row existed).
pub fn stopped_at(row: Option<&StageRecord>, handler: HandlerAtStop) -> RunOutcome {
    RunOutcome::Stopped {
        stage_id: row.map(|r| r.id),
        stage: row.map(|r| r.stage.clone()),
        community_id: row.and_then(|r| r.community_id),
        handler,
    }
}

/// Input of `user.interrupt_stage`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterruptStageInput {
    /// The request.
    pub request_id: Uuid,
    /// The current row whose handler attempt the stop cancelled.
    pub stage_id: Uuid,
    /// Who asked for the stop, for the audit trail.
    pub requested_by: Option<String>,
}

/// Output of `user.interrupt_stage`: the row as the fence left it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterruptedStage {
    /// Whether the attempt saved the handler's result before the fence.
    pub result_saved: bool,
    /// The request's execution generation after the fence.
    pub exec_generation: i64,
}

impl InterruptedStage {
    /// What the handler had done when the run stopped.
    pub fn handler(&self) -> HandlerAtStop {
        if self.result_saved {
            HandlerAtStop::ResultSaved
        } else {
            HandlerAtStop::Interrupted
        }
    }
}
