//! The workflow variants (b and c): the real worker process on its own task queue, driven by the
//! real operator CLI, timed from the approval to `retention_pending`.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;
use tokio::process::{Child, Command};
use uuid::Uuid;

use crate::cpu_account::{CpuAccount, CpuSnapshot};
use crate::history::{RunHistory, run_chain};
use crate::machine::peak_rss_kib;
use crate::stack::Stack;

/// How often the request row is polled for completion.
pub(crate) const POLL: Duration = Duration::from_millis(100);

/// How long a stopped worker may drain before it is killed.
const WORKER_DRAIN: Duration = Duration::from_secs(30);

/// Workflow tuning and process settings of one workflow variant.
#[derive(Debug, Clone)]
pub struct WorkflowVariant {
    /// Directory of `buzz-deletion` and `buzz-deletion-worker`.
    pub bin_dir: PathBuf,
    /// DeleteObjects calls in flight (`--delete-parallelism`).
    pub delete_parallelism: u32,
    /// Chunks per `delete_chunks` call (`--chunks-per-call`).
    pub chunks_per_call: u64,
    /// `delete_chunks` calls per run (`--delete-rounds-per-run`).
    pub delete_rounds_per_run: u32,
    /// Versions per manifest chunk (worker's `BUZZ_MANIFEST_CHUNK_ENTRIES`).
    pub chunk_entries: u32,
    /// Give up after this long.
    pub timeout: Duration,
    /// Variables set for the worker and the CLI on top of the inherited environment (another
    /// database's URLs, another S3 endpoint).
    pub env: Vec<(String, String)>,
    /// Kill the worker (SIGKILL, no drain) once the freeze has stored this many manifest
    /// chunks, and start another: the freeze must resume from what it stored.
    pub kill_freeze_at_chunks: Option<u64>,
}

/// The worker killed in the middle of the freeze.
#[derive(Debug, Clone, PartialEq)]
pub struct FreezeKill {
    /// Manifest chunks stored when it was killed.
    pub chunks_at_kill: u64,
    /// Versions those chunks hold.
    pub versions_at_kill: u64,
    /// The killed worker's peak resident set, KiB.
    pub peak_rss_kib: u64,
    /// The killed worker's CPU seconds.
    pub cpu_seconds: f64,
}

/// What one workflow variant measured.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowTimings {
    /// From invoking `community approve` until the request reached `retention_pending` (the
    /// time its checkpoint records, on this machine's clock: not when the bench's polling saw
    /// it, up to one poll later).
    pub wall: Duration,
    /// Time per stage checkpoint, from the approval on (stage, time since the previous one).
    pub stages: Vec<(String, Duration)>,
    /// Every run of the continue-as-new chain.
    pub runs: Vec<RunHistory>,
    /// The worker's peak resident set, KiB.
    pub worker_peak_rss_kib: u64,
    /// CPU seconds the worker used from its start to the end of the deletion.
    pub worker_cpu_seconds: f64,
    /// Top-level statements (round trips) the worker role ran from just before the approval to
    /// the end; `None` without `pg_stat_statements`.
    pub worker_statements: Option<u64>,
    /// The request id.
    pub request_id: Uuid,
    /// The worker killed mid-freeze, when the variant asked for it (the figures above are then
    /// the replacement worker's).
    pub freeze_kill: Option<FreezeKill>,
    /// The details of the audit trail's `freeze_resumed` events (chunks and versions kept).
    pub freeze_resumed: Vec<Value>,
    /// Where the machine's CPU went from the approval to the end, the worker as the client;
    /// `None` when the worker was replaced on the way (a killed freeze).
    pub cpu: Option<CpuAccount>,
}

/// Deletes the community served at `host` through the workflow and measures it.
pub async fn run_workflow(
    stack: &Stack,
    host: &str,
    variant: &WorkflowVariant,
    label: &str,
) -> Result<WorkflowTimings> {
    let task_queue = format!("bench-{label}-{}", Uuid::new_v4().simple());
    let mut worker = start_worker(variant, &task_queue)?;
    let measured = drive(stack, host, variant, &task_queue, &mut worker).await;
    stop_worker(&mut worker).await;
    measured
}

/// Submits, approves and waits; reads the worker's peak RSS before it is stopped.
async fn drive(
    stack: &Stack,
    host: &str,
    variant: &WorkflowVariant,
    task_queue: &str,
    worker: &mut Child,
) -> Result<WorkflowTimings> {
    let requester = operator_key(variant, "bench-requester").await?;
    let approver = operator_key(variant, "bench-approver").await?;
    let submitted = submit(variant, task_queue, host, &requester).await?;
    let request_id = submitted.request_id;

    let counter = crate::statements::StatementCounter::connect().await?;
    let statements_before = match &counter {
        Some(counter) => Some(counter.total().await?),
        None => None,
    };
    let worker_pid = worker.id().context("the worker exited")?;
    let cpu_before = CpuSnapshot::take(worker_pid)?;
    let started = Instant::now();
    let started_at = chrono::Utc::now();
    approve(variant, task_queue, &submitted, &approver).await?;
    let freeze_kill = match variant.kill_freeze_at_chunks {
        Some(chunks) => {
            let killed = kill_mid_freeze(stack, request_id, chunks, worker, variant).await?;
            *worker = start_worker(variant, task_queue)?;
            Some(killed)
        }
        None => None,
    };
    wait_until_retained(stack, request_id, variant.timeout).await?;
    let polled = started.elapsed();
    let pid = worker.id().context("the worker exited")?;
    let cpu = (pid == worker_pid)
        .then(|| CpuSnapshot::take(pid).map(|after| after.since(&cpu_before)))
        .transpose()?;
    let worker_peak_rss_kib = peak_rss_kib(pid)?;
    let worker_cpu_seconds = crate::machine::cpu_seconds(pid)?;
    let worker_statements = match (&counter, statements_before) {
        (Some(counter), Some(before)) => Some(counter.total().await?.saturating_sub(before)),
        _ => None,
    };

    let inspection = stack.store.inspect(request_id).await?;
    let stages = stage_durations(
        inspection
            .checkpoints
            .iter()
            .map(|c| (c.stage.clone(), c.reached_at)),
    );
    let wall = retained_after(&inspection.checkpoints, started_at).unwrap_or(polled);
    let runs = run_chain(&submitted.workflow_id).await?;
    let freeze_resumed = inspection
        .audit
        .iter()
        .filter(|event| event.event == "freeze_resumed")
        .map(|event| event.detail.clone())
        .collect();
    Ok(WorkflowTimings {
        wall,
        stages,
        runs,
        worker_peak_rss_kib,
        worker_cpu_seconds,
        worker_statements,
        request_id,
        freeze_kill,
        freeze_resumed,
        cpu,
    })
}

/// From `started_at` to the `retention_pending` checkpoint; `None` without one (or before).
fn retained_after(
    checkpoints: &[activities::store::Checkpoint],
    started_at: chrono::DateTime<chrono::Utc>,
) -> Option<Duration> {
    let reached = checkpoints
        .iter()
        .find(|c| c.stage == "retention_pending")?
        .reached_at;
    (reached - started_at).to_std().ok()
}

/// One submitted request: what the approval and the history reads need.
pub(crate) struct Submitted {
    pub(crate) request_id: Uuid,
    pub(crate) workflow_id: String,
    pub(crate) digest: String,
}

/// `community submit` of one tenant, waiting for its inventory.
pub(crate) async fn submit(
    variant: &WorkflowVariant,
    task_queue: &str,
    host: &str,
    requester: &str,
) -> Result<Submitted> {
    let parallelism = variant.delete_parallelism.to_string();
    let chunks = variant.chunks_per_call.to_string();
    let rounds = variant.delete_rounds_per_run.to_string();
    let wait = variant.timeout.as_secs().to_string();
    let submitted = cli(
        variant,
        task_queue,
        &[
            "community",
            "submit",
            "--host",
            host,
            "--requested-by",
            "bench-requester",
            "--key",
            requester,
            "--retry-initial-secs",
            "1",
            "--wait-secs",
            &wait,
            "--delete-parallelism",
            &parallelism,
            "--chunks-per-call",
            &chunks,
            "--delete-rounds-per-run",
            &rounds,
        ],
    )
    .await?;
    let request_id: Uuid = submitted["request_id"]
        .as_str()
        .and_then(|id| id.parse().ok())
        .with_context(|| format!("submit of {host} printed no request id: {submitted}"))?;
    let digest = submitted["inventory_digest"]
        .as_str()
        .with_context(|| format!("submit of {host} printed no digest: {submitted}"))?
        .to_owned();
    let workflow_id = submitted["workflow_id"].as_str().map_or_else(
        || workflows::community::workflow_id(request_id),
        str::to_owned,
    );
    Ok(Submitted {
        request_id,
        workflow_id,
        digest,
    })
}

/// `community approve` of one submitted tenant.
pub(crate) async fn approve(
    variant: &WorkflowVariant,
    task_queue: &str,
    request: &Submitted,
    approver: &str,
) -> Result<()> {
    cli(
        variant,
        task_queue,
        &[
            "community",
            "approve",
            &request.request_id.to_string(),
            "--approved-by",
            "bench-approver",
            "--inventory-digest",
            &request.digest,
            "--key",
            approver,
        ],
    )
    .await?;
    Ok(())
}

/// Waits until the freeze of `request_id` stored `chunks` manifest chunks, then kills the
/// worker with SIGKILL (no drain, no heartbeat: as a crash).
async fn kill_mid_freeze(
    stack: &Stack,
    request_id: Uuid,
    chunks: u64,
    worker: &mut Child,
    variant: &WorkflowVariant,
) -> Result<FreezeKill> {
    let pid = worker.id().context("the worker exited")?;
    let deadline = Instant::now() + variant.timeout;
    loop {
        let (stored, versions): (i64, i64) = sqlx::query_as(
            "SELECT count(*), COALESCE(sum(entry_count), 0)::bigint \
             FROM deletion.manifest_chunks WHERE request_id = $1 AND late_at IS NULL",
        )
        .bind(request_id)
        .fetch_one(stack.store.pool())
        .await
        .context("counting the stored manifest chunks")?;
        let stored = u64::try_from(stored).unwrap_or(0);
        if stored >= chunks {
            let killed = FreezeKill {
                chunks_at_kill: stored,
                versions_at_kill: u64::try_from(versions).unwrap_or(0),
                peak_rss_kib: peak_rss_kib(pid)?,
                cpu_seconds: crate::machine::cpu_seconds(pid)?,
            };
            worker.kill().await.context("killing the worker")?;
            eprintln!(
                "killed the worker mid-freeze: {} chunks ({} versions) stored",
                killed.chunks_at_kill, killed.versions_at_kill
            );
            return Ok(killed);
        }
        let request = stack.store.get_request(request_id).await?;
        if request.stage != "approved" && request.stage != "fenced" {
            bail!(
                "the freeze ended (stage {}) before {chunks} chunks were stored ({stored})",
                request.stage
            );
        }
        if Instant::now() >= deadline {
            bail!("the freeze never stored {chunks} chunks ({stored} after the timeout)");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Polls the request row until it is `retention_pending`; a block or abort ends the wait.
pub(crate) async fn wait_until_retained(
    stack: &Stack,
    request_id: Uuid,
    timeout: Duration,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let request = stack.store.get_request(request_id).await?;
        match request.stage.as_str() {
            "retention_pending" => return Ok(()),
            "aborted" => bail!("request {request_id} was aborted"),
            _ => {}
        }
        if let Some(reason) = request.blocked_reason {
            bail!("request {request_id} is blocked: {reason}");
        }
        if Instant::now() >= deadline {
            bail!(
                "request {request_id} still at stage {} after {} s (last error: {:?})",
                request.stage,
                timeout.as_secs(),
                request.last_error
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Time between consecutive checkpoints, starting at the approval.
fn stage_durations(
    checkpoints: impl Iterator<Item = (String, chrono::DateTime<chrono::Utc>)>,
) -> Vec<(String, Duration)> {
    let mut previous: Option<chrono::DateTime<chrono::Utc>> = None;
    let mut stages = Vec::new();
    for (stage, at) in checkpoints {
        if previous.is_none() && stage != "approved" {
            continue;
        }
        if let Some(before) = previous {
            let took = (at - before).to_std().unwrap_or_default();
            stages.push((stage, took));
        }
        previous = Some(at);
    }
    stages
}

/// Starts `buzz-deletion-worker` on `task_queue` (metrics off, warnings only).
pub(crate) fn start_worker(variant: &WorkflowVariant, task_queue: &str) -> Result<Child> {
    let exe = variant.bin_dir.join("buzz-deletion-worker");
    Command::new(&exe)
        .env("BUZZ_TASK_QUEUE", task_queue)
        .env("BUZZ_METRICS_PORT", "0")
        .env(
            "BUZZ_MANIFEST_CHUNK_ENTRIES",
            variant.chunk_entries.to_string(),
        )
        .env("RUST_LOG", "warn")
        .envs(variant.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| {
            format!(
                "start {} (build it with `cargo build --workspace --bins`)",
                exe.display()
            )
        })
}

/// SIGTERM (graceful drain), then SIGKILL if it has not exited within [`WORKER_DRAIN`].
pub(crate) async fn stop_worker(worker: &mut Child) {
    if let Some(pid) = worker.id() {
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await;
    }
    if tokio::time::timeout(WORKER_DRAIN, worker.wait())
        .await
        .is_err()
    {
        let _ = worker.kill().await;
    }
}

/// A throwaway SSH key for operator `name` (every operator action is signed), registered with
/// `buzz-deletion operators add --replace` (the owner's BUZZ_OWNER_DATABASE_URL); its path.
pub(crate) async fn operator_key(variant: &WorkflowVariant, name: &str) -> Result<String> {
    let dir = std::env::temp_dir().join(format!("buzz-bench-operators-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let key = dir.join(name);
    if !key.exists() {
        let status = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
            .arg(&key)
            .stdin(Stdio::null())
            .status()
            .await
            .context("run ssh-keygen (install openssh-client)")?;
        if !status.success() {
            bail!("ssh-keygen could not create {}", key.display());
        }
    }
    let public = format!("{}.pub", key.display());
    cli(
        variant,
        "-",
        &[
            "operators",
            "add",
            "--name",
            name,
            "--public-key",
            &public,
            "--replace",
        ],
    )
    .await?;
    Ok(key.display().to_string())
}

/// Runs the operator CLI on `task_queue`; exit 0 and JSON on stdout are required.
pub(crate) async fn cli(
    variant: &WorkflowVariant,
    task_queue: &str,
    args: &[&str],
) -> Result<Value> {
    let exe = variant.bin_dir.join("buzz-deletion");
    let output = Command::new(&exe)
        .args(args)
        .env("BUZZ_TASK_QUEUE", task_queue)
        .env("RUST_LOG", "warn")
        .envs(variant.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .output()
        .await
        .with_context(|| format!("run {}", exe.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "buzz-deletion {} exited {:?}\n{stdout}\n{}",
            args.join(" "),
            output.status.code(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    serde_json::from_str(&stdout)
        .with_context(|| format!("buzz-deletion {} printed no JSON: {stdout}", args.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    #[test]
    fn stage_times_start_at_the_approval_and_are_deltas() {
        let at = |s: i64| Utc.timestamp_opt(1_000 + s, 0).single().unwrap_or_default();
        let stages = stage_durations(
            [
                ("inventoried".to_owned(), at(0)),
                ("approved".to_owned(), at(10)),
                ("fenced".to_owned(), at(11)),
                ("drained".to_owned(), at(14)),
                ("retention_pending".to_owned(), at(20)),
            ]
            .into_iter(),
        );
        assert_eq!(
            stages,
            vec![
                ("fenced".to_owned(), Duration::from_secs(1)),
                ("drained".to_owned(), Duration::from_secs(3)),
                ("retention_pending".to_owned(), Duration::from_secs(6)),
            ]
        );
    }
}
