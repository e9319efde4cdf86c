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
use bench::double::{Double, Profile, counter};
use bench::floor::run_floor;
use bench::machine;
use bench::stack::Stack;
use bench::workflow::{FreezeKill, WorkflowTimings, WorkflowVariant, run_workflow};
use clap::Parser;
use uuid::Uuid;

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
    /// DeleteObjects calls in flight, floor and workflow alike.
    #[arg(long, default_value_t = 8)]
    delete_parallelism: u32,
    /// Which scenarios to run (comma-separated: overhead, s3-like, throttled, scale).
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
    let (neighbour, _) = seed(&stack, &double, "neighbour", 1_200).await?;
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
            other => bail!("unknown scenario {other:?}: overhead, s3-like, throttled or scale"),
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
        let (community, _) = seed(&self.stack, &self.double, scenario, versions).await?;
        self.double.reset().await?;
        eprintln!("{scenario}: floor on {versions} versions");
        let started = Instant::now();
        let timings = run_floor(
            &self.stack,
            community,
            self.args.delete_parallelism as usize,
            5_000,
        )
        .await?;
        let wall = started.elapsed();
        let stats = self.double.stats().await?;
        self.checked(
            Measured {
                list_calls: operations(&stats, "ListObjectVersions"),
                freeze_kill: None,
                freeze_resumed: Vec::new(),
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
        let (community, host) = seed(&self.stack, &self.double, scenario, versions).await?;
        self.double.reset().await?;
        let mut env = self.double.worker_env();
        env.push((
            "BUZZ_DELETE_RATE_PER_PREFIX".to_owned(),
            ceiling.to_string(),
        ));
        let variant = WorkflowVariant {
            bin_dir: self.bin_dir.clone(),
            delete_parallelism: parallelism,
            chunks_per_call: 100,
            delete_rounds_per_run: 40,
            chunk_entries: 1_000,
            timeout: Duration::from_secs(self.args.timeout_secs),
            env,
            kill_freeze_at_chunks: kill_at_chunks,
        };
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
                list_calls: operations(&stats, "ListObjectVersions"),
                freeze_kill: timings.freeze_kill.clone(),
                freeze_resumed: timings.freeze_resumed.clone(),
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
                failed_attempts: timings
                    .runs
                    .iter()
                    .flat_map(|r| r.failed_attempts.clone())
                    .collect(),
                slow_downs: counter(&stats, "slow_down_total"),
                gone: false,
                neighbour_untouched: false,
            },
            community,
        )
        .await
    }

    /// Fills in whether the target is gone and the neighbour untouched.
    async fn checked(&self, mut measured: Measured, community: Uuid) -> Result<Measured> {
        let left = remains(&self.stack, community).await?;
        measured.gone = left.is_empty();
        if !measured.gone {
            eprintln!("{}: {} left {left:?}", measured.scenario, measured.variant);
        }
        measured.neighbour_untouched =
            snapshot(&self.stack, self.neighbour).await? == self.neighbour_before;
        Ok(measured)
    }
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
async fn seed(stack: &Stack, double: &Double, tag: &str, versions: u64) -> Result<(Uuid, String)> {
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
    Ok((seeded.community_id, host))
}

fn render(args: &S3Args, results: &[Measured], started_at: &str, load_start: &str) -> String {
    let build = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let mut out = String::new();
    out.push_str("# Benchmark: community deletion at the speed of real S3 (the S3 double)\n\n");
    out.push_str(&format!(
        "Generated by `buzz-deletion-s3-bench` (crate `bench/`), run started {started_at} UTC, \
         {build} build. Every number below comes from that one run; rerun the command to \
         refresh this file. The real gateway's figures stay in [benchmarks.md](benchmarks.md).\n\n"
    ));
    out.push_str("## How to run\n\n```bash\nbash deploy/local/up && source .state/env\n");
    out.push_str(&format!(
        "(cd bench/s3-double && cargo build --release)\n\
         cargo build --release --workspace --bins\n\
         target/release/buzz-deletion-s3-bench --scenarios {} --overhead-versions {} \
         --s3-like-versions {} --throttled-versions {} --s3-limit {} --throttle-limit {} \
         --throttle-ceiling {} --latency-ms-delete {} --latency-ms-list {} \
         --latency-ms-other {} --delete-parallelism {} --scale-versions {} \
         --scale-baseline-versions {} --scale-kill-fraction {}{}\n```\n\n",
        args.scenarios.join(","),
        args.overhead_versions,
        args.s3_like_versions,
        args.throttled_versions,
        args.s3_limit,
        args.throttle_limit,
        args.throttle_ceiling,
        args.latency_ms_delete,
        args.latency_ms_list,
        args.latency_ms_other,
        args.delete_parallelism,
        args.scale_versions,
        args.scale_baseline_versions,
        args.scale_kill_fraction,
        if args.docs.as_os_str() == "docs/benchmarks-s3.md" {
            String::new()
        } else {
            format!(" --docs {}", args.docs.display())
        },
    ));
    out.push_str(
        "The double (`bench/s3-double`, `buzz-s3-double`) is an in-memory, versioned S3 server \
         on the `s3s` protocol crate; the worker, the CLI and the floor reach it through the \
         same AWS SDK client as the real gateway. Tenants are seeded straight into it (two \
         versions per key over `media/`, `thumbs/` and `_meta/`, a delete marker on one media \
         key in ten), with their rows and Redis keys in the local stack (versions/50 rows per \
         tenant table, at most 5,000, and as many keys). A partition is a tenant prefix: the \
         double refuses a DeleteObjects call with `503 SlowDown` when its prefix's token bucket \
         (one second of the limit) lacks one token per version.\n\n\
         - **(a) floor**: a bare program in the benchmark process: list the three prefixes, \
         DeleteObjects of at most 1,000 versions with the prefixes taking turns (the workflow's \
         order) and the same parallelism, batched row deletes, SCAN + UNLINK. No Temporal, no \
         fence, no manifest, no stamps, no audit trail.\n\
         - **(c) workflow**: the full `CommunityDeletion` workflow on a fresh \
         `buzz-deletion-worker` (chunks of 1,000, 100 chunks per `delete_chunks` call), timed \
         from `community approve` to `retention_pending`.\n\
         - **versions/s** divides the versions deleted (the double's own count for the \
         workflow) by the whole wall time; **deleting/s** by the object-deletion part only (the \
         floor's DeleteObjects calls; the workflow's `bindings_removed` stage). **listing** is \
         the floor's listing and the workflow's `drained` stage (the manifest freeze).\n\
         - **PG round trips per 1,000 versions**: top-level statements the worker role ran \
         (BEGIN and COMMIT included; with sqlx each is one round trip), read from \
         `pg_stat_statements` just before the approval and at the end, for every stage of the \
         deletion, divided by the versions deleted.\n\
         - **failed attempts**: activity attempts that failed and were retried, read from every \
         run's history (each started event's attempt number); **SlowDown**: the double's count \
         of throttled answers.\n\n",
    );
    out.push_str(&format!(
        "## Machine\n\n- {}.\n- Load average at start: {load_start}; at end: {}.\n- Everything \
         on loopback: the double, Temporal dev server, PostgreSQL, Redis, the worker and the \
         benchmark share the machine's cores.\n\n",
        machine::describe(),
        machine::load_average()
    ));
    out.push_str("## Results\n\n| scenario | variant | versions | wall s | versions/s | listing s | deleting s | deleting/s | worker CPU s | PG round trips per 1,000 versions | worker peak RSS | events/run | failed attempts | SlowDown | target gone | neighbour untouched |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n");
    for m in results {
        out.push_str(&format!(
            "| {} | {} | {} | {:.2} | {:.0} | {:.2} | {:.2} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            m.scenario,
            m.variant,
            m.versions,
            m.wall.as_secs_f64(),
            m.per_second(m.wall),
            m.listing.as_secs_f64(),
            m.deleting.as_secs_f64(),
            m.per_second(m.deleting),
            m.worker_cpu_seconds
                .map_or("—".to_owned(), |s| format!("{s:.1}")),
            m.worker_statements.map_or("—".to_owned(), |n| format!(
                "{:.1}",
                n as f64 * 1_000.0 / m.versions.max(1) as f64
            )),
            m.worker_peak_rss_kib
                .map_or("—".to_owned(), |k| format!("{:.1} MiB", k as f64 / 1024.0)),
            m.events_per_run.map_or("—".to_owned(), |e| e.to_string()),
            m.failed_attempts.len(),
            m.slow_downs,
            yes(m.gone),
            yes(m.neighbour_untouched),
        ));
    }
    out.push_str(&targets(args, results));
    let failures: Vec<&String> = results.iter().flat_map(|m| &m.failed_attempts).collect();
    if !failures.is_empty() {
        out.push_str("\n### Failed attempts\n\n");
        for failure in failures {
            out.push_str(&format!("- {failure}\n"));
        }
    }
    out
}

/// The scale scenario's rows: the large tenant completes, its runs stay small, the worker's
/// memory stays flat, and the killed freeze resumed without listing again what it had stored.
fn scale_targets(results: &[Measured]) -> String {
    let verdict = |met: bool| if met { "met" } else { "**not met**" };
    let scale = || results.iter().filter(|m| m.scenario == "scale");
    let (Some(small), Some(large)) = (
        scale().find(|m| m.freeze_kill.is_none()),
        scale().find(|m| m.freeze_kill.is_some()),
    ) else {
        return String::new();
    };
    let mut out = String::new();
    let events = large.events_per_run.unwrap_or(u64::MAX);
    out.push_str(&format!(
        "| scale: a {}-version tenant completes, history events per run ≤ 1,000 | {}; at most {events} events in one run | {} |\n",
        large.versions,
        if large.gone { "completed, nothing left" } else { "**not completed**" },
        verdict(large.gone && events <= 1_000),
    ));
    let rss = |m: &Measured| m.worker_peak_rss_kib.unwrap_or(0) as f64 / 1024.0;
    let ratio = rss(large) / rss(small).max(f64::MIN_POSITIVE);
    out.push_str(&format!(
        "| scale: worker peak RSS within 1.25× of the {}-version run | {:.1} MiB ÷ {:.1} MiB = {ratio:.2}× (the larger of the killed worker's and its replacement's) | {} |\n",
        small.versions,
        rss(large),
        rss(small),
        verdict(ratio <= 1.25),
    ));
    if let Some(killed) = &large.freeze_kill {
        let kept = large
            .freeze_resumed
            .iter()
            .filter_map(|detail| detail["chunks_kept"].as_u64())
            .max()
            .unwrap_or(0);
        // Pages beyond two full listings (the inventory and the freeze): verification and
        // partial last pages, as the small tenant measures them, and whatever was re-listed.
        let pages = |m: &Measured| m.versions as f64 / 1_000.0;
        let overhead = small.list_calls as f64 - 2.0 * pages(small);
        let relisted = (large.list_calls as f64 - 2.0 * pages(large) - overhead).max(0.0);
        let from_zero = killed.chunks_at_kill as f64;
        out.push_str(&format!(
            "| scale: the freeze killed mid-way resumes without re-listing what it stored | killed at {} stored chunks ({} versions); the replacement kept {kept} chunks (`freeze_resumed`); {} ListObjectVersions calls in all = two full listings ({:.0}) + verification and last pages ({overhead:.0}, from the small run) + {relisted:.0} re-listed pages, where restarting from zero would re-list ≈ {from_zero:.0} | {} |\n",
            killed.chunks_at_kill,
            killed.versions_at_kill,
            large.list_calls,
            2.0 * pages(large),
            verdict(kept >= killed.chunks_at_kill && relisted <= from_zero / 20.0),
        ));
    }
    out
}

fn yes(value: bool) -> &'static str {
    if value { "yes" } else { "**no**" }
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let values: Vec<f64> = values.collect();
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

fn targets(args: &S3Args, results: &[Measured]) -> String {
    let of = |scenario: &'static str, floor: bool| {
        results
            .iter()
            .filter(move |m| m.scenario == scenario && m.variant.starts_with("(a)") == floor)
    };
    let verdict = |met: bool| if met { "met" } else { "**not met**" };
    let mut out = String::from("\n## Targets\n\n| target | measured | verdict |\n|---|---|---|\n");
    let floor = mean(of("overhead", true).map(|m| m.per_second(m.wall)));
    let workflow = mean(of("overhead", false).map(|m| m.per_second(m.wall)));
    if let (Some(floor), Some(workflow)) = (floor, workflow) {
        let ratio = workflow / floor;
        let cpu = mean(of("overhead", false).filter_map(|m| {
            m.worker_cpu_seconds
                .map(|s| s / (m.versions as f64 / 1_000.0))
        }));
        let trips = mean(of("overhead", false).filter_map(|m| {
            m.worker_statements
                .map(|n| n as f64 * 1_000.0 / m.versions.max(1) as f64)
        }));
        out.push_str(&format!(
            "| overhead: workflow versions/s ÷ floor versions/s (means, no latency, no limit) ≥ 0.9 | {ratio:.2} ({workflow:.0} ÷ {floor:.0}); worker {} CPU-ms and {} PostgreSQL round trips per 1,000 versions | {} |\n",
            cpu.map_or("—".to_owned(), |c| format!("{:.0}", c * 1_000.0)),
            trips.map_or("—".to_owned(), |t| format!("{t:.1}")),
            verdict(ratio >= 0.9)
        ));
    }
    for m in of("s3-like", false) {
        let physical = 3.0 * f64::from(args.s3_limit);
        let deleting = m.per_second(m.deleting);
        let whole = m.per_second(m.wall);
        out.push_str(&format!(
            "| s3-like: {} versions over three prefixes delete at ≥ 0.85 × {physical:.0}/s | deleting {deleting:.0}/s = {:.2}×; whole workflow {whole:.0}/s = {:.2}× | {} (deleting), {} (whole) |\n",
            m.versions,
            deleting / physical,
            whole / physical,
            verdict(deleting >= 0.85 * physical),
            verdict(whole >= 0.85 * physical),
        ));
    }
    out.push_str(&scale_targets(results));
    for m in of("throttled", false) {
        let limit = 3.0 * f64::from(args.throttle_limit);
        let deleting = m.per_second(m.deleting);
        out.push_str(&format!(
            "| throttled: deleting ≥ 0.8 × the limit ({} per prefix × 3 = {limit:.0}/s), zero attempts failed by SlowDown | deleting {deleting:.0}/s = {:.2}×; {} failed attempts; {} SlowDown answers | {} |\n",
            args.throttle_limit,
            deleting / limit,
            m.failed_attempts.len(),
            m.slow_downs,
            verdict(deleting >= 0.8 * limit && m.failed_attempts.is_empty()),
        ));
    }
    out
}
