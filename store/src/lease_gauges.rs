//! The serving-write lease sample behind the worker's lease gauges, and the bounded reaper the
//! worker runs on the same timer (`worker::lease_reaper`).
//!
//! States of an unreaped lease row (`state` label), decided in this order:
//! - `live`: unreleased and unexpired — a serving write may be in flight; a fence waits for it;
//! - `stalled`: unreleased and expired — its writer stopped renewing without releasing (crashed,
//!   killed, partitioned); its write may still land until `expires_at` plus the
//!   protected-operation bound, and a drain waits that long;
//! - `ended`: released, kept until it is past the same window.
//!
//! A row is reapable once it is released or expired *and* past `expires_at` + the bound
//! ([`serving::MAX_PROTECTED_OPERATION`], 30 s, the stalled-writer window); migration 0019
//! deletes at most a batch of them per call, oldest first. A stalled lease older than the
//! window that is still there means the reaper is not running: `oldest_stalled_secs` (time since
//! the oldest stalled lease expired) is what the chart's alert watches.

use sqlx::FromRow;

use super::{Store, StoreError, StoreResult, count_u64};
use crate::gauge_series::{Series, count_of, fill, unknown_series, whole_seconds, zero_grid};

/// The `kind` label values: a lease made for a user (`user_pubkey` set) or a community-only one.
pub const LEASE_KINDS: [&str; 2] = ["community", "user"];

/// The `state` label values (see the module documentation).
pub const LEASE_STATES: [&str; 3] = ["live", "stalled", "ended"];

/// What a refused sample row is reported as.
const SAMPLE: &str = "serving-write lease sample";

/// Largest batch one reaping call accepts (migration 0019 refuses more).
pub const MAX_REAP_BATCH: u32 = 100_000;

/// One `(kind, state)` series of the lease gauge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseCount {
    /// One of [`LEASE_KINDS`].
    pub kind: &'static str,
    /// One of [`LEASE_STATES`].
    pub state: &'static str,
    /// Lease rows of that kind in that state.
    pub leases: u64,
}

/// One sample of the lease table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseGauges {
    /// Every [`LEASE_KINDS`] × [`LEASE_STATES`] pair, in that order, zero where no row is.
    pub counts: Vec<LeaseCount>,
    /// Whole seconds since the oldest stalled lease of each kind expired, in [`LEASE_KINDS`]
    /// order (0 where none is stalled).
    pub oldest_stalled_secs: [u64; 2],
}

impl Series for LeaseCount {
    fn zero(kind: &'static str, state: &'static str) -> Self {
        LeaseCount {
            kind,
            state,
            leases: 0,
        }
    }

    fn labels(&self) -> (&str, &str) {
        (self.kind, self.state)
    }

    fn count(&self) -> u64 {
        self.leases
    }

    fn set_count(&mut self, count: u64) {
        self.leases = count;
    }
}

impl LeaseGauges {
    /// The count of the `(kind, state)` series, `None` for a pair outside the label sets.
    pub fn count(&self, kind: &str, state: &str) -> Option<u64> {
        count_of(&self.counts, kind, state)
    }

    /// Seconds since the oldest stalled lease of `kind` expired, `None` for an unknown kind.
    pub fn oldest_stalled(&self, kind: &str) -> Option<u64> {
        LEASE_KINDS
            .iter()
            .position(|k| *k == kind)
            .map(|i| self.oldest_stalled_secs[i])
    }

    /// Folds the query's rows into a full sample; an unknown kind or state is refused as
    /// corrupt rather than silently dropped.
    pub fn from_rows(rows: &[LeaseRow]) -> StoreResult<LeaseGauges> {
        let mut counts: Vec<LeaseCount> = zero_grid(&LEASE_KINDS, &LEASE_STATES);
        let mut oldest_stalled = [0_u64; 2];
        for row in rows {
            let labels = (row.kind.as_str(), row.state.as_str());
            fill(&mut counts, labels, row.leases, SAMPLE)?;
            let kind = LEASE_KINDS
                .iter()
                .position(|k| *k == row.kind)
                .ok_or_else(|| unknown_series(SAMPLE, &row.kind, &row.state))?;
            let age = whole_seconds(row.oldest_expired_secs.unwrap_or(0.0));
            oldest_stalled[kind] = oldest_stalled[kind].max(age);
        }
        Ok(LeaseGauges {
            counts,
            oldest_stalled_secs: oldest_stalled,
        })
    }
}

/// Lease rows deleted by one bounded reaping call, per kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReapedLeases {
    /// Community-only leases reaped.
    pub community: u64,
    /// Per-user leases reaped.
    pub user: u64,
}

impl ReapedLeases {
    /// Both kinds together.
    pub fn total(&self) -> u64 {
        self.community + self.user
    }
}

/// One row of the sample query: a `(kind, state)` group.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct LeaseRow {
    /// `community` or `user`.
    pub kind: String,
    /// `live`, `stalled` or `ended`.
    pub state: String,
    /// Rows in the group.
    pub leases: i64,
    /// Seconds since the oldest row of a `stalled` group expired.
    pub oldest_expired_secs: Option<f64>,
}

const SAMPLE_SQL: &str = r#"
SELECT CASE WHEN l.user_pubkey IS NULL THEN 'community' ELSE 'user' END AS kind,
       CASE WHEN l.released_at IS NOT NULL THEN 'ended'
            WHEN l.expires_at > clock_timestamp() THEN 'live'
            ELSE 'stalled' END AS state,
       count(*)::int8 AS leases,
       max(EXTRACT(EPOCH FROM clock_timestamp() - l.expires_at)::float8)
           FILTER (WHERE l.released_at IS NULL AND l.expires_at <= clock_timestamp())
           AS oldest_expired_secs
FROM deletion.serving_write_leases l
GROUP BY 1, 2
"#;

impl Store {
    /// Samples the lease table (one read-only query).
    pub async fn sample_lease_gauges(&self) -> StoreResult<LeaseGauges> {
        let rows: Vec<LeaseRow> = sqlx::query_as(SAMPLE_SQL).fetch_all(self.pool()).await?;
        LeaseGauges::from_rows(&rows)
    }

    /// Deletes at most `batch` lease rows that are released or expired and past the
    /// stalled-writer window, oldest first (migration 0019); returns how many of each kind.
    /// Idempotent, and safe to run from several workers at once (rows another reaper holds are
    /// skipped). `batch` must be 1 to [`MAX_REAP_BATCH`].
    pub async fn reap_ended_serving_write_leases(&self, batch: u32) -> StoreResult<ReapedLeases> {
        if batch == 0 || batch > MAX_REAP_BATCH {
            return Err(StoreError::InvalidInput {
                field: "batch",
                reason: format!("a reaping batch is 1 to {MAX_REAP_BATCH} rows, not {batch}"),
            });
        }
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT kind, reaped FROM deletion.reap_ended_serving_write_leases($1)")
                .bind(i32::try_from(batch).unwrap_or(i32::MAX))
                .fetch_all(self.pool())
                .await?;
        let mut reaped = ReapedLeases::default();
        for (kind, count) in rows {
            match kind.as_str() {
                "community" => reaped.community += count_u64(count),
                "user" => reaped.user += count_u64(count),
                other => {
                    return Err(StoreError::Corrupt {
                        what: "lease reaping result",
                        reason: format!("unknown kind {other:?}"),
                    });
                }
            }
        }
        Ok(reaped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: &str, state: &str, leases: i64, expired: Option<f64>) -> LeaseRow {
        LeaseRow {
            kind: kind.to_owned(),
            state: state.to_owned(),
            leases,
            oldest_expired_secs: expired,
        }
    }

    #[test]
    fn an_empty_table_reports_every_series_at_zero() {
        let gauges = LeaseGauges::from_rows(&[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(gauges.counts.len(), LEASE_KINDS.len() * LEASE_STATES.len());
        assert!(gauges.counts.iter().all(|c| c.leases == 0), "{gauges:?}");
        assert_eq!(gauges.oldest_stalled_secs, [0, 0]);
    }

    #[test]
    fn rows_fill_their_series_and_the_oldest_stall_per_kind() {
        let gauges = LeaseGauges::from_rows(&[
            row("community", "live", 3, None),
            row("community", "stalled", 2, Some(95.7)),
            row("user", "stalled", 1, Some(12.2)),
            row("user", "ended", 7, None),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(gauges.count("community", "live"), Some(3));
        assert_eq!(gauges.count("community", "stalled"), Some(2));
        assert_eq!(gauges.count("community", "ended"), Some(0));
        assert_eq!(gauges.count("user", "live"), Some(0));
        assert_eq!(gauges.count("user", "ended"), Some(7));
        assert_eq!(gauges.oldest_stalled("community"), Some(95));
        assert_eq!(gauges.oldest_stalled("user"), Some(12));
        assert_eq!(gauges.count("user", "reaped"), None);
    }

    #[test]
    fn an_unknown_kind_or_state_is_refused() {
        for bad in [
            row("tenant", "live", 1, None),
            row("user", "zombie", 1, None),
        ] {
            assert!(LeaseGauges::from_rows(&[bad]).is_err());
        }
    }
}
