//! `buzz-deletion-redis-size-bench`: the Redis purge and its two-pass verification with millions
//! of other tenants' keys in the keyspace (issue 32, must-show 7).
//!
//! A SCAN pass reads the whole keyspace whatever the namespace's size, so what a deletion costs
//! in Redis is set by everyone else's keys. This benchmark starts a private `redis-server` (the
//! stack's Redis stays small), seeds `--others` keys spread over 1,000 other communities and
//! `--target` keys of the community being deleted, and measures side by side in one run, in
//! ABBA order:
//!
//! - (f) the floor: the plain loop a purge was before this issue — SCAN MATCH COUNT 1000, then
//!   UNLINK of the page, one after the other;
//! - (w) the worker's own code: `Cache::purge_namespace` (a page's UNLINK sent beside the next
//!   SCAN), then `Cache::verify_absent` (two complete passes).
//!
//! Each run is also repeated on a keyspace holding only the target, so the keyspace's share of
//! the cost is a ratio too. Round trips are counted by the server (`INFO commandstats`). After
//! every purge the target must hold no key and every other key must still be there.
#![deny(unsafe_code)]

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use activities::redis::{Cache, namespace_pattern};
use anyhow::{Context, Result, bail, ensure};
use bench::redis_loop::serial_purge;
use clap::Parser;
use redis::aio::MultiplexedConnection;
use uuid::Uuid;

/// Measures the Redis purge and verification against the size of everyone else's keyspace.
#[derive(Debug, Parser)]
#[command(name = "buzz-deletion-redis-size-bench")]
struct Args {
    /// Keys of other communities in the keyspace.
    #[arg(long, default_value_t = 10_000_000)]
    others: u64,
    /// Keys of the community being deleted.
    #[arg(long, default_value_t = 100_000)]
    target: u64,
    /// Runs of each variant per keyspace, in ABBA order; medians are reported.
    #[arg(long, default_value_t = 2)]
    repeat: u32,
    /// The `redis-server` executable.
    #[arg(long, default_value = "redis-server")]
    redis_server: String,
    /// Where the markdown report is written.
    #[arg(long, default_value = "docs/benchmarks-redis-size.md")]
    docs: PathBuf,
}

/// Communities the other keys are spread over.
const OTHER_COMMUNITIES: u64 = 1_000;

/// Keys one seeding script writes.
const SEED_STEP: u64 = 10_000;

/// SET `KEYS[1]..i` for i in ARGV[1]..=ARGV[2], on the server (seeding only).
const SEED_SCRIPT: &str = "for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do \
     redis.call('SET', KEYS[1] .. i, 'v') end return 0";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Floor,
    Worker,
}

/// One run: the purge, the verification (the worker's variant only) and the server's counts.
#[derive(Debug, Clone, Copy, Default)]
struct Run {
    purge: Duration,
    verify: Option<Duration>,
    scans: u64,
    unlinks: u64,
}

/// Medians of one variant on one keyspace.
#[derive(Debug, Clone, Copy)]
struct Row {
    others: u64,
    floor: Run,
    worker: Run,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build();
    let outcome = match runtime {
        Ok(runtime) => runtime.block_on(run(args)),
        Err(error) => Err(error.into()),
    };
    bench::exit_code("buzz-deletion-redis-size-bench", outcome.map(|()| true), "")
}

async fn run(args: Args) -> Result<()> {
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let started = chrono::Utc::now();
    let server = PrivateRedis::start(&args.redis_server).await?;
    let client = redis::Client::open(server.url())?;
    let mut admin = client.get_multiplexed_async_connection().await?;
    let cache = Cache::connect(&server.url())
        .await
        .context("the worker's Redis client")?;
    let target = Uuid::new_v4();

    let mut rows = Vec::new();
    for others in [0, args.others] {
        flush(&mut admin).await?;
        let seeded = Instant::now();
        seed_others(&mut admin, others).await?;
        eprintln!(
            "seeded {others} other keys in {:.1} s",
            seeded.elapsed().as_secs_f64()
        );
        let mut floor = Vec::new();
        let mut worker = Vec::new();
        for round in 0..args.repeat {
            let order = match round % 2 {
                0 => [Variant::Floor, Variant::Worker],
                _ => [Variant::Worker, Variant::Floor],
            };
            for variant in order {
                let run = measure(&mut admin, &cache, variant, target, args.target, others).await?;
                eprintln!("{others} others, {variant:?}: {run:?}");
                match variant {
                    Variant::Floor => floor.push(run),
                    Variant::Worker => worker.push(run),
                }
            }
        }
        rows.push(Row {
            others,
            floor: median(&floor),
            worker: median(&worker),
        });
    }
    let report = render(&args, &command, &started.to_rfc3339(), &rows);
    print!("{report}");
    std::fs::write(&args.docs, report).with_context(|| format!("write {}", args.docs.display()))?;
    Ok(())
}

/// Seeds the target, purges it with `variant` (then verifies, for the worker), and checks that
/// the target is empty and every other key is still there.
async fn measure(
    admin: &mut MultiplexedConnection,
    cache: &Cache,
    variant: Variant,
    target: Uuid,
    target_keys: u64,
    others: u64,
) -> Result<Run> {
    let prefix = format!("buzz:{}:k:", target.hyphenated());
    seed(admin, &prefix, target_keys).await?;
    ensure!(
        dbsize(admin).await? == others + target_keys,
        "seeding left the wrong key count"
    );
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(admin)
        .await?;
    let pattern = namespace_pattern(target);
    let started = Instant::now();
    let removed = match variant {
        Variant::Floor => serial_purge(admin, &pattern).await?,
        Variant::Worker => cache.purge_namespace(target, |_| {}).await?,
    };
    let purge = started.elapsed();
    let verify = match variant {
        Variant::Floor => None,
        Variant::Worker => {
            let started = Instant::now();
            cache.verify_absent(target).await?;
            Some(started.elapsed())
        }
    };
    let (scans, unlinks) = command_calls(admin).await?;
    ensure!(
        removed == target_keys,
        "{variant:?} removed {removed} of {target_keys} keys"
    );
    ensure!(
        dbsize(admin).await? == others,
        "{variant:?}: other keys were lost, or target keys are left"
    );
    Ok(Run {
        purge,
        verify,
        scans,
        unlinks,
    })
}

async fn seed_others(admin: &mut MultiplexedConnection, others: u64) -> Result<()> {
    if others == 0 {
        return Ok(());
    }
    let per_community = others.div_ceil(OTHER_COMMUNITIES);
    let mut left = others;
    for _ in 0..OTHER_COMMUNITIES {
        let keys = per_community.min(left);
        if keys == 0 {
            break;
        }
        let prefix = format!("buzz:{}:k:", Uuid::new_v4().hyphenated());
        seed(admin, &prefix, keys).await?;
        left -= keys;
    }
    Ok(())
}

/// Writes `prefix0` … `prefix{keys-1}` with server-side scripts of [`SEED_STEP`] keys each.
async fn seed(admin: &mut MultiplexedConnection, prefix: &str, keys: u64) -> Result<()> {
    let mut first = 0u64;
    while first < keys {
        let last = (first + SEED_STEP).min(keys) - 1;
        redis::cmd("EVAL")
            .arg(SEED_SCRIPT)
            .arg(1)
            .arg(prefix)
            .arg(first)
            .arg(last)
            .query_async::<i64>(admin)
            .await
            .context("seeding script")?;
        first = last + 1;
    }
    Ok(())
}

async fn flush(admin: &mut MultiplexedConnection) -> Result<()> {
    redis::cmd("FLUSHALL").query_async::<()>(admin).await?;
    Ok(())
}

async fn dbsize(admin: &mut MultiplexedConnection) -> Result<u64> {
    Ok(redis::cmd("DBSIZE").query_async(admin).await?)
}

/// SCAN and UNLINK calls since the last `CONFIG RESETSTAT`.
async fn command_calls(admin: &mut MultiplexedConnection) -> Result<(u64, u64)> {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(admin)
        .await?;
    let calls = |name: &str| {
        stats
            .lines()
            .find_map(|line| line.strip_prefix(&format!("cmdstat_{name}:calls=")))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok((calls("scan"), calls("unlink")))
}

fn median(runs: &[Run]) -> Run {
    let mut sorted = runs.to_vec();
    sorted.sort_by_key(|r| r.purge);
    sorted.get(sorted.len() / 2).copied().unwrap_or_default()
}

/// A `redis-server` of the benchmark's own on a free loopback port, without persistence;
/// killed when dropped.
struct PrivateRedis {
    child: tokio::process::Child,
    port: u16,
}

impl PrivateRedis {
    async fn start(executable: &str) -> Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = tokio::process::Command::new(executable)
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {executable} (apt-get install redis-server)"))?;
        let server = PrivateRedis { child, port };
        let client = redis::Client::open(server.url())?;
        for _ in 0..100 {
            if let Ok(mut connection) = client.get_multiplexed_async_connection().await {
                let pong: redis::RedisResult<String> =
                    redis::cmd("PING").query_async(&mut connection).await;
                if pong.is_ok() {
                    return Ok(server);
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("{executable} did not answer on port {port} within 5 s")
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

fn seconds(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64())
}

fn render(args: &Args, command: &str, started: &str, rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Redis at size: purge and verification among other tenants' keys\n"
    );
    let _ = writeln!(
        out,
        "Reproduce: `cargo build --release -p bench && {command}` (a private `redis-server` on a \
         free port; no stack needed). Run {started}; {}; load average at the end {}.\n",
        bench::machine::describe(),
        bench::machine::load_average()
    );
    let _ = writeln!(
        out,
        "The community deleted holds {} keys; the other keys are spread over {OTHER_COMMUNITIES} \
         other communities. (f) is the plain SCAN-then-UNLINK loop a purge was before issue 32; \
         (w) is the worker's `Cache::purge_namespace` (each page's UNLINK sent beside the next \
         SCAN) and `Cache::verify_absent` (two complete passes). Medians of {} runs per variant, \
         ABBA order. Round trips are the server's own counts (`INFO commandstats`). After every \
         purge the target held no key and every other key was still there.\n",
        args.target, args.repeat
    );
    let _ = writeln!(
        out,
        "| other keys | (f) purge s | (w) purge s | (w)/(f) time | (w) verify s (2 passes) | SCAN calls (purge+verify) | UNLINK calls |"
    );
    let _ = writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|");
    for row in rows {
        let ratio = row.worker.purge.as_secs_f64() / row.floor.purge.as_secs_f64().max(1e-9);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.2} | {} | {} | {} |",
            row.others,
            seconds(row.floor.purge),
            seconds(row.worker.purge),
            ratio,
            row.worker.verify.map(seconds).unwrap_or_default(),
            row.worker.scans,
            row.worker.unlinks
        );
    }
    if let [small, large] = rows {
        let pass = |row: &Row| {
            row.worker.purge.as_secs_f64() + row.worker.verify.unwrap_or_default().as_secs_f64()
        };
        let _ = writeln!(
            out,
            "\nThe keyspace's share: purge + verification took {:.1}× as long with {} other keys \
             as with none ({:.2} s against {:.2} s).",
            pass(large) / pass(small).max(1e-9),
            large.others,
            pass(large),
            pass(small)
        );
    }
    let _ = writeln!(
        out,
        "\n## Cost model\n\n\
         A SCAN pass costs ⌈keyspace / 1000⌉ round trips, each of which makes the server walk \
         about 1,000 slots of its hash table and match every key there against the pattern: it is \
         paid in proportion to everyone's keys, not the target's. A deletion runs one pass to \
         count the namespace at the inventory, one to purge and two to verify. The purge adds one \
         UNLINK per non-empty page, which now travels beside the next SCAN instead of after it, \
         so a purge costs about as many round trips as a bare pass. Per community the cost is \
         linear in the keyspace; for the fleet, it is (communities deleted) × (keyspace) / 1000 \
         SCAN calls, each about a millisecond of the server's single thread."
    );
    out
}
