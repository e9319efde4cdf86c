//! What a simulation observed: per-community counts of serving writes by outcome, and (when
//! asked) the exact writes that were admitted, so a test can check each one is still present.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::objects::ObjectVersionRef;

/// Failure messages kept per community: enough to diagnose, bounded however long the run.
const FAILURE_SAMPLES: usize = 5;

/// Outcome counts of serving writes. `attempted = admitted + refused + failed` once every write
/// has finished.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteCounts {
    /// Writes started.
    pub attempted: u64,
    /// Writes that completed under their exclusion proof: a committed row, or an external write
    /// whose lease was held from before it started until after it finished.
    pub admitted: u64,
    /// Writes refused because the community is quiescing or fenced for deletion. Expected while a
    /// deletion runs; not an error.
    pub refused: u64,
    /// Writes that failed otherwise (a server error, a lost lease).
    pub failed: u64,
}

impl WriteCounts {
    fn count(&mut self, outcome: &WriteOutcome) {
        self.attempted += 1;
        match outcome {
            WriteOutcome::Admitted(_) => self.admitted += 1,
            WriteOutcome::Refused => self.refused += 1,
            WriteOutcome::Failed(_) | WriteOutcome::Unconfirmed { .. } => self.failed += 1,
        }
    }
}

/// The kinds of serving write the simulator issues, in the order it rotates through them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteKind {
    /// A row inserted with plain SQL (guarded by the tenant write-fence trigger).
    Row,
    /// A put of a key the community did not have, under a serving-write lease.
    NewObject,
    /// A put of a new version of an existing key, under a serving-write lease.
    NewVersion,
    /// A Redis SET in the community namespace, under a serving-write lease.
    CacheKey,
}

impl WriteKind {
    /// The rotation: every fourth write is of the same kind.
    pub const ROTATION: [WriteKind; 4] = [
        WriteKind::Row,
        WriteKind::NewObject,
        WriteKind::NewVersion,
        WriteKind::CacheKey,
    ];

    /// The kind of the `seq`-th write of a host.
    pub fn for_seq(seq: u64) -> WriteKind {
        let index = usize::try_from(seq % Self::ROTATION.len() as u64).unwrap_or_default();
        Self::ROTATION[index]
    }

    /// The lease operation name recorded for external writes of this kind.
    pub fn lease_operation(self) -> &'static str {
        match self {
            WriteKind::Row => "row_write",
            WriteKind::NewObject => "s3_put_new",
            WriteKind::NewVersion => "s3_put_version",
            WriteKind::CacheKey => "redis_write",
        }
    }
}

/// Counts split by write kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountsByKind {
    /// Rows through plain SQL.
    pub rows: WriteCounts,
    /// Puts of new keys.
    pub new_objects: WriteCounts,
    /// Puts of new versions of existing keys.
    pub new_versions: WriteCounts,
    /// Redis keys.
    pub cache_keys: WriteCounts,
}

impl CountsByKind {
    fn of(&mut self, kind: WriteKind) -> &mut WriteCounts {
        match kind {
            WriteKind::Row => &mut self.rows,
            WriteKind::NewObject => &mut self.new_objects,
            WriteKind::NewVersion => &mut self.new_versions,
            WriteKind::CacheKey => &mut self.cache_keys,
        }
    }
}

/// The tenant tables the simulator inserts rows into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RowTable {
    /// `buzz.events`, keyed by its 64-hex event id.
    #[serde(rename = "buzz.events")]
    Events,
    /// `buzz.memberships`, keyed by (community, pubkey).
    #[serde(rename = "buzz.memberships")]
    Memberships,
}

/// One admitted row: its table and the key that identifies it within the community.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AdmittedRow {
    /// The table.
    pub table: RowTable,
    /// Event id for `buzz.events`, pubkey for `buzz.memberships`.
    pub key: String,
}

/// One admitted write, exactly as it was stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdmittedWrite {
    /// A committed row.
    Row(AdmittedRow),
    /// An object version (new key or new version).
    Object(ObjectVersionRef),
    /// A Redis key.
    Key(String),
}

/// A write that failed after its request reached the store: it may or may not be stored. A fault
/// (a dropped connection, a restarted server) between the store applying a write and the writer
/// hearing back makes this unknowable from the writer's side, so a checker must allow it either
/// way, and only for exactly this row, object key or Redis key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnconfirmedWrite {
    /// A row insert whose commit was not acknowledged.
    Row(AdmittedRow),
    /// A put (new key or new version) of this object key; the version id, if any, is unknown.
    ObjectKey(String),
    /// A Redis SET of this key.
    Key(String),
}

/// How one serving write ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Completed under its exclusion proof.
    Admitted(AdmittedWrite),
    /// Refused: the community is quiescing or fenced.
    Refused,
    /// Failed before anything was sent to a data store; the message says why.
    Failed(String),
    /// Failed after the write was sent: it may be stored (counted as failed).
    Unconfirmed {
        /// Why it failed.
        error: String,
        /// What may have been stored.
        write: UnconfirmedWrite,
    },
}

/// Every admitted write of one community, up to the recording limit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmittedWrites {
    /// Committed rows.
    pub rows: Vec<AdmittedRow>,
    /// Object versions written.
    pub objects: Vec<ObjectVersionRef>,
    /// Redis keys set.
    pub keys: Vec<String>,
    /// Writes that failed after being sent, so may or may not be stored.
    #[serde(default)]
    pub unconfirmed: Vec<UnconfirmedWrite>,
    /// Whether more writes were admitted than the limit allowed recording (counts stay exact).
    pub truncated: bool,
}

impl AdmittedWrites {
    fn len(&self) -> usize {
        self.rows.len() + self.objects.len() + self.keys.len() + self.unconfirmed.len()
    }

    fn push_unconfirmed(&mut self, write: UnconfirmedWrite, limit: usize) {
        if self.len() >= limit {
            self.truncated = true;
            return;
        }
        self.unconfirmed.push(write);
    }

    fn push(&mut self, write: AdmittedWrite, limit: usize) {
        if self.len() >= limit {
            self.truncated = true;
            return;
        }
        match write {
            AdmittedWrite::Row(row) => self.rows.push(row),
            AdmittedWrite::Object(version) => self.objects.push(version),
            AdmittedWrite::Key(key) => self.keys.push(key),
        }
    }
}

/// What the simulator saw for one community.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommunityReport {
    /// The host served.
    pub host: String,
    /// Its community id.
    pub community_id: Uuid,
    /// All writes.
    pub totals: WriteCounts,
    /// Writes per kind.
    pub by_kind: CountsByKind,
    /// When the first refusal came back (simulator clock).
    pub first_refused_at: Option<DateTime<Utc>>,
    /// When the last admitted write completed (simulator clock).
    pub last_admitted_at: Option<DateTime<Utc>>,
    /// The first few failure messages.
    pub failure_samples: Vec<String>,
    /// The admitted writes, when the run was asked to record them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted: Option<AdmittedWrites>,
}

impl CommunityReport {
    /// An empty report; `record_limit` 0 records no admitted writes.
    pub(crate) fn new(host: String, community_id: Uuid, record_limit: usize) -> Self {
        CommunityReport {
            host,
            community_id,
            totals: WriteCounts::default(),
            by_kind: CountsByKind::default(),
            first_refused_at: None,
            last_admitted_at: None,
            failure_samples: Vec::new(),
            admitted: (record_limit > 0).then(AdmittedWrites::default),
        }
    }

    /// Counts one finished write and records it if admitted.
    pub(crate) fn record(&mut self, kind: WriteKind, outcome: WriteOutcome, record_limit: usize) {
        self.totals.count(&outcome);
        self.by_kind.of(kind).count(&outcome);
        match outcome {
            WriteOutcome::Admitted(write) => {
                self.last_admitted_at = Some(Utc::now());
                if let Some(admitted) = self.admitted.as_mut() {
                    admitted.push(write, record_limit);
                }
            }
            WriteOutcome::Refused => {
                self.first_refused_at.get_or_insert_with(Utc::now);
            }
            WriteOutcome::Failed(message) => self.sample_failure(message),
            WriteOutcome::Unconfirmed { error, write } => {
                if let Some(admitted) = self.admitted.as_mut() {
                    admitted.push_unconfirmed(write, record_limit);
                }
                self.sample_failure(error);
            }
        }
    }

    /// Counts a write whose task ended without an outcome (it panicked): a failure of no kind.
    pub(crate) fn record_lost_task(&mut self, message: String) {
        self.totals.attempted += 1;
        self.totals.failed += 1;
        self.sample_failure(message);
    }

    fn sample_failure(&mut self, message: String) {
        if self.failure_samples.len() < FAILURE_SAMPLES {
            self.failure_samples.push(message);
        }
    }
}

/// Why the simulation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The planned duration elapsed.
    Duration,
    /// The caller asked it to stop (SIGINT/SIGTERM for the CLI).
    Requested,
}

/// What a whole simulation observed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimulationReport {
    /// Writes started per second per host (an upper bound: a host never exceeds its in-flight cap).
    pub rate_per_host: u32,
    /// How long it ran.
    pub elapsed_ms: u64,
    /// Why it stopped.
    pub stopped_by: StopReason,
    /// One report per host, in the order the hosts were given.
    pub communities: Vec<CommunityReport>,
}

impl SimulationReport {
    /// The report of `host` (as given to the plan), if it was served.
    pub fn community(&self, host: &str) -> Option<&CommunityReport> {
        self.communities.iter().find(|c| c.host == host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u32) -> AdmittedWrite {
        AdmittedWrite::Key(format!("buzz:c:{n}"))
    }

    #[test]
    fn refusals_are_counted_apart_from_failures() {
        let mut report = CommunityReport::new("h".into(), Uuid::new_v4(), 10);
        report.record(WriteKind::CacheKey, WriteOutcome::Admitted(key(1)), 10);
        report.record(WriteKind::CacheKey, WriteOutcome::Refused, 10);
        report.record(WriteKind::Row, WriteOutcome::Refused, 10);
        report.record(
            WriteKind::NewObject,
            WriteOutcome::Failed("boom".into()),
            10,
        );
        assert_eq!(
            report.totals,
            WriteCounts {
                attempted: 4,
                admitted: 1,
                refused: 2,
                failed: 1
            }
        );
        assert_eq!(report.by_kind.rows.refused, 1);
        assert_eq!(report.by_kind.cache_keys.admitted, 1);
        assert_eq!(report.by_kind.new_objects.failed, 1);
        assert_eq!(report.failure_samples, vec!["boom".to_owned()]);
        assert!(report.first_refused_at.is_some());
    }

    #[test]
    fn an_unconfirmed_write_counts_as_failed_and_is_recorded_apart() {
        let mut report = CommunityReport::new("h".into(), Uuid::new_v4(), 10);
        let write = UnconfirmedWrite::Key("buzz:c:9".into());
        report.record(
            WriteKind::CacheKey,
            WriteOutcome::Unconfirmed {
                error: "connection reset".into(),
                write: write.clone(),
            },
            10,
        );
        assert_eq!(report.totals.failed, 1);
        assert_eq!(report.totals.admitted, 0);
        let recorded = report.admitted.unwrap_or_default();
        assert_eq!(recorded.unconfirmed, vec![write]);
        assert!(recorded.keys.is_empty());
    }

    #[test]
    fn recording_stops_at_the_limit_but_counting_does_not() {
        let mut report = CommunityReport::new("h".into(), Uuid::new_v4(), 2);
        for n in 0..5 {
            report.record(WriteKind::CacheKey, WriteOutcome::Admitted(key(n)), 2);
        }
        assert_eq!(report.totals.admitted, 5);
        let admitted = report.admitted.unwrap_or_default();
        assert_eq!(admitted.keys.len(), 2);
        assert!(admitted.truncated);
    }

    #[test]
    fn a_zero_limit_records_nothing_and_omits_the_list_from_json() {
        let mut report = CommunityReport::new("h".into(), Uuid::new_v4(), 0);
        report.record(WriteKind::CacheKey, WriteOutcome::Admitted(key(1)), 0);
        assert!(report.admitted.is_none());
        let json = serde_json::to_value(&report).unwrap_or_default();
        assert!(json.get("admitted").is_none(), "{json}");
        assert_eq!(json["totals"]["admitted"], 1);
    }

    #[test]
    fn failure_samples_are_bounded() {
        let mut report = CommunityReport::new("h".into(), Uuid::new_v4(), 0);
        for n in 0..50 {
            report.record(WriteKind::Row, WriteOutcome::Failed(format!("e{n}")), 0);
        }
        assert_eq!(report.failure_samples.len(), FAILURE_SAMPLES);
        assert_eq!(report.totals.failed, 50);
    }

    #[test]
    fn the_rotation_covers_every_kind_every_four_writes() {
        let kinds: Vec<WriteKind> = (0..8).map(WriteKind::for_seq).collect();
        assert_eq!(&kinds[..4], &WriteKind::ROTATION);
        assert_eq!(&kinds[4..], &WriteKind::ROTATION);
    }

    #[test]
    fn admitted_rows_serialise_with_their_qualified_table() {
        let row = AdmittedRow {
            table: RowTable::Memberships,
            key: "pk".into(),
        };
        let json = serde_json::to_value(&row).unwrap_or_default();
        assert_eq!(json["table"], "buzz.memberships");
    }
}
