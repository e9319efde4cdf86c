use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use stack_config::env as stack_env;
use testkit::env::required;
use testkit::poll;
use testkit::prelude::*;
use testkit::records::chunk_progress;
use testkit::refusal::{audit_trail, request_row};
use testkit::story::PacedDeletion;
use testkit::workers::{refused_naming, worker_command, worker_exit};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_refuses_to_start_naming_the_missing_variable_or_unreachable_service() {
    let (_shared, _stack) = shared_stack().await;
    for (set, remove, named) in [
        (vec![], vec!["BUZZ_S3_BUCKET"], "BUZZ_S3_BUCKET is not set"),
        (
            vec![("TEMPORAL_ADDRESS", "127.0.0.1:1")],
            vec![],
            "Temporal is not reachable at 127.0.0.1:1",
        ),
        (
            vec![("REDIS_URL", "redis://127.0.0.1:1")],
            vec![],
            "Redis is not reachable",
        ),
    ] {
        refused_naming(&set, &remove, &[named]).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_refuses_to_start_without_its_receipt_key_or_with_an_unlocked_archive_bucket() {
    let (_shared, _stack) = shared_stack().await;
    let key_var = activities::certificates::SIGNING_KEY_FILE_ENV;
    let not_set = format!("{key_var} is not set");
    refused_naming(&[], &[key_var], &[&not_set, "keys generate"]).await;
    // A key file that is not a key: the variable and the file are named, nothing of its content.
    let dir = std::env::temp_dir().join(format!("buzz-bad-key-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let not_a_key = dir.join("receipt.key");
    std::fs::write(
        &not_a_key,
        "-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWJ5dGVz\n-----END PRIVATE KEY-----\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let path = not_a_key.display().to_string();
    let stderr = refused_naming(&[(key_var, path.as_str())], &[], &[key_var, &path]).await;
    assert!(
        !stderr.contains("c2VjcmV0LWJ5dGVz"),
        "key material printed: {stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    // The tenant bucket is versioned but not under object lock: no archive there.
    let bucket = required(stack_env::S3_BUCKET);
    let archive = [(
        activities::certificates::ARCHIVE_BUCKET_ENV,
        bucket.as_str(),
    )];
    refused_naming(&archive, &[], &["cannot archive receipts", "COMPLIANCE"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_secret_can_come_from_a_file_and_none_is_printed() {
    let (_shared, stack) = shared_stack().await;
    let dir = std::env::temp_dir().join(format!("buzz-secrets-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    // Each secret in a file of its own, as a mounted Kubernetes Secret; none in the environment.
    let secrets = [
        stack_env::DATABASE_URL,
        stack_env::REDIS_URL,
        stack_env::S3_ACCESS_KEY,
        stack_env::S3_SECRET_KEY,
    ];
    let mut files = Vec::new();
    for name in secrets {
        let path = dir.join(name.to_lowercase());
        std::fs::write(&path, format!("{}\n", required(name))).unwrap_or_else(|e| panic!("{e}"));
        files.push((format!("{name}_FILE"), path.display().to_string()));
    }
    let file_env: Vec<(&str, &str)> = files
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let queue = unique_queue("secret-files");
    let _worker = WorkerProcess::start_without(&queue, &file_env, &secrets).await;
    let mut cli = Cli::new(&queue);
    for (name, path) in &file_env {
        cli = cli.with_env(name, path);
    }
    for name in secrets {
        cli = cli.without_env(name);
    }
    let host = unique_host("secret-files");
    let target = seed(&stack, &host, small_plan()).await;
    let (id, digest) = cli.submit(&host, "alice", &[]).await;
    cli.approve_and_finish(&id, &digest).await;
    snapshot(&stack, target.community_id)
        .await
        .assert_gone("the target");

    // A secret's file that cannot be read: the worker names the variable and the file.
    refused_naming(
        &[("REDIS_URL_FILE", "/nonexistent/redis-url")],
        &[stack_env::REDIS_URL],
        &["REDIS_URL_FILE=/nonexistent/redis-url: cannot read the file"],
    )
    .await;
    // Both a value and a file: refused, naming both, printing neither value.
    let both = "both BUZZ_S3_SECRET_KEY and BUZZ_S3_SECRET_KEY_FILE are set";
    let stderr = refused_naming(&[file_env[3]], &[], &[both]).await;
    assert!(
        !stderr.contains(&required(stack_env::S3_SECRET_KEY)),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A worker on its own queue with `env` (and without the static S3 pair) passes a stack check,
/// which writes, reads and deletes an object in the bucket.
async fn stack_check_with_s3_credentials_from(env: &[(&str, &str)]) {
    let queue = unique_queue("s3-creds");
    let _worker = WorkerProcess::start_without(
        &queue,
        env,
        &[stack_env::S3_ACCESS_KEY, stack_env::S3_SECRET_KEY],
    )
    .await;
    Cli::new(&queue)
        .run(&["stack-check", "--sleep-secs", "1"])
        .await
        .expect_code(0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_credentials_come_from_the_aws_environment_a_shared_profile_or_the_static_pair() {
    let (_shared, _stack) = shared_stack().await;
    let access = required(stack_env::S3_ACCESS_KEY);
    let secret = required(stack_env::S3_SECRET_KEY);
    // The AWS SDK's environment variables.
    stack_check_with_s3_credentials_from(&[
        ("AWS_ACCESS_KEY_ID", access.as_str()),
        ("AWS_SECRET_ACCESS_KEY", secret.as_str()),
    ])
    .await;
    // A profile of a shared credentials file, as `aws configure --profile` writes it.
    let dir = std::env::temp_dir().join(format!("buzz-aws-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let credentials = dir.join("credentials");
    std::fs::write(
        &credentials,
        format!(
            "[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\n\
             [buzz-deletion]\naws_access_key_id = {access}\naws_secret_access_key = {secret}\n"
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let config = dir.join("config");
    std::fs::write(&config, "[profile buzz-deletion]\nregion = us-east-1\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let credentials = credentials.display().to_string();
    let config = config.display().to_string();
    stack_check_with_s3_credentials_from(&[
        ("AWS_SHARED_CREDENTIALS_FILE", credentials.as_str()),
        ("AWS_CONFIG_FILE", config.as_str()),
        ("AWS_PROFILE", "buzz-deletion"),
    ])
    .await;
    // Nothing anywhere (no instance metadata either): the worker stops at start saying what to
    // set, and prints no key.
    let stderr = refused_naming(
        &[
            ("AWS_EC2_METADATA_DISABLED", "true"),
            ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials"),
            ("AWS_CONFIG_FILE", "/nonexistent/config"),
        ],
        &[stack_env::S3_ACCESS_KEY, stack_env::S3_SECRET_KEY],
        &["no S3 credentials", "BUZZ_S3_ACCESS_KEY"],
    )
    .await;
    assert!(!stderr.contains(&secret), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_reaches_s3_over_https_trusting_the_given_ca_and_refuses_an_unknown_issuer() {
    let (_shared, _stack) = shared_stack().await;
    let https = required("BUZZ_S3_HTTPS_ENDPOINT");
    let ca = required("BUZZ_LOCAL_CA_FILE");
    let queue = unique_queue("s3-https");
    let _worker = WorkerProcess::start(
        &queue,
        &[
            (stack_env::S3_ENDPOINT, https.as_str()),
            (stack_env::S3_CA_FILE, ca.as_str()),
        ],
    )
    .await;
    Cli::new(&queue)
        .run(&["stack-check", "--sleep-secs", "1"])
        .await
        .expect_code(0);
    // Without the CA, the gateway's certificate is from an unknown issuer: refused at start.
    let unknown_issuer = [(stack_env::S3_ENDPOINT, https.as_str())];
    let stderr = refused_naming(&unknown_issuer, &[], &["S3", &https]).await;
    assert!(
        stderr.contains("UnknownIssuer") || stderr.contains("certificate"),
        "{stderr}"
    );
    // A CA file that cannot be read is named.
    refused_naming(
        &[
            (stack_env::S3_ENDPOINT, https.as_str()),
            (stack_env::S3_CA_FILE, "/nonexistent/ca.pem"),
        ],
        &[],
        &["BUZZ_S3_CA_FILE=/nonexistent/ca.pem"],
    )
    .await;
}

/// `url` with TLS to Postgres verified against `ca` (`sslmode=verify-full`).
fn verified_tls(url: &str, ca: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}sslmode=verify-full&sslrootcert={ca}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_and_cli_reach_postgres_over_verified_tls_and_a_wrong_ca_stops_the_worker() {
    let (_shared, _stack) = shared_stack().await;
    let ca = required("BUZZ_LOCAL_CA_FILE");
    let url = verified_tls(&required(stack_env::DATABASE_URL), &ca);
    let queue = unique_queue("pg-tls");
    let _worker = WorkerProcess::start(&queue, &[(stack_env::DATABASE_URL, url.as_str())]).await;
    let cli = Cli::new(&queue).with_env(stack_env::DATABASE_URL, &url);
    cli.run(&["stack-check", "--sleep-secs", "1"])
        .await
        .expect_code(0);

    // A CA that did not sign the server's certificate: the worker does not start, and says
    // PostgreSQL refused to be trusted.
    let dir = std::env::temp_dir().join(format!("buzz-other-ca-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let other_ca = dir.join("ca.pem");
    let made = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args([
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=someone else's CA",
            "-keyout",
        ])
        .arg(dir.join("ca.key"))
        .arg("-out")
        .arg(&other_ca)
        .output()
        .unwrap_or_else(|e| panic!("openssl: {e}"));
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let wrong = verified_tls(
        &required(stack_env::DATABASE_URL),
        &other_ca.display().to_string(),
    );
    let wrong_ca = [(stack_env::DATABASE_URL, wrong.as_str())];
    let named = ["PostgreSQL at", "not signed by a trusted CA"];
    let stderr = refused_naming(&wrong_ca, &[], &named).await;
    assert!(
        !stderr.contains(":buzz_worker@"),
        "the password is redacted: {stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_refuses_an_unmigrated_schema_and_says_to_run_migrate() {
    let (_shared, stack) = shared_stack().await;
    let database = format!("buzz_unmigrated_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {database}")))
        .execute(stack.store.pool())
        .await
        .unwrap_or_else(|e| panic!("create scratch database: {e}"));
    let url = required(stack_env::DATABASE_URL);
    let scratch_url = format!(
        "{}/{database}",
        url.rsplit_once('/').map(|(base, _)| base).unwrap_or(&url)
    );
    let (code, stderr) = worker_exit(&[("DATABASE_URL", &scratch_url)], &[]).await;
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {database}"
    )))
    .execute(stack.store.pool())
    .await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("buzz-deletion migrate"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_the_worker_and_it_exits_cleanly() {
    let (_shared, _stack) = shared_stack().await;
    let (clean, stderr) = worker_runs_until_sigterm("drain", &[]).await;
    assert!(clean, "a drained worker exits 0: {stderr}");
    assert!(stderr.contains("drained"), "{stderr}");
}

/// Starts the worker on a queue named after `tag` with `overrides`, lets it poll for three
/// seconds, SIGTERMs it (the signal must be delivered); returns whether it exited 0 within 30 s
/// and its stderr.
async fn worker_runs_until_sigterm(tag: &str, overrides: &[(&str, &str)]) -> (bool, String) {
    let mut command = worker_command(&[
        ("BUZZ_TASK_QUEUE", &unique_queue(tag)),
        ("BUZZ_SHUTDOWN_GRACE_SECS", "5"),
    ]);
    command.stderr(Stdio::piped());
    for (k, v) in overrides {
        command.env(k, v);
    }
    let mut child = command.spawn().unwrap_or_else(|e| panic!("{e}"));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pid = child.id().unwrap_or_default().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().await;
    assert!(killed.is_ok_and(|k| k.success()), "kill -TERM {pid}");
    tokio::time::timeout(Duration::from_secs(30), async {
        let status = child.wait().await;
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            use tokio::io::AsyncReadExt;
            let _ = pipe.read_to_string(&mut stderr).await;
        }
        (status.map(|s| s.success()).unwrap_or(false), stderr)
    })
    .await
    .unwrap_or_else(|_| panic!("the worker did not stop within 30 s of SIGTERM"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_and_cli_refuse_the_schema_owner_unless_told_the_stack_is_throwaway() {
    let (_shared, _stack) = shared_stack().await;
    let owner_url = required(stack_env::OWNER_DATABASE_URL);
    let owner = [("DATABASE_URL", owner_url.as_str())];

    // The worker: refused, with the reason and both ways out named.
    let (code, stderr) = worker_exit(&owner, &["BUZZ_ALLOW_PRIVILEGED_DB_ROLE"]).await;
    assert_eq!(code, 1, "{stderr}");
    for part in [
        "refusing to run as a privileged database role",
        "owns schema buzz",
        "disable the triggers",
        "member of buzz_deletion_worker",
        "BUZZ_OWNER_DATABASE_URL",
        "BUZZ_ALLOW_PRIVILEGED_DB_ROLE=throwaway-local-stack",
    ] {
        assert!(stderr.contains(part), "{part:?} missing from: {stderr}");
    }
    // Something that merely looks like consent is not the flag.
    let (code, stderr) = worker_exit(
        &[
            ("DATABASE_URL", owner_url.as_str()),
            ("BUZZ_ALLOW_PRIVILEGED_DB_ROLE", "true"),
        ],
        &[],
    )
    .await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("refusing to run"), "{stderr}");
    // With the flag it runs (and says so), then drains on SIGTERM.
    let (clean, stderr) = worker_runs_until_sigterm(
        "role-flag",
        &[
            ("DATABASE_URL", owner_url.as_str()),
            ("BUZZ_ALLOW_PRIVILEGED_DB_ROLE", "throwaway-local-stack"),
        ],
    )
    .await;
    assert!(clean, "the flagged worker must run and drain: {stderr}");
    assert!(stderr.contains("privileged database role"), "{stderr}");
    assert!(stderr.contains("drained"), "{stderr}");
    // On the worker role it starts without any flag.
    let (clean, stderr) = worker_runs_until_sigterm("role-flag", &[]).await;
    assert!(clean, "{stderr}");
    assert!(!stderr.contains("privileged database role"), "{stderr}");

    // The CLI: ordinary commands refuse the owner too, `--allow-privileged-db-role` lets them run.
    let cli = |args: &'static [&'static str], url: String| async move {
        let output = Cli::inherited()
            .with_env("DATABASE_URL", &url)
            .command(args)
            .env_remove("BUZZ_ALLOW_PRIVILEGED_DB_ROLE")
            .output()
            .await
            .unwrap_or_else(|e| panic!("could not run buzz-deletion: {e}"));
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, stderr) = cli(&["community", "list", "--limit", "1"], owner_url.clone()).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("refusing to run as a privileged database role")
            && stderr.contains("BUZZ_ALLOW_PRIVILEGED_DB_ROLE=throwaway-local-stack"),
        "{stderr}"
    );
    let (code, stderr) = cli(
        &[
            "--allow-privileged-db-role",
            "community",
            "list",
            "--limit",
            "1",
        ],
        owner_url.clone(),
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    let worker_url = required(stack_env::DATABASE_URL);
    let (code, stderr) = cli(&["community", "list", "--limit", "1"], worker_url.clone()).await;
    assert_eq!(code, 0, "{stderr}");
    // `migrate` is the one command that needs the owner: it takes BUZZ_OWNER_DATABASE_URL.
    let (code, stderr) = cli(&["migrate"], worker_url).await;
    assert_eq!(code, 0, "{stderr}");
}

/// `text` without its terminal colour sequences (`ESC [ … m`), as a log reader sees it.
fn without_colours(text: &str) -> String {
    let mut plain = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for end in chars.by_ref() {
                if end == 'm' {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}

/// Issue 30: a deployment carried over from the predecessor keeps no setting silently. Every
/// predecessor variable this release does not read yields exactly one warning line naming what
/// replaces it (never its value), whether the worker then runs or refuses to start; the pool
/// size and activity slots set are the ones the worker runs with, and a pool that would starve
/// the slots, or one out of bounds, is refused naming the variable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_predecessor_variable_yields_one_warning_and_the_pool_setting_is_honoured_and_bounded()
{
    let (_shared, _stack) = shared_stack().await;
    let secret = "postgres://tester:topsecret@db.example/buzz";
    let mut env: Vec<(&str, &str)> = worker::predecessor::REPLACED
        .iter()
        .map(|r| {
            (
                r.old,
                if r.old == "BUZZ_TEST_DATABASE_URL" {
                    secret
                } else {
                    "20"
                },
            )
        })
        .collect();
    env.extend([
        ("RUST_LOG", "info"),
        (worker::capacity::ACTIVITY_SLOTS_ENV, "4"),
        (worker::capacity::PG_POOL_SIZE_ENV, "5"),
    ]);
    let one_warning_each = |stderr: &str| {
        for replaced in worker::predecessor::REPLACED {
            let lines: Vec<&str> = stderr
                .lines()
                .filter(|l| l.contains(&format!("{} is set but not read", replaced.old)))
                .collect();
            assert_eq!(lines.len(), 1, "{}: {stderr}", replaced.old);
            assert!(
                lines[0].contains("WARN") && lines[0].contains(replaced.instead),
                "{}",
                lines[0]
            );
        }
        assert!(
            !stderr.contains("topsecret"),
            "a value was printed: {stderr}"
        );
    };

    let (clean, stderr) = worker_runs_until_sigterm("role-flag", &env).await;
    let stderr = without_colours(&stderr);
    assert!(clean, "{stderr}");
    one_warning_each(&stderr);
    assert!(
        stderr.contains("activity_slots=4") && stderr.contains("pg_pool=5"),
        "the worker must run with the slots and pool it was given: {stderr}"
    );

    // Refused before anything connects; the warnings are printed first all the same.
    let slots = (worker::capacity::ACTIVITY_SLOTS_ENV, "8");
    for (pool, reason) in [
        (
            "4",
            "BUZZ_PG_POOL_SIZE=\"4\" is invalid: smaller than the 8 activity slots",
        ),
        (
            "1001",
            "BUZZ_PG_POOL_SIZE=\"1001\" is invalid: at most 1000 connections",
        ),
        (
            "many",
            "BUZZ_PG_POOL_SIZE=\"many\" is invalid: not a whole number",
        ),
    ] {
        let mut refused = env.clone();
        refused.retain(|(k, _)| !k.starts_with("BUZZ_ACTIVITY") && !k.starts_with("BUZZ_PG_"));
        refused.extend([slots, (worker::capacity::PG_POOL_SIZE_ENV, pool)]);
        let (code, stderr) = worker_exit(&refused, &[]).await;
        let stderr = without_colours(&stderr);
        assert_eq!(code, 1, "{stderr}");
        assert!(stderr.contains(reason), "{reason}: {stderr}");
        one_warning_each(&stderr);
    }
}

/// The request's failure record: its blocked stage and reason, last error and retry count, and
/// every audit event that reports a failure or a block.
async fn failure_record(stack: &Stack, id: uuid::Uuid) -> (String, Vec<String>) {
    let request = request_row(stack, id).await;
    let record = format!(
        "blocked_stage {:?}, blocked_reason {:?}, last_error {:?}, retry_count {}",
        request.blocked_stage, request.blocked_reason, request.last_error, request.retry_count
    );
    let events = audit_trail(stack, id)
        .await
        .into_iter()
        .map(|e| e.event)
        .filter(|e| e.contains("fail") || e.contains("block"))
        .collect();
    (record, events)
}

/// What a request that never failed shows.
const NO_FAILURE: &str = "blocked_stage None, blocked_reason None, last_error None, retry_count 0";

/// Panics unless the request records no failure and no block, `when`.
async fn assert_no_failure(stack: &Stack, id: uuid::Uuid, when: &str) {
    let (record, events) = failure_record(stack, id).await;
    assert_eq!(record, NO_FAILURE, "{when}");
    assert!(events.is_empty(), "{when}: {events:?}");
}

/// SIGTERMs the worker: it must drain and exit 0.
async fn sigterm(worker: WorkerProcess) {
    let drained = worker.terminate().await;
    assert!(drained, "a SIGTERMed worker drains and exits 0");
}

/// SIGTERM in the middle of the object deletion: the worker drains, cancels the phase once its
/// one-second grace is over and exits 0. That is not a failure of the deletion: nothing is
/// blocked, no error or retry is recorded, no audit event says failed or blocked. The next
/// worker retries the phase and stamps the chunks left, under a newer execution generation,
/// without stamping any chunk twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_phase_hands_the_phase_to_the_next_worker_without_recording_a_failure() {
    // Chunks of 50 deleted one call at a time at 50 versions per second per prefix: the phase
    // runs for several seconds, much longer than the grace.
    let paced = [
        ("BUZZ_MANIFEST_CHUNK_ENTRIES", "50"),
        ("BUZZ_DELETE_RATE_PER_PREFIX", "50"),
    ];
    let mut first_env = paced.to_vec();
    first_env.push(("BUZZ_SHUTDOWN_GRACE_SECS", "1"));
    let deletion = PacedDeletion::start("term-phase", &first_env, 150).await;
    let (stack, request_id) = (&deletion.stack, deletion.request);
    deletion.wait_for_a_stamped_chunk().await;

    sigterm(deletion.worker.process).await;
    let cut = chunk_progress(stack, request_id).await;
    assert!(
        cut.chunks_stamped < cut.chunks_total,
        "the phase must still have been running when the grace ran out: {cut:?}"
    );
    assert_no_failure(stack, request_id, "after the SIGTERM").await;

    let _second = WorkerProcess::start(&deletion.worker.queue, &paced).await;
    deletion.cli.watch_to_end(&deletion.id).await;
    deletion.target.assert_gone(stack, "the target").await;
    assert_no_failure(stack, request_id, "after the next worker finished").await;

    let stamps: Vec<(u64, i64)> = audit_trail(stack, request_id)
        .await
        .into_iter()
        .filter(|e| e.event == "chunk_stamped")
        .map(|e| {
            (
                e.detail["chunk_no"].as_u64().unwrap_or(u64::MAX),
                e.detail["exec_generation"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    let mut chunks: Vec<u64> = stamps.iter().map(|(chunk, _)| *chunk).collect();
    chunks.sort_unstable();
    let total = chunk_progress(stack, request_id).await.chunks_total;
    assert_eq!(
        chunks,
        (0..total).collect::<Vec<_>>(),
        "every chunk stamped exactly once"
    );
    let generations: std::collections::BTreeSet<i64> = stamps.iter().map(|(_, g)| *g).collect();
    assert!(
        generations.len() >= 2,
        "the stamps after the SIGTERM come from the next worker's attempt: {stamps:?}"
    );
}

/// The request's rows in the user stage history, in creation order: (stage, status, attempt,
/// last error).
async fn user_rows(stack: &Stack, id: uuid::Uuid) -> Vec<(String, String, i32, Option<String>)> {
    sqlx::query_as(
        "SELECT stage, status, attempt, last_error FROM deletion.user_stage_history \
         WHERE request_id = $1 ORDER BY created_at, id",
    )
    .bind(id)
    .fetch_all(stack.store.pool())
    .await
    .unwrap_or_else(|e| panic!("stage rows of {id}: {e}"))
}

/// SIGTERM while a user deletion's handler runs: the worker drains and exits 0 after its grace,
/// cancelling the handler. The row is not failed (still `running`, no error), no retry deadline
/// or `user.stage_failed` event is recorded, and the next worker runs the same row again
/// (attempt 2) to completion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_handler_records_no_stage_failure_and_the_next_worker_runs_the_row_again() {
    let (stack, cli, first) =
        with_worker("term-handler", &[("BUZZ_SHUTDOWN_GRACE_SECS", "1")]).await;
    let target = format!("demo:term-{}", uuid::Uuid::new_v4().simple());
    let id = cli.user_submit_and_approve(&target, "alice", "bob").await;
    let request_id: uuid::Uuid = id.parse().unwrap_or_else(|e| panic!("{id}: {e}"));
    // One handler of 8 s (heartbeating), so the SIGTERM and its grace land inside it.
    let step = cli
        .command(&[
            "user",
            "run",
            &id,
            "--next-step",
            "--stage-delay-ms",
            "8000",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("user run: {e}"));
    let every = Duration::from_millis(50);
    poll::until(Duration::from_secs(60), every, async || {
        let rows = user_rows(&stack, request_id).await;
        match rows.first() {
            Some((_, status, ..)) if status == "running" => Ok(()),
            _ => Err(format!("the gate never started running: {rows:?}")),
        }
    })
    .await;

    sigterm(first.process).await;
    assert_eq!(
        user_rows(&stack, request_id).await,
        vec![("gate_user".to_owned(), "running".to_owned(), 1, None)],
        "the interrupted row is not failed"
    );
    assert_no_failure(&stack, request_id, "after the SIGTERM").await;

    let _second = WorkerProcess::start(&first.queue, &[]).await;
    let stepped = tokio::time::timeout(Duration::from_secs(120), step.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("user run --next-step did not end within 120 s"))
        .unwrap_or_else(|e| panic!("user run: {e}"));
    CliRun::from_output(&stepped).expect_exit(0);
    cli.user_run(&id).await.expect_exit(0);
    let rows = user_rows(&stack, request_id).await;
    assert_eq!(
        rows.first(),
        Some(&("gate_user".to_owned(), "completed".to_owned(), 2, None)),
        "the next worker ran the interrupted row again: {rows:?}"
    );
    assert!(
        rows.iter()
            .all(|(_, status, _, error)| status == "completed" && error.is_none()),
        "{rows:?}"
    );
    assert_no_failure(&stack, request_id, "after the run completed").await;
}
