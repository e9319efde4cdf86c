//! `buzz-deletion demo serve`: live serving traffic to communities, through the serving-write
//! lease API, until SIGINT/SIGTERM or the duration ends.

use std::time::Duration;

use demo::simulator::{SimulationPlan, SimulationReport, simulate};

use crate::cli::ServeArgs;
use crate::commands::demo::connect_data_stores;
use crate::connect;
use crate::error::{CliError, CliResult};
use crate::host;
use crate::output::Report;
use crate::render::Table;

/// Serves the hosts, then prints what each community saw. Exit 0 when no write failed
/// (refusals during a deletion are expected), 1 otherwise.
pub async fn serve(args: ServeArgs) -> CliResult {
    // Installed before any write so an early signal stops the run instead of killing it.
    let stop = shutdown_signal()?;
    let hosts = args
        .hosts
        .iter()
        .map(|h| host::resolve(Some(h), None))
        .collect::<Result<Vec<_>, _>>()?;
    let mut plan = SimulationPlan::new(
        hosts,
        args.rate,
        (args.duration > 0).then(|| Duration::from_secs(args.duration)),
    );
    plan.max_in_flight_per_host = usize::from(args.in_flight);
    plan.record_limit = args.record_admitted;
    plan.authors = args.authors;
    let pool = plan
        .connections_needed()
        .max(activities::store::DEFAULT_MAX_CONNECTIONS);
    let store = connect::serving_store_warm(pool).await?;
    let (objects, cache) = connect_data_stores().await?;
    eprintln!(
        "serving {} host(s) at up to {} writes/s each; stop with Ctrl-C or SIGTERM",
        plan.hosts.len(),
        plan.rate_per_host
    );
    let report = simulate(&store, &objects, &cache, &plan, stop)
        .await
        .map_err(|e| CliError::Refused(e.to_string()))?;
    let failed: u64 = report.communities.iter().map(|c| c.totals.failed).sum();
    Ok(Report::new(&report, table(&report).render())?.with_exit_code(i32::from(failed > 0)))
}

/// Completes on the first SIGINT or SIGTERM. The handlers are registered now, not when first
/// polled.
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>, CliError> {
    use tokio::signal::unix::{SignalKind, signal};
    let install = |kind: SignalKind, name: &str| {
        signal(kind)
            .map_err(|e| CliError::Other(anyhow::anyhow!("cannot install the {name} handler: {e}")))
    };
    let mut interrupt = install(SignalKind::interrupt(), "SIGINT")?;
    let mut terminate = install(SignalKind::terminate(), "SIGTERM")?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    })
}

fn table(report: &SimulationReport) -> Table {
    let mut table = Table::new(
        format!(
            "served for {} ms, stopped by {:?}",
            report.elapsed_ms, report.stopped_by
        ),
        &["host", "attempted", "admitted", "refused", "failed"],
    );
    for c in &report.communities {
        table.row(vec![
            c.host.clone(),
            c.totals.attempted.to_string(),
            c.totals.admitted.to_string(),
            c.totals.refused.to_string(),
            c.totals.failed.to_string(),
        ]);
        for (author, counts) in &c.by_author {
            table.row(vec![
                format!("  as {author}"),
                counts.attempted.to_string(),
                counts.admitted.to_string(),
                counts.refused.to_string(),
                counts.failed.to_string(),
            ]);
        }
    }
    table
}
