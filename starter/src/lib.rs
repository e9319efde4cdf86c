//! The `buzz-deletion` operator CLI as a library, so the end-to-end tests drive exactly the code
//! operators run.
#![deny(unsafe_code)]

pub mod cli;
pub mod commands;
pub mod connect;
pub mod error;
pub mod host;
pub mod output;
pub mod render;
pub mod signing;
pub mod update;
pub mod worker_wait;

use cli::Cli;

/// Runs one parsed invocation, prints its report through [`output::emit`] and returns its exit
/// code (errors are printed to stderr).
pub async fn run(cli: Cli) -> i32 {
    let format = cli.output;
    match commands::run(cli).await {
        Ok(report) => output::emit(format, &report),
        Err(error) => {
            eprintln!("error: {error:#}");
            error.exit_code()
        }
    }
}
