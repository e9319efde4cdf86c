//! One chaos run from start to verdict: seed, snapshot, start proxies, workers and serving
//! traffic, drive the deletions while the faults of the schedule are injected and healed, wait for
//! every request to end, then check the invariants.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use demo::simulator::SimulationReport;
use serde::Serialize;
use tokio::sync::Mutex;
use tokio::task::JoinSet;
use tokio::time::Instant;
use uuid::Uuid;

use crate::faults::{Actuators, FaultRecord};
use crate::invariants::{self, Violation};
use crate::operator::{Operators, Submitted};
use crate::population::{self, Seeded, Snapshot};
use crate::proxies::NetProxy;
use crate::schedule::{AbortPoint, DeletionPlan, Dependency, Schedule};
use crate::services::Services;
use crate::stack::{StackEnv, Stores, connect_stores, env};
use crate::traffic::Traffic;
use crate::workers::{self, Workers};

/// Everything a run needs besides its schedule.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The directory holding `buzz-deletion` and `buzz-deletion-worker`.
    pub bin_dir: PathBuf,
    /// Holds the private keys `alice` (requester) and `bob` (approver), registered operators.
    pub keys_dir: PathBuf,
    /// Every request must end within this long after the last fault healed.
    pub end_bound: Duration,
    /// Serving writes started per second per community.
    pub rate_per_host: u32,
    /// Where worker logs go.
    pub log_dir: PathBuf,
    /// The repository (for `deploy/local/*`).
    pub repo_root: PathBuf,
}

/// How a request ended.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case", tag = "state", content = "reason")]
pub enum EndState {
    /// Reached `retention_pending`: everything deleted and verified.
    Completed,
    /// Aborted before the irreversible point.
    Aborted,
    /// Blocked, waiting for an operator.
    Blocked(String),
}

/// The end of a request.
#[derive(Debug, Clone, Serialize)]
pub struct End {
    /// How.
    pub state: EndState,
    /// When it was seen (ms since the window started).
    pub at_ms: u64,
}

/// One deletion of the run, as it went.
#[derive(Debug, Clone, Serialize)]
pub struct DeletionOutcome {
    /// The plan.
    pub plan: DeletionPlan,
    /// The target.
    pub target_host: String,
    /// The target's id.
    pub target_id: Uuid,
    /// The neighbour.
    pub neighbour_host: String,
    /// The neighbour's id.
    pub neighbour_id: Uuid,
    /// The request, once submitted.
    pub request: Option<Submitted>,
    /// When its inventory was frozen (ms since the window started).
    pub submitted_ms: Option<u64>,
    /// When its approval or abort was recorded.
    pub decided_ms: Option<u64>,
    /// Approval or abort sends (more than one when a fault swallowed one).
    pub sends: u32,
    /// How it ended, if it did.
    pub end: Option<End>,
    /// Why the operator could not drive it, if so.
    pub driver_error: Option<String>,
}

/// Everything a run produced.
#[derive(Debug, Serialize)]
pub struct RunRecord {
    /// The schedule it ran.
    pub schedule: Schedule,
    /// The faults as they happened.
    pub timeline: Vec<FaultRecord>,
    /// Per deletion.
    pub deletions: Vec<DeletionOutcome>,
    /// When the last fault healed (ms since the window started).
    pub last_fault_healed_ms: u64,
    /// When the last request ended.
    pub last_end_ms: u64,
    /// Worker exits no fault caused.
    pub unplanned_worker_exits: Vec<workers::UnplannedExit>,
    /// Worker process starts per slot.
    pub worker_starts: Vec<u32>,
    /// What the serving traffic saw.
    pub traffic: SimulationReport,
    /// Broken invariants (empty: nothing was lost).
    pub violations: Vec<Violation>,
    /// The bound every request had to end within after the last fault, ms.
    pub end_bound_ms: u64,
}

fn ms_since(t0: Instant) -> u64 {
    u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Runs `schedule` on the local stack.
pub async fn run(schedule: Schedule, settings: Settings) -> Result<RunRecord> {
    let stack = StackEnv::from_env()?;
    let stores = connect_stores().await?;
    let tag = &Uuid::new_v4().simple().to_string()[..8];
    let task_queue = format!("buzz-chaos-{}-{tag}", schedule.seed);
    std::fs::create_dir_all(&settings.log_dir)
        .with_context(|| format!("create {}", settings.log_dir.display()))?;

    eprintln!(
        "chaos: seed {}, {} deletion(s), {} worker(s), {} fault(s); task queue {task_queue}",
        schedule.seed,
        schedule.deletions.len(),
        schedule.params.workers,
        schedule.faults.len()
    );
    // The pairs are seeded and snapshotted side by side: each waits mostly on the gateway.
    let pairs: Vec<(Seeded, Seeded)> =
        futures::future::try_join_all(schedule.deletions.iter().map(|plan| {
            let (stores, base) = (&stores, format!("s{}-{tag}-{}", schedule.seed, plan.index));
            async move {
                let target =
                    population::seed(stores, &format!("t{base}.chaos.example"), plan.target)
                        .await?;
                let neighbour =
                    population::seed(stores, &format!("n{base}.chaos.example"), plan.neighbour)
                        .await?;
                Ok::<_, anyhow::Error>((target, neighbour))
            }
        }))
        .await?;
    let seeded_ids = pairs
        .iter()
        .flat_map(|(target, neighbour)| [target.community_id, neighbour.community_id]);
    let before = snapshots(&stores, seeded_ids).await?;
    eprintln!("chaos: seeded {} communities", pairs.len() * 2);

    let mut proxies = BTreeMap::new();
    let mut ports = BTreeMap::new();
    if stack.redis_cluster != schedule.params.redis_cluster {
        bail!(
            "the schedule is for {} but BUZZ_REDIS_MODE says otherwise: run `BUZZ_REDIS_MODE=cluster \
             deploy/local/chaos …` for the cluster, or neither",
            if schedule.params.redis_cluster {
                "the Redis Cluster"
            } else {
                "the single Redis server"
            }
        );
    }
    for dependency in Dependency::ALL {
        // Redis on a cluster has no proxy: its faults are failovers (`FaultKind::RedisFailover`).
        if stack.redis_cluster && dependency == Dependency::Redis {
            continue;
        }
        let upstream = stack
            .upstreams
            .get(&dependency)
            .cloned()
            .ok_or_else(|| anyhow!("no address for {}", dependency.name()))?;
        let proxy = NetProxy::start(dependency, upstream).await?;
        ports.insert(dependency, proxy.port()?);
        proxies.insert(dependency, Mutex::new(proxy));
    }
    let mut worker_env = stack.worker_env(&ports)?;
    worker_env.extend([
        ("BUZZ_TASK_QUEUE".to_owned(), task_queue.clone()),
        ("BUZZ_METRICS_PORT".to_owned(), "0".to_owned()),
        ("BUZZ_SHUTDOWN_GRACE_SECS".to_owned(), "15".to_owned()),
        ("RUST_LOG".to_owned(), "warn".to_owned()),
    ]);
    let term_grace = Duration::from_secs(30);
    let workers = Workers::start(
        &settings.bin_dir.join("buzz-deletion-worker"),
        worker_env,
        schedule.params.workers,
        &settings.log_dir,
    )?;
    let actuators = Arc::new(Actuators {
        services: Services::new(settings.repo_root.clone(), stack.state_dir.clone()),
        proxies,
        workers: Mutex::new(workers),
        term_grace,
    });

    let hosts: Vec<String> = pairs
        .iter()
        .flat_map(|(t, n)| [t.host.clone(), n.host.clone()])
        .collect();
    let mut traffic = Traffic::start(
        &settings.bin_dir.join("buzz-deletion"),
        &hosts,
        settings.rate_per_host,
        &settings.log_dir.join("demo-serve.log"),
    )?;

    let operators = Arc::new(Operators {
        cli: settings.bin_dir.join("buzz-deletion"),
        temporal_cli: PathBuf::from(env("TEMPORAL_CLI_EXE")?),
        temporal_address: env("TEMPORAL_ADDRESS")?,
        task_queue: task_queue.clone(),
        requester_key: settings.keys_dir.join("alice"),
        approver_key: settings.keys_dir.join("bob"),
        store: stores.store.clone(),
    });

    let t0 = Instant::now();
    let driver_deadline =
        t0 + Duration::from_millis(schedule.last_fault_end_ms()) + settings.end_bound;
    eprintln!("chaos: fault window opens");

    let mut drivers = JoinSet::new();
    for (plan, (target, neighbour)) in schedule
        .deletions
        .iter()
        .cloned()
        .zip(pairs.iter().cloned())
    {
        let operators = Arc::clone(&operators);
        drivers.spawn(async move {
            drive(operators, plan, target, neighbour, t0, driver_deadline).await
        });
    }

    // The schedule never overlaps two faults on one resource, but a slow heal (a restart that
    // waits for another) can run past the next fault's moment: that fault then waits, and its
    // actual start is what the timeline records.
    let mut resources: BTreeMap<String, Arc<Mutex<()>>> = BTreeMap::new();
    let mut faults = JoinSet::new();
    for fault in schedule.faults.iter().cloned() {
        let actuators = Arc::clone(&actuators);
        let resource = Arc::clone(resources.entry(fault.resource_name()).or_default());
        faults.spawn(async move {
            tokio::time::sleep_until(t0 + Duration::from_millis(fault.at_ms)).await;
            let _held = resource.lock().await;
            let began_ms = ms_since(t0);
            eprintln!(
                "chaos: +{:>6} ms  fault #{} {} begins",
                began_ms, fault.index, fault.kind
            );
            let mut error = actuators
                .inject(&fault)
                .await
                .err()
                .map(|e| format!("inject: {e:#}"));
            tokio::time::sleep_until(t0 + Duration::from_millis(began_ms + fault.hold_ms)).await;
            if let Err(e) = actuators.heal(&fault).await {
                error = Some(format!("heal: {e:#}"));
            }
            let healed_ms = ms_since(t0);
            eprintln!(
                "chaos: +{:>6} ms  fault #{} {} healed",
                healed_ms, fault.index, fault.kind
            );
            FaultRecord {
                fault,
                began_ms,
                healed_ms,
                error,
            }
        });
    }

    let mut timeline = Vec::new();
    let mut supervise = tokio::time::interval(Duration::from_millis(500));
    while !faults.is_empty() {
        tokio::select! {
            Some(done) = faults.join_next() => timeline.push(done.context("a fault task panicked")?),
            _ = supervise.tick() => actuators.workers.lock().await.supervise(ms_since(t0))?,
        }
    }
    timeline.sort_by_key(|r| r.fault.index);
    let last_fault_healed_ms = timeline.iter().map(|r| r.healed_ms).max().unwrap_or(0);
    eprintln!(
        "chaos: +{last_fault_healed_ms:>6} ms  last fault healed; waiting for every request to end"
    );
    // Failed heals leave the stack broken: heal what can be healed before judging.
    for record in timeline.iter().filter(|r| r.error.is_some()) {
        let _ = actuators.heal(&record.fault).await;
    }

    let mut deletions = Vec::new();
    let end_deadline = t0 + Duration::from_millis(last_fault_healed_ms) + settings.end_bound;
    while !drivers.is_empty() {
        tokio::select! {
            Some(done) = drivers.join_next() => deletions.push(done.context("a deletion driver panicked")?),
            _ = supervise.tick() => actuators.workers.lock().await.supervise(ms_since(t0))?,
        }
    }
    deletions.sort_by_key(|d| d.plan.index);
    loop {
        let mut open = 0;
        for deletion in &mut deletions {
            if deletion.end.is_none() {
                if let Some(request) = &deletion.request {
                    deletion.end = read_end(&stores, request.request_id, t0).await;
                }
                if deletion.end.is_none() && deletion.request.is_some() {
                    open += 1;
                }
            }
        }
        if open == 0 || Instant::now() > end_deadline {
            break;
        }
        actuators.workers.lock().await.supervise(ms_since(t0))?;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let last_end_ms = deletions
        .iter()
        .filter_map(|d| d.end.as_ref().map(|e| e.at_ms))
        .max()
        .unwrap_or(0);
    eprintln!(
        "chaos: +{:>6} ms  requests ended; stopping traffic and workers",
        ms_since(t0)
    );

    if !traffic.is_running() {
        return Err(anyhow!(
            "demo serve exited before the end of the run; see {}",
            settings.log_dir.join("demo-serve.log").display()
        ));
    }
    let traffic = traffic.stop().await?;
    let (unplanned, starts, children) = {
        let mut workers = actuators.workers.lock().await;
        (
            workers.unplanned.clone(),
            workers.starts(),
            workers.hold_down_all(),
        )
    };
    for child in children {
        workers::terminate(child, term_grace).await;
    }
    for proxy in actuators.proxies.values() {
        proxy.lock().await.close().await;
    }

    eprintln!("chaos: checking the invariants");
    // Fresh connections: the run's own ones lived through every restart.
    let stores = connect_stores()
        .await
        .context("reconnecting to the stores to check the invariants")?;
    let violations = check(
        &stores,
        &deletions,
        &before,
        &traffic,
        last_fault_healed_ms,
        settings.end_bound,
    )
    .await?;
    Ok(RunRecord {
        schedule,
        timeline,
        deletions,
        last_fault_healed_ms,
        last_end_ms,
        unplanned_worker_exits: unplanned,
        worker_starts: starts,
        traffic,
        violations,
        end_bound_ms: u64::try_from(settings.end_bound.as_millis()).unwrap_or(u64::MAX),
    })
}

/// Submits one deletion at its moment, then aborts or approves it.
async fn drive(
    operators: Arc<Operators>,
    plan: DeletionPlan,
    target: Seeded,
    neighbour: Seeded,
    t0: Instant,
    deadline: Instant,
) -> DeletionOutcome {
    let mut outcome = DeletionOutcome {
        plan: plan.clone(),
        target_host: target.host.clone(),
        target_id: target.community_id,
        neighbour_host: neighbour.host,
        neighbour_id: neighbour.community_id,
        request: None,
        submitted_ms: None,
        decided_ms: None,
        sends: 0,
        end: None,
        driver_error: None,
    };
    tokio::time::sleep_until(t0 + Duration::from_millis(plan.submit_at_ms)).await;
    let submitted = match operators
        .submit(&target.host, target.community_id, deadline)
        .await
    {
        Ok(submitted) => submitted,
        Err(error) => {
            outcome.driver_error = Some(format!("{error:#}"));
            return outcome;
        }
    };
    outcome.submitted_ms = Some(ms_since(t0));
    outcome.request = Some(submitted.clone());
    let decided = match plan.abort {
        Some(AbortPoint::BeforeApproval) => operators.abort(&submitted, deadline).await,
        None => operators.approve(&submitted, plan.route, deadline).await,
        Some(AbortPoint::AfterApproval) => {
            match operators.approve(&submitted, plan.route, deadline).await {
                Ok(approvals) => operators
                    .abort_unless_irreversible(&submitted, deadline)
                    .await
                    .map(|aborts| approvals + aborts),
                Err(error) => Err(error),
            }
        }
    };
    match decided {
        Ok(sends) => {
            outcome.sends = sends;
            outcome.decided_ms = Some(ms_since(t0));
        }
        Err(error) => outcome.driver_error = Some(format!("{error:#}")),
    }
    outcome
}

/// The request's end, if it has one.
async fn read_end(stores: &Stores, request_id: Uuid, t0: Instant) -> Option<End> {
    let row: Option<(String, Option<String>)> =
        sqlx::query_as("SELECT stage, blocked_reason FROM deletion.requests WHERE id = $1")
            .bind(request_id)
            .fetch_optional(stores.store.pool())
            .await
            .ok()
            .flatten();
    let (stage, blocked) = row?;
    let state = match (stage.as_str(), blocked) {
        ("retention_pending", _) => EndState::Completed,
        ("aborted", _) => EndState::Aborted,
        (_, Some(reason)) => EndState::Blocked(reason),
        _ => return None,
    };
    Some(End {
        state,
        at_ms: ms_since(t0),
    })
}

/// Snapshots of `communities`, taken side by side.
async fn snapshots(
    stores: &Stores,
    communities: impl IntoIterator<Item = Uuid>,
) -> Result<BTreeMap<Uuid, Snapshot>> {
    let taken = futures::future::try_join_all(communities.into_iter().map(|id| async move {
        Ok::<_, anyhow::Error>((id, population::snapshot(stores, id).await?))
    }))
    .await?;
    Ok(taken.into_iter().collect())
}

/// Every invariant, over every deletion.
async fn check(
    stores: &Stores,
    deletions: &[DeletionOutcome],
    before: &BTreeMap<Uuid, Snapshot>,
    traffic: &SimulationReport,
    last_fault_healed_ms: u64,
    end_bound: Duration,
) -> Result<Vec<Violation>> {
    let mut found = Vec::new();
    let bound_ms = u64::try_from(end_bound.as_millis()).unwrap_or(u64::MAX);
    let empty = demo::simulator::AdmittedWrites::default();
    // A community must be its snapshot plus the serving writes admitted for it.
    let whole = |invariant, host: &str, before: &Snapshot, after: &Snapshot| {
        let writes = traffic
            .community(host)
            .and_then(|c| c.admitted.as_ref())
            .unwrap_or(&empty);
        invariants::whole(invariant, host, before, after, writes)
    };
    let after = snapshots(
        stores,
        deletions.iter().flat_map(|d| [d.target_id, d.neighbour_id]),
    )
    .await?;
    let after_of = |id: Uuid, host: &str| {
        after
            .get(&id)
            .ok_or_else(|| anyhow!("no snapshot of {host} after the run"))
    };
    for deletion in deletions {
        let subject = deletion
            .request
            .as_ref()
            .map_or(deletion.target_host.clone(), |r| r.request_id.to_string());
        if let Some(error) = &deletion.driver_error {
            found.push(Violation {
                invariant: "every request reaches an end",
                subject: subject.clone(),
                detail: format!("the operator could not drive it: {error}"),
            });
        }
        let target_after = after_of(deletion.target_id, &deletion.target_host)?;
        let neighbour_after = after_of(deletion.neighbour_id, &deletion.neighbour_host)?;
        let target_before = before
            .get(&deletion.target_id)
            .ok_or_else(|| anyhow!("no snapshot of {}", deletion.target_host))?;
        let neighbour_before = before
            .get(&deletion.neighbour_id)
            .ok_or_else(|| anyhow!("no snapshot of {}", deletion.neighbour_host))?;
        found.extend(whole(
            "every neighbour is its snapshot plus its admitted writes",
            &deletion.neighbour_host,
            neighbour_before,
            neighbour_after,
        ));
        match deletion.end.as_ref().map(|e| &e.state) {
            Some(EndState::Completed) => {
                found.extend(invariants::target_is_empty(
                    &deletion.target_host,
                    target_after,
                ));
                if deletion.plan.abort == Some(AbortPoint::BeforeApproval) {
                    found.push(Violation {
                        invariant: "every aborted target is whole and served again",
                        subject: subject.clone(),
                        detail: "planned as an abort before approval, yet it completed".into(),
                    });
                }
            }
            Some(EndState::Aborted) => {
                found.extend(whole(
                    "every aborted target is whole and served again",
                    &deletion.target_host,
                    target_before,
                    target_after,
                ));
                found.extend(
                    invariants::served_again(stores, &deletion.target_host, deletion.target_id)
                        .await,
                );
            }
            Some(EndState::Blocked(reason)) => found.push(Violation {
                invariant: "no request is left blocked",
                subject: subject.clone(),
                detail: format!("blocked: {reason}"),
            }),
            None => found.push(Violation {
                invariant: "every request reaches an end",
                subject: subject.clone(),
                detail: format!("no end within {} s of the last fault", end_bound.as_secs()),
            }),
        }
        if let Some(end) = &deletion.end
            && end.at_ms > last_fault_healed_ms + bound_ms
        {
            found.push(Violation {
                invariant: "every request reaches an end",
                subject: subject.clone(),
                detail: format!(
                    "ended {} ms after the last fault, beyond the bound of {bound_ms} ms",
                    end.at_ms - last_fault_healed_ms
                ),
            });
        }
        if let Some(request) = &deletion.request {
            let completed = matches!(
                deletion.end.as_ref().map(|e| &e.state),
                Some(EndState::Completed)
            );
            found.extend(invariants::proof_is_sound(stores, request.request_id, completed).await?);
        }
    }
    Ok(found)
}
