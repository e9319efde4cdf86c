//! The operators of the run: submit, approve (by the CLI's update or by the Web UI's signal
//! path) and abort, through the real `buzz-deletion` and `temporal` binaries, as two registered
//! operators with their own keys. A command that fails because a server is down is retried, but
//! only after the durable record says its effect did not happen: a retried submit adopts the
//! request an earlier attempt created, a retried approval or abort stops once it is recorded.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use activities::store::Store;
use anyhow::{Context, Result, anyhow, bail};
use serde::Serialize;
use serde_json::Value;
use tokio::process::Command;
use tokio::time::Instant;
use uuid::Uuid;

use crate::schedule::ApprovalRoute;

/// Pause between two attempts of a command.
const RETRY_PAUSE: Duration = Duration::from_secs(3);

/// How long a failed submit's request has to appear in the record before submitting again.
const ADOPT_WITHIN: Duration = Duration::from_secs(90);

/// How long a sent approval or abort has to show up in the record before it is sent again.
const CONFIRM_WITHIN: Duration = Duration::from_secs(45);

/// A submitted request.
#[derive(Debug, Clone, Serialize)]
pub struct Submitted {
    /// Request id.
    pub request_id: Uuid,
    /// Its workflow.
    pub workflow_id: String,
    /// The frozen inventory digest.
    pub digest: String,
}

/// The line of a command's error output that says what failed: its `error:` line (log lines
/// may come first), else its first line.
fn first_line(text: &str) -> &str {
    let mut lines = text.trim().lines();
    text.trim()
        .lines()
        .find(|line| line.to_ascii_lowercase().starts_with("error"))
        .or_else(|| lines.next())
        .unwrap_or("(no output)")
}

/// One finished command.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// The binaries, keys and task queue the operators use.
#[derive(Debug, Clone)]
pub struct Operators {
    /// `buzz-deletion`.
    pub cli: PathBuf,
    /// The Temporal CLI.
    pub temporal_cli: PathBuf,
    /// The real Temporal address (operators are not behind the workers' proxies).
    pub temporal_address: String,
    /// The run's task queue.
    pub task_queue: String,
    /// Private key of the requesting operator.
    pub requester_key: PathBuf,
    /// Private key of the approving operator.
    pub approver_key: PathBuf,
    /// Postgres as the owner, to read the record.
    pub store: Store,
}

impl Operators {
    async fn exec(&self, program: &PathBuf, args: &[&str]) -> Result<Run> {
        let output = Command::new(program)
            .args(args)
            .env("BUZZ_TASK_QUEUE", &self.task_queue)
            .stdin(Stdio::null())
            .output()
            .await
            .with_context(|| format!("cannot run {}", program.display()))?;
        Ok(Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }

    async fn cli(&self, args: &[&str]) -> Result<Run> {
        self.exec(&self.cli, args).await
    }

    /// The newest request of `community`, read from the record: `(id, workflow, digest)`.
    async fn latest_request(
        &self,
        community: Uuid,
    ) -> Result<Option<(Uuid, String, Option<String>)>> {
        Ok(sqlx::query_as(
            "SELECT id, workflow_id, inventory_digest FROM deletion.requests \
             WHERE kind = 'community' AND community_id = $1 ORDER BY created_at DESC LIMIT 1",
        )
        .bind(community)
        .fetch_optional(self.store.pool())
        .await?)
    }

    /// Submits the deletion of `host` and waits for its frozen inventory; gives up at `deadline`.
    pub async fn submit(
        &self,
        host: &str,
        community: Uuid,
        deadline: Instant,
    ) -> Result<Submitted> {
        let key = self.requester_key.display().to_string();
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let adopted = match self.latest_request(community).await {
                Ok(found) => found,
                Err(error) => {
                    eprintln!("chaos: {host}: the record is unreadable ({error}); retrying");
                    None
                }
            };
            if let Some((request_id, workflow_id, digest)) = adopted {
                return self
                    .await_digest(request_id, workflow_id, digest, deadline)
                    .await;
            }
            let run = self
                .cli(&[
                    "community",
                    "submit",
                    "--host",
                    host,
                    "--key",
                    &key,
                    "--reason",
                    "chaos run",
                    "--retry-initial-secs",
                    "1",
                    "--retry-max-secs",
                    "10",
                    "--heartbeat-timeout-secs",
                    "10",
                    "--wait-secs",
                    "60",
                    "--worker-wait",
                    "60",
                ])
                .await?;
            if run.code == 0 {
                let out: Value = serde_json::from_str(&run.stdout)
                    .with_context(|| format!("submit printed no JSON: {}", run.stdout))?;
                let request_id: Uuid = out["request_id"]
                    .as_str()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| anyhow!("submit printed no request_id: {out}"))?;
                let workflow_id = out["workflow_id"].as_str().unwrap_or_default().to_owned();
                let digest = out["inventory_digest"].as_str().map(str::to_owned);
                return self
                    .await_digest(request_id, workflow_id, digest, deadline)
                    .await;
            }
            eprintln!(
                "chaos: {host}: submit attempt {attempts} failed (exit {}): {}",
                run.code,
                first_line(&run.stderr)
            );
            if Instant::now() > deadline {
                bail!(
                    "submit of {host} failed {attempts} times; last: {}",
                    run.stderr.trim()
                );
            }
            // A failed submit may have started its workflow anyway ("the request continues"):
            // give it time to register before submitting again, as an operator would check
            // `community list` first. A second workflow would only be refused by the one-open-
            // request rule, but it is noise.
            let until = Instant::now() + ADOPT_WITHIN;
            while Instant::now() < until {
                if matches!(self.latest_request(community).await, Ok(Some(_))) {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }

    async fn await_digest(
        &self,
        request_id: Uuid,
        workflow_id: String,
        digest: Option<String>,
        deadline: Instant,
    ) -> Result<Submitted> {
        let mut digest = digest;
        loop {
            if let Some(digest) = digest.filter(|d| !d.is_empty()) {
                return Ok(Submitted {
                    request_id,
                    workflow_id,
                    digest,
                });
            }
            if Instant::now() > deadline {
                bail!("request {request_id}: the inventory was never frozen");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            digest =
                sqlx::query_scalar("SELECT inventory_digest FROM deletion.requests WHERE id = $1")
                    .bind(request_id)
                    .fetch_optional(self.store.pool())
                    .await
                    .ok()
                    .flatten()
                    .flatten();
        }
    }

    /// The one value `sql` selects for the request (`$1`); `None` when the query fails.
    async fn fact<T>(&self, sql: &'static str, request_id: Uuid) -> Option<T>
    where
        T: Send + Unpin,
        (T,): for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>,
    {
        sqlx::query_scalar::<_, T>(sql)
            .bind(request_id)
            .fetch_one(self.store.pool())
            .await
            .ok()
    }

    async fn approved(&self, request_id: Uuid) -> bool {
        let sql = "SELECT count(*) FROM deletion.approvals WHERE request_id = $1";
        self.fact::<i64>(sql, request_id)
            .await
            .is_some_and(|n| n > 0)
    }

    async fn aborted(&self, request_id: Uuid) -> bool {
        let sql = "SELECT stage FROM deletion.requests WHERE id = $1";
        self.fact::<String>(sql, request_id)
            .await
            .is_some_and(|stage| stage == "aborted")
    }

    /// Whether the request passed its irreversible point (an abort is then refused).
    async fn irreversible(&self, request_id: Uuid) -> bool {
        let sql = "SELECT irreversible_at IS NOT NULL FROM deletion.requests WHERE id = $1";
        self.fact::<bool>(sql, request_id).await.unwrap_or(false)
    }

    /// Whether the record shows `goal` reached.
    async fn reached(&self, request_id: Uuid, goal: Goal) -> bool {
        match goal {
            Goal::Approved => self.approved(request_id).await,
            Goal::Aborted => self.aborted(request_id).await,
            Goal::AbortedOrIrreversible => {
                self.aborted(request_id).await || self.irreversible(request_id).await
            }
        }
    }

    /// Waits up to [`CONFIRM_WITHIN`] for `goal` to show in the record.
    async fn confirmed(&self, request_id: Uuid, goal: Goal) -> bool {
        let until = Instant::now() + CONFIRM_WITHIN;
        while Instant::now() < until {
            if self.reached(request_id, goal).await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        false
    }

    /// Sends `action` until the record shows `goal`; gives up at `deadline`. Returns how many
    /// times it was sent.
    async fn until_recorded(
        &self,
        request: &Submitted,
        action: Action,
        goal: Goal,
        deadline: Instant,
    ) -> Result<u32> {
        let id = request.request_id;
        let mut sent = 0u32;
        loop {
            if self.reached(id, goal).await {
                return Ok(sent);
            }
            if Instant::now() > deadline {
                bail!("request {id}: {goal:?} never recorded after {sent} {action:?} send(s)");
            }
            let run = match action {
                Action::Approve(route) => self.send_approval(request, route).await?,
                Action::Abort => self.send_abort(request).await?,
            };
            sent += 1;
            if run.code == 0 {
                // Not yet recorded after a while: the loop checks again and sends again.
                let _ = self.confirmed(id, goal).await;
            } else {
                eprintln!(
                    "chaos: {id}: {action:?} not accepted (exit {}): {}",
                    run.code,
                    first_line(&run.stderr)
                );
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }

    /// One approval of `request` by `route`.
    async fn send_approval(&self, request: &Submitted, route: ApprovalRoute) -> Result<Run> {
        let id = request.request_id.to_string();
        let key = self.approver_key.display().to_string();
        let approval = [
            "approve",
            &id,
            "--inventory-digest",
            &request.digest,
            "--key",
            &key,
            "--note",
            "chaos run",
        ];
        match route {
            ApprovalRoute::Cli => {
                let mut args = vec!["community"];
                args.extend_from_slice(&approval);
                args.extend(["--worker-wait", "60"]);
                self.cli(&args).await
            }
            ApprovalRoute::WebUiSignal => {
                let mut args = vec!["community", "sign"];
                args.extend_from_slice(&approval);
                let signed = self.cli(&args).await?;
                if signed.code != 0 {
                    return Ok(signed);
                }
                self.exec(
                    &self.temporal_cli,
                    &[
                        "workflow",
                        "signal",
                        "-w",
                        &request.workflow_id,
                        "--name",
                        "approve",
                        "--input",
                        signed.stdout.trim(),
                        "--address",
                        &self.temporal_address,
                        "--namespace",
                        "default",
                    ],
                )
                .await
            }
        }
    }

    /// One abort of `request`, by the requester.
    async fn send_abort(&self, request: &Submitted) -> Result<Run> {
        let id = request.request_id.to_string();
        let key = self.requester_key.display().to_string();
        self.cli(&[
            "community",
            "abort",
            &id,
            "--reason",
            "chaos run: abort",
            "--key",
            &key,
            "--worker-wait",
            "60",
        ])
        .await
    }

    /// Approves `request` by `route` until the approval is recorded; gives up at `deadline`.
    pub async fn approve(
        &self,
        request: &Submitted,
        route: ApprovalRoute,
        deadline: Instant,
    ) -> Result<u32> {
        self.until_recorded(request, Action::Approve(route), Goal::Approved, deadline)
            .await
    }

    /// Aborts `request` until the abort is recorded; gives up at `deadline`.
    pub async fn abort(&self, request: &Submitted, deadline: Instant) -> Result<u32> {
        self.until_recorded(request, Action::Abort, Goal::Aborted, deadline)
            .await
    }

    /// Aborts `request` right after its approval, until the abort is recorded or the request has
    /// passed its irreversible point (the abort is then refused and the deletion completes).
    pub async fn abort_unless_irreversible(
        &self,
        request: &Submitted,
        deadline: Instant,
    ) -> Result<u32> {
        self.until_recorded(
            request,
            Action::Abort,
            Goal::AbortedOrIrreversible,
            deadline,
        )
        .await
    }
}

/// What an operator sends.
#[derive(Debug, Clone, Copy)]
enum Action {
    /// An approval, by this route.
    Approve(ApprovalRoute),
    /// An abort.
    Abort,
}

/// What the record must show for a send to count.
#[derive(Debug, Clone, Copy)]
enum Goal {
    /// An approval row.
    Approved,
    /// The `aborted` stage.
    Aborted,
    /// The `aborted` stage, or the irreversible mark (the abort was refused).
    AbortedOrIrreversible,
}
