//! `buzz-deletion-log-bench`: what completing a deletion costs as the transparency log grows.
//!
//! For each log size it creates a database of its own, fills its log with that many receipts
//! (`bench::log_fill`), then deletes small communities through the real worker and CLI on it,
//! one after another, and measures each deletion's completion stage (from `logically_verified`
//! to `retention_pending`: issuing, signing and logging the receipt), the rows PostgreSQL read
//! during the whole deletion (`pg_stat_user_tables`), and checks the receipt's certificate
//! verifies against the log's new checkpoint, whose proof is rebuilt from every stored leaf.
//! Writes a markdown report. Not a test: run it by hand (see docs/benchmarks-log.md).
#![deny(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use activities::certificates::{ReceiptKey, SIGNING_KEY_FILE_ENV, load_receipt_key};
use anyhow::{Context, Result, anyhow, bail};
use bench::check::remains;
use bench::log_fill::fill_log;
use bench::machine;
use bench::stack::{Stack, env};
use bench::table_reads::ReadSnapshot;
use bench::workflow::{WorkflowVariant, run_workflow};
use certificate::keys::KeyRing;
use clap::Parser;
use uuid::Uuid;

/// The tables of the transparency log and the receipts it covers.
const LOG_TABLES: [&str; 3] = [
    "deletion.transparency_log",
    "deletion.log_checkpoints",
    "deletion.receipts",
];

/// The largest allowed spread between the cheapest and the dearest log size (the target).
const FLAT_WITHIN: f64 = 2.0;

/// Completion cost against the size of the transparency log.
#[derive(Debug, Clone, Parser)]
#[command(name = "buzz-deletion-log-bench")]
struct LogArgs {
    /// Receipts already in the log before the measured deletions (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,10000,1000000")]
    receipts: Vec<u64>,
    /// Deletions measured per log size (the median is compared).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    repeat: u32,
    /// Give up on one deletion after this many seconds.
    #[arg(long, default_value_t = 300)]
    timeout_secs: u64,
    /// Directory holding `buzz-deletion` and `buzz-deletion-worker` (default: this binary's).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Where to write the markdown report ("-" writes nothing).
    #[arg(long, default_value = "docs/benchmarks-log.md")]
    docs: PathBuf,
}

/// One measured deletion.
struct Completion {
    receipts_before: u64,
    completion: Duration,
    whole: Duration,
    reads: ReadSnapshot,
    leaf_index: u64,
    tree_size: u64,
}

/// One log size: how long filling it took, and its deletions.
struct SizeRun {
    receipts: u64,
    fill: Duration,
    completions: Vec<Completion>,
}

#[tokio::main]
async fn main() -> ExitCode {
    bench::install_crypto();
    let outcome = run(LogArgs::parse()).await;
    bench::exit_code(
        "buzz-deletion-log-bench",
        outcome,
        &format!("completion cost is not flat within {FLAT_WITHIN}x across the log sizes"),
    )
}

async fn run(args: LogArgs) -> Result<bool> {
    let bin_dir = testkit::process::bin_dir(args.bin_dir.as_deref())?;
    let shared = Stack::connect().await?;
    let key_file = env(SIGNING_KEY_FILE_ENV)?;
    let key = load_receipt_key(std::path::Path::new(&key_file)).map_err(|e| anyhow!(e))?;
    let started_at = chrono::Utc::now().format("%Y-%m-%d %H:%M").to_string();
    let load_start = machine::load_average();
    let mut runs = Vec::new();
    for &receipts in &args.receipts {
        runs.push(measure_size(&args, &bin_dir, &shared, &key, receipts).await?);
    }
    let report = render(&args, &runs, &started_at, &load_start);
    print!("{report}");
    if args.docs.as_os_str() != "-" {
        std::fs::write(&args.docs, &report)
            .with_context(|| format!("write {}", args.docs.display()))?;
        eprintln!("wrote {}", args.docs.display());
    }
    Ok(spread(&runs, |c| c.completion.as_secs_f64()) <= FLAT_WITHIN
        && spread(&runs, |c| log_rows(c) as f64) <= FLAT_WITHIN)
}

/// A fresh database with `receipts` in its log, and `args.repeat` deletions on it.
async fn measure_size(
    args: &LogArgs,
    bin_dir: &std::path::Path,
    shared: &Stack,
    key: &ReceiptKey,
    receipts: u64,
) -> Result<SizeRun> {
    let db = testkit::private_db::private_database(&format!("log{receipts}")).await;
    let migrated = db.migrated_owner_store(2).await;
    migrated.pool().close().await;
    let measured = fill_and_delete(args, bin_dir, shared, key, receipts, &db).await;
    testkit::private_db::drop_database(&db.name).await;
    measured
}

/// Fills the log of `db` and measures `args.repeat` deletions on it.
async fn fill_and_delete(
    args: &LogArgs,
    bin_dir: &std::path::Path,
    shared: &Stack,
    key: &ReceiptKey,
    receipts: u64,
    db: &testkit::private_db::PrivateDatabase,
) -> Result<SizeRun> {
    eprintln!("log of {receipts}: filling {}", db.name);
    let fill_started = Instant::now();
    fill_log(&db.owner, key, receipts).await?;
    let fill = fill_started.elapsed();
    let variant = WorkflowVariant {
        bin_dir: bin_dir.to_path_buf(),
        delete_parallelism: 8,
        chunks_per_call: 100,
        delete_rounds_per_run: 40,
        chunk_entries: 1_000,
        timeout: Duration::from_secs(args.timeout_secs),
        env: vec![
            ("DATABASE_URL".to_owned(), db.worker.clone()),
            ("BUZZ_OWNER_DATABASE_URL".to_owned(), db.owner.clone()),
        ],
        kill_freeze_at_chunks: None,
    };
    let mut completions = Vec::new();
    for round in 0..args.repeat {
        let before = receipts + u64::from(round);
        completions.push(delete_one(shared, &db.owner, &variant, key, before).await?);
    }
    Ok(SizeRun {
        receipts,
        fill,
        completions,
    })
}

/// Seeds a small community on the database at `owner_url`, deletes it through the worker, and
/// measures the deletion; its receipt must become leaf `receipts_before`.
async fn delete_one(
    shared: &Stack,
    owner_url: &str,
    variant: &WorkflowVariant,
    key: &ReceiptKey,
    receipts_before: u64,
) -> Result<Completion> {
    let host = format!("bench-log-{}.bench.example", Uuid::new_v4().simple());
    let stack = shared.on_database(owner_url).await?;
    let seeded = demo::seed_community(&stack.store, &stack.objects, &stack.cache, &host, PLAN)
        .await
        .with_context(|| format!("seeding {host}"))?;
    stack.store.pool().close().await;
    settle().await;
    let before = ReadSnapshot::take(owner_url).await?;

    let stack = shared.on_database(owner_url).await?;
    eprintln!("log of {receipts_before}: deleting {host}");
    let timings = run_workflow(&stack, &host, variant, "log").await?;
    stack.store.pool().close().await;
    settle().await;
    let reads = ReadSnapshot::take(owner_url).await?.since(&before);

    let stack = shared.on_database(owner_url).await?;
    let left = remains(&stack, seeded.community_id).await?;
    if !left.is_empty() {
        bail!("{host} was not wholly deleted: {left:?}");
    }
    let certificate = stack
        .store
        .certificate(timings.request_id, None)
        .await
        .context("exporting the receipt's certificate")?;
    stack.store.pool().close().await;
    let json = serde_json::to_value(&certificate)?;
    let keys = KeyRing::new(vec![key.signing_key().public_key()]);
    let verified = certificate::verify::verify_certificate(&json, &keys, None).map_err(|p| {
        anyhow!(
            "the certificate of {} does not verify: {p:?}",
            timings.request_id
        )
    })?;
    if verified.leaf_index != receipts_before {
        bail!(
            "the receipt became leaf {} of a log that held {receipts_before}",
            verified.leaf_index
        );
    }
    let completion = timings
        .stages
        .iter()
        .find(|(stage, _)| stage == "retention_pending")
        .map(|(_, took)| *took)
        .context("no retention_pending checkpoint")?;
    Ok(Completion {
        receipts_before,
        completion,
        whole: timings.wall,
        reads,
        leaf_index: verified.leaf_index,
        tree_size: verified.tree_size,
    })
}

/// The tenant each measured deletion removes: small, so the completion is what varies.
const PLAN: demo::SeedPlan = demo::SeedPlan {
    objects: 20,
    versions: 1,
    delete_markers: 2,
    rows: 20,
    redis_keys: 20,
    parallelism: 8,
};

/// Backends report their table statistics when they exit; give the closed ones a moment.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(500)).await;
}

fn log_rows(completion: &Completion) -> i64 {
    completion.reads.rows_of(&LOG_TABLES)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// The largest per-size median over the smallest (1 when every median is 0).
fn spread(runs: &[SizeRun], measure: impl Fn(&Completion) -> f64) -> f64 {
    let medians: Vec<f64> = runs
        .iter()
        .map(|run| median(run.completions.iter().map(&measure).collect()))
        .collect();
    let low = medians.iter().copied().fold(f64::INFINITY, f64::min);
    let high = medians.iter().copied().fold(0.0, f64::max);
    if high == 0.0 {
        1.0
    } else {
        high / low.max(f64::MIN_POSITIVE)
    }
}

fn render(args: &LogArgs, runs: &[SizeRun], started_at: &str, load_start: &str) -> String {
    let sizes: Vec<String> = args.receipts.iter().map(u64::to_string).collect();
    let build = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let mut out = String::new();
    out.push_str("# Benchmark: completing a deletion as the transparency log grows\n\n");
    out.push_str(&format!(
        "Generated by `buzz-deletion-log-bench` (crate `bench/`), run started {started_at} UTC, \
         {build} build. Every number below comes from that one run; rerun the command to \
         refresh this file.\n\n"
    ));
    out.push_str("## How to run\n\n```bash\nbash deploy/local/up && source .state/env\n");
    out.push_str(&format!(
        "cargo build --release --workspace --bins\n\
         target/release/buzz-deletion-log-bench --receipts {} --repeat {}\n```\n\n",
        sizes.join(","),
        args.repeat
    ));
    out.push_str(
        "For each log size the benchmark creates a PostgreSQL database of its own (the shared \
         stack's database is never given filler receipts), migrates it and fills its log: that \
         many finished user requests, a stored receipt for each, that many leaves, and one \
         checkpoint over them signed with the worker's receipt key and carrying the log's right \
         edge, as the worker's own appends leave it. Then it deletes small communities (60 \
         object versions, 120 rows, 20 Redis keys) one after another through a fresh \
         `buzz-deletion-worker` and the operator CLI on that database, exactly as in \
         [benchmarks.md](benchmarks.md).\n\n\
         - **completion**: the time from the `logically_verified` checkpoint to the \
         `retention_pending` one: the activity that finishes the request, derives and signs its \
         receipt, appends it to the log and signs the new checkpoint.\n\
         - **rows read**: `seq_tup_read + idx_tup_fetch` of `pg_stat_user_tables`, from just \
         before the approval to the end of the deletion (after the worker and every other \
         connection closed, so every backend has reported), for the log's three tables \
         (`transparency_log`, `log_checkpoints`, `receipts`) and for all tables. The \
         benchmark's own polling of the request row (10 a second) is included.\n\
         - **verified**: the receipt's certificate, exported with an inclusion proof rebuilt \
         from every stored leaf, verifies against the new checkpoint with the receipt public \
         key, and the receipt is leaf number *receipts before*: the O(log n) append signed the \
         same root the full tree has.\n\n",
    );
    out.push_str(&format!(
        "## Machine\n\n- {}.\n- Load average at start: {load_start}; at end: {}.\n\n",
        machine::describe(),
        machine::load_average()
    ));
    out.push_str("## Results\n\n");
    out.push_str(
        "| receipts before | fill s | completion s | whole deletion s | log rows read | \
         all rows read | most-read table | leaf / tree size |\n\
         |---:|---:|---:|---:|---:|---:|---|---|\n",
    );
    for run in runs {
        for c in &run.completions {
            let (table, rows) = c.reads.most_read().unwrap_or(("—", 0));
            out.push_str(&format!(
                "| {} | {:.1} | {:.3} | {:.2} | {} | {} | {table} ({rows}) | {} / {} |\n",
                c.receipts_before,
                run.fill.as_secs_f64(),
                c.completion.as_secs_f64(),
                c.whole.as_secs_f64(),
                log_rows(c),
                c.reads.total_rows(),
                c.leaf_index,
                c.tree_size,
            ));
        }
    }
    out.push_str("\n### Medians per log size\n\n| receipts in the log | completion s | log rows read | all rows read |\n|---:|---:|---:|---:|\n");
    for run in runs {
        let completion = median(
            run.completions
                .iter()
                .map(|c| c.completion.as_secs_f64())
                .collect(),
        );
        let log = median(run.completions.iter().map(|c| log_rows(c) as f64).collect());
        let all = median(
            run.completions
                .iter()
                .map(|c| c.reads.total_rows() as f64)
                .collect(),
        );
        out.push_str(&format!(
            "| {} | {completion:.3} | {log:.0} | {all:.0} |\n",
            run.receipts
        ));
    }
    let time_spread = spread(runs, |c| c.completion.as_secs_f64());
    let rows_spread = spread(runs, |c| log_rows(c) as f64);
    let verdict = |spread: f64| {
        if spread <= FLAT_WITHIN {
            "met"
        } else {
            "**not met**"
        }
    };
    out.push_str(&format!(
        "\n## Target\n\n| target | measured | verdict |\n|---|---|---|\n\
         | completion time, dearest log size over cheapest (medians) ≤ {FLAT_WITHIN} | {time_spread:.2} | {} |\n\
         | log rows read, dearest log size over cheapest (medians) ≤ {FLAT_WITHIN} | {rows_spread:.2} | {} |\n",
        verdict(time_spread),
        verdict(rows_spread),
    ));
    out
}
