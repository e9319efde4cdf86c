//! The test harness: the real local stack, real worker processes, the real CLI binary.
//!
//! Every test gets its own task queue and its own worker process, so tests run in parallel and a
//! test may SIGKILL its worker without touching anyone else's.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use activities::cache::Cache;
use activities::demo::{SeedPlan, SeedReport, seed_community};
use activities::objects::{ObjectStore, ObjectVersion};
use activities::stack_env::StackEnv;
use activities::store::{Store, TableSnapshot};
use activities::taxonomy::tenant_prefixes;
use serde_json::Value;
use tokio::process::{Child, Command};
use uuid::Uuid;

const HOW_TO_START: &str = "start the local stack with `bash deploy/local/up && source .state/env` \
     (or run the whole suite with `bash deploy/local/test`)";

/// Tests that stop a shared server take this for writing; every other test takes it for reading.
pub fn outage_lock() -> &'static tokio::sync::RwLock<()> {
    static LOCK: OnceLock<tokio::sync::RwLock<()>> = OnceLock::new();
    LOCK.get_or_init(|| tokio::sync::RwLock::new(()))
}

fn env(name: &'static str) -> String {
    StackEnv::process()
        .required(name)
        .unwrap_or_else(|e| panic!("{e}\n{HOW_TO_START}"))
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

/// Path of a workspace binary (built by `cargo build --workspace --bins` before the tests).
pub fn bin(name: &str) -> PathBuf {
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo_root().join("target"));
    let path = target.join("debug").join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace --bins` first (deploy/local/test does)",
        path.display()
    );
    path
}

/// Connections to the three data stores of the local stack.
///
/// Postgres is reached as two roles: `store` is the schema owner (BUZZ_OWNER_DATABASE_URL:
/// migrations, snapshots, inspection and deliberate tampering), `serving` the serving role
/// (BUZZ_SERVING_DATABASE_URL: tenant writes and leases, as the relay makes them). Workers and the
/// CLI run as the worker role (DATABASE_URL), which they inherit from this process.
pub struct Stack {
    /// Postgres as the schema owner.
    pub store: Store,
    /// Postgres as the serving role.
    pub serving: Store,
    /// S3 bucket.
    pub objects: ObjectStore,
    /// Redis.
    pub cache: Cache,
}

/// Connects to the local stack, migrating the database; panics naming the unreachable server.
pub async fn stack() -> Stack {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // Workers and CLI runs inherit DATABASE_URL: it must be the worker role.
    env("DATABASE_URL");
    let store = Store::connect(&env("BUZZ_OWNER_DATABASE_URL"))
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL not reachable as the owner: {e}\n{HOW_TO_START}"));
    migrate_once(&store).await;
    let serving = Store::connect(&env("BUZZ_SERVING_DATABASE_URL"))
        .await
        .unwrap_or_else(|e| {
            panic!("PostgreSQL not reachable as the serving role: {e}\n{HOW_TO_START}")
        });
    let s3 = StackEnv::process()
        .s3()
        .unwrap_or_else(|e| panic!("{e}\n{HOW_TO_START}"));
    let objects = ObjectStore::connect(&s3).await.unwrap_or_else(|e| {
        panic!(
            "S3 (Ceph RGW) not usable at {}: {e}\n{HOW_TO_START}",
            s3.endpoint
        )
    });
    objects.check_bucket().await.unwrap_or_else(|e| {
        panic!(
            "S3 bucket not usable at {}: {e}\n{HOW_TO_START}",
            s3.endpoint
        )
    });
    let redis_url = env("REDIS_URL");
    let cache = Cache::connect(&redis_url)
        .await
        .unwrap_or_else(|e| panic!("Redis not reachable at {redis_url}: {e}\n{HOW_TO_START}"));
    Stack {
        store,
        serving,
        objects,
        cache,
    }
}

async fn migrate_once(store: &Store) {
    static MIGRATED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    MIGRATED
        .get_or_init(|| async {
            store
                .migrate()
                .await
                .unwrap_or_else(|e| panic!("migrations failed: {e}"));
        })
        .await;
}

/// A host name no other test uses.
pub fn unique_host(tag: &str) -> String {
    format!("{tag}-{}.test.example", Uuid::new_v4().simple())
}

/// A small but complete tenant: versions, delete markers, rows and keys.
pub fn small_plan() -> SeedPlan {
    SeedPlan {
        objects: 6,
        versions: 2,
        delete_markers: 2,
        rows: 5,
        redis_keys: 7,
        parallelism: 8,
    }
}

/// Seeds a community through the serving API, as the serving role.
pub async fn seed(stack: &Stack, host: &str, plan: SeedPlan) -> SeedReport {
    seed_community(&stack.serving, &stack.objects, &stack.cache, host, plan)
        .await
        .unwrap_or_else(|e| panic!("seeding {host}: {e}"))
}

/// Everything a community holds in the three stores, for before/after comparisons.
#[derive(Debug, PartialEq, Eq)]
pub struct CommunitySnapshot {
    /// Rows per tenant table (each row as canonical JSON text).
    pub rows: Vec<TableSnapshot>,
    /// Every version and delete marker under its three prefixes (key, version id, size, kind).
    pub versions: Vec<ObjectVersion>,
    /// Every key with its DUMP serialization.
    pub keys: Vec<(String, Vec<u8>)>,
}

impl CommunitySnapshot {
    /// Total rows across tenant tables.
    pub fn row_count(&self) -> usize {
        self.rows.iter().map(|t| t.rows.len()).sum()
    }
}

/// Snapshots a community in all three stores.
pub async fn snapshot(stack: &Stack, community: Uuid) -> CommunitySnapshot {
    let rows = stack
        .store
        .snapshot_rows(community)
        .await
        .unwrap_or_else(|e| panic!("snapshot rows: {e}"));
    let mut versions = Vec::new();
    for prefix in tenant_prefixes(community) {
        versions.extend(
            stack
                .objects
                .snapshot_prefix(&prefix)
                .await
                .unwrap_or_else(|e| panic!("snapshot {prefix}: {e}")),
        );
    }
    let keys = stack
        .cache
        .snapshot_namespace(community)
        .await
        .unwrap_or_else(|e| panic!("snapshot keys: {e}"));
    CommunitySnapshot {
        rows,
        versions,
        keys,
    }
}

/// A `buzz-deletion-worker` process on its own task queue.
pub struct WorkerProcess {
    child: Child,
}

impl WorkerProcess {
    /// Starts a worker on `task_queue` with extra environment, and waits until it polls.
    pub async fn start(task_queue: &str, extra_env: &[(&str, &str)]) -> WorkerProcess {
        let mut command = Command::new(bin("buzz-deletion-worker"));
        command
            .env("BUZZ_TASK_QUEUE", task_queue)
            .env("BUZZ_METRICS_PORT", "0")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        for (k, v) in extra_env {
            command.env(k, v);
        }
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("could not start buzz-deletion-worker: {e}"));
        // Connecting takes about a second; workflow tasks wait on the queue meanwhile anyway.
        tokio::time::sleep(Duration::from_millis(500)).await;
        WorkerProcess { child }
    }

    /// SIGKILLs the worker (no drain, no cleanup): a crash.
    pub async fn crash(mut self) {
        self.child
            .kill()
            .await
            .unwrap_or_else(|e| panic!("kill worker: {e}"));
        let _ = self.child.wait().await;
    }
}

/// What one CLI invocation printed.
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
    /// Standard output parsed as JSON (panics with both streams when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}); code {}\nstdout: {}\nstderr: {}",
                self.code, self.stdout, self.stderr
            )
        })
    }

    /// Panics unless the exit code is `code`.
    pub fn expect_code(self, code: i32) -> Self {
        assert_eq!(
            self.code, code,
            "expected exit {code}\nstdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        self
    }
}

/// The operator CLI bound to one task queue.
#[derive(Clone)]
pub struct Cli {
    task_queue: String,
    env: Vec<(String, String)>,
}

impl Cli {
    /// A CLI that starts workflows on `task_queue`.
    pub fn new(task_queue: &str) -> Cli {
        Cli {
            task_queue: task_queue.to_owned(),
            env: Vec::new(),
        }
    }

    /// The same CLI with extra environment (e.g. a test's own `DATABASE_URL`).
    pub fn with_env(mut self, name: &str, value: &str) -> Cli {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Runs `buzz-deletion ARGS…` and captures its output. A signed command that names its
    /// operator (`--approved-by bob`) and gives no `--key` signs with that operator's e2e key
    /// (see `operators`).
    pub async fn run(&self, args: &[&str]) -> CliRun {
        let owner = self
            .env
            .iter()
            .find(|(name, _)| name == "BUZZ_OWNER_DATABASE_URL")
            .map(|(_, url)| url.as_str());
        let args = crate::operators::with_operator_key(args, owner).await;
        let output = Command::new(bin("buzz-deletion"))
            .args(&args)
            .env("BUZZ_TASK_QUEUE", &self.task_queue)
            .env("RUST_LOG", "warn")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap_or_else(|e| panic!("could not run buzz-deletion: {e}"));
        CliRun {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Submits a deletion with fast test tuning; returns (request id, digest).
    pub async fn submit(&self, host: &str, requested_by: &str, extra: &[&str]) -> (String, String) {
        let mut args = vec![
            "community",
            "submit",
            "--host",
            host,
            "--requested-by",
            requested_by,
            "--retry-initial-secs",
            "1",
            "--heartbeat-timeout-secs",
            "5",
        ];
        args.extend_from_slice(extra);
        let run = self.run(&args).await.expect_code(0);
        let json = run.json();
        let id = json["request_id"].as_str().unwrap_or_default().to_owned();
        let digest = json["digest"].as_str().unwrap_or_default().to_owned();
        assert!(
            !id.is_empty() && !digest.is_empty(),
            "submit printed {json}"
        );
        (id, digest)
    }

    /// `community unblock ID --unblocked-by ACTOR --reason REASON`.
    pub async fn unblock(&self, id: &str, actor: &str, reason: &str) -> CliRun {
        self.run(&[
            "community",
            "unblock",
            id,
            "--unblocked-by",
            actor,
            "--reason",
            reason,
        ])
        .await
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
            "--digest",
            digest,
        ])
        .await
    }

    /// Polls `community status` until `done` says so (or panics after `secs`).
    pub async fn wait_status(&self, id: &str, secs: u64, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        loop {
            let run = self.run(&["community", "status", id]).await;
            if let Ok(status) = serde_json::from_str::<Value>(&run.stdout)
                && done(&status)
            {
                return status;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "status of {id} never matched within {secs} s; last: {}\n{}",
                run.stdout,
                run.stderr
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// A task queue no other test uses.
pub fn unique_queue(tag: &str) -> String {
    format!("test-{tag}-{}", Uuid::new_v4().simple())
}
