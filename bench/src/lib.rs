//! The benchmarks' shared parts: connections to the local stack, seeding plans, the raw floor,
//! the workflow runner (real worker and CLI processes), outcome checks and the report. The
//! binaries under `src/bin/` and `src/main.rs` are the benchmarks themselves; none is a test.
#![deny(unsafe_code)]

pub mod args;
pub mod check;
pub mod cpu_account;
pub mod document;
pub mod double;
pub mod fence_cost;
pub mod fleet;
pub mod floor;
pub mod history;
pub mod log_fill;
pub mod machine;
pub mod plan;
pub mod probe;
pub mod redis_loop;
pub mod report;
pub mod stack;
pub mod statements;
pub mod table_reads;
pub mod workflow;

/// The exit code of a benchmark binary `name` from what its run returned: success, `Ok(false)`
/// (a target or target figure failed: `failed` says which) or an error, printed with its causes.
pub fn exit_code(
    name: &str,
    outcome: anyhow::Result<bool>,
    failed: &str,
) -> std::process::ExitCode {
    match outcome {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("{failed}");
            std::process::ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("{name}: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Installs ring as the process's rustls provider (every client here uses it).
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
