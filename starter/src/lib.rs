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
pub mod user_cmd;
pub mod user_list;
pub mod worker_wait;

use cli::{Cli, Command};
use error::CliResult;

/// Runs one parsed invocation and returns its exit code (errors are printed to stderr).
pub async fn run(cli: Cli) -> i32 {
    match dispatch(cli).await {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            error.exit_code()
        }
    }
}

async fn dispatch(cli: Cli) -> CliResult {
    let format = cli.output;
    if cli.allow_privileged_db_role {
        connect::allow_privileged_db_role();
    }
    let waits = worker_wait::WorkerWait {
        task_queue: connect::task_queue(),
        wait: std::time::Duration::from_secs(cli.worker_wait.max(1)),
    };
    match cli.command {
        Command::Migrate => commands::migrate::run(format).await,
        Command::StackCheck { sleep_secs } => commands::stack_check::run(format, sleep_secs).await,
        Command::Community(command) => commands::community::run(format, &waits, command).await,
        Command::Demo(command) => commands::demo::run(format, command).await,
        Command::Sweep(command) => commands::sweep::run(format, command).await,
        Command::Operators(command) => commands::operators::run(format, command).await,
        Command::User(command) => {
            let store = connect::store().await?;
            let env = user_cmd::UserCliEnv {
                client: connect::temporal(&connect::TemporalTarget::from_env()).await?,
                task_queue: connect::task_queue(),
                waits,
                store: activities::user::UserStore::new(store.pool().clone()),
                output: format,
            };
            user_cmd::run(command, &env)
                .await
                .map_err(error::CliError::Other)
        }
    }
}
