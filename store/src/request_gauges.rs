//! The request-state sample behind the worker's alert gauges: how many requests are in each
//! state, how long the longest-blocked one has been blocked, and how long the longest-stalled one
//! has gone without progress. One read-only query; the worker role's SELECT on `deletion.*`
//! (migration 0007) is all it needs.
//!
//! States (`state` label), decided in this order:
//! - `completed` / `aborted`: ended (`completed_at` set; `aborted` when the stage says so);
//! - `blocked`: waiting for an operator's unblock (`blocked_reason` set);
//! - `awaiting_approval`: inventory frozen (stage `inventoried`), waiting for a human;
//! - `retry_wait`: a user deletion waiting for its next attempt after a failed stage;
//! - `active`: every other open request (a worker should be moving it).
//!
//! "Last progress" of an `active` or `retry_wait` request is the latest of: its creation, an
//! audit event that is not a refusal or a failure (a stage reached, an approval, an unblock, …),
//! a destructive-manifest chunk stamped, a row-purge batch committed, a user stage row created or
//! finished. `requests.updated_at` is NOT used: every activity attempt's claim bumps it, so a
//! deletion failing and retrying forever would look alive.

use sqlx::FromRow;

use super::{Store, StoreResult};
use crate::gauge_series::{Series, count_of, fill, whole_seconds, zero_grid};

/// The `kind` label values, as `deletion.requests.kind` spells them.
pub const KINDS: [&str; 2] = ["community", "user"];

/// The `state` label values (see the module documentation).
pub const STATES: [&str; 6] = [
    "awaiting_approval",
    "active",
    "retry_wait",
    "blocked",
    "completed",
    "aborted",
];

/// One `(kind, state)` series of the request-count gauge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateCount {
    /// One of [`KINDS`].
    pub kind: &'static str,
    /// One of [`STATES`].
    pub state: &'static str,
    /// Requests of that kind in that state.
    pub requests: u64,
}

/// One sample of the request states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestGauges {
    /// Every [`KINDS`] × [`STATES`] pair, in that order, zero where no request is: a state that
    /// empties must read 0, not keep its last count.
    pub counts: Vec<StateCount>,
    /// Whole seconds the longest-blocked open request has been blocked (0 if none is).
    pub oldest_blocked_secs: u64,
    /// Whole seconds since the last progress of the longest-stalled `active` or `retry_wait`
    /// request (0 if none is).
    pub oldest_stalled_secs: u64,
}

/// One row of the query: a `(kind, state)` group with its count and oldest ages in seconds.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct StateRow {
    /// `deletion.requests.kind`.
    pub kind: String,
    /// The derived state.
    pub state: String,
    /// Requests in the group.
    pub requests: i64,
    /// Longest time blocked in the group, seconds (blocked groups only).
    pub oldest_blocked: Option<f64>,
    /// Longest time without progress in the group, seconds (active and retry_wait groups only).
    pub oldest_stalled: Option<f64>,
}

const SAMPLE_SQL: &str = r#"
WITH classified AS (
    SELECT r.id, r.kind, r.created_at,
           COALESCE(r.blocked_at, r.updated_at) AS blocked_since,
           CASE
               WHEN r.completed_at IS NOT NULL AND r.stage = 'aborted' THEN 'aborted'
               WHEN r.completed_at IS NOT NULL THEN 'completed'
               WHEN r.blocked_reason IS NOT NULL THEN 'blocked'
               WHEN r.stage = 'inventoried' THEN 'awaiting_approval'
               WHEN r.stage = 'retry_wait' THEN 'retry_wait'
               ELSE 'active'
           END AS state
    FROM deletion.requests r
),
aged AS (
    SELECT c.kind, c.state,
           CASE WHEN c.state = 'blocked'
                THEN EXTRACT(EPOCH FROM now() - c.blocked_since)::float8 END AS blocked_secs,
           CASE WHEN c.state IN ('active', 'retry_wait')
                THEN EXTRACT(EPOCH FROM now() - GREATEST(
                    c.created_at,
                    (SELECT max(a.at) FROM deletion.audit_events a
                      WHERE a.request_id = c.id
                        AND a.event !~ '(rejected|refused|failed)$'),
                    (SELECT max(m.deleted_at) FROM deletion.manifest_chunks m
                      WHERE m.request_id = c.id),
                    (SELECT max(p.updated_at) FROM deletion.purge_progress p
                      WHERE p.request_id = c.id),
                    (SELECT max(GREATEST(h.created_at, h.finished_at))
                       FROM deletion.user_stage_history h WHERE h.request_id = c.id)
                ))::float8 END AS stalled_secs
    FROM classified c
)
SELECT kind, state, count(*)::int8 AS requests,
       max(blocked_secs) AS oldest_blocked, max(stalled_secs) AS oldest_stalled
FROM aged
GROUP BY kind, state
"#;

impl Series for StateCount {
    fn zero(kind: &'static str, state: &'static str) -> Self {
        StateCount {
            kind,
            state,
            requests: 0,
        }
    }

    fn labels(&self) -> (&str, &str) {
        (self.kind, self.state)
    }

    fn count(&self) -> u64 {
        self.requests
    }

    fn set_count(&mut self, count: u64) {
        self.requests = count;
    }
}

impl RequestGauges {
    /// The count of the `(kind, state)` series, `None` for a pair outside [`KINDS`] × [`STATES`].
    pub fn count(&self, kind: &str, state: &str) -> Option<u64> {
        count_of(&self.counts, kind, state)
    }

    /// Folds the query's rows into a full sample. A kind or state this binary does not know is
    /// refused as corrupt rather than silently dropped.
    pub fn from_rows(rows: &[StateRow]) -> StoreResult<RequestGauges> {
        let mut counts: Vec<StateCount> = zero_grid(&KINDS, &STATES);
        let mut oldest_blocked: f64 = 0.0;
        let mut oldest_stalled: f64 = 0.0;
        for row in rows {
            let labels = (row.kind.as_str(), row.state.as_str());
            fill(&mut counts, labels, row.requests, "request state sample")?;
            oldest_blocked = oldest_blocked.max(row.oldest_blocked.unwrap_or(0.0));
            oldest_stalled = oldest_stalled.max(row.oldest_stalled.unwrap_or(0.0));
        }
        Ok(RequestGauges {
            counts,
            oldest_blocked_secs: whole_seconds(oldest_blocked),
            oldest_stalled_secs: whole_seconds(oldest_stalled),
        })
    }
}

impl Store {
    /// Samples the request states (one read-only query).
    pub async fn sample_request_gauges(&self) -> StoreResult<RequestGauges> {
        let rows: Vec<StateRow> = sqlx::query_as(SAMPLE_SQL).fetch_all(self.pool()).await?;
        RequestGauges::from_rows(&rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: &str, state: &str, requests: i64, blocked: f64, stalled: f64) -> StateRow {
        StateRow {
            kind: kind.to_owned(),
            state: state.to_owned(),
            requests,
            oldest_blocked: (blocked > 0.0).then_some(blocked),
            oldest_stalled: (stalled > 0.0).then_some(stalled),
        }
    }

    fn count(gauges: &RequestGauges, kind: &str, state: &str) -> u64 {
        gauges
            .count(kind, state)
            .unwrap_or_else(|| panic!("no {kind}/{state} series in {gauges:?}"))
    }

    #[test]
    fn an_empty_database_reports_every_series_at_zero() {
        let gauges = RequestGauges::from_rows(&[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(gauges.counts.len(), KINDS.len() * STATES.len());
        assert!(gauges.counts.iter().all(|c| c.requests == 0), "{gauges:?}");
        assert_eq!(
            (gauges.oldest_blocked_secs, gauges.oldest_stalled_secs),
            (0, 0)
        );
    }

    #[test]
    fn counts_land_on_their_series_and_the_oldest_ages_are_the_maxima() {
        let gauges = RequestGauges::from_rows(&[
            row("community", "blocked", 2, 3600.9, 0.0),
            row("user", "blocked", 1, 7200.2, 0.0),
            row("community", "active", 3, 0.0, 90.5),
            row("user", "retry_wait", 1, 0.0, 600.0),
            row("user", "completed", 7, 0.0, 0.0),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(count(&gauges, "community", "blocked"), 2);
        assert_eq!(count(&gauges, "user", "blocked"), 1);
        assert_eq!(count(&gauges, "community", "active"), 3);
        assert_eq!(count(&gauges, "user", "retry_wait"), 1);
        assert_eq!(count(&gauges, "user", "completed"), 7);
        assert_eq!(count(&gauges, "community", "completed"), 0);
        assert_eq!(gauges.oldest_blocked_secs, 7200);
        assert_eq!(gauges.oldest_stalled_secs, 600);
    }

    #[test]
    fn an_unknown_state_is_refused_not_dropped() {
        let error = RequestGauges::from_rows(&[row("community", "paused", 1, 0.0, 0.0)])
            .err()
            .unwrap_or_else(|| panic!("an unknown state must be refused"));
        assert!(error.to_string().contains("paused"), "{error}");
    }
}
