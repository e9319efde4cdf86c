//! The production connection paths against the local stack's real TLS endpoints: Temporal behind
//! the nginx TLS front (TLS, mutual TLS, API key), PostgreSQL with `sslmode=verify-full`, Redis
//! over `rediss://` with an ACL user and password, S3 over HTTPS — every credential read from a
//! file, none in the process environment. A whole deletion runs that way; then every kind of
//! misconfiguration an operator meets first (a wrong CA, a missing or expired client
//! certificate, a wrong password or key) stops the worker with one line that names the service
//! and what to fix, and prints no secret.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use stack_config::env as stack_env;
use stack_config::temporal::settings::{
    TEMPORAL_API_KEY, TEMPORAL_TLS_CLIENT_CERT_PATH, TEMPORAL_TLS_CLIENT_KEY_PATH,
    TEMPORAL_TLS_SERVER_CA_CERT_PATH, TEMPORAL_TLS_SERVER_NAME,
};
use testkit::env::required;
use testkit::prelude::*;
use testkit::workers::{worker_command, worker_exit};

/// A CA that signed none of the stack's certificates (a fixture of stack_config::temporal's tests).
const FOREIGN_CA: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../stack-config/src/temporal/testdata/ca.pem"
);

/// A directory of secret files (mode 0600) for one test, removed when dropped.
struct SecretFiles {
    dir: PathBuf,
}

impl SecretFiles {
    fn new() -> SecretFiles {
        let dir = std::env::temp_dir().join(format!("buzz-secrets-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        SecretFiles { dir }
    }

    /// Writes `content` to a new file of the directory; its path.
    fn write(&self, name: &str, content: &str) -> String {
        let path = self.dir.join(name);
        testkit::env::write_private_file(&path, content.as_bytes());
        path.display().to_string()
    }
}

impl Drop for SecretFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `url` with verified TLS against `ca`.
fn verify_full(url: &str, ca: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}sslmode=verify-full&sslrootcert={ca}")
}

/// The secrets of the local stack a leak check looks for.
struct Secrets {
    redis_password: String,
    api_key: String,
    s3_secret_key: String,
    client_key: String,
}

impl Secrets {
    fn read() -> Secrets {
        let read = |variable: &'static str| {
            std::fs::read_to_string(required(variable))
                .unwrap_or_else(|e| panic!("{variable}: {e}"))
                .trim()
                .to_owned()
        };
        Secrets {
            redis_password: read("BUZZ_REDIS_PASSWORD_FILE"),
            api_key: read("BUZZ_TEMPORAL_API_KEY_FILE"),
            s3_secret_key: required(stack_env::S3_SECRET_KEY),
            client_key: read("BUZZ_TEMPORAL_CLIENT_KEY_FILE"),
        }
    }

    /// Fails if `output` shows any secret (or the Postgres password inside a URL).
    fn assert_absent(&self, output: &str, what: &str) {
        let key_body = self.client_key.lines().nth(1).unwrap_or("-----");
        for (name, secret) in [
            ("the Redis password", self.redis_password.as_str()),
            ("the Temporal API key", self.api_key.as_str()),
            ("the S3 secret key", self.s3_secret_key.as_str()),
            ("the client private key", key_body),
            ("the Postgres password", ":buzz_worker@"),
        ] {
            assert!(!output.contains(secret), "{what} shows {name}:\n{output}");
        }
    }
}

/// Environment of a worker that reaches every service over verified TLS, its credentials from
/// files: the pairs to set and the plain variables to remove.
fn worker_tls_env(files: &SecretFiles) -> (Vec<(&'static str, String)>, Vec<&'static str>) {
    let ca = required("BUZZ_LOCAL_CA_FILE");
    let redis_password = std::fs::read_to_string(required("BUZZ_REDIS_PASSWORD_FILE"))
        .unwrap_or_else(|e| panic!("{e}"));
    let redis_url = format!(
        "rediss://{}:{}@{}",
        required("BUZZ_REDIS_TLS_USER"),
        redis_password.trim(),
        required("BUZZ_REDIS_TLS_ADDRESS")
    );
    let set = vec![
        (
            "DATABASE_URL_FILE",
            files.write(
                "database-url",
                &verify_full(&required(stack_env::DATABASE_URL), &ca),
            ),
        ),
        ("REDIS_URL_FILE", files.write("redis-url", &redis_url)),
        (stack_env::REDIS_CA_FILE, ca.clone()),
        (stack_env::S3_ENDPOINT, required("BUZZ_S3_HTTPS_ENDPOINT")),
        (stack_env::S3_CA_FILE, ca.clone()),
        (
            "BUZZ_S3_ACCESS_KEY_FILE",
            files.write("s3-access-key", &required(stack_env::S3_ACCESS_KEY)),
        ),
        (
            "BUZZ_S3_SECRET_KEY_FILE",
            files.write("s3-secret-key", &required(stack_env::S3_SECRET_KEY)),
        ),
        (
            stack_env::TEMPORAL_ADDRESS,
            required("BUZZ_TEMPORAL_MTLS_ADDRESS"),
        ),
        (TEMPORAL_TLS_SERVER_CA_CERT_PATH, ca.clone()),
        (
            TEMPORAL_TLS_CLIENT_CERT_PATH,
            required("BUZZ_TEMPORAL_CLIENT_CERT_FILE"),
        ),
        (
            TEMPORAL_TLS_CLIENT_KEY_PATH,
            required("BUZZ_TEMPORAL_CLIENT_KEY_FILE"),
        ),
    ];
    let remove = vec![
        stack_env::DATABASE_URL,
        stack_env::REDIS_URL,
        stack_env::S3_ACCESS_KEY,
        stack_env::S3_SECRET_KEY,
    ];
    (set, remove)
}

/// What every story here starts from: the stack's secrets (to prove none is printed), a
/// directory for secrets' files, and the local CA's file.
fn tls_setting() -> (Secrets, SecretFiles, String) {
    let ca = required("BUZZ_LOCAL_CA_FILE");
    (Secrets::read(), SecretFiles::new(), ca)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_completes_with_every_service_over_verified_tls_and_secrets_from_files() {
    let (_shared, stack) = shared_stack().await;
    let (secrets, files, ca) = tls_setting();
    let queue = unique_queue("all-tls");

    // The worker: Temporal over mutual TLS, the rest as `worker_tls_env` says. Its stderr goes
    // to a file, to be searched for secrets afterwards.
    let (set, remove) = worker_tls_env(&files);
    let log_path = files.dir.join("worker.log");
    let log = std::fs::File::create(&log_path).unwrap_or_else(|e| panic!("{e}"));
    let mut command = worker_command(&[("BUZZ_TASK_QUEUE", &queue), ("RUST_LOG", "info")]);
    for (k, v) in &set {
        command.env(k, v);
    }
    for k in &remove {
        command.env_remove(k);
    }
    let mut worker = command
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("could not start buzz-deletion-worker: {e}"));

    let target_host = unique_host("tls-target");
    let target = seed(&stack, &target_host, small_plan()).await;
    let neighbour = seed(&stack, &unique_host("tls-neighbour"), small_plan()).await;
    let neighbour_before = snapshot(&stack, neighbour.community_id).await;

    // The operators' CLI: Postgres over verify-full from a file; Temporal over TLS with an API
    // key (submit, approve) and over plain TLS (watch, inspect).
    let database_url_file = files.write(
        "cli-database-url",
        &verify_full(&required(stack_env::DATABASE_URL), &ca),
    );
    // The CLI of the queue, reaching Postgres with the file's URL and Temporal at `address`.
    let cli_at = |address: &'static str| {
        Cli::new(&queue)
            .without_env(stack_env::DATABASE_URL)
            .with_env("DATABASE_URL_FILE", &database_url_file)
            .with_env(stack_env::TEMPORAL_ADDRESS, &required(address))
            .with_env(TEMPORAL_TLS_SERVER_CA_CERT_PATH, &ca)
    };
    let api_key = required("BUZZ_TEMPORAL_API_KEY_FILE");
    let with_key =
        cli_at("BUZZ_TEMPORAL_API_KEY_ADDRESS").with_env("TEMPORAL_API_KEY_FILE", &api_key);
    let (id, digest) = with_key
        .submit(&target_host, "alice", &["--reason", "over TLS"])
        .await;
    with_key.approve(&id, "bob", &digest).await.expect_code(0);
    let tls_only = cli_at("BUZZ_TEMPORAL_TLS_ADDRESS");
    let watched = tls_only.watch_to_end_printing(&id).await;
    assert!(watched.stdout.contains("verified"), "{}", watched.stdout);

    snapshot(&stack, target.community_id)
        .await
        .assert_gone("the target deleted over TLS");
    assert_unchanged(
        &stack,
        neighbour.community_id,
        &neighbour_before,
        "the neighbour",
    )
    .await;
    let inspection = tls_only
        .run(&["community", "inspect", &id])
        .await
        .expect_code(0);
    assert_eq!(inspection.json()["request"]["stage"], "retention_pending");

    let _ = worker.kill().await;
    let _ = worker.wait().await;
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(log.contains("worker polling"), "{log}");
    secrets.assert_absent(&log, "the worker's log");
    secrets.assert_absent(
        &format!("{}{}", watched.stdout, watched.stderr),
        "the CLI's output",
    );
}

/// The worker's stderr ends with one `error:` line holding every `expected` fragment, and shows
/// no secret.
async fn refused_in_one_line(
    set: &[(&str, &str)],
    remove: &[&str],
    expected: &[&str],
    secrets: &Secrets,
) {
    let stderr = testkit::workers::refused_in_one_line(set, remove, expected).await;
    secrets.assert_absent(&stderr, "a refused start");
}

/// A worker pointed at the Temporal front `address`, trusting `ca`, refuses to start in one line
/// saying Temporal at that address refused the connection, `why`, and the setting to `fix`.
async fn temporal_refused(address: &str, ca: &str, (why, fix): (&str, &str), secrets: &Secrets) {
    let refused = format!("Temporal at {address} refused the connection");
    let set = [
        (stack_env::TEMPORAL_ADDRESS, address),
        (TEMPORAL_TLS_SERVER_CA_CERT_PATH, ca),
    ];
    refused_in_one_line(&set, &[], &[&refused, why, fix], secrets).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tls_or_credential_mistake_stops_the_worker_in_one_line_naming_the_fix() {
    let (_shared, _stack) = shared_stack().await;
    let (secrets, files, ca) = tls_setting();
    let tls = required("BUZZ_TEMPORAL_TLS_ADDRESS");
    let mtls = required("BUZZ_TEMPORAL_MTLS_ADDRESS");

    // Temporal: a CA that did not sign the front's certificate.
    let untrusted = (
        "not signed by a trusted CA",
        TEMPORAL_TLS_SERVER_CA_CERT_PATH,
    );
    temporal_refused(&tls, FOREIGN_CA, untrusted, &secrets).await;
    // Temporal: a frontend whose certificate has expired.
    let expired_front = required("BUZZ_TEMPORAL_EXPIRED_ADDRESS");
    let expired = (
        "the server's certificate has expired",
        "renewed certificate",
    );
    temporal_refused(&expired_front, &ca, expired, &secrets).await;
    // Temporal: mutual TLS without a client certificate.
    let no_client = ("no client certificate", TEMPORAL_TLS_CLIENT_CERT_PATH);
    temporal_refused(&mtls, &ca, no_client, &secrets).await;
    // Temporal: an expired client certificate, named before any connection.
    let expired = required("BUZZ_TEMPORAL_EXPIRED_CLIENT_CERT_FILE");
    refused_in_one_line(
        &[
            (stack_env::TEMPORAL_ADDRESS, &mtls),
            (TEMPORAL_TLS_SERVER_CA_CERT_PATH, &ca),
            (TEMPORAL_TLS_CLIENT_CERT_PATH, &expired),
            (
                TEMPORAL_TLS_CLIENT_KEY_PATH,
                &required("BUZZ_TEMPORAL_EXPIRED_CLIENT_KEY_FILE"),
            ),
        ],
        &[],
        &[
            "Temporal",
            &format!("{TEMPORAL_TLS_CLIENT_CERT_PATH}={expired}"),
            "expired on 2020-02-01",
        ],
        &secrets,
    )
    .await;
    // Temporal: a wrong API key, from a file.
    let wrong_key = files.write("wrong-api-key", "not-the-key-0123456789");
    let (code, stderr) = worker_exit(
        &[
            (
                stack_env::TEMPORAL_ADDRESS,
                &required("BUZZ_TEMPORAL_API_KEY_ADDRESS"),
            ),
            (TEMPORAL_TLS_SERVER_CA_CERT_PATH, &ca),
            ("TEMPORAL_API_KEY_FILE", &wrong_key),
        ],
        &[],
    )
    .await;
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("credentials refused") && stderr.contains(TEMPORAL_API_KEY),
        "{stderr}"
    );
    assert!(!stderr.contains("not-the-key-0123456789"), "{stderr}");

    // PostgreSQL: a wrong password (from a file), then a wrong CA.
    let url = required(stack_env::DATABASE_URL);
    let wrong_password = verify_full(
        &url.replacen(":buzz_worker@", ":wrong-password-42@", 1),
        &ca,
    );
    let wrong_password_file = files.write("wrong-database-url", &wrong_password);
    refused_in_one_line(
        &[("DATABASE_URL_FILE", &wrong_password_file)],
        &[stack_env::DATABASE_URL],
        &[
            "PostgreSQL at",
            "password authentication failed",
            "DATABASE_URL",
        ],
        &secrets,
    )
    .await;
    let (_, stderr) = worker_exit(
        &[("DATABASE_URL_FILE", &wrong_password_file)],
        &[stack_env::DATABASE_URL],
    )
    .await;
    assert!(!stderr.contains("wrong-password-42"), "{stderr}");
    // The operators' CLI says the same, in one line.
    let cli = Cli::new(&unique_queue("cli-refused"))
        .without_env(stack_env::DATABASE_URL)
        .with_env("DATABASE_URL_FILE", &wrong_password_file)
        .run(&["community", "list"])
        .await;
    cli.expect_exit(1);
    let line = cli.stderr.trim_end();
    assert!(
        line.starts_with("error: PostgreSQL at")
            && line.contains("password authentication failed")
            && !line.contains('\n'),
        "{line}"
    );
    assert!(!cli.stderr.contains("wrong-password-42"), "{}", cli.stderr);
    refused_in_one_line(
        &[(stack_env::DATABASE_URL, &verify_full(&url, FOREIGN_CA))],
        &[],
        &["PostgreSQL at", "not signed by a trusted CA", "sslrootcert"],
        &secrets,
    )
    .await;

    // Redis: a wrong password, then a wrong CA.
    let redis = |password: &str| {
        format!(
            "rediss://{}:{password}@{}",
            required("BUZZ_REDIS_TLS_USER"),
            required("BUZZ_REDIS_TLS_ADDRESS")
        )
    };
    let wrong_redis = files.write("wrong-redis-url", &redis("wrong-redis-password-7"));
    let (code, stderr) = worker_exit(
        &[
            ("REDIS_URL_FILE", &wrong_redis),
            (stack_env::REDIS_CA_FILE, &ca),
        ],
        &[stack_env::REDIS_URL],
    )
    .await;
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("Redis at rediss://buzz_worker:***@")
            && stderr.contains("AUTH failed")
            && stderr.contains("REDIS_URL"),
        "{stderr}"
    );
    assert!(!stderr.contains("wrong-redis-password-7"), "{stderr}");
    let right_redis = files.write("right-redis-url", &redis(&secrets.redis_password));
    refused_in_one_line(
        &[
            ("REDIS_URL_FILE", &right_redis),
            (stack_env::REDIS_CA_FILE, FOREIGN_CA),
        ],
        &[stack_env::REDIS_URL],
        &[
            "Redis at",
            "not signed by a trusted CA",
            stack_env::REDIS_CA_FILE,
        ],
        &secrets,
    )
    .await;

    // S3 over HTTPS with a wrong CA.
    refused_in_one_line(
        &[
            (stack_env::S3_ENDPOINT, &required("BUZZ_S3_HTTPS_ENDPOINT")),
            (stack_env::S3_CA_FILE, FOREIGN_CA),
        ],
        &[],
        &["S3", "not signed by a trusted CA", stack_env::S3_CA_FILE],
        &secrets,
    )
    .await;
    // Temporal: a server name override the certificate does not carry.
    refused_in_one_line(
        &[
            (stack_env::TEMPORAL_ADDRESS, &tls),
            (TEMPORAL_TLS_SERVER_CA_CERT_PATH, &ca),
            (TEMPORAL_TLS_SERVER_NAME, "ns.other.example"),
        ],
        &[],
        &[
            "not valid for the name connected to",
            TEMPORAL_TLS_SERVER_NAME,
        ],
        &secrets,
    )
    .await;
    // A worker given everything right starts (the refusals above were the mistakes, not TLS),
    // here with the server name override the front's certificate does carry (`localhost`, while
    // the address is 127.0.0.1), as a Cloud endpoint behind another name needs.
    let (mut set, remove) = worker_tls_env(&files);
    set.push((TEMPORAL_TLS_SERVER_NAME, "localhost".to_owned()));
    let set: Vec<(&str, &str)> = set.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let queue = unique_queue("tls-ok");
    let _worker = WorkerProcess::start_without(&queue, &set, &remove).await;
    tokio::time::timeout(
        Duration::from_secs(60),
        Cli::new(&queue).run(&["stack-check", "--sleep-secs", "1"]),
    )
    .await
    .unwrap_or_else(|_| panic!("stack check over TLS did not finish within 60 s"))
    .expect_code(0);
}
