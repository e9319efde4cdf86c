//! One module per command family, and [`run`], which hands a parsed invocation to its family.
//! The two deletion groups keep one file a command: `commands/community/<command>.rs` and
//! `commands/user/<command>.rs`, behind the dispatch in their `mod.rs`.

use crate::cli::{Cli, Command};
use crate::connect;
use crate::error::CliResult;
use crate::worker_wait;

pub mod certificate;
pub mod community;
pub mod demo;
pub mod demo_serve;
pub mod migrate;
pub mod operators;
pub mod stack_check;
pub mod sweep;
pub mod user;

/// Runs one parsed invocation: the global flags, then the command's family.
pub async fn run(cli: Cli) -> CliResult {
    if cli.allow_privileged_db_role {
        connect::allow_privileged_db_role();
    }
    let waits = worker_wait::WorkerWait {
        task_queue: connect::task_queue(),
        wait: std::time::Duration::from_secs(cli.worker_wait.max(1)),
    };
    match cli.command {
        Command::Migrate => migrate::run().await,
        Command::StackCheck { sleep_secs } => stack_check::run(sleep_secs).await,
        Command::Community(command) => community::run(&waits, command).await,
        Command::Demo(command) => demo::run(command).await,
        Command::Sweep(command) => sweep::run(command).await,
        Command::Operators(command) => operators::run(command).await,
        Command::Certificate(command) => certificate::run(command).await,
        Command::Keys(command) => certificate::run_keys(command),
        Command::User(command) => user::run_invoked(waits, command).await,
    }
}
