//! `buzz-chaos`: a seeded fault-injection run on the local stack (see `deploy/local/chaos`).
#![deny(unsafe_code)]

mod args;
mod faults;
mod invariants;
mod operator;
mod population;
mod proxies;
mod report;
mod rng;
mod run;
mod schedule;
mod services;
mod stack;
mod traffic;
mod workers;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;

use crate::args::ChaosArgs;
use crate::run::Settings;
use crate::schedule::Schedule;

#[tokio::main]
async fn main() -> ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                // The proxies log every refused upstream connection and sqlx every slow acquire:
                // expected under faults, so kept out of the report unless asked for.
                .unwrap_or_else(|_| {
                    tracing_subscriber::EnvFilter::new("warn,noxious=off,sqlx=error")
                }),
        )
        .with_writer(std::io::stderr)
        .init();
    match chaos(ChaosArgs::parse()).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(error) => {
            eprintln!("buzz-chaos: {error:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs (or prints) the schedule; `Ok(false)` when an invariant was broken.
async fn chaos(args: ChaosArgs) -> Result<bool> {
    let schedule = Schedule::draw(args.seed, args.params())?;
    if args.print_schedule {
        println!("{}", serde_json::to_string_pretty(&schedule)?);
        return Ok(true);
    }
    let bin_dir = testkit::process::bin_dir(args.bin_dir.as_deref())?;
    let state_dir = PathBuf::from(stack::env("BUZZ_STATE_DIR")?);
    let repo_root = testkit::env::repo_root();
    let settings = Settings {
        bin_dir,
        keys_dir: args
            .keys_dir
            .clone()
            .unwrap_or_else(|| state_dir.join("operators")),
        end_bound: Duration::from_secs(args.end_bound_secs),
        rate_per_host: args.rate_per_host,
        log_dir: state_dir
            .join("logs")
            .join(format!("chaos-{}-{}", args.seed, std::process::id())),
        repo_root,
    };
    let record = run::run(schedule, settings).await?;
    let replay = args.replay_command();
    print!("{}", report::render(&record, &replay));
    if let Some(path) = &args.report {
        let document = serde_json::json!({
            "replay": replay,
            "figures": report::figures(&record),
            "record": record,
        });
        std::fs::write(path, serde_json::to_string_pretty(&document)?)
            .with_context(|| format!("write {}", path.display()))?;
        eprintln!("chaos: report written to {}", path.display());
    }
    Ok(record.violations.is_empty())
}
