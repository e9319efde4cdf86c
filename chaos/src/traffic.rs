//! The relay's serving traffic during the run: a real `buzz-deletion demo serve` process on every
//! target and neighbour, connected straight to the stores (never through the workers' proxies),
//! recording every admitted write and every write whose outcome a fault made unknowable. Stopped
//! with SIGTERM at the end, it prints its report as JSON.

use std::path::Path;

use anyhow::{Context, Result, bail};
use demo::simulator::SimulationReport;
use testkit::process::demo_serve;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

/// Writes recorded per community: far above what a run admits, so nothing is truncated (the
/// checker reports a truncated recording as a violation).
const RECORD_LIMIT: u64 = 1_000_000;

/// The running serving process.
pub struct Traffic {
    child: Child,
    stdout: JoinHandle<std::io::Result<String>>,
}

impl Traffic {
    /// Starts serving `hosts` at `rate` writes per second each; its log goes to `log`.
    pub fn start(cli: &Path, hosts: &[String], rate: u32, log: &Path) -> Result<Traffic> {
        let log_file =
            std::fs::File::create(log).with_context(|| format!("create {}", log.display()))?;
        let mut child = demo_serve(cli, hosts, rate, RECORD_LIMIT)
            .args(["--output", "json", "--in-flight", "2"])
            .stderr(log_file)
            .spawn()
            .with_context(|| format!("start {} demo serve", cli.display()))?;
        let mut pipe = child
            .stdout
            .take()
            .context("demo serve has no stdout pipe")?;
        let stdout = tokio::spawn(async move {
            let mut text = String::new();
            pipe.read_to_string(&mut text).await?;
            Ok(text)
        });
        Ok(Traffic { child, stdout })
    }

    /// Whether the serving process is still running (it must be, all run long).
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Stops the serving process (SIGTERM: it lets the writes in flight finish) and returns what
    /// it saw.
    pub async fn stop(mut self) -> Result<SimulationReport> {
        if let Some(pid) = self.child.id() {
            Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await
                .context("kill -TERM demo serve")?;
        }
        // Exit 1 means some write failed, which faults make certain; only the report matters.
        let status = self.child.wait().await.context("wait for demo serve")?;
        let text = self
            .stdout
            .await
            .context("the demo serve reader panicked")?
            .context("reading demo serve's report")?;
        if text.trim().is_empty() {
            bail!("demo serve printed no report ({status}); see its log");
        }
        serde_json::from_str(&text)
            .with_context(|| format!("demo serve's report is not a simulation report ({status})"))
    }
}
