//! Command-line arguments of `buzz-chaos`.

use std::path::PathBuf;

use clap::Parser;

use crate::schedule::{FaultKind, Params};

/// A seeded fault-injection run on the local stack: N deletions and N neighbours under live
/// serving traffic, W worker processes, and every fault kind (worker SIGKILL/SIGTERM; restarts of
/// PostgreSQL, Redis, the S3 gateway and Temporal; latency, dropped and half-open connections
/// between the workers and each of them; on the Redis Cluster, a primary's failover instead of
/// the Redis faults) at moments drawn from the seed. Ends with the invariants
/// that prove nothing was lost; exit 0 only when none is broken.
#[derive(Debug, Parser)]
#[command(name = "buzz-chaos")]
pub struct ChaosArgs {
    /// The seed: the same seed (with the same flags) gives the same schedule.
    #[arg(long)]
    pub seed: u64,
    /// Deletions (each with its own neighbour).
    #[arg(long, default_value_t = 6)]
    pub deletions: usize,
    /// Worker processes.
    #[arg(long, default_value_t = 3)]
    pub workers: usize,
    /// Faults injected (at least one per kind; default: the number of kinds, or twice the
    /// deletions if more).
    #[arg(long)]
    pub faults: Option<usize>,
    /// How long each fault lasts, in seconds: `MIN..MAX` (drawn per fault) or one value.
    #[arg(long, default_value = "3..8", value_parser = parse_hold)]
    pub duration_per_fault: (u64, u64),
    /// Length of the window the faults are drawn in, in seconds (default: from the faults).
    #[arg(long)]
    pub window_secs: Option<u64>,
    /// Every request must end within this many seconds after the last fault healed.
    #[arg(long, default_value_t = 240)]
    pub end_bound_secs: u64,
    /// Serving writes per second per community.
    #[arg(long, default_value_t = 1)]
    pub rate_per_host: u32,
    /// Write the whole record (schedule, timeline, outcomes, violations) as JSON here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Print the schedule of the seed as JSON and exit without running anything.
    #[arg(long)]
    pub print_schedule: bool,
    /// Directory of `buzz-deletion` and `buzz-deletion-worker` (default: this binary's).
    #[arg(long)]
    pub bin_dir: Option<PathBuf>,
    /// Directory with the registered operators' private keys `alice` and `bob` (default:
    /// `$BUZZ_STATE_DIR/operators`, where `deploy/local/chaos` registers them).
    #[arg(long)]
    pub keys_dir: Option<PathBuf>,
    /// `cluster`: the workers use the local Redis Cluster (`REDIS_URL` its seed nodes, as
    /// `BUZZ_REDIS_MODE=cluster deploy/local/chaos` sets), and a primary's failover replaces the
    /// Redis faults no proxy can inject there. `single` (default): the one Redis server.
    #[arg(long, env = "BUZZ_REDIS_MODE", default_value = "single",
          value_parser = ["single", "cluster"])]
    pub redis_mode: String,
}

/// `"3..8"` or `"5"` seconds, as milliseconds.
fn parse_hold(text: &str) -> Result<(u64, u64), String> {
    let secs = |s: &str| {
        s.trim()
            .parse::<u64>()
            .map_err(|_| format!("{s:?} is not a whole number of seconds (try 3..8)"))
    };
    let (min, max) = match text.split_once("..") {
        Some((a, b)) => (secs(a)?, secs(b)?),
        None => {
            let v = secs(text)?;
            (v, v)
        }
    };
    if min == 0 || min > max {
        return Err(format!(
            "{text:?}: give MIN..MAX seconds with 1 <= MIN <= MAX (try 3..8)"
        ));
    }
    Ok((min * 1000, max * 1000))
}

impl ChaosArgs {
    /// The schedule parameters these flags ask for.
    pub fn params(&self) -> Params {
        let redis_cluster = self.redis_cluster();
        let kinds = FaultKind::all(redis_cluster).len();
        let faults = self.faults.unwrap_or(kinds.max(2 * self.deletions));
        let (hold_min_ms, hold_max_ms) = self.duration_per_fault;
        let window_ms = match self.window_secs {
            Some(secs) => secs * 1000,
            // Faults overlap across about three resources at a time.
            None => (faults as u64 * (hold_min_ms + hold_max_ms) / 2 / 3).max(60_000),
        };
        Params {
            deletions: self.deletions,
            workers: self.workers,
            faults,
            hold_min_ms,
            hold_max_ms,
            window_ms,
            redis_cluster,
        }
    }

    /// Whether the run uses the local Redis Cluster.
    pub fn redis_cluster(&self) -> bool {
        self.redis_mode == "cluster"
    }

    /// The command that replays this run.
    pub fn replay_command(&self) -> String {
        let p = self.params();
        format!(
            "deploy/local/chaos --seed {} --deletions {} --workers {} --faults {} --duration-per-fault {}..{} --window-secs {} --end-bound-secs {} --rate-per-host {} --redis-mode {}",
            self.seed,
            p.deletions,
            p.workers,
            p.faults,
            p.hold_min_ms / 1000,
            p.hold_max_ms / 1000,
            p.window_ms / 1000,
            self.end_bound_secs,
            self.rate_per_host,
            self.redis_mode
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hold_ranges_parse_and_bad_ones_say_what_to_give() {
        assert_eq!(parse_hold("3..8"), Ok((3000, 8000)));
        assert_eq!(parse_hold("5"), Ok((5000, 5000)));
        for bad in ["0..3", "8..3", "x", "3..", ""] {
            let error = parse_hold(bad).err().unwrap_or_default();
            assert!(error.contains("try 3..8"), "{bad}: {error}");
        }
    }

    #[test]
    fn the_replay_command_names_every_schedule_parameter() {
        let args = ChaosArgs::parse_from(["buzz-chaos", "--seed", "9", "--deletions", "4"]);
        let command = args.replay_command();
        let replayed =
            ChaosArgs::parse_from(std::iter::once("buzz-chaos").chain(command.split(' ').skip(1)));
        assert_eq!(replayed.params(), args.params());
        assert_eq!(replayed.seed, 9);
        let cluster =
            ChaosArgs::parse_from(["buzz-chaos", "--seed", "9", "--redis-mode", "cluster"]);
        let command = cluster.replay_command();
        assert!(command.ends_with("--redis-mode cluster"), "{command}");
        let replayed =
            ChaosArgs::parse_from(std::iter::once("buzz-chaos").chain(command.split(' ').skip(1)));
        assert_eq!(replayed.params(), cluster.params());
        assert!(replayed.params().redis_cluster);
    }
}
