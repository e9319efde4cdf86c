//! `sweep …`: the grammar of the bucket-wide taxonomy sweep.

use std::time::Duration;

use clap::Subcommand;
use workflows::sweep::DEFAULT_SWEEP_OBJECT_CAP;

/// Schedule id `sweep schedule` and `sweep unschedule` use unless told otherwise.
pub const DEFAULT_SCHEDULE_ID: &str = "buzz-taxonomy-sweep";

/// `sweep …` subcommands.
#[derive(Debug, Subcommand)]
pub enum SweepCommand {
    /// Sweep the whole bucket now and print the record (exit 1 when unknown shapes were found).
    Run {
        /// Stop listing after this many objects.
        #[arg(long, env = "BUZZ_SWEEP_MAX_OBJECTS", default_value_t = DEFAULT_SWEEP_OBJECT_CAP,
              value_parser = clap::value_parser!(u64).range(1..))]
        max_objects: u64,
    },
    /// Create (or update) a Temporal Schedule that runs TaxonomySweep periodically.
    Schedule {
        /// Interval between sweeps: a whole number with a unit, e.g. `24h`, `90m`, `1d`.
        #[arg(long, value_parser = parse_every)]
        every: Duration,
        /// Schedule id (`--id` is the deprecated spelling).
        #[arg(long, alias = "id", default_value = DEFAULT_SCHEDULE_ID)]
        schedule_id: String,
        /// Object cap of each scheduled sweep.
        #[arg(long, env = "BUZZ_SWEEP_MAX_OBJECTS", default_value_t = DEFAULT_SWEEP_OBJECT_CAP,
              value_parser = clap::value_parser!(u64).range(1..))]
        max_objects: u64,
    },
    /// Delete the sweep schedule (recorded sweeps stay in Postgres).
    Unschedule {
        /// Schedule id (`--id` is the deprecated spelling).
        #[arg(long, alias = "id", default_value = DEFAULT_SCHEDULE_ID)]
        schedule_id: String,
    },
    /// The latest recorded sweeps, newest first (from Postgres).
    List {
        /// At most this many.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: u32,
    },
}

/// Parses `<whole number><unit>` with unit `s`, `m`, `h` or `d`; zero is refused.
pub fn parse_every(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{text:?} has no unit: write e.g. 24h, 90m, 1d"))?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} does not start with a whole number"))?;
    let unit_secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 60 * 60,
        "d" => 24 * 60 * 60,
        other => return Err(format!("unknown unit {other:?}: use s, m, h or d")),
    };
    match number.checked_mul(unit_secs) {
        Some(0) => Err("the interval must be longer than zero".to_owned()),
        Some(secs) => Ok(Duration::from_secs(secs)),
        None => Err(format!("{text:?} is too long")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_accepts_a_whole_number_with_a_unit() {
        assert_eq!(parse_every("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_every("90m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse_every("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_every("45s"), Ok(Duration::from_secs(45)));
    }

    /// The object cap `sweep run` and `sweep schedule` use, or a usage error.
    fn max_objects(args: &[&str]) -> Result<u64, clap::Error> {
        let mut argv = vec!["buzz-deletion", "sweep"];
        argv.extend_from_slice(args);
        match crate::cli::parse(argv)?.cli.command {
            crate::cli::Command::Sweep(SweepCommand::Run { max_objects })
            | crate::cli::Command::Sweep(SweepCommand::Schedule { max_objects, .. }) => {
                Ok(max_objects)
            }
            other => panic!("{args:?} parsed to {other:?}"),
        }
    }

    #[test]
    fn the_object_cap_defaults_to_ten_million_and_a_cap_of_zero_is_a_usage_error() {
        assert_eq!(max_objects(&["run"]).ok(), Some(10_000_000));
        assert_eq!(
            max_objects(&["schedule", "--every", "24h"]).ok(),
            Some(10_000_000)
        );
        assert_eq!(max_objects(&["run", "--max-objects", "1"]).ok(), Some(1));
        for args in [
            &["run", "--max-objects", "0"][..],
            &["schedule", "--every", "24h", "--max-objects", "0"][..],
        ] {
            match max_objects(args) {
                Err(e) => {
                    assert_eq!(e.exit_code(), 2, "{args:?}: a usage error");
                    assert!(e.to_string().contains("--max-objects"), "{e}");
                }
                Ok(cap) => panic!("{args:?} must be refused, parsed cap {cap}"),
            }
        }
    }

    #[test]
    fn every_refuses_zero_a_missing_unit_and_an_unknown_one() {
        assert!(parse_every("0h").is_err());
        assert!(parse_every("24").is_err());
        assert!(parse_every("h").is_err());
        assert!(parse_every("2w").is_err());
        assert!(parse_every("1.5h").is_err());
    }
}
