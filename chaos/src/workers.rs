//! The worker processes: W real `buzz-deletion-worker` processes on the run's task queue, each
//! reaching its dependencies through the proxies. A slot whose process exits when no fault holds
//! it down is started again at once (as a process supervisor would) and the exit is reported.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// An exit nobody planned.
#[derive(Debug, Clone, Serialize)]
pub struct UnplannedExit {
    /// The slot.
    pub worker: usize,
    /// Milliseconds since the start of the fault window.
    pub at_ms: u64,
    /// How it ended.
    pub status: String,
}

struct Slot {
    child: Option<Child>,
    held_down: bool,
    starts: u32,
    /// After an unplanned exit: when the slot may start again (a supervisor's back-off, so a
    /// worker that cannot start while a dependency is down is not restarted in a tight loop).
    restart_at: Option<Instant>,
}

/// Pause before a slot whose process exited unplanned is started again.
const RESTART_BACKOFF: Duration = Duration::from_secs(3);

/// The worker slots.
pub struct Workers {
    binary: PathBuf,
    env: Vec<(String, String)>,
    log_dir: PathBuf,
    slots: Vec<Slot>,
    /// Exits of processes no fault stopped.
    pub unplanned: Vec<UnplannedExit>,
}

impl Workers {
    /// Starts `count` workers with `env` (task queue, proxied addresses), logging to `log_dir`.
    pub fn start(
        binary: &Path,
        env: Vec<(String, String)>,
        count: usize,
        log_dir: &Path,
    ) -> Result<Workers> {
        let mut workers = Workers {
            binary: binary.to_path_buf(),
            env,
            log_dir: log_dir.to_path_buf(),
            slots: Vec::new(),
            unplanned: Vec::new(),
        };
        for index in 0..count {
            workers.slots.push(Slot {
                child: None,
                held_down: false,
                starts: 0,
                restart_at: None,
            });
            workers.spawn(index)?;
        }
        Ok(workers)
    }

    fn spawn(&mut self, index: usize) -> Result<()> {
        let log_path = self.log_dir.join(format!("worker-{index}.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("open {}", log_path.display()))?;
        let mut command = Command::new(&self.binary);
        command
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true);
        let child = command
            .spawn()
            .with_context(|| format!("start {}", self.binary.display()))?;
        let slot = &mut self.slots[index];
        slot.child = Some(child);
        slot.held_down = false;
        slot.restart_at = None;
        slot.starts += 1;
        Ok(())
    }

    /// Restarts (after [`RESTART_BACKOFF`]) every slot whose process ended while no fault held it
    /// down; `now_ms` stamps the report.
    pub fn supervise(&mut self, now_ms: u64) -> Result<()> {
        for index in 0..self.slots.len() {
            let slot = &mut self.slots[index];
            if slot.held_down {
                continue;
            }
            if let Some(at) = slot.restart_at {
                if Instant::now() >= at {
                    self.spawn(index)?;
                }
                continue;
            }
            let exited = match slot.child.as_mut() {
                Some(child) => child.try_wait()?,
                None => None,
            };
            if let Some(status) = exited {
                slot.child = None;
                slot.restart_at = Some(Instant::now() + RESTART_BACKOFF);
                self.unplanned.push(UnplannedExit {
                    worker: index,
                    at_ms: now_ms,
                    status: status.to_string(),
                });
            }
        }
        Ok(())
    }

    /// Takes slot `index`'s process out of supervision (so its exit is planned) and returns it;
    /// the slot stays down until [`Workers::release`].
    pub fn hold_down(&mut self, index: usize) -> Option<Child> {
        let slot = self.slots.get_mut(index)?;
        slot.held_down = true;
        slot.child.take()
    }

    /// Starts slot `index` again after a worker fault.
    pub fn release(&mut self, index: usize) -> Result<()> {
        if index >= self.slots.len() {
            return Ok(());
        }
        self.spawn(index)
    }

    /// Process starts per slot (first start included).
    pub fn starts(&self) -> Vec<u32> {
        self.slots.iter().map(|s| s.starts).collect()
    }

    /// Every process, taken out of supervision (to stop them all at the end).
    pub fn hold_down_all(&mut self) -> Vec<Child> {
        (0..self.slots.len())
            .filter_map(|index| self.hold_down(index))
            .collect()
    }
}

/// SIGKILLs a worker: no drain, no cleanup.
pub async fn kill(mut child: Child) {
    let _ = child.start_kill();
    let _ = child.wait().await;
}

/// SIGTERMs a worker and waits for it to drain and exit; SIGKILL after `grace`.
pub async fn terminate(mut child: Child, grace: Duration) {
    if let Some(pid) = child.id() {
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await;
    }
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        tracing::warn!("a worker ignored SIGTERM past its grace; killing it");
        kill(child).await;
    }
}
