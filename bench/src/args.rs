//! Command-line knobs of the benchmark. Connection settings come from the environment
//! (`source .state/env`), exactly as the worker and the CLI read them.

use std::path::PathBuf;

use clap::Parser;

/// Measures community deletion three ways on freshly seeded tenants, side by side in one run:
/// (a) the raw floor, (b) the workflow deleting one DeleteObjects call at a time, (c) the
/// workflow with parallel chunk deletion. Prints a markdown report and writes it to `--docs`.
#[derive(Debug, Clone, Parser)]
#[command(name = "buzz-deletion-bench")]
pub struct BenchArgs {
    /// Target sizes in object versions (comma-separated); rows and Redis keys scale with them.
    #[arg(long, value_delimiter = ',', default_value = "5000,50000")]
    pub sizes: Vec<u32>,
    /// Runs of (a) and of (c) per size, in ABBA order (a c c a …) so drift in the machine's load
    /// weighs on both alike; ratios use the means.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10))]
    pub repeat: u32,
    /// DeleteObjects calls in flight for the floor (a) and the parallel workflow (c).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub delete_parallelism: u32,
    /// Manifest chunks one `delete_chunks` activity call deletes (workflow tuning; the CLI's
    /// default).
    #[arg(long, default_value_t = 100)]
    pub chunks_per_call: u64,
    /// `delete_chunks` calls per workflow run before continue-as-new (workflow tuning).
    #[arg(long, default_value_t = 40)]
    pub delete_rounds_per_run: u32,
    /// Versions per manifest chunk (the worker's BUZZ_MANIFEST_CHUNK_ENTRIES; its default).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub chunk_entries: u32,
    /// Rows per purge statement, for the floor (the workflow's default `purge_batch_rows`).
    #[arg(long, default_value_t = 5_000)]
    pub purge_batch_rows: u32,
    /// Parallelism levels of the raw DeleteObjects probe (what the S3 server allows).
    #[arg(long, value_delimiter = ',', default_value = "1,8,16")]
    pub probe_parallelism: Vec<u32>,
    /// Object versions deleted per probe level (0 skips the probe).
    #[arg(long, default_value_t = 16_000)]
    pub probe_versions: u32,
    /// S3 writes in flight while seeding.
    #[arg(long, default_value_t = 16)]
    pub seed_parallelism: usize,
    /// Give up on one workflow variant after this many seconds.
    #[arg(long, default_value_t = 1_800)]
    pub variant_timeout_secs: u64,
    /// Directory holding `buzz-deletion` and `buzz-deletion-worker` (default: this binary's).
    #[arg(long)]
    pub bin_dir: Option<PathBuf>,
    /// Where to write the markdown report ("-" writes nothing).
    #[arg(long, default_value = "docs/benchmarks.md")]
    pub docs: PathBuf,
    /// Leave the neighbour community in place at the end (it is deleted by default).
    #[arg(long)]
    pub keep_neighbour: bool,
}

impl BenchArgs {
    /// The command line that reproduces this run, for the report.
    pub fn command_line(&self) -> String {
        let sizes: Vec<String> = self.sizes.iter().map(u32::to_string).collect();
        let probe: Vec<String> = self.probe_parallelism.iter().map(u32::to_string).collect();
        format!(
            "target/debug/buzz-deletion-bench --sizes {} --repeat {} --delete-parallelism {} \
             --chunks-per-call {} --delete-rounds-per-run {} --chunk-entries {} \
             --purge-batch-rows {} --probe-parallelism {} --probe-versions {}",
            sizes.join(","),
            self.repeat,
            self.delete_parallelism,
            self.chunks_per_call,
            self.delete_rounds_per_run,
            self.chunk_entries,
            self.purge_batch_rows,
            probe.join(","),
            self.probe_versions,
        )
    }
}
