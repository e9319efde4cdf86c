//! `buzz-deletion`: the operator CLI. Exit codes: 0 ok, 1 failed/refused/blocked, 2 usage.
#![deny(unsafe_code)]

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
    let parsed = match starter::cli::parse(std::env::args_os()) {
        Ok(parsed) => parsed,
        // Help and version print and exit 0; usage errors exit 2.
        Err(usage) => usage.exit(),
    };
    for warning in &parsed.warnings {
        eprintln!("{warning}");
    }
    let code = starter::run(parsed.cli).await;
    std::process::exit(code);
}
