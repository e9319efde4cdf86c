//! `buzz-deletion-bench`: community deletion throughput on the local stack, the workflow against
//! the raw floor, side by side in one run. Not a test: run it by hand (see docs/benchmarks.md).
#![deny(unsafe_code)]

use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use demo::{SeedReport, seed_community};
use uuid::Uuid;

use bench::args::BenchArgs;
use bench::check::{Snapshot, remains, snapshot};
use bench::floor::run_floor;
use bench::report::{Checked, Outcome, Report, SizeResult};
use bench::stack::Stack;
use bench::workflow::{WorkflowVariant, run_workflow};
use bench::{document, fence_cost, machine, plan, probe};

#[tokio::main]
async fn main() -> ExitCode {
    bench::install_crypto();
    let outcome = run(BenchArgs::parse()).await;
    bench::exit_code(
        "buzz-deletion-bench",
        outcome,
        "a variant failed, left the target behind or touched the neighbour",
    )
}

/// Runs the whole benchmark; `Ok(false)` when any outcome check failed.
async fn run(mut args: BenchArgs) -> Result<bool> {
    args.sizes.sort_unstable();
    args.sizes.dedup();
    let bin_dir = testkit::process::bin_dir(args.bin_dir.as_deref())?;
    let connected = Stack::connect().await?;
    let stack = &connected;
    let started_at = chrono::Utc::now().format("%Y-%m-%d %H:%M").to_string();
    let load_start = machine::load_average();

    let neighbour = seed(
        stack,
        "neighbour",
        plan::neighbour_plan(&args.sizes, args.seed_parallelism),
    )
    .await?;
    let neighbour_before = snapshot(stack, neighbour.community_id).await?;

    let probe = if args.probe_versions > 0 {
        probe::run_probe(
            &stack.objects,
            &args.probe_parallelism,
            args.probe_versions,
            args.seed_parallelism,
        )
        .await?
    } else {
        Vec::new()
    };

    let workflow_variant = |parallelism: u32| WorkflowVariant {
        bin_dir: bin_dir.clone(),
        delete_parallelism: parallelism,
        chunks_per_call: args.chunks_per_call,
        delete_rounds_per_run: args.delete_rounds_per_run,
        chunk_entries: args.chunk_entries,
        timeout: Duration::from_secs(args.variant_timeout_secs),
        env: Vec::new(),
        kill_freeze_at_chunks: None,
    };
    let mut sizes = Vec::new();
    for &size in &args.sizes {
        let target_plan = plan::tenant_plan(size, args.seed_parallelism);
        let parallelism = args.delete_parallelism as usize;
        let batch_rows = args.purge_batch_rows;
        let ctx = VariantContext {
            stack,
            neighbour: neighbour.community_id,
            neighbour_before: &neighbour_before,
            plan: target_plan,
            size,
        };
        let parallel_variant = workflow_variant(args.delete_parallelism);
        let mut floor = Vec::new();
        let mut parallel = Vec::new();
        let mut seeded = None;
        for repetition in 0..args.repeat {
            // ABBA: a c, then c a, so a steady drift in load weighs on both variants alike.
            let floor_first = repetition % 2 == 0;
            for run_floor_now in [floor_first, !floor_first] {
                if run_floor_now {
                    let (outcome, report) = ctx
                        .measure("a-floor", |seeded| async move {
                            run_floor(stack, seeded.community_id, parallelism, batch_rows).await
                        })
                        .await?;
                    floor.push(outcome);
                    seeded = Some(report);
                } else {
                    let (outcome, _) = ctx
                        .measure("c-workflow", |seeded| {
                            let variant = &parallel_variant;
                            async move { run_workflow(stack, &seeded.host, variant, "parallel").await }
                        })
                        .await?;
                    parallel.push(outcome);
                }
            }
        }
        let seeded = seeded.context("no repetition ran")?;
        let first_parallel = parallel.iter().find_map(|o| o.as_ref().ok());
        let fence_check = match first_parallel {
            Some(c) => Some(fence_cost::mean_fence_check(stack, c.timings.request_id).await?),
            None => None,
        };
        let sequential_variant = workflow_variant(1);
        let (sequential, _) = ctx
            .measure("b-sequential", |seeded| {
                let variant = &sequential_variant;
                async move { run_workflow(stack, &seeded.host, variant, "sequential").await }
            })
            .await?;
        sizes.push(SizeResult {
            size,
            versions: seeded.object_versions + seeded.delete_markers,
            rows: seeded.rows.iter().map(|t| t.rows).sum::<u64>() + 1,
            keys: seeded.redis_keys,
            fence_check,
            floor,
            sequential,
            parallel,
        });
    }

    if !args.keep_neighbour {
        run_floor(
            stack,
            neighbour.community_id,
            args.delete_parallelism as usize,
            args.purge_batch_rows,
        )
        .await
        .context("deleting the neighbour after the run")?;
    }

    let report = Report {
        command: args.command_line(),
        machine: machine::describe(),
        started_at,
        load_start,
        load_end: machine::load_average(),
        build: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        plan: plan::describe(),
        delete_parallelism: args.delete_parallelism,
        chunk_entries: args.chunk_entries,
        chunks_per_call: args.chunks_per_call,
        delete_rounds_per_run: args.delete_rounds_per_run,
        purge_batch_rows: args.purge_batch_rows,
        neighbour_versions: neighbour.object_versions + neighbour.delete_markers,
        probe,
        sizes,
    };
    print!("{}", report.render());
    if args.docs.as_os_str() != "-" {
        std::fs::write(&args.docs, document::render(&report))
            .with_context(|| format!("write {}", args.docs.display()))?;
        eprintln!("wrote {}", args.docs.display());
    }
    Ok(report.sizes.iter().all(SizeResult::all_checks_passed))
}

/// Seeds a community with a host no other run uses.
async fn seed(stack: &Stack, tag: &str, plan: demo::SeedPlan) -> Result<SeedReport> {
    let host = format!("bench-{tag}-{}.bench.example", Uuid::new_v4().simple());
    eprintln!(
        "seeding {host}: {} versions, {} rows per table, {} keys",
        plan.objects * 3 * plan.versions,
        plan.rows,
        plan.redis_keys
    );
    seed_community(&stack.store, &stack.objects, &stack.cache, &host, plan)
        .await
        .with_context(|| format!("seeding {host}"))
}

/// What every variant of one size shares.
struct VariantContext<'a> {
    stack: &'a Stack,
    neighbour: Uuid,
    neighbour_before: &'a Snapshot,
    plan: demo::SeedPlan,
    size: u32,
}

impl VariantContext<'_> {
    /// Seeds a fresh target, runs `variant` on it, then checks the target is gone and the
    /// neighbour untouched. A failing variant is recorded (and its target cleaned up by the
    /// floor, best effort); only a failure to seed or to check ends the run.
    async fn measure<T, F, Fut>(&self, name: &str, variant: F) -> Result<(Outcome<T>, SeedReport)>
    where
        F: FnOnce(SeedReport) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let seeded = seed(self.stack, &format!("{}-{name}", self.size), self.plan).await?;
        let load_at_start = machine::load_average();
        eprintln!("size {}: running {name} (load {load_at_start})", self.size);
        let measured = variant(seeded.clone()).await;
        if let Err(error) = &measured {
            eprintln!("size {}: {name} failed: {error:#}", self.size);
            let _ = run_floor(self.stack, seeded.community_id, 8, 5_000).await;
        }
        let target_left = remains(self.stack, seeded.community_id).await?;
        let neighbour_untouched =
            snapshot(self.stack, self.neighbour).await? == *self.neighbour_before;
        eprintln!(
            "size {}: {name} done; target left {target_left:?}, neighbour untouched: {neighbour_untouched}",
            self.size
        );
        let outcome = measured
            .map(|timings| Checked {
                timings,
                target_left,
                neighbour_untouched,
                load_at_start,
            })
            .map_err(|e| format!("{e:#}"));
        Ok((outcome, seeded))
    }
}
