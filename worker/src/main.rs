//! `buzz-deletion-worker`: polls the `buzz-deletion` task queue until SIGTERM or Ctrl-C, then
//! drains: in-flight activities get the grace period to finish before they are cancelled.
#![deny(unsafe_code)]

use anyhow::Context;
use temporalio_sdk::Runtime;
use worker::config::WorkerConfig;
use worker::metrics::MetricsEndpoint;
use worker::startup;

fn main() {
    // One process-wide TLS provider, before any client is built.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(startup::RUNTIME_THREAD_STACK_BYTES)
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: start the worker's async runtime: {error}");
            std::process::exit(1);
        }
    };
    if let Err(error) = runtime.block_on(run()) {
        // The whole cause chain, no backtrace: the message says what to fix.
        eprintln!("error: {error:#}");
        std::process::exit(1);
    }
}

async fn run() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,temporalio_sdk_core=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();

    // First, so that a start that fails on a setting still names what replaced the
    // predecessor's.
    for warning in worker::predecessor::warnings(|name| std::env::var(name).ok()) {
        tracing::warn!("{warning}");
    }
    let config = WorkerConfig::from_env()?;
    let deps = startup::connect(&config).await?;
    let metrics = match config.metrics_port {
        0 => None,
        port => Some(MetricsEndpoint::start(port)?),
    };
    if let Some(endpoint) = &metrics {
        let gauges = endpoint.request_state_gauges();
        worker::request_sampler::spawn(deps.store.clone(), gauges, config.metrics_sample_every);
    }
    worker::lease_reaper::spawn(
        deps.store.clone(),
        config.lease_reaper,
        metrics
            .as_ref()
            .map(|endpoint| endpoint.lease_instruments()),
    );
    let runtime_options = worker::metrics::runtime_options(metrics.as_ref())
        .map_err(anyhow::Error::msg)
        .context("configure the Temporal runtime")?;
    let runtime =
        Runtime::from_current_tokio(runtime_options).context("start the Temporal runtime")?;
    let settings = activities::community::Settings {
        fence_wait: config.fence_wait,
        manifest_chunk_entries: config.manifest_chunk_entries,
        delete_rate: config.delete_rate,
        metrics: metrics
            .as_ref()
            .map(MetricsEndpoint::deletion_metrics)
            .unwrap_or_default(),
    };
    let mut worker = startup::build_deployed_worker(
        &runtime,
        &deps,
        &config.task_queue,
        settings,
        config.shutdown_grace,
        &config.deployment,
        config.capacity.activity_slots,
    )?;
    let shutdown = worker.shutdown_handle();
    tokio::spawn(async move {
        wait_for_termination().await;
        tracing::info!("termination requested: draining in-flight tasks");
        shutdown();
    });
    tracing::info!(
        task_queue = %config.task_queue,
        deployment = config.deployment.name.as_deref().unwrap_or("-"),
        build_id = config.deployment.build_id.as_deref().unwrap_or("(executable hash)"),
        temporal = %config.temporal.address,
        temporal_access = %config.temporal.access.describe(),
        metrics = %metrics.as_ref().map_or("disabled".to_owned(), |m| format!("http://{}/metrics", m.address)),
        activity_slots = config.capacity.activity_slots,
        pg_pool = config.capacity.postgres.max_connections,
        "worker polling"
    );
    worker.run().await.context("worker stopped with an error")?;
    tracing::info!("worker drained and stopped");
    Ok(())
}

/// Resolves on SIGTERM or Ctrl-C.
async fn wait_for_termination() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {},
                    _ = term.recv() => {},
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
