//! The request row's lifecycle (`deletion.requests.stage`) cross-checked against the position the
//! stage history reconstructs to. Both are written in the same transactions, so they always
//! agree; when they do not, one of them was changed behind the workflow's back, and the run
//! stops with the disagreement instead of reporting progress (or completion) that only one of
//! them shows.

use super::history::Position;

/// Lifecycles a request with no stage row may have: approved, waiting for its first run.
const NOT_STARTED: &[&str] = &["approved"];
/// Lifecycles of a request whose chain ends in a current row.
const CURRENT: &[&str] = &["running", "retry_wait"];
/// Lifecycles of a request whose chain is finished.
const FINISHED: &[&str] = &["completed"];

/// What is wrong when the request row's lifecycle `request_stage` disagrees with `position`.
pub fn lifecycle_problem(request_stage: &str, position: Position) -> Option<String> {
    let (expected, what) = match position {
        Position::NotStarted => (
            NOT_STARTED,
            "has no stage row (starting it would be a second gate, not a resumption)",
        ),
        Position::Current => (CURRENT, "ends in a current stage row"),
        Position::Finished => (
            FINISHED,
            "is finished (its last row left without a successor)",
        ),
    };
    (!expected.contains(&request_stage)).then(|| {
        format!(
            "the request row's lifecycle is '{request_stage}', but its stage history {what}, which \
             fits only {}: one of them was changed outside the workflow; nothing ran. Compare \
             `buzz-deletion user status` with the audit trail, restore the row that was changed, \
             then run again",
            expected
                .iter()
                .map(|s| format!("'{s}'"))
                .collect::<Vec<_>>()
                .join(" or ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lifecycles_the_workflow_writes_agree_with_their_positions() {
        assert_eq!(lifecycle_problem("approved", Position::NotStarted), None);
        assert_eq!(lifecycle_problem("running", Position::Current), None);
        assert_eq!(lifecycle_problem("retry_wait", Position::Current), None);
        assert_eq!(lifecycle_problem("completed", Position::Finished), None);
    }

    #[test]
    fn a_finished_chain_is_not_reported_completed_unless_the_row_says_so() {
        for stage in [
            "running",
            "retry_wait",
            "approved",
            "aborted",
            "inventoried",
        ] {
            let problem = lifecycle_problem(stage, Position::Finished).unwrap_or_default();
            assert!(
                problem.contains(stage) && problem.contains("finished"),
                "{problem}"
            );
        }
    }

    #[test]
    fn a_started_request_with_empty_history_is_refused_not_gated_again() {
        for stage in ["running", "retry_wait", "completed", "aborted"] {
            let problem = lifecycle_problem(stage, Position::NotStarted).unwrap_or_default();
            assert!(problem.contains("second gate"), "{problem}");
        }
    }

    #[test]
    fn a_current_row_of_a_completed_or_aborted_request_is_refused() {
        for stage in ["completed", "aborted", "approved"] {
            assert!(
                lifecycle_problem(stage, Position::Current).is_some(),
                "{stage}"
            );
        }
    }
}
