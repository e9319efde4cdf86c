//! The whole run, drawn from one seed before anything starts: which communities are seeded with
//! which shapes, when each deletion is submitted and how it is approved or aborted, and every
//! fault with its moment, target and duration. Pure: the same seed and parameters give the same
//! schedule, so a failing seed is replayed exactly (`--print-schedule` shows it without running).

use std::fmt;

use serde::Serialize;

use crate::rng::SplitMix64;

/// A server the workers depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dependency {
    /// PostgreSQL (the store and the exclusion proof).
    Postgres,
    /// Redis (the cache and the disconnect channel).
    Redis,
    /// The S3 gateway (Ceph RGW).
    S3,
    /// The Temporal server.
    Temporal,
}

impl Dependency {
    /// Every dependency.
    pub const ALL: [Dependency; 4] = [
        Dependency::Postgres,
        Dependency::Redis,
        Dependency::S3,
        Dependency::Temporal,
    ];

    /// Its short name.
    pub fn name(self) -> &'static str {
        match self {
            Dependency::Postgres => "postgres",
            Dependency::Redis => "redis",
            Dependency::S3 => "s3",
            Dependency::Temporal => "temporal",
        }
    }
}

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "dependency")]
pub enum FaultKind {
    /// SIGKILL of one worker process (no drain); it is started again when the fault ends.
    WorkerKill,
    /// SIGTERM of one worker process (graceful drain); started again when the fault ends.
    WorkerTerm,
    /// The server is stopped (PostgreSQL and the S3 gateway crash-stopped, Redis and Temporal
    /// shut down), then started again with its state.
    Restart(Dependency),
    /// Every byte between the workers and the server is delayed (300 ms ± 200 ms).
    Latency(Dependency),
    /// Every open connection between the workers and the server is dropped, and new ones are
    /// refused, until the fault ends.
    Drop(Dependency),
    /// Connections stay open but no byte passes in either direction (a half-open connection);
    /// when the fault ends the far side has forgotten them, so they are reset.
    HalfOpen(Dependency),
    /// Redis Cluster only: a primary crashes (its keys die with it) and its replica is promoted
    /// at once; when the fault ends the crashed node comes back as a replica.
    RedisFailover,
}

impl FaultKind {
    /// Every kind, in a fixed order. With `redis_cluster`, the workers reach the cluster's
    /// nodes directly (a cluster client learns their addresses from the cluster, so no proxy
    /// can stand between them): Redis' proxy and restart faults give way to a primary's
    /// failover.
    pub fn all(redis_cluster: bool) -> Vec<FaultKind> {
        let mut kinds = vec![FaultKind::WorkerKill, FaultKind::WorkerTerm];
        for dependency in Dependency::ALL {
            if redis_cluster && dependency == Dependency::Redis {
                kinds.push(FaultKind::RedisFailover);
                continue;
            }
            kinds.push(FaultKind::Restart(dependency));
            kinds.push(FaultKind::Latency(dependency));
            kinds.push(FaultKind::Drop(dependency));
            kinds.push(FaultKind::HalfOpen(dependency));
        }
        kinds
    }

    /// The thing the fault occupies: two faults on the same resource never overlap (a server
    /// cannot be stopped while it is already stopped; a proxy holds one fault at a time).
    fn resource(self, worker: usize) -> Resource {
        match self {
            FaultKind::WorkerKill | FaultKind::WorkerTerm => Resource::Worker(worker),
            FaultKind::Restart(d)
            | FaultKind::Latency(d)
            | FaultKind::Drop(d)
            | FaultKind::HalfOpen(d) => Resource::Dependency(d),
            FaultKind::RedisFailover => Resource::Dependency(Dependency::Redis),
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultKind::WorkerKill => f.write_str("worker-sigkill"),
            FaultKind::WorkerTerm => f.write_str("worker-sigterm"),
            FaultKind::Restart(d) => write!(f, "{}-restart", d.name()),
            FaultKind::Latency(d) => write!(f, "{}-latency", d.name()),
            FaultKind::Drop(d) => write!(f, "{}-drop", d.name()),
            FaultKind::HalfOpen(d) => write!(f, "{}-half-open", d.name()),
            FaultKind::RedisFailover => f.write_str("redis-primary-failover"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resource {
    Worker(usize),
    Dependency(Dependency),
}

/// One fault of the schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fault {
    /// Its position in the schedule.
    pub index: usize,
    /// Milliseconds after the start of the fault window.
    pub at_ms: u64,
    /// How long it lasts, in milliseconds.
    pub hold_ms: u64,
    /// What fails.
    pub kind: FaultKind,
    /// The worker slot a worker fault hits (0 for other kinds).
    pub worker: usize,
}

impl Fault {
    /// When it ends, in milliseconds after the start of the fault window.
    pub fn end_ms(&self) -> u64 {
        self.at_ms + self.hold_ms
    }

    /// The thing this fault occupies (a server with its proxy, or a worker slot), as a name.
    pub fn resource_name(&self) -> String {
        match self.kind.resource(self.worker) {
            Resource::Worker(slot) => format!("worker-{slot}"),
            Resource::Dependency(d) => d.name().to_owned(),
        }
    }
}

/// What a community holds when it is seeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Shape {
    /// Distinct keys per prefix family (media, thumbs, meta).
    pub objects: u32,
    /// Versions per key.
    pub versions: u32,
    /// Keys with a delete marker on top.
    pub delete_markers: u32,
    /// Rows per tenant table.
    pub rows: u32,
    /// Redis keys.
    pub redis_keys: u32,
    /// An empty (zero-byte) object.
    pub empty_object: bool,
    /// A large object of this many MiB (0: none).
    pub large_object_mib: u32,
    /// Unfinished multipart uploads.
    pub unfinished_uploads: u32,
}

impl Shape {
    fn draw(rng: &mut SplitMix64) -> Shape {
        // Mostly small, sometimes medium: the point is many shapes, not volume.
        let medium = rng.chance(250);
        Shape {
            objects: if medium {
                rng.between(8, 20) as u32
            } else {
                rng.between(1, 6) as u32
            },
            versions: rng.between(1, 4) as u32,
            delete_markers: rng.between(0, 3) as u32,
            rows: rng.between(1, 12) as u32,
            redis_keys: rng.between(0, 15) as u32,
            empty_object: rng.chance(500),
            large_object_mib: if rng.chance(300) {
                rng.between(2, 6) as u32
            } else {
                0
            },
            unfinished_uploads: rng.between(0, 2) as u32,
        }
    }
}

/// How an approval reaches the workflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalRoute {
    /// `buzz-deletion community approve` (an update).
    Cli,
    /// The signed payload of `community sign approve`, sent as the `approve` signal, as an
    /// operator does in the Web UI's "Send a Signal" dialog.
    WebUiSignal,
}

/// When a planned abort is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AbortPoint {
    /// Before the approval: always before the irreversible point, so it must be accepted.
    BeforeApproval,
    /// Right after the approval is recorded, racing the fence, drain and freeze: accepted (the
    /// fence is lifted and the community served again) or refused once the irreversible point
    /// is passed (the deletion then completes). Either way the invariants must hold.
    AfterApproval,
}

/// One deletion of the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeletionPlan {
    /// Its position (target and neighbour `index`).
    pub index: usize,
    /// When it is submitted, in milliseconds after the start of the fault window.
    pub submit_at_ms: u64,
    /// The target's shape.
    pub target: Shape,
    /// Its neighbour's shape (kept whole, byte for byte).
    pub neighbour: Shape,
    /// How it is approved.
    pub route: ApprovalRoute,
    /// Aborted (and when) instead of only approved.
    pub abort: Option<AbortPoint>,
}

/// What the run is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Params {
    /// Deletions (and as many neighbours).
    pub deletions: usize,
    /// Worker processes.
    pub workers: usize,
    /// Faults (at least one of every kind).
    pub faults: usize,
    /// Shortest fault, ms.
    pub hold_min_ms: u64,
    /// Longest fault, ms.
    pub hold_max_ms: u64,
    /// Length of the window the faults are drawn in, ms.
    pub window_ms: u64,
    /// The workers use the local Redis Cluster (`BUZZ_REDIS_MODE=cluster`).
    pub redis_cluster: bool,
}

/// Why parameters cannot make a schedule.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParamsError {
    /// Fewer faults than kinds.
    #[error(
        "--faults {faults} cannot cover the {kinds} fault kinds: give at least --faults {kinds}"
    )]
    TooFewFaults {
        /// Asked.
        faults: usize,
        /// Needed.
        kinds: usize,
    },
    /// No deletion or no worker.
    #[error("{what} must be at least 1")]
    Zero {
        /// The flag.
        what: &'static str,
    },
    /// Hold range upside down or empty.
    #[error(
        "--duration-per-fault {min}..{max}: give two durations in seconds, the first not larger than the second, at least 1"
    )]
    HoldRange {
        /// Shortest.
        min: u64,
        /// Longest.
        max: u64,
    },
}

impl Params {
    /// Checks the parameters can make a schedule.
    pub fn validate(&self) -> Result<(), ParamsError> {
        if self.deletions == 0 {
            return Err(ParamsError::Zero {
                what: "--deletions",
            });
        }
        if self.workers == 0 {
            return Err(ParamsError::Zero { what: "--workers" });
        }
        let kinds = FaultKind::all(self.redis_cluster).len();
        if self.faults < kinds {
            return Err(ParamsError::TooFewFaults {
                faults: self.faults,
                kinds,
            });
        }
        if self.hold_min_ms < 1000 || self.hold_min_ms > self.hold_max_ms {
            return Err(ParamsError::HoldRange {
                min: self.hold_min_ms / 1000,
                max: self.hold_max_ms / 1000,
            });
        }
        Ok(())
    }
}

/// The run, drawn from the seed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Schedule {
    /// The seed.
    pub seed: u64,
    /// The parameters.
    pub params: Params,
    /// Deletions in submission order.
    pub deletions: Vec<DeletionPlan>,
    /// Faults in start order.
    pub faults: Vec<Fault>,
}

/// Gap kept between two faults on the same resource, so the second starts on a recovered one.
const SAME_RESOURCE_GAP_MS: u64 = 1_000;

impl Schedule {
    /// Draws the schedule of `seed`.
    pub fn draw(seed: u64, params: Params) -> Result<Schedule, ParamsError> {
        params.validate()?;
        let mut rng = SplitMix64::new(seed);

        let mut deletions = Vec::with_capacity(params.deletions);
        // Submissions are spread over the first two thirds of the window, so faults hit
        // deletions in every stage; at least one abort and one Web UI approval when there is room.
        let submit_span = params.window_ms * 2 / 3;
        let slot = submit_span / params.deletions as u64;
        // From three deletions on, one is aborted before its approval; from four on, another
        // is aborted right after it (racing the irreversible point).
        let n = params.deletions as u64;
        let forced_abort = (params.deletions >= 3).then(|| rng.below(n));
        let forced_late_abort = forced_abort
            .filter(|_| params.deletions >= 4)
            .map(|f| (f + 1 + rng.below(n - 1)) % n);
        for index in 0..params.deletions {
            let i = index as u64;
            let aborted = rng.chance(150);
            // Drawn for every deletion so the other draws do not depend on it.
            let after_approval = rng.chance(500);
            let abort = if forced_abort == Some(i) {
                Some(AbortPoint::BeforeApproval)
            } else if forced_late_abort == Some(i) {
                Some(AbortPoint::AfterApproval)
            } else {
                aborted.then_some(if after_approval {
                    AbortPoint::AfterApproval
                } else {
                    AbortPoint::BeforeApproval
                })
            };
            let route = if rng.chance(300) {
                ApprovalRoute::WebUiSignal
            } else {
                ApprovalRoute::Cli
            };
            deletions.push(DeletionPlan {
                index,
                submit_at_ms: i * slot + rng.below(slot.max(1)),
                target: Shape::draw(&mut rng),
                neighbour: Shape::draw(&mut rng),
                route,
                abort,
            });
        }
        // A run of aborts only would leave no completion to check: keep one a deletion.
        if deletions.iter().all(|d| d.abort.is_some()) {
            let keep = forced_abort.map_or(0, |f| (f as usize + 1) % params.deletions);
            deletions[keep].abort = None;
        }
        // At least one approval goes through the Web UI's signal path when two or more run.
        let signalled = deletions
            .iter()
            .any(|d| d.abort.is_none() && d.route == ApprovalRoute::WebUiSignal);
        if params.deletions >= 2 && !signalled {
            let approved: Vec<usize> = deletions
                .iter()
                .filter(|d| d.abort.is_none())
                .map(|d| d.index)
                .collect();
            let pick = approved[usize::try_from(rng.below(approved.len() as u64)).unwrap_or(0)];
            deletions[pick].route = ApprovalRoute::WebUiSignal;
        }

        let mut kinds = FaultKind::all(params.redis_cluster);
        rng.shuffle(&mut kinds);
        let every = FaultKind::all(params.redis_cluster);
        while kinds.len() < params.faults {
            let pick = usize::try_from(rng.below(every.len() as u64)).unwrap_or(0);
            kinds.push(every[pick]);
        }
        let mut faults: Vec<Fault> = kinds
            .into_iter()
            .map(|kind| {
                let hold_ms = rng.between(params.hold_min_ms, params.hold_max_ms);
                let latest = params.window_ms.saturating_sub(hold_ms);
                let at_ms = rng.below(latest.max(1));
                let worker = usize::try_from(rng.below(params.workers as u64)).unwrap_or(0);
                let hits_a_worker = matches!(kind, FaultKind::WorkerKill | FaultKind::WorkerTerm);
                Fault {
                    index: 0,
                    at_ms,
                    hold_ms,
                    kind,
                    worker: if hits_a_worker { worker } else { 0 },
                }
            })
            .collect();
        faults.sort_by_key(|f| (f.at_ms, f.kind));
        // A fault on a busy resource waits until the resource is free again.
        let mut busy: Vec<(Resource, u64)> = Vec::new();
        for fault in &mut faults {
            let resource = fault.kind.resource(fault.worker);
            if let Some((_, until)) = busy.iter_mut().find(|(r, _)| *r == resource) {
                if fault.at_ms < *until {
                    fault.at_ms = *until;
                }
                *until = fault.end_ms() + SAME_RESOURCE_GAP_MS;
            } else {
                busy.push((resource, fault.end_ms() + SAME_RESOURCE_GAP_MS));
            }
        }
        faults.sort_by_key(|f| (f.at_ms, f.kind));
        for (index, fault) in faults.iter_mut().enumerate() {
            fault.index = index;
        }
        Ok(Schedule {
            seed,
            params,
            deletions,
            faults,
        })
    }

    /// When the last fault ends, ms after the start of the window.
    pub fn last_fault_end_ms(&self) -> u64 {
        self.faults.iter().map(Fault::end_ms).max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Params {
        Params {
            deletions: 8,
            workers: 3,
            faults: 40,
            hold_min_ms: 3_000,
            hold_max_ms: 9_000,
            window_ms: 240_000,
            redis_cluster: false,
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule_and_another_seed_another() {
        let a = Schedule::draw(42, params());
        let b = Schedule::draw(42, params());
        assert_eq!(a, b);
        let c = Schedule::draw(43, params());
        assert_ne!(a, c);
    }

    #[test]
    fn every_fault_kind_is_scheduled_at_least_once() {
        for seed in 0..50 {
            let schedule = Schedule::draw(seed, params()).unwrap_or_else(|e| panic!("{e}"));
            for kind in FaultKind::all(false) {
                assert!(
                    schedule.faults.iter().any(|f| f.kind == kind),
                    "seed {seed} misses {kind}"
                );
            }
            assert_eq!(schedule.faults.len(), 40);
        }
    }

    #[test]
    fn on_the_redis_cluster_a_primary_fails_over_instead_of_the_redis_proxy_faults() {
        let cluster = Params {
            redis_cluster: true,
            ..params()
        };
        let kinds = FaultKind::all(true);
        assert!(kinds.contains(&FaultKind::RedisFailover));
        assert!(!kinds.iter().any(|k| matches!(
            k,
            FaultKind::Restart(Dependency::Redis)
                | FaultKind::Latency(Dependency::Redis)
                | FaultKind::Drop(Dependency::Redis)
                | FaultKind::HalfOpen(Dependency::Redis)
        )));
        assert_eq!(kinds.len(), FaultKind::all(false).len() - 3);
        for seed in 0..20 {
            let schedule = Schedule::draw(seed, cluster).unwrap_or_else(|e| panic!("{e}"));
            assert!(schedule.faults.iter().all(|f| kinds.contains(&f.kind)));
            assert!(
                schedule
                    .faults
                    .iter()
                    .any(|f| f.kind == FaultKind::RedisFailover)
            );
        }
        // The single-server schedule of a seed is what it was.
        assert!(!FaultKind::all(false).contains(&FaultKind::RedisFailover));
    }

    #[test]
    fn faults_on_one_resource_never_overlap() {
        for seed in 0..50 {
            let schedule = Schedule::draw(seed, params()).unwrap_or_else(|e| panic!("{e}"));
            for (i, a) in schedule.faults.iter().enumerate() {
                for b in &schedule.faults[i + 1..] {
                    if a.kind.resource(a.worker) == b.kind.resource(b.worker) {
                        assert!(
                            a.end_ms() + SAME_RESOURCE_GAP_MS <= b.at_ms
                                || b.end_ms() + SAME_RESOURCE_GAP_MS <= a.at_ms,
                            "seed {seed}: {a:?} overlaps {b:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn faults_are_in_start_order_and_numbered() {
        let schedule = Schedule::draw(5, params()).unwrap_or_else(|e| panic!("{e}"));
        for (i, pair) in schedule.faults.windows(2).enumerate() {
            assert!(pair[0].at_ms <= pair[1].at_ms);
            assert_eq!(pair[0].index, i);
        }
    }

    #[test]
    fn a_run_of_four_or_more_aborts_both_before_and_after_an_approval() {
        for seed in 0..50 {
            let schedule = Schedule::draw(seed, params()).unwrap_or_else(|e| panic!("{e}"));
            let points: Vec<AbortPoint> =
                schedule.deletions.iter().filter_map(|d| d.abort).collect();
            assert!(points.contains(&AbortPoint::BeforeApproval), "seed {seed}");
            assert!(points.contains(&AbortPoint::AfterApproval), "seed {seed}");
        }
    }

    #[test]
    fn a_run_of_three_or_more_has_an_abort_and_a_web_ui_approval() {
        for seed in 0..50 {
            let schedule = Schedule::draw(seed, params()).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                schedule.deletions.iter().any(|d| d.abort.is_some()),
                "seed {seed}"
            );
            assert!(
                schedule.deletions.iter().any(|d| d.abort.is_none()),
                "seed {seed}: nothing to delete"
            );
            assert!(
                schedule
                    .deletions
                    .iter()
                    .any(|d| d.abort.is_none() && d.route == ApprovalRoute::WebUiSignal),
                "seed {seed}"
            );
        }
    }

    #[test]
    fn aborts_come_both_before_and_after_the_approval_across_seeds() {
        let points: Vec<AbortPoint> = (0..50)
            .flat_map(|seed| {
                Schedule::draw(seed, params())
                    .unwrap_or_else(|e| panic!("{e}"))
                    .deletions
            })
            .filter_map(|d| d.abort)
            .collect();
        assert!(points.contains(&AbortPoint::BeforeApproval));
        assert!(points.contains(&AbortPoint::AfterApproval));
    }

    #[test]
    fn bad_parameters_are_refused_with_what_to_give() {
        let too_few = Params {
            faults: 3,
            ..params()
        };
        let error = Schedule::draw(1, too_few).err();
        assert_eq!(
            error,
            Some(ParamsError::TooFewFaults {
                faults: 3,
                kinds: FaultKind::all(false).len()
            })
        );
        assert!(
            Schedule::draw(
                1,
                Params {
                    deletions: 0,
                    ..params()
                }
            )
            .is_err()
        );
        assert!(
            Schedule::draw(
                1,
                Params {
                    hold_min_ms: 9_000,
                    hold_max_ms: 3_000,
                    ..params()
                }
            )
            .is_err()
        );
    }
}
