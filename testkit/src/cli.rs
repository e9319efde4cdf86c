//! The operator CLI (`target/debug/buzz-deletion`) run as a process with the stack's
//! environment, and what one run printed. A signed command that names its operator
//! (`--approved-by bob`) and gives no `--key` signs with that operator's e2e key
//! ([`crate::operators`]).

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;
use uuid::Uuid;

use crate::env::bin;
use crate::poll;

/// What one process run printed.
#[derive(Debug)]
pub struct CliRun {
    /// Exit code.
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl CliRun {
    /// The run of a finished process.
    pub fn from_output(output: &std::process::Output) -> CliRun {
        CliRun {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Standard output parsed as JSON (panics with both streams when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}); code {}\nstdout: {}\nstderr: {}",
                self.code, self.stdout, self.stderr
            )
        })
    }

    /// Panics unless the exit code is `code`; hands the run on.
    pub fn expect_code(self, code: i32) -> Self {
        self.expect_exit(code);
        self
    }

    /// Panics unless the exit code is `code` and stderr says `text`: a refusal that names
    /// its reason. Hands the run on.
    pub fn expect_refusal_naming(self, code: i32, text: &str) -> Self {
        self.expect_refusal_naming_all(code, &[text])
    }

    /// Panics unless the exit code is `code` and stderr says every one of `texts`: a refusal
    /// that names all it must. Hands the run on.
    pub fn expect_refusal_naming_all(self, code: i32, texts: &[&str]) -> Self {
        self.expect_exit(code);
        for text in texts {
            assert!(
                self.stderr.contains(text),
                "{text:?} missing: {}",
                self.stderr
            );
        }
        self
    }

    /// Panics unless the exit code is `code` and stdout says `text`. Hands the run on.
    pub fn expect_printing(self, code: i32, text: &str) -> Self {
        self.expect_exit(code);
        assert!(
            self.stdout.contains(text),
            "{text:?} missing: {}",
            self.stdout
        );
        self
    }

    /// Panics unless the exit code is `code`; keeps the run where it is.
    pub fn expect_exit(&self, code: i32) -> &Self {
        assert_eq!(
            self.code, code,
            "expected exit {code}\nstdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        self
    }
}

/// Runs `program ARGS…` with extra environment and captures its output.
pub async fn exec(program: &str, args: &[&str], envs: &[(&str, &str)]) -> CliRun {
    let output = Command::new(program)
        .args(args)
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap_or_else(|e| panic!("could not run {program}: {e}"));
    CliRun::from_output(&output)
}

/// The operator CLI with the environment of this process plus its own.
#[derive(Clone)]
pub struct Cli {
    env: Vec<(String, String)>,
    removed: Vec<String>,
}

impl Cli {
    /// A CLI that starts workflows on `task_queue` of the shared dev server.
    pub fn new(task_queue: &str) -> Cli {
        Cli::inherited()
            .with_env("BUZZ_TASK_QUEUE", task_queue)
            .with_env("RUST_LOG", "warn")
    }

    /// A CLI with this process's environment and nothing else.
    pub fn inherited() -> Cli {
        Cli {
            env: Vec::new(),
            removed: Vec::new(),
        }
    }

    /// The same CLI with extra environment (e.g. a test's own `DATABASE_URL`).
    pub fn with_env(mut self, name: &str, value: &str) -> Cli {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The same CLI without the inherited variable `name` (e.g. to give it as `NAME_FILE`).
    pub fn without_env(mut self, name: &str) -> Cli {
        self.removed.push(name.to_owned());
        self
    }

    /// `buzz-deletion ARGS…`, not yet started (killed when dropped).
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(bin("buzz-deletion"));
        command
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        for name in &self.removed {
            command.env_remove(name);
        }
        command
    }

    /// Runs `buzz-deletion ARGS…` and captures its output. A signed command that names its
    /// operator and gives no `--key` signs with that operator's e2e key, registered in the
    /// database of this CLI's `BUZZ_OWNER_DATABASE_URL` when it has one of its own.
    pub async fn run(&self, args: &[&str]) -> CliRun {
        let owner = self
            .env
            .iter()
            .find(|(name, _)| name == "BUZZ_OWNER_DATABASE_URL")
            .map(|(_, url)| url.as_str());
        let args = crate::operators::with_operator_key(args, owner).await;
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = self
            .command(&args)
            .output()
            .await
            .unwrap_or_else(|e| panic!("could not run buzz-deletion: {e}"));
        CliRun::from_output(&output)
    }

    /// `GROUP VERB ID ACTOR_FLAG ACTOR --reason REASON`: an operator's abort or unblock.
    async fn decide(
        &self,
        group: &str,
        verb: &str,
        id: &str,
        (actor_flag, actor): (&str, &str),
        reason: &str,
    ) -> CliRun {
        self.run(&[group, verb, id, actor_flag, actor, "--reason", reason])
            .await
    }

    /// Submits a deletion with fast test tuning; returns (request id, digest).
    pub async fn submit(&self, host: &str, requested_by: &str, extra: &[&str]) -> (String, String) {
        let mut args = submit_args(host, requested_by);
        args.extend_from_slice(&["--heartbeat-timeout-secs", "5"]);
        args.extend_from_slice(extra);
        id_and_digest(&self.run(&args).await.expect_code(0).json())
    }

    /// Submits as `alice` (fast retries, plus `extra`) a deletion whose inventory blocks: the
    /// CLI exits 1 with the blocked request. Returns its id and the printed document.
    pub async fn submit_blocked(&self, host: &str, extra: &[&str]) -> (Uuid, Value) {
        let mut args = submit_args(host, "alice");
        args.extend_from_slice(extra);
        let json = self.run(&args).await.expect_code(1).json();
        let id = json["request_id"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("a blocked submit must print its request id: {json}"));
        (id, json)
    }

    /// `community unblock ID --unblocked-by ACTOR --reason REASON`.
    pub async fn unblock(&self, id: &str, actor: &str, reason: &str) -> CliRun {
        self.decide(
            "community",
            "unblock",
            id,
            ("--unblocked-by", actor),
            reason,
        )
        .await
    }

    /// `community abort ID --aborted-by BY --reason REASON`.
    pub async fn abort(&self, id: &str, by: &str, reason: &str) -> CliRun {
        self.decide("community", "abort", id, ("--aborted-by", by), reason)
            .await
    }

    /// `community approve ID --inventory-digest DIGEST --key KEY EXTRA…`: an approval signed
    /// with the key at `key`, whoever's it is.
    pub async fn approve_with_key(
        &self,
        id: &str,
        digest: &str,
        key: &str,
        extra: &[&str],
    ) -> CliRun {
        let mut args = vec![
            "community",
            "approve",
            id,
            "--inventory-digest",
            digest,
            "--key",
            key,
        ];
        args.extend_from_slice(extra);
        self.run(&args).await
    }

    /// `community unblock ID` by `actor` giving `remediation` (must exit 0), then waits (up to
    /// 60 s) until the inventory, taken again, awaits approval unblocked; returns that status.
    pub async fn unblock_until_awaiting_approval(
        &self,
        id: &str,
        actor: &str,
        remediation: &str,
    ) -> Value {
        self.unblock(id, actor, remediation).await.expect_code(0);
        self.wait_status(id, 60, |s| {
            s["phase"] == "awaiting_approval" && s["blocked"].is_null()
        })
        .await
    }

    /// `community approve ID` by bob of `digest` (must exit 0), then `community watch ID` until
    /// the deletion completes.
    pub async fn approve_and_finish(&self, id: &str, digest: &str) {
        self.approve(id, "bob", digest).await.expect_code(0);
        self.watch_to_end(id).await;
    }

    /// What `community inspect ID` prints (must exit 0): the request, its audit trail, its
    /// signatures.
    pub async fn inspect(&self, id: &str) -> Value {
        self.run(&["community", "inspect", id])
            .await
            .expect_code(0)
            .json()
    }

    /// `community unblock ID` by `actor` giving `remediation` (must exit 0), then `community
    /// watch ID` until the deletion completes.
    pub async fn unblock_and_finish(&self, id: &str, actor: &str, remediation: &str) {
        self.unblock(id, actor, remediation).await.expect_code(0);
        self.watch_to_end(id).await;
    }

    /// What `community status ID` prints, which must exit `code` (1: the request is blocked).
    pub async fn status(&self, id: &str, code: i32) -> Value {
        let status = self.run(&["community", "status", id]).await;
        status.expect_code(code).json()
    }

    /// The audit trail `community inspect ID` prints (must exit 0).
    pub async fn inspected_audit(&self, id: &str) -> Vec<Value> {
        audit_of(&self.inspect(id).await)
    }

    /// `community watch ID --interval-ms 300 --timeout-secs 240` until the deletion completes
    /// (must exit 0); what it printed.
    pub async fn watch_to_end_printing(&self, id: &str) -> CliRun {
        self.watch_within(id, 300, 240).await
    }

    /// `community watch ID --interval-ms INTERVAL --timeout-secs SECS` until the deletion
    /// completes (must exit 0); what it printed.
    pub async fn watch_within(&self, id: &str, interval_ms: u64, secs: u64) -> CliRun {
        let (interval, secs) = (interval_ms.to_string(), secs.to_string());
        let mut watch = vec!["community", "watch", id];
        watch.extend(["--interval-ms", &interval, "--timeout-secs", &secs]);
        self.run(&watch).await.expect_code(0)
    }

    /// `community watch ID` until the deletion ends (up to 240 s), which must be a completion.
    pub async fn watch_to_end(&self, id: &str) {
        self.run(&["community", "watch", id, "--timeout-secs", "240"])
            .await
            .expect_code(0);
    }

    /// `community approve ID --approved-by APPROVER --digest DIGEST`.
    pub async fn approve(&self, id: &str, approver: &str, digest: &str) -> CliRun {
        self.run(&[
            "community",
            "approve",
            id,
            "--approved-by",
            approver,
            "--inventory-digest",
            digest,
        ])
        .await
    }

    /// The signed payload `community sign ARGS…` prints (what the Web UI's dialog is given).
    pub async fn signed_payload(&self, args: &[&str]) -> String {
        let mut all = vec!["community", "sign"];
        all.extend_from_slice(args);
        self.run(&all).await.expect_code(0).stdout.trim().to_owned()
    }

    /// `user approve ID --approved-by BY --inventory-digest DIGEST`.
    pub async fn user_approve(&self, id: &str, by: &str, digest: &str) -> CliRun {
        self.run(&[
            "user",
            "approve",
            id,
            "--approved-by",
            by,
            "--inventory-digest",
            digest,
        ])
        .await
    }

    /// `user run ID`: the approved deletion run to its end (or its block) in the foreground.
    pub async fn user_run(&self, id: &str) -> CliRun {
        self.run(&["user", "run", id]).await
    }

    /// `user abort ID --requested-by BY --reason REASON`.
    pub async fn user_abort(&self, id: &str, by: &str, reason: &str) -> CliRun {
        self.decide("user", "abort", id, ("--requested-by", by), reason)
            .await
    }

    /// `user unblock ID --requested-by BY --reason REASON`.
    pub async fn user_unblock(&self, id: &str, by: &str, reason: &str) -> CliRun {
        self.decide("user", "unblock", id, ("--requested-by", by), reason)
            .await
    }

    /// `user submit --target TARGET --requested-by REQUESTER`, whatever it answers.
    pub async fn user_submit_run(&self, target: &str, requester: &str) -> CliRun {
        self.run(&[
            "user",
            "submit",
            "--target",
            target,
            "--requested-by",
            requester,
        ])
        .await
    }

    /// `user submit --target TARGET --requested-by REQUESTER` (must exit 0); returns the
    /// request id and the frozen inventory's digest.
    pub async fn user_submit(&self, target: &str, requester: &str) -> (String, String) {
        id_and_digest(
            &self
                .user_submit_run(target, requester)
                .await
                .expect_code(0)
                .json(),
        )
    }

    /// [`Cli::user_submit`], then `user approve` by `approver` with the printed digest (must
    /// exit 0); returns the request id.
    pub async fn user_submit_and_approve(
        &self,
        target: &str,
        requester: &str,
        approver: &str,
    ) -> String {
        let (id, digest) = self.user_submit(target, requester).await;
        self.user_approve(&id, approver, &digest)
            .await
            .expect_code(0);
        id
    }

    /// Polls `community status` until `done` says so (or panics after `secs`).
    pub async fn wait_status(&self, id: &str, secs: u64, done: impl Fn(&Value) -> bool) -> Value {
        let every = Duration::from_millis(500);
        poll::until(Duration::from_secs(secs), every, async || {
            let run = self.run(&["community", "status", id]).await;
            match serde_json::from_str::<Value>(&run.stdout) {
                Ok(status) if done(&status) => Ok(status),
                _ => Err(format!(
                    "status of {id} never matched; last: {}\n{}",
                    run.stdout, run.stderr
                )),
            }
        })
        .await
    }

    /// Waits (up to 60 s) until the request's audit trail holds `count` events named `event`.
    pub async fn wait_audit(&self, id: &str, event: &str, count: usize) {
        let every = Duration::from_millis(300);
        poll::until(Duration::from_secs(60), every, async || {
            let inspection = self.run(&["community", "inspect", id]).await;
            let seen = serde_json::from_str::<Value>(&inspection.stdout)
                .map(|v| audit_of(&v))
                .unwrap_or_default()
                .iter()
                .filter(|e| e["event"] == event)
                .count();
            (seen >= count)
                .then_some(())
                .ok_or_else(|| format!("{id}: {count} {event} events never recorded (saw {seen})"))
        })
        .await
    }
}

/// The frozen inventory's digest a `community status` document shows (empty when none).
pub fn inventory_digest(status: &Value) -> String {
    status["inventory"]["digest"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The audit trail of a `community inspect` document.
pub fn audit_of(inspection: &Value) -> Vec<Value> {
    inspection["audit"].as_array().cloned().unwrap_or_default()
}

/// `community submit --host HOST --requested-by WHO` with fast retries.
fn submit_args<'a>(host: &'a str, requested_by: &'a str) -> Vec<&'a str> {
    vec![
        "community",
        "submit",
        "--host",
        host,
        "--requested-by",
        requested_by,
        "--retry-initial-secs",
        "1",
    ]
}

/// The request id and the frozen inventory's digest a `submit` printed (both must be there).
fn id_and_digest(submitted: &Value) -> (String, String) {
    let field = |name: &str| submitted[name].as_str().unwrap_or_default().to_owned();
    let (id, digest) = (field("request_id"), field("inventory_digest"));
    assert!(
        !id.is_empty() && !digest.is_empty(),
        "submit printed {submitted}"
    );
    (id, digest)
}
