//! The `buzz-deletion` operator CLI as a library, so the end-to-end tests drive exactly the code
//! operators run.
#![deny(unsafe_code)]

pub mod cli;
pub mod commands;
pub mod connect;
pub mod error;
pub mod host;
pub mod output;
pub mod signing;
pub mod update;
pub mod worker_wait;

use cli::{Cli, Command};
use error::CliResult;

/// Runs one parsed invocation, prints its report through [`output::emit`] and returns its exit
/// code (errors are printed to stderr).
pub async fn run(cli: Cli) -> i32 {
    let format = cli.output;
    match dispatch(cli).await {
        Ok(report) => output::emit(format, &report),
        Err(error) => {
            eprintln!("error: {error:#}");
            error.exit_code()
        }
    }
}

async fn dispatch(cli: Cli) -> CliResult {
    if cli.allow_privileged_db_role {
        connect::allow_privileged_db_role();
    }
    let waits = worker_wait::WorkerWait {
        task_queue: connect::task_queue(),
        wait: std::time::Duration::from_secs(cli.worker_wait.max(1)),
    };
    match cli.command {
        Command::Migrate => commands::migrate::run().await,
        Command::StackCheck { sleep_secs } => commands::stack_check::run(sleep_secs).await,
        Command::Community(command) => commands::community::run(&waits, command).await,
        Command::Demo(command) => commands::demo::run(command).await,
        Command::Sweep(command) => commands::sweep::run(command).await,
        Command::Operators(command) => commands::operators::run(command).await,
        Command::Certificate(command) => commands::certificate::run(command).await,
        Command::Keys(command) => commands::certificate::run_keys(command),
        // Exporting needs only Postgres, not Temporal.
        Command::User(cli::UserCommand::Certificate(args)) => {
            commands::certificate::export(args, "user").await
        }
        Command::User(command) => {
            let store = connect::store().await?;
            let env = commands::user::UserCliEnv {
                client: connect::temporal(&connect::TemporalTarget::from_env()?).await?,
                task_queue: connect::task_queue(),
                waits,
                store: activities::user::UserStore::new(store.pool().clone()),
            };
            commands::user::run(command, &env).await
        }
    }
}
