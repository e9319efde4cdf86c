//! The whole command-line grammar of `buzz-deletion`, one file per command group, and the one
//! parser that also warns about deprecated spellings.
//!
//! Naming convention (README, "CLI conventions"): a request's id is the positional
//! `REQUEST_ID`; the frozen inventory digest is `--inventory-digest`; a schedule's id is
//! `--schedule-id`; durations carry their unit (`--wait-secs`, `--interval-ms`). An old
//! spelling stays accepted for one release as a hidden clap `alias`: every hidden alias of a
//! long flag is a deprecated spelling, and [`parse`] warns on stderr when one is used.

use std::ffi::OsString;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::output::OutputFormat;

mod certificate;
mod community;
mod demo;
mod key;
mod operators;
mod sweep;
mod user;

pub use certificate::{CertificateCommand, ExportArgs, KeysCommand, OutArgs};
pub use community::{
    AbortArgs, ApproveArgs, CommunityCommand, ListArgs, ListState, SignCommand, TuningArgs,
    UnblockArgs,
};
pub use demo::{DemoCommand, SeedArgs, SeedUserArgs, ServeArgs};
pub use key::{KEY_ENV, KeyArgs};
pub use operators::OperatorsCommand;
pub use sweep::{DEFAULT_SCHEDULE_ID, SweepCommand, parse_every};
pub use user::{DEFAULT_STOP_WAIT_SECS, StageArg, UserActionArgs, UserCommand};

/// The release in which the deprecated spellings (flags and JSON field names) go away.
pub const DEPRECATED_SPELLINGS_REMOVED_IN: &str = "0.2.0";

/// Operator CLI for buzz-deletion: erase a community or a user, with proof.
///
/// Exit codes: 0 ok, 1 failed, refused or blocked, 2 usage error.
#[derive(Debug, Parser)]
#[command(name = "buzz-deletion", version, about)]
pub struct Cli {
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Json, global = true)]
    pub output: OutputFormat,
    /// Seconds a command that needs a worker (submit, approve, abort, unblock, status, watch,
    /// the `user` commands) waits for one to answer before saying that none does.
    #[arg(long, global = true, value_name = "SECS",
          default_value_t = crate::worker_wait::DEFAULT_WORKER_WAIT_SECS)]
    pub worker_wait: u64,
    /// Run even if the database role is a superuser or owns the schemas. Only for a throwaway
    /// local stack (same as BUZZ_ALLOW_PRIVILEGED_DB_ROLE=throwaway-local-stack); `migrate`
    /// always connects as the owner and needs no flag.
    #[arg(long, global = true)]
    pub allow_privileged_db_role: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply the database migrations (idempotent).
    Migrate,
    /// Run a StackCheck workflow: one activity touching Postgres, Redis and S3, then a timer.
    StackCheck {
        /// Durable timer after the activity, in seconds.
        #[arg(long, default_value_t = 1)]
        sleep_secs: u64,
    },
    /// Whole-community deletion.
    #[command(subcommand)]
    Community(CommunityCommand),
    /// User deletion: a real user (`user:<pubkey>`) or the demo orchestration (`demo:<name>`).
    #[command(subcommand)]
    User(UserCommand),
    /// Demo data and the serving simulator.
    #[command(subcommand)]
    Demo(DemoCommand),
    /// Bucket-wide taxonomy sweep: run once, schedule, unschedule, list records.
    #[command(subcommand)]
    Sweep(SweepCommand),
    /// The operator registry: SSH public keys allowed to sign operator actions (owner only,
    /// BUZZ_OWNER_DATABASE_URL).
    #[command(subcommand)]
    Operators(OperatorsCommand),
    /// Deletion certificates: verify one offline, audit one against the database, the log's
    /// latest checkpoint.
    #[command(subcommand)]
    Certificate(CertificateCommand),
    /// The receipt signing key pair.
    #[command(subcommand)]
    Keys(KeysCommand),
}

/// A parsed invocation and the deprecation warnings its spelling earned.
#[derive(Debug)]
pub struct Parsed {
    /// What to run.
    pub cli: Cli,
    /// One line per deprecated flag used, naming the new spelling (for stderr).
    pub warnings: Vec<String>,
}

/// Parses `args` (program name first) like [`Cli::try_parse_from`], and lists the deprecated
/// spellings it used.
pub fn parse<I, T>(args: I) -> Result<Parsed, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let grammar = Cli::command();
    let matches = grammar.clone().try_get_matches_from(&args)?;
    let cli = Cli::from_arg_matches(&matches)?;
    let warnings = deprecated_flags_used(&grammar, &matches, &args);
    Ok(Parsed { cli, warnings })
}

/// The deprecated spellings among `args`: the hidden aliases of the long flags of every command
/// on the matched path (`community approve` …), since an alias is how an old spelling is kept.
fn deprecated_flags_used(
    grammar: &clap::Command,
    matches: &clap::ArgMatches,
    args: &[OsString],
) -> Vec<String> {
    let mut warnings = Vec::new();
    let mut command = Some(grammar);
    let mut matched = Some(matches);
    while let (Some(cmd), Some(m)) = (command, matched) {
        for arg in cmd.get_arguments() {
            let (Some(long), Some(aliases)) = (arg.get_long(), arg.get_aliases()) else {
                continue;
            };
            for alias in aliases {
                let flag = format!("--{alias}");
                let used = args.iter().filter_map(|a| a.to_str()).any(|a| {
                    a == flag
                        || a.strip_prefix(flag.as_str())
                            .is_some_and(|r| r.starts_with('='))
                });
                if used {
                    warnings.push(format!(
                        "warning: {flag} is deprecated and goes away in release \
                         {DEPRECATED_SPELLINGS_REMOVED_IN}; use --{long}"
                    ));
                }
            }
        }
        let next = m.subcommand();
        command = next.and_then(|(name, _)| cmd.find_subcommand(name));
        matched = next.map(|(_, sub)| sub);
    }
    warnings
}

#[cfg(test)]
mod tests;
