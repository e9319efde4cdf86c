//! A serving-path simulator: live relay traffic against communities, to prove a deletion's fence
//! holds while the serving path keeps writing (DESIGN 2).
//!
//! For each host, a loop starts up to `rate_per_host` writes a second (at most
//! `max_in_flight_per_host` at once) until the duration elapses or the caller says stop, rotating
//! through rows (plain SQL), new object keys, new versions of existing keys and Redis keys; every
//! external write runs under its own serving-write lease. Each write ends admitted, refused
//! (the community is quiescing or fenced: expected during a deletion, not an error) or failed, and
//! the per-community counts come back as a [`SimulationReport`]. With `record_limit > 0` the exact
//! admitted writes are kept too, so [`missing_admitted_writes`] can prove none was lost.
//!
//! Memory is bounded by the recording limit plus one in-flight write per slot, however long the
//! simulation runs.

mod check;
mod report;
mod writes;

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use activities::redis::{Cache, CacheError};
use activities::s3::{ObjectStore, ObjectStoreError};
use activities::store::{Store, StoreError, validate_user_pubkey};
use serving::ServingLeaseConfig;

use report::AuthoredStart;

pub use check::{MissingWrites, missing_admitted_writes};
pub use report::{
    AdmittedRow, AdmittedWrite, AdmittedWrites, AuthoredOutcome, AuthoredWrite, CommunityReport,
    CountsByKind, RowTable, SimulationReport, StopReason, UnconfirmedWrite, WriteCounts, WriteKind,
    WriteOutcome,
};
pub use writes::HostWriter;

/// Keys remembered per host as targets for new versions: the most recent new objects.
const VERSION_TARGETS: usize = 32;

/// What to simulate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimulationPlan {
    /// Community hosts to serve; each must exist.
    pub hosts: Vec<String>,
    /// Writes started per second per host (at least 1).
    pub rate_per_host: u32,
    /// Stop after this long; `None` runs until the caller's stop signal.
    pub duration: Option<Duration>,
    /// Writes in flight at once per host (at least 1).
    pub max_in_flight_per_host: usize,
    /// Admitted writes recorded per community (0: count only).
    pub record_limit: usize,
    /// Lease timing and owner of this serving process.
    pub lease: ServingLeaseConfig,
    /// Users (64-hex pubkeys) to write as; write `seq` of a host is authored by
    /// `authors[seq % len]`: its row is an event by them, its object write a media upload by them
    /// and its cache write a per-user key, each external write under a per-user lease. Empty:
    /// anonymous traffic (events and memberships of fresh pubkeys, community leases).
    pub authors: Vec<String>,
}

impl SimulationPlan {
    /// A plan for `hosts` at `rate_per_host` with four writes in flight per host, recording
    /// nothing, with the default lease configuration.
    pub fn new(hosts: Vec<String>, rate_per_host: u32, duration: Option<Duration>) -> Self {
        SimulationPlan {
            hosts,
            rate_per_host,
            duration,
            max_in_flight_per_host: 4,
            record_limit: 0,
            lease: ServingLeaseConfig::default(),
            authors: Vec::new(),
        }
    }

    /// The PostgreSQL connections the plan can have busy at once: each write in flight holds at
    /// most two (its own statement, and its lease's heartbeat renewing beside it), plus one for
    /// the host lookups. A serving pool this large, opened before the first write, never makes
    /// a write wait for a connection to free up or to be opened on a loaded server, so a slow
    /// database shows as slow writes, never as writes failed by the pool's timeout.
    pub fn connections_needed(&self) -> u32 {
        let writes = self.hosts.len().saturating_mul(self.max_in_flight_per_host);
        u32::try_from(writes.saturating_mul(2).saturating_add(1)).unwrap_or(u32::MAX)
    }

    fn validate(&self) -> Result<(), SimulationError> {
        let invalid = |reason: &str| {
            Err(SimulationError::InvalidPlan {
                reason: reason.to_owned(),
            })
        };
        if self.hosts.is_empty() {
            return invalid("no host to serve");
        }
        if self.rate_per_host == 0 {
            return invalid("the rate must be at least one write per second per host");
        }
        if self.max_in_flight_per_host == 0 {
            return invalid("at least one write per host must be allowed in flight");
        }
        for author in &self.authors {
            if let Err(error) = validate_user_pubkey("author", author) {
                return invalid(&error.to_string());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod plan_tests {
    use super::*;

    #[test]
    fn the_pool_covers_every_write_in_flight_and_its_heartbeat() {
        let mut plan = SimulationPlan::new(vec!["a".into(), "b".into(), "c".into()], 50, None);
        assert_eq!(plan.connections_needed(), 3 * 4 * 2 + 1);
        plan.max_in_flight_per_host = 1;
        assert_eq!(plan.connections_needed(), 7);
    }
}

/// Why a simulation could not run or a check could not complete.
#[derive(Debug, thiserror::Error)]
pub enum SimulationError {
    /// The plan cannot run.
    #[error("invalid simulation plan: {reason}")]
    InvalidPlan {
        /// What is wrong.
        reason: String,
    },
    /// No community is served under a host of the plan.
    #[error(
        "no community is served under host {host:?}: create it with `buzz-deletion demo seed --host {host}`"
    )]
    UnknownHost {
        /// The host.
        host: String,
    },
    /// The run kept no admitted writes to check.
    #[error("the simulation recorded no admitted writes for {host}: run it with a record limit")]
    NotRecorded {
        /// The host.
        host: String,
    },
    /// Postgres.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// S3.
    #[error(transparent)]
    Objects(#[from] ObjectStoreError),
    /// Redis.
    #[error(transparent)]
    Cache(#[from] CacheError),
}

/// Serves every host of `plan` until its duration elapses or `stop` completes, then waits for the
/// writes in flight and reports what each community saw.
pub async fn simulate(
    store: &Store,
    objects: &ObjectStore,
    cache: &Cache,
    plan: &SimulationPlan,
    stop: impl Future<Output = ()>,
) -> Result<SimulationReport, SimulationError> {
    plan.validate()?;
    let mut writers = Vec::with_capacity(plan.hosts.len());
    let run_tag = Uuid::new_v4().simple().to_string();
    for host in &plan.hosts {
        let community = store
            .community_by_host(host)
            .await?
            .ok_or_else(|| SimulationError::UnknownHost { host: host.clone() })?;
        let writer = HostWriter {
            store: store.clone(),
            objects: objects.clone(),
            cache: cache.clone(),
            lease: plan.lease.clone(),
            community_id: community.id,
            run_tag: run_tag.clone(),
            authors: plan.authors.clone(),
        };
        writers.push((host.clone(), writer));
    }

    let started = tokio::time::Instant::now();
    let halt = CancellationToken::new();
    let mut hosts = Vec::with_capacity(writers.len());
    for (host, writer) in writers {
        let pace = HostPace {
            period: Duration::from_secs(1) / plan.rate_per_host,
            max_in_flight: plan.max_in_flight_per_host,
            record_limit: plan.record_limit,
        };
        hosts.push(tokio::spawn(serve_host(host, writer, pace, halt.clone())));
    }

    let elapsed = async {
        match plan.duration {
            Some(duration) => tokio::time::sleep(duration).await,
            None => std::future::pending().await,
        }
    };
    let stopped_by = tokio::select! {
        () = elapsed => StopReason::Duration,
        () = stop => StopReason::Requested,
    };
    halt.cancel();

    let mut communities = Vec::with_capacity(hosts.len());
    for (handle, host) in hosts.into_iter().zip(&plan.hosts) {
        match handle.await {
            Ok(report) => communities.push(report),
            Err(error) => {
                // The host loop itself never panics; if it did, say so rather than hide the host.
                let mut report = CommunityReport::new(host.clone(), Uuid::nil(), 0);
                report.record_lost_task(format!("host loop ended abnormally: {error}"));
                communities.push(report);
            }
        }
    }
    Ok(SimulationReport {
        rate_per_host: plan.rate_per_host,
        elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        stopped_by,
        communities,
    })
}

/// How fast one host writes.
#[derive(Debug, Clone, Copy)]
struct HostPace {
    period: Duration,
    max_in_flight: usize,
    record_limit: usize,
}

/// One host's serving loop: starts a write every `period` (never more than `max_in_flight` at
/// once) until `halt`, then lets the writes in flight finish so every started write is counted.
async fn serve_host(
    host: String,
    writer: HostWriter,
    pace: HostPace,
    halt: CancellationToken,
) -> CommunityReport {
    let mut state = HostState {
        report: CommunityReport::new(host, writer.community_id, pace.record_limit),
        version_targets: VecDeque::with_capacity(VERSION_TARGETS),
        record_limit: pace.record_limit,
    };
    let writer = Arc::new(writer);
    let mut in_flight: JoinSet<(WriteKind, Option<AuthoredStart>, WriteOutcome)> = JoinSet::new();

    let mut ticks = tokio::time::interval(pace.period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seq: u64 = 0;
    'serving: loop {
        tokio::select! {
            biased;
            () = halt.cancelled() => break 'serving,
            _ = ticks.tick() => {}
        }
        while let Some(finished) = in_flight.try_join_next() {
            state.absorb(finished);
        }
        while in_flight.len() >= pace.max_in_flight {
            tokio::select! {
                biased;
                () = halt.cancelled() => break 'serving,
                Some(finished) = in_flight.join_next() => state.absorb(finished),
            }
        }
        let kind = WriteKind::for_seq(seq);
        let existing_key = (kind == WriteKind::NewVersion)
            .then(|| state.version_target(seq))
            .flatten();
        let authored = writer.author(seq).map(|author| AuthoredStart {
            seq,
            kind,
            author: author.to_owned(),
            started_at: chrono::Utc::now(),
        });
        let writer = Arc::clone(&writer);
        in_flight.spawn(async move {
            let outcome = writer.write(kind, seq, existing_key).await;
            (kind, authored, outcome)
        });
        seq += 1;
    }
    while let Some(finished) = in_flight.join_next().await {
        state.absorb(finished);
    }
    state.report
}

/// What one host loop accumulates.
struct HostState {
    report: CommunityReport,
    /// Recently admitted new keys, the targets of new-version writes.
    version_targets: VecDeque<String>,
    record_limit: usize,
}

impl HostState {
    /// Counts a finished write; an admitted new key becomes a target for later new versions.
    fn absorb(
        &mut self,
        finished: Result<(WriteKind, Option<AuthoredStart>, WriteOutcome), tokio::task::JoinError>,
    ) {
        match finished {
            Ok((kind, authored, outcome)) => {
                if let (WriteKind::NewObject, WriteOutcome::Admitted(AdmittedWrite::Object(v))) =
                    (kind, &outcome)
                {
                    if self.version_targets.len() == VERSION_TARGETS {
                        self.version_targets.pop_front();
                    }
                    self.version_targets.push_back(v.key.clone());
                }
                match authored {
                    Some(authored) => {
                        self.report
                            .record_authored(authored, outcome, self.record_limit)
                    }
                    None => self.report.record(kind, outcome, self.record_limit),
                }
            }
            Err(error) => self
                .report
                .record_lost_task(format!("write task ended abnormally: {error}")),
        }
    }

    /// The existing key the `seq`-th write adds a version to, cycling through recent new keys.
    fn version_target(&self, seq: u64) -> Option<String> {
        if self.version_targets.is_empty() {
            return None;
        }
        let index = usize::try_from(seq / 4).unwrap_or_default() % self.version_targets.len();
        self.version_targets.get(index).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_without_hosts_rate_or_slots_is_refused() {
        let plan = SimulationPlan::new(vec!["a.example".into()], 5, None);
        assert!(plan.validate().is_ok());
        let authored = SimulationPlan {
            authors: vec!["a".repeat(64), "0".repeat(64)],
            ..plan.clone()
        };
        assert!(authored.validate().is_ok());
        for broken in [
            SimulationPlan {
                hosts: vec![],
                ..plan.clone()
            },
            SimulationPlan {
                rate_per_host: 0,
                ..plan.clone()
            },
            SimulationPlan {
                max_in_flight_per_host: 0,
                ..plan.clone()
            },
            SimulationPlan {
                authors: vec!["A".repeat(64)],
                ..plan.clone()
            },
            SimulationPlan {
                authors: vec!["a".repeat(63)],
                ..plan.clone()
            },
        ] {
            assert!(matches!(
                broken.validate(),
                Err(SimulationError::InvalidPlan { .. })
            ));
        }
    }
}
