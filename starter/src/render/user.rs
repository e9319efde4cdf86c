//! The text of the `user` commands: the registered request, a request's snapshot (its row, its
//! approval and its stage rows in chain order), the request list, and the one line that says
//! how a run ended.

use activities::user::{StageRowView, UserRequestSummary, UserRequestView};
use workflows::user::{HandlerAtStop, Registration, RunOutcome, UserApprovalRecord};

use super::{Table, key_values, rfc3339_or_empty};

/// `user submit`: the registered request and its frozen inventory digest.
pub fn submitted_text(registration: &Registration) -> String {
    key_values(
        "user deletion submitted",
        &[
            ("request_id", registration.id.to_string()),
            ("workflow_id", registration.workflow_id.clone()),
            ("target", registration.target.clone()),
            ("inventory_digest", registration.inventory_digest.clone()),
        ],
    )
}

/// A request as Postgres holds it: its row, its approval, its stage rows (in chain order when
/// the chain is readable) and, when it is not, why (`unreadable`).
pub fn snapshot_text(
    request: Option<&UserRequestView>,
    approval: Option<&UserApprovalRecord>,
    stages: &[StageRowView],
    unreadable: Option<&str>,
) -> String {
    let mut out = String::new();
    if let Some(r) = request {
        let optional = |v: Option<String>| v.unwrap_or_default();
        out.push_str(&key_values(
            "request",
            &[
                ("request_id", r.id.to_string()),
                ("target", optional(r.target.clone())),
                ("stage", r.stage.clone()),
                ("requested_by", r.requested_by.clone()),
                ("inventory_digest", optional(r.inventory_digest.clone())),
                ("exec_generation", r.exec_generation.to_string()),
                ("retry_count", r.retry_count.to_string()),
                ("next_attempt_at", rfc3339_or_empty(r.next_attempt_at)),
                ("last_error", optional(r.last_error.clone())),
                ("completed_at", rfc3339_or_empty(r.completed_at)),
            ],
        ));
    }
    out.push('\n');
    match approval {
        Some(a) => out.push_str(&key_values(
            "approval",
            &[
                ("approved_by", a.approved_by.clone()),
                ("approved_at", a.approved_at.clone()),
                ("inventory_digest", a.inventory_digest.clone()),
            ],
        )),
        None => out.push_str("approval: none\n"),
    }
    out.push('\n');
    out.push_str(&stages_table(stages).render());
    if let Some(error) = unreadable {
        out.push_str(&format!("progress: unreadable: {error}\n"));
    }
    out
}

/// The stage rows, numbered in the order given, times of day to the millisecond.
fn stages_table(stages: &[StageRowView]) -> Table {
    let mut table = Table::new(
        format!("stages ({} rows)", stages.len()),
        &[
            "#",
            "id",
            "stage",
            "community",
            "status",
            "current",
            "attempt",
            "gen",
            "first_started_at",
            "started_at",
            "finished_at",
            "decision",
            "last_error",
        ],
    );
    for (n, row) in stages.iter().enumerate() {
        let time = |t: Option<chrono::DateTime<chrono::Utc>>| {
            t.map(|t| t.format("%H:%M:%S%.3f").to_string())
                .unwrap_or_default()
        };
        let decision = row
            .transition
            .as_ref()
            .and_then(|t| t.get("decision"))
            .and_then(|d| d.as_str())
            .unwrap_or_default()
            .to_string();
        table.row(vec![
            (n + 1).to_string(),
            row.id.to_string(),
            row.stage.clone(),
            row.community_id.map(|c| c.to_string()).unwrap_or_default(),
            row.status.clone(),
            row.is_current.to_string(),
            row.attempt.to_string(),
            row.exec_generation
                .map(|g| g.to_string())
                .unwrap_or_default(),
            time(row.first_started_at),
            time(row.started_at),
            time(row.finished_at),
            decision,
            row.last_error.clone().unwrap_or_default(),
        ]);
    }
    table
}

/// `user list`: one row a request, with its current stage and who approved it.
pub fn requests_text(requests: &[UserRequestSummary]) -> String {
    let mut table = Table::new(
        "user deletion requests",
        &[
            "request_id",
            "target",
            "stage",
            "current stage",
            "rows",
            "requested_by",
            "approved_by",
            "next_attempt_at",
            "blocked",
            "created_at",
        ],
    );
    for r in requests {
        let current = match (&r.current_stage, r.current_community) {
            (Some(stage), Some(community)) => format!("{stage} in {community}"),
            (Some(stage), None) => stage.clone(),
            (None, _) => String::new(),
        };
        table.row(vec![
            r.id.to_string(),
            r.target.clone().unwrap_or_default(),
            r.stage.clone(),
            current,
            r.stage_rows.to_string(),
            r.requested_by.clone(),
            r.approved_by.clone().unwrap_or_default(),
            rfc3339_or_empty(r.next_attempt_at),
            r.blocked_reason.clone().unwrap_or_default(),
            r.created_at.to_rfc3339(),
        ]);
    }
    table.render()
}

/// One line an operator can act on.
pub fn describe_outcome(outcome: &RunOutcome) -> String {
    match outcome {
        RunOutcome::Paused {
            stage,
            community_id,
            ..
        } => match community_id {
            Some(c) => format!("paused; current stage {stage} in {c} (pending)"),
            None => format!("paused; current stage {stage} (pending)"),
        },
        RunOutcome::HandlerBudgetReached {
            limit,
            stage,
            community_id,
            ..
        } => match community_id {
            Some(c) => format!(
                "paused after {limit} handlers, the budget of one run; current stage {stage} in {c} (pending); run again to continue"
            ),
            None => format!(
                "paused after {limit} handlers, the budget of one run; current stage {stage} (pending); run again to continue"
            ),
        },
        RunOutcome::Completed => "completed".into(),
        RunOutcome::AlreadyCompleted => "already completed; nothing changed".into(),
        RunOutcome::HandlerFailed {
            stage,
            error,
            retry,
            ..
        } => format!(
            "handler {stage} failed: {error}; retry {} saved, next attempt at {}",
            retry.retry_count, retry.next_attempt_at
        ),
        RunOutcome::RetryNotDue { retry } => format!(
            "run refused: the saved retry deadline has not passed; next attempt at {}",
            retry.next_attempt_at
        ),
        RunOutcome::RunInProgress => {
            "run refused: another run is in progress; wait for it to pause, or stop it with \
             `buzz-deletion user stop ID`"
                .into()
        }
        RunOutcome::NotApproved => "run refused: the request is not approved".into(),
        RunOutcome::Stopped {
            stage,
            community_id,
            handler,
            ..
        } => {
            let at = match (stage, community_id) {
                (Some(stage), Some(c)) => format!("{stage} in {c}"),
                (Some(stage), None) => stage.clone(),
                (None, _) => "no stage row yet".into(),
            };
            let handler = match handler {
                HandlerAtStop::NotStarted => "its handler had not started in this run",
                HandlerAtStop::Interrupted => {
                    "its handler was interrupted; the next run starts it again"
                }
                HandlerAtStop::ResultSaved => {
                    "its handler's result is saved; the next run commits its transition without \
                     running it again"
                }
            };
            format!("stopped; current stage {at} ({handler}); `user run` continues from it")
        }
        RunOutcome::Blocked { reason } => format!("blocked: {reason}"),
    }
}
