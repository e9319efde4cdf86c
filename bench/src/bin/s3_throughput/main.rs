//! `buzz-deletion-s3-bench`: community deletion at the speed of real S3, against the fast S3
//! double (`bench/s3-double`), side by side with the raw floor in one run.
//!
//! Three scenarios, each on freshly seeded tenants (objects seeded straight into the double,
//! rows and Redis keys into the local stack):
//! - **overhead**: the double with no latency and no limit, so only the client's own costs show:
//!   the floor (a bare program: list, DeleteObjects in the workflow's order and parallelism, row
//!   and key purge) against the full workflow, with the worker's CPU-seconds;
//! - **s3-like**: S3's documented 3,500 DELETEs per second per prefix and per-call latency, one
//!   large tenant over its three prefixes;
//! - **throttled**: the double's limit far below the worker's ceiling, so every prefix is
//!   throttled until its adaptive rate finds the limit; no activity attempt may fail.
//!
//! After every variant the target must be gone and the neighbour byte-identical. Writes a
//! markdown report. Not a test: run it by hand (see docs/benchmarks-s3.md).
#![deny(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use activities::s3::ObjectStore;
use anyhow::{Context, Result, bail};
use bench::check::{Snapshot, remains, snapshot};
use bench::cpu_account::{CpuAccount, CpuSnapshot};
use bench::double::{Double, Profile, counter};
use bench::fleet::{Overlap, WorkerUse, run_fleet};
use bench::floor::run_floor;
use bench::machine::{self, CpuTimes};
use bench::stack::Stack;
use bench::workflow::{FreezeKill, WorkflowTimings, WorkflowVariant, run_workflow};
use clap::Parser;
use uuid::Uuid;

mod report;

use report::render;

/// Community deletion against the fast S3 double.
#[derive(Debug, Clone, Parser)]
#[command(name = "buzz-deletion-s3-bench")]
struct S3Args {
    /// The double's binary (built with `cd bench/s3-double && cargo build --release`).
    #[arg(long, default_value = "bench/s3-double/target/release/buzz-s3-double")]
    double_exe: PathBuf,
    /// Object versions of the overhead scenario's tenants.
    #[arg(long, default_value_t = 200_000)]
    overhead_versions: u64,
    /// Object versions of the S3-like scenario's tenant.
    #[arg(long, default_value_t = 1_000_000)]
    s3_like_versions: u64,
    /// Object versions of the throttled scenario's tenant.
    #[arg(long, default_value_t = 300_000)]
    throttled_versions: u64,
    /// The S3-like profile's limit, versions per second per prefix (S3's documented rate).
    #[arg(long, default_value_t = 3_500)]
    s3_limit: u32,
    /// The throttled profile's limit, versions per second per prefix.
    #[arg(long, default_value_t = 2_000)]
    throttle_limit: u32,
    /// The worker's ceiling in the throttled scenario (far above the limit).
    #[arg(long, default_value_t = 20_000)]
    throttle_ceiling: u32,
    /// Milliseconds the S3-like and throttled profiles wait before a DeleteObjects answer.
    #[arg(long, default_value_t = 60)]
    latency_ms_delete: u64,
    /// Milliseconds they wait before a listing answer.
    #[arg(long, default_value_t = 30)]
    latency_ms_list: u64,
    /// Milliseconds they wait before any other answer.
    #[arg(long, default_value_t = 10)]
    latency_ms_other: u64,
    /// Object versions of the scale scenario's large tenant.
    #[arg(long, default_value_t = 10_000_000)]
    scale_versions: u64,
    /// Object versions of the scale scenario's small tenant (the peak-RSS reference).
    #[arg(long, default_value_t = 10_000)]
    scale_baseline_versions: u64,
    /// In the scale scenario, the worker is killed once the freeze stored this fraction of the
    /// large tenant's manifest chunks.
    #[arg(long, default_value_t = 0.4)]
    scale_kill_fraction: f64,
    /// Tenants of the fleet scenario, deleted at once.
    #[arg(long, default_value_t = 10)]
    fleet_tenants: u32,
    /// Object versions of each fleet tenant.
    #[arg(long, default_value_t = 100_000)]
    fleet_versions: u64,
    /// Worker processes of the fleet scenario, polling one task queue.
    #[arg(long, default_value_t = 2)]
    fleet_workers: usize,
    /// The fleet scenario's per-prefix limits (each also the workers' ceiling), one variant
    /// each: S3's documented rate, and one whose sum this machine can carry. At least 1,000:
    /// the double's bucket holds one second of its limit, so a full DeleteObjects call (1,000
    /// versions) could never be paid below that.
    #[arg(long, value_delimiter = ',', default_value = "3500,2000")]
    fleet_limits: Vec<u32>,
    /// DeleteObjects calls in flight, floor and workflow alike.
    #[arg(long, default_value_t = 8)]
    delete_parallelism: u32,
    /// Which scenarios to run (comma-separated: overhead, s3-like, throttled, scale, fleet).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "overhead,s3-like,throttled"
    )]
    scenarios: Vec<String>,
    /// Give up on one variant after this many seconds.
    #[arg(long, default_value_t = 1_800)]
    timeout_secs: u64,
    /// Directory holding `buzz-deletion` and `buzz-deletion-worker` (default: this binary's).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Where to write the markdown report ("-" writes nothing).
    #[arg(long, default_value = "docs/benchmarks-s3.md")]
    docs: PathBuf,
}

/// What one variant measured.
struct Measured {
    scenario: &'static str,
    variant: String,
    versions: u64,
    wall: Duration,
    /// The object-deletion part: the floor's DeleteObjects calls, the workflow's
    /// `bindings_removed` stage.
    deleting: Duration,
    /// The listing part: the floor's listing, the workflow's `drained` stage (the freeze).
    listing: Duration,
    worker_cpu_seconds: Option<f64>,
    /// Round trips the worker role made (`pg_stat_statements`), when counted.
    worker_statements: Option<u64>,
    worker_peak_rss_kib: Option<u64>,
    events_per_run: Option<u64>,
    failed_attempts: Vec<String>,
    slow_downs: u64,
    gone: bool,
    neighbour_untouched: bool,
    /// ListObjectVersions calls the double answered, from the submit (inventory) on.
    list_calls: u64,
    /// The worker killed mid-freeze, if the variant killed one.
    freeze_kill: Option<FreezeKill>,
    /// The `freeze_resumed` audit details.
    freeze_resumed: Vec<serde_json::Value>,
    /// For a fleet variant: its tenants, workers and what the machine spent.
    fleet: Option<FleetUse>,
    /// Where the machine's CPU went over the wall time (the floor's client is the benchmark
    /// process, the workflow's the worker); `None` where not measured.
    cpu: Option<CpuAccount>,
}

/// What a fleet variant ran on and used over its wall time.
struct FleetUse {
    tenants: u32,
    limit_per_prefix: u32,
    workers: Vec<WorkerUse>,
    machine: CpuTimes,
    machine_deleting: Option<CpuTimes>,
    double_cpu_seconds: Option<f64>,
    /// Each tenant's deleting stage and versions.
    tenant_deleting: Vec<TenantDeleting>,
    /// The aggregate while every tenant was deleting at once.
    all_deleting: Option<Overlap>,
}

/// One fleet tenant's approval, deleting stage (`drained` to `bindings_removed`) and versions.
struct TenantDeleting {
    approved: chrono::DateTime<chrono::Utc>,
    began: chrono::DateTime<chrono::Utc>,
    ended: chrono::DateTime<chrono::Utc>,
    versions: u64,
}

impl TenantDeleting {
    fn seconds(&self) -> f64 {
        (self.ended - self.began)
            .to_std()
            .map_or(0.0, |d| d.as_secs_f64())
    }
}

impl Measured {
    fn per_second(&self, over: Duration) -> f64 {
        self.versions as f64 / over.as_secs_f64().max(f64::MIN_POSITIVE)
    }
}

struct Bench<'a> {
    args: &'a S3Args,
    stack: Stack,
    double: Double,
    bin_dir: PathBuf,
    neighbour: Uuid,
    neighbour_before: Snapshot,
}

#[tokio::main]
async fn main() -> ExitCode {
    bench::install_crypto();
    let outcome = run(S3Args::parse()).await;
    bench::exit_code(
        "buzz-deletion-s3-bench",
        outcome,
        "a target was left behind or the neighbour was touched",
    )
}

async fn run(args: S3Args) -> Result<bool> {
    let bin_dir = testkit::process::bin_dir(args.bin_dir.as_deref())?;
    let shared = Stack::connect().await?;
    let double = Double::start(&args.double_exe).await?;
    let objects = ObjectStore::connect(&double.s3_config()).await?;
    objects
        .check_bucket()
        .await
        .context("the double's bucket")?;
    let stack = Stack {
        store: shared.store.clone(),
        objects,
        cache: shared.cache.clone(),
    };
    let started_at = chrono::Utc::now().format("%Y-%m-%d %H:%M").to_string();
    let load_start = machine::load_average();
    double.configure(Profile::UNLIMITED).await?;
    let (neighbour, _, _) = seed(&stack, &double, "neighbour", 1_200).await?;
    let neighbour_before = snapshot(&stack, neighbour).await?;
    let mut bench = Bench {
        args: &args,
        stack,
        double,
        bin_dir,
        neighbour,
        neighbour_before,
    };
    let mut results = Vec::new();
    for scenario in &args.scenarios {
        match scenario.as_str() {
            "overhead" => results.extend(bench.overhead().await?),
            "s3-like" => results.extend(bench.s3_like().await?),
            "throttled" => results.extend(bench.throttled().await?),
            "scale" => results.extend(bench.scale().await?),
            "fleet" => results.extend(bench.fleet().await?),
            other => {
                bail!("unknown scenario {other:?}: overhead, s3-like, throttled, scale or fleet")
            }
        }
    }
    let report = render(&args, &results, &started_at, &load_start);
    print!("{report}");
    if args.docs.as_os_str() != "-" {
        std::fs::write(&args.docs, &report)
            .with_context(|| format!("write {}", args.docs.display()))?;
        eprintln!("wrote {}", args.docs.display());
    }
    // The floor does not adapt to throttling: lift the limit before it deletes the neighbour.
    bench.double.configure(Profile::UNLIMITED).await?;
    run_floor(&bench.stack, bench.neighbour, 8, 5_000)
        .await
        .context("deleting the neighbour after the run")?;
    bench.double.stop().await;
    Ok(results.iter().all(|m| m.gone && m.neighbour_untouched))
}

impl Bench<'_> {
    fn s3_like_profile(&self, limit: u32) -> Profile {
        Profile {
            latency_ms_delete: self.args.latency_ms_delete,
            latency_ms_list: self.args.latency_ms_list,
            latency_ms_other: self.args.latency_ms_other,
            delete_rate_per_partition: f64::from(limit),
        }
    }

    async fn overhead(&mut self) -> Result<Vec<Measured>> {
        self.double.configure(Profile::UNLIMITED).await?;
        let versions = self.args.overhead_versions;
        let parallelism = self.args.delete_parallelism;
        let mut out = Vec::new();
        // ABBA: a c c a, so a drift in the machine's load weighs on both alike.
        for floor_now in [true, false, false, true] {
            if floor_now {
                out.push(self.floor("overhead", versions).await?);
            } else {
                out.push(self.workflow("overhead", versions, parallelism, 0).await?);
            }
        }
        Ok(out)
    }

    async fn s3_like(&mut self) -> Result<Vec<Measured>> {
        self.double
            .configure(self.s3_like_profile(self.args.s3_limit))
            .await?;
        let versions = self.args.s3_like_versions;
        let ceiling = self.args.s3_limit;
        Ok(vec![
            self.workflow("s3-like", versions, self.args.delete_parallelism, ceiling)
                .await?,
        ])
    }

    async fn throttled(&mut self) -> Result<Vec<Measured>> {
        self.double
            .configure(self.s3_like_profile(self.args.throttle_limit))
            .await?;
        let versions = self.args.throttled_versions;
        Ok(vec![
            self.workflow(
                "throttled",
                versions,
                self.args.delete_parallelism,
                self.args.throttle_ceiling,
            )
            .await?,
        ])
    }

    /// A small tenant (the peak-RSS reference), then a large one whose freeze loses its worker
    /// to SIGKILL part-way: the replacement must resume from the stored chunks.
    async fn scale(&mut self) -> Result<Vec<Measured>> {
        self.double.configure(Profile::UNLIMITED).await?;
        let parallelism = self.args.delete_parallelism;
        let small = self
            .workflow_killed(
                "scale",
                self.args.scale_baseline_versions,
                parallelism,
                None,
            )
            .await?;
        let versions = self.args.scale_versions;
        let chunks = (versions as f64 / 1_000.0 * self.args.scale_kill_fraction).max(1.0) as u64;
        let large = self
            .workflow_killed("scale", versions, parallelism, Some(chunks))
            .await?;
        Ok(vec![small, large])
    }

    /// The raw floor on a fresh tenant of `versions`.
    async fn floor(&mut self, scenario: &'static str, versions: u64) -> Result<Measured> {
        let (community, _, _) = seed(&self.stack, &self.double, scenario, versions).await?;
        self.double.reset().await?;
        eprintln!("{scenario}: floor on {versions} versions");
        let cpu_before = CpuSnapshot::take(std::process::id())?;
        let started = Instant::now();
        let timings = run_floor(
            &self.stack,
            community,
            self.args.delete_parallelism as usize,
            5_000,
        )
        .await?;
        let wall = started.elapsed();
        let cpu = CpuSnapshot::take(std::process::id())?.since(&cpu_before);
        let stats = self.double.stats().await?;
        self.checked(
            Measured {
                cpu: Some(cpu),
                list_calls: operations(&stats, "ListObjectVersions"),
                freeze_kill: None,
                freeze_resumed: Vec::new(),
                fleet: None,
                scenario,
                variant: format!("(a) floor, parallelism {}", self.args.delete_parallelism),
                versions: timings.versions_deleted,
                wall,
                deleting: timings.delete,
                listing: timings.list,
                worker_cpu_seconds: None,
                worker_statements: None,
                worker_peak_rss_kib: None,
                events_per_run: None,
                failed_attempts: Vec::new(),
                slow_downs: counter(&stats, "slow_down_total"),
                gone: false,
                neighbour_untouched: false,
            },
            community,
        )
        .await
    }

    /// The workflow on a fresh tenant of `versions`, the worker's ceiling at `ceiling` (0: none).
    async fn workflow(
        &mut self,
        scenario: &'static str,
        versions: u64,
        parallelism: u32,
        ceiling: u32,
    ) -> Result<Measured> {
        self.workflow_with(scenario, versions, parallelism, ceiling, None)
            .await
    }

    /// The workflow without a ceiling; its worker is killed once the freeze stored
    /// `kill_at_chunks` chunks, when given.
    async fn workflow_killed(
        &mut self,
        scenario: &'static str,
        versions: u64,
        parallelism: u32,
        kill_at_chunks: Option<u64>,
    ) -> Result<Measured> {
        self.workflow_with(scenario, versions, parallelism, 0, kill_at_chunks)
            .await
    }

    async fn workflow_with(
        &mut self,
        scenario: &'static str,
        versions: u64,
        parallelism: u32,
        ceiling: u32,
        kill_at_chunks: Option<u64>,
    ) -> Result<Measured> {
        let (community, host, _) = seed(&self.stack, &self.double, scenario, versions).await?;
        self.double.reset().await?;
        let variant = self.variant(parallelism, ceiling, kill_at_chunks);
        eprintln!("{scenario}: workflow on {versions} versions (ceiling {ceiling})");
        let timings = run_workflow(&self.stack, &host, &variant, scenario).await?;
        let stats = self.double.stats().await?;
        let stage = |name: &str| stage_time(&timings, name);
        let mut ceiling_text = if ceiling == 0 {
            "no ceiling".to_owned()
        } else {
            format!("ceiling {ceiling}/s")
        };
        if let Some(killed) = &timings.freeze_kill {
            ceiling_text.push_str(&format!(
                ", worker killed at {} stored chunks (its peak RSS {:.1} MiB; the replacement's {:.1} MiB)",
                killed.chunks_at_kill,
                killed.peak_rss_kib as f64 / 1024.0,
                timings.worker_peak_rss_kib as f64 / 1024.0,
            ));
        }
        self.checked(
            Measured {
                cpu: timings.cpu,
                list_calls: operations(&stats, "ListObjectVersions"),
                freeze_kill: timings.freeze_kill.clone(),
                freeze_resumed: timings.freeze_resumed.clone(),
                fleet: None,
                scenario,
                variant: format!("(c) workflow, parallelism {parallelism}, {ceiling_text}"),
                versions: counter(&stats, "versions_deleted"),
                wall: timings.wall,
                deleting: stage("bindings_removed"),
                listing: stage("drained"),
                worker_cpu_seconds: Some(timings.worker_cpu_seconds),
                worker_statements: timings.worker_statements,
                worker_peak_rss_kib: Some(
                    timings.worker_peak_rss_kib.max(
                        timings
                            .freeze_kill
                            .as_ref()
                            .map_or(0, |killed| killed.peak_rss_kib),
                    ),
                ),
                events_per_run: timings.runs.iter().map(|r| r.events).max(),
                failed_attempts: failed_attempts(&timings.runs),
                slow_downs: counter(&stats, "slow_down_total"),
                gone: false,
                neighbour_untouched: false,
            },
            community,
        )
        .await
    }

    /// The workflow's settings on the double: chunks of 1,000, 100 per `delete_chunks` call, the
    /// worker's per-prefix ceiling at `ceiling` (0: none), killed mid-freeze when asked.
    fn variant(
        &self,
        parallelism: u32,
        ceiling: u32,
        kill_at_chunks: Option<u64>,
    ) -> WorkflowVariant {
        let mut env = self.double.worker_env();
        env.push((
            "BUZZ_DELETE_RATE_PER_PREFIX".to_owned(),
            ceiling.to_string(),
        ));
        WorkflowVariant {
            bin_dir: self.bin_dir.clone(),
            delete_parallelism: parallelism,
            chunks_per_call: 100,
            delete_rounds_per_run: 40,
            chunk_entries: 1_000,
            timeout: Duration::from_secs(self.args.timeout_secs),
            env,
            kill_freeze_at_chunks: kill_at_chunks,
        }
    }

    /// Many tenants at once on a few workers, once per limit: the aggregate against the sum of
    /// their prefixes' limits, and where the machine's CPU went.
    async fn fleet(&mut self) -> Result<Vec<Measured>> {
        let mut out = Vec::new();
        for limit in self.args.fleet_limits.clone() {
            out.push(self.fleet_at(limit).await?);
        }
        Ok(out)
    }

    async fn fleet_at(&mut self, limit: u32) -> Result<Measured> {
        self.double.configure(Profile::UNLIMITED).await?;
        let tenants = self.args.fleet_tenants;
        let versions = self.args.fleet_versions;
        let mut seeded = Vec::new();
        for _ in 0..tenants {
            seeded.push(seed(&self.stack, &self.double, "fleet", versions).await?);
        }
        self.double.configure(self.s3_like_profile(limit)).await?;
        self.double.reset().await?;
        let variant = self.variant(self.args.delete_parallelism, limit, None);
        let workers = self.args.fleet_workers;
        eprintln!(
            "fleet: {tenants} tenants of {versions} versions on {workers} workers (limit {limit}/s per prefix)"
        );
        let hosts: Vec<String> = seeded.iter().map(|(_, host, _)| host.clone()).collect();
        let watched: Vec<u32> = self.double.pid().into_iter().collect();
        let timings = run_fleet(
            &self.stack,
            &hosts,
            &variant,
            workers,
            &watched,
            Some(self.double.deleted_counter()),
        )
        .await?;
        let stats = self.double.stats().await?;
        let mut measured = Measured {
            cpu: None,
            list_calls: operations(&stats, "ListObjectVersions"),
            freeze_kill: None,
            freeze_resumed: Vec::new(),
            fleet: Some(FleetUse {
                tenants,
                limit_per_prefix: limit,
                workers: timings.workers.clone(),
                machine: timings.machine,
                machine_deleting: timings.machine_deleting,
                double_cpu_seconds: timings.watched_cpu_seconds.first().copied().flatten(),
                tenant_deleting: timings
                    .tenant_stages
                    .iter()
                    .zip(&seeded)
                    .filter_map(|(stages, (_, _, created))| {
                        stages.map(|stages| TenantDeleting {
                            approved: stages.approved,
                            began: stages.drained,
                            ended: stages.bindings_removed,
                            versions: *created,
                        })
                    })
                    .collect(),
                all_deleting: timings.all_deleting,
            }),
            scenario: "fleet",
            variant: format!(
                "(c) {tenants} workflows at once on {workers} workers, parallelism {} each, limit and ceiling {limit}/s per prefix",
                self.args.delete_parallelism
            ),
            versions: counter(&stats, "versions_deleted"),
            wall: timings.wall,
            deleting: timings.deleting,
            listing: timings.listing,
            worker_cpu_seconds: Some(timings.workers.iter().map(|w| w.cpu_seconds).sum()),
            worker_statements: timings.worker_statements,
            worker_peak_rss_kib: timings.workers.iter().map(|w| w.peak_rss_kib).max(),
            events_per_run: timings.runs.iter().map(|r| r.events).max(),
            failed_attempts: failed_attempts(&timings.runs),
            slow_downs: counter(&stats, "slow_down_total"),
            gone: true,
            neighbour_untouched: true,
        };
        for (community, _, _) in &seeded {
            let (gone, neighbour_untouched) = self.outcome(&measured, *community).await?;
            measured.gone &= gone;
            measured.neighbour_untouched &= neighbour_untouched;
        }
        Ok(measured)
    }

    /// Fills in whether the target is gone and the neighbour untouched.
    async fn checked(&self, mut measured: Measured, community: Uuid) -> Result<Measured> {
        (measured.gone, measured.neighbour_untouched) = self.outcome(&measured, community).await?;
        Ok(measured)
    }

    /// Whether `community`, deleted by `measured`, is gone, and the neighbour untouched.
    async fn outcome(&self, measured: &Measured, community: Uuid) -> Result<(bool, bool)> {
        let left = remains(&self.stack, community).await?;
        if !left.is_empty() {
            eprintln!("{}: {} left {left:?}", measured.scenario, measured.variant);
        }
        let untouched = snapshot(&self.stack, self.neighbour).await? == self.neighbour_before;
        Ok((left.is_empty(), untouched))
    }
}

/// Every failed activity attempt of `runs`.
fn failed_attempts(runs: &[bench::history::RunHistory]) -> Vec<String> {
    runs.iter()
        .flat_map(|r| r.failed_attempts.iter().cloned())
        .collect()
}

/// Calls of one S3 operation in the double's stats answer.
fn operations(stats: &serde_json::Value, operation: &str) -> u64 {
    stats["operations"][operation].as_u64().unwrap_or(0)
}

fn stage_time(timings: &WorkflowTimings, name: &str) -> Duration {
    timings
        .stages
        .iter()
        .filter(|(stage, _)| stage == name)
        .map(|(_, took)| *took)
        .sum()
}

/// A community with `versions` object versions in the double and a few rows and Redis keys.
/// Seeds one tenant: its rows and keys in the stack, its versions in the double; returns its
/// community, host and the versions created.
async fn seed(
    stack: &Stack,
    double: &Double,
    tag: &str,
    versions: u64,
) -> Result<(Uuid, String, u64)> {
    let host = format!("bench-s3-{tag}-{}.bench.example", Uuid::new_v4().simple());
    let rows = u32::try_from((versions / 50).clamp(10, 5_000)).unwrap_or(5_000);
    let plan = demo::SeedPlan {
        objects: 0,
        versions: 1,
        delete_markers: 0,
        rows,
        redis_keys: rows,
        parallelism: 8,
    };
    let seeded = demo::seed_community(&stack.store, &stack.objects, &stack.cache, &host, plan)
        .await
        .with_context(|| format!("seeding {host}"))?;
    let created = double.seed_tenant(seeded.community_id, versions).await?;
    eprintln!("seeded {host}: {created} versions, {rows} rows per table");
    Ok((seeded.community_id, host, created))
}
