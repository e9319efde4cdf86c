//! `buzz-deletion`: the operator CLI. Exit codes: 0 ok, 1 failed/refused/blocked, 2 usage.
#![deny(unsafe_code)]

use clap::Parser;

#[tokio::main]
async fn main() {
    // One process-wide TLS provider, before any client is built.
    let _ = rustls::crypto::ring::default_provider().install_default();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = starter::cli::Cli::parse();
    let code = starter::run(cli).await;
    std::process::exit(code);
}
