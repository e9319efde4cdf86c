//! What a simulation observed: per-community counts of serving writes by outcome, and (when
//! asked) the exact writes that were admitted, so a test can check each one is still present.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use activities::s3::ObjectVersionRef;

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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
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

/// How one write made as a user ended, as the report keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum AuthoredOutcome {
    /// Completed under its exclusion proof; what was stored.
    Admitted {
        /// The stored row, object version or key.
        write: AdmittedWrite,
    },
    /// Refused: the community or the author is quiescing or fenced.
    Refused,
    /// Failed before anything was sent.
    Failed,
    /// Failed after being sent: it may be stored.
    Unconfirmed {
        /// What may have been stored.
        write: UnconfirmedWrite,
    },
}

impl AuthoredOutcome {
    fn of(outcome: &WriteOutcome) -> Self {
        match outcome {
            WriteOutcome::Admitted(write) => AuthoredOutcome::Admitted {
                write: write.clone(),
            },
            WriteOutcome::Refused => AuthoredOutcome::Refused,
            WriteOutcome::Failed(_) => AuthoredOutcome::Failed,
            WriteOutcome::Unconfirmed { write, .. } => AuthoredOutcome::Unconfirmed {
                write: write.clone(),
            },
        }
    }
}

/// One write made as a user (a plan with authors), with its author and when it started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthoredWrite {
    /// The host loop's write number.
    pub seq: u64,
    /// Its kind.
    pub kind: WriteKind,
    /// The 64-hex pubkey it was written as.
    pub author: String,
    /// When the write started (simulator clock): a write started after a user's fence committed
    /// must be refused.
    pub started_at: DateTime<Utc>,
    /// How it ended.
    #[serde(flatten)]
    pub outcome: AuthoredOutcome,
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
    /// Counts per author (64-hex pubkey), for a plan with authors.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub by_author: BTreeMap<String, WriteCounts>,
    /// Every write made as a user with its author and outcome (admitted, refused, failed or
    /// unconfirmed), up to the recording limit, for a plan with authors.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub authored: Vec<AuthoredWrite>,
    /// Whether more authored writes ended than the recording limit allowed keeping.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub authored_truncated: bool,
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
            by_author: BTreeMap::new(),
            authored: Vec::new(),
            authored_truncated: false,
        }
    }

    /// Counts one finished write made as `author` (see [`CommunityReport::record`]), and keeps
    /// it with its author while fewer than `record_limit` authored writes are kept.
    pub(crate) fn record_authored(
        &mut self,
        write: AuthoredStart,
        outcome: WriteOutcome,
        record_limit: usize,
    ) {
        self.by_author
            .entry(write.author.clone())
            .or_default()
            .count(&outcome);
        if record_limit > 0 {
            if self.authored.len() < record_limit {
                self.authored.push(AuthoredWrite {
                    seq: write.seq,
                    kind: write.kind,
                    author: write.author,
                    started_at: write.started_at,
                    outcome: AuthoredOutcome::of(&outcome),
                });
            } else {
                self.authored_truncated = true;
            }
        }
        self.record(write.kind, outcome, record_limit);
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

/// A write made as a user, as it started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AuthoredStart {
    pub(crate) seq: u64,
    pub(crate) kind: WriteKind,
    pub(crate) author: String,
    pub(crate) started_at: DateTime<Utc>,
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
    fn authored_writes_are_counted_per_author_and_kept_with_their_author() {
        let mut report = CommunityReport::new("h".into(), Uuid::new_v4(), 2);
        let (a, b) = ("a".repeat(64), "b".repeat(64));
        let start = |seq: u64, author: &str| AuthoredStart {
            seq,
            kind: WriteKind::for_seq(seq),
            author: author.to_owned(),
            started_at: Utc::now(),
        };
        report.record_authored(start(3, &a), WriteOutcome::Admitted(key(3)), 2);
        report.record_authored(start(4, &b), WriteOutcome::Refused, 2);
        report.record_authored(start(5, &b), WriteOutcome::Refused, 2);
        assert_eq!(report.by_author[&a].admitted, 1);
        assert_eq!(report.by_author[&b].refused, 2);
        assert_eq!(report.totals.attempted, 3);
        assert_eq!(report.authored.len(), 2);
        assert!(report.authored_truncated);
        let json = serde_json::to_value(&report).unwrap_or_default();
        assert_eq!(json["by_author"][&b]["refused"], 2);
        assert_eq!(json["authored"][0]["author"], a.as_str());
        assert_eq!(json["authored"][0]["outcome"], "admitted");
        assert_eq!(json["authored"][0]["write"]["key"], "buzz:c:3");
        assert_eq!(json["authored"][1]["outcome"], "refused");
        let back: CommunityReport = serde_json::from_value(json).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, report);
    }

    #[test]
    fn a_report_without_authors_serialises_as_before() {
        let mut report = CommunityReport::new("h".into(), Uuid::new_v4(), 1);
        report.record(WriteKind::CacheKey, WriteOutcome::Admitted(key(1)), 1);
        let json = serde_json::to_value(&report).unwrap_or_default();
        for absent in ["by_author", "authored", "authored_truncated"] {
            assert!(json.get(absent).is_none(), "{absent}: {json}");
        }
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
