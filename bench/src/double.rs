//! The fast S3 double (`bench/s3-double`, `buzz-s3-double`) as a benchmark starts and drives it:
//! its process on a free loopback port, its control endpoints (`/_double/…`: seeding, tuning,
//! counters), and the S3 settings the worker, the CLI and the benchmark's own client use to reach
//! it. Benchmarks only: every test runs against the real Ceph gateway.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use activities::s3::{S3Addressing, S3Config, S3Credentials};
use activities::taxonomy::tenant_prefixes;
use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use uuid::Uuid;

/// The bucket the double serves to the benchmark.
pub const BUCKET: &str = "buzz-bench";
const ACCESS_KEY: &str = "buzz-double";
const SECRET_KEY: &str = "buzz-double-secret";
const REGION: &str = "us-east-1";

/// The shape of a tenant's keys under each prefix family: the content hash is 64 hex digits
/// (here 16 hex digits mixed from the key's index, then the zero-padded index: spread over the
/// leading hex digit as content hashes are, so each listing lane holds its share) and thumbnails
/// and metadata carry their suffixes, as the platform writes them (`store::taxonomy`).
const FAMILY_SUFFIXES: [&str; 3] = ["", ".webp", ".json"];

/// How the double answers: per-call latency and the per-partition delete rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Profile {
    /// Milliseconds before a DeleteObjects answer.
    pub latency_ms_delete: u64,
    /// Milliseconds before a listing answer.
    pub latency_ms_list: u64,
    /// Milliseconds before any other answer.
    pub latency_ms_other: u64,
    /// Versions deleted per second per partition (a tenant prefix); 0: unlimited.
    pub delete_rate_per_partition: f64,
}

impl Profile {
    /// No latency, no limit: only the client's own costs show.
    pub const UNLIMITED: Profile = Profile {
        latency_ms_delete: 0,
        latency_ms_list: 0,
        latency_ms_other: 0,
        delete_rate_per_partition: 0.0,
    };

    /// One line for the report.
    pub fn describe(&self) -> String {
        let limit = if self.delete_rate_per_partition > 0.0 {
            format!(
                "{:.0} versions/s per prefix (503 SlowDown above)",
                self.delete_rate_per_partition
            )
        } else {
            "no rate limit".to_owned()
        };
        format!(
            "latency DeleteObjects {} ms, listings {} ms, other {} ms; {limit}",
            self.latency_ms_delete, self.latency_ms_list, self.latency_ms_other
        )
    }
}

/// The running double.
pub struct Double {
    child: Child,
    address: String,
}

impl Double {
    /// Starts `exe` on a free loopback port with the benchmark's bucket.
    pub async fn start(exe: &Path) -> Result<Double> {
        let mut child = Command::new(exe)
            .args([
                "--listen",
                "127.0.0.1:0",
                "--bucket",
                BUCKET,
                "--access-key",
                ACCESS_KEY,
                "--secret-key",
                SECRET_KEY,
                "--region",
                REGION,
            ])
            // s3s logs every 503 SlowDown it answers as an error: expected here, so quiet.
            .env("RUST_LOG", "warn,s3s=off")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| {
                format!(
                    "start {} (build it: cd bench/s3-double && cargo build --release)",
                    exe.display()
                )
            })?;
        let stdout = child.stdout.take().context("the double's stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).await?;
        let Some(url) = line.trim().strip_prefix("buzz-s3-double listening on ") else {
            bail!("the double did not say where it listens: {line:?}");
        };
        let address = url.trim_start_matches("http://").to_owned();
        Ok(Double { child, address })
    }

    /// The default place of the double's binary: built by its own manifest in release.
    pub fn default_exe() -> PathBuf {
        PathBuf::from("bench/s3-double/target/release/buzz-s3-double")
    }

    /// The double's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The S3 settings of the double, for the benchmark's own client.
    pub fn s3_config(&self) -> S3Config {
        S3Config {
            endpoint: self.endpoint(),
            bucket: BUCKET.to_owned(),
            region: Some(REGION.to_owned()),
            credentials: S3Credentials::Static {
                access_key: ACCESS_KEY.to_owned(),
                secret_key: SECRET_KEY.to_owned(),
            },
            addressing: S3Addressing::Path,
            ca_file: None,
        }
    }

    /// The variables that point a worker and the CLI at the double (the receipt archive, an
    /// object-lock bucket the double does not implement, is turned off: blank is unset).
    pub fn worker_env(&self) -> Vec<(String, String)> {
        [
            ("BUZZ_S3_ENDPOINT", self.endpoint()),
            ("BUZZ_S3_BUCKET", BUCKET.to_owned()),
            ("BUZZ_S3_REGION", REGION.to_owned()),
            ("BUZZ_S3_ACCESS_KEY", ACCESS_KEY.to_owned()),
            ("BUZZ_S3_SECRET_KEY", SECRET_KEY.to_owned()),
            ("BUZZ_S3_CA_FILE", String::new()),
            ("BUZZ_RECEIPT_ARCHIVE_BUCKET", String::new()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// Sets the latency and the rate limit.
    pub async fn configure(&self, profile: Profile) -> Result<()> {
        let body = json!({
            "latency_ms_delete": profile.latency_ms_delete,
            "latency_ms_list": profile.latency_ms_list,
            "latency_ms_other": profile.latency_ms_other,
            "delete_rate_per_partition": profile.delete_rate_per_partition,
        });
        self.control("POST", "/_double/config", Some(&body)).await?;
        Ok(())
    }

    /// Seeds `versions` object versions (2 per key, a delete marker on one media key in 10)
    /// spread evenly over the community's three tenant prefixes; the versions created.
    pub async fn seed_tenant(&self, community: Uuid, versions: u64) -> Result<u64> {
        let keys = versions.div_ceil(6).max(1);
        let mut created = 0;
        for (family, (prefix, suffix)) in tenant_prefixes(community)
            .into_iter()
            .zip(FAMILY_SUFFIXES)
            .enumerate()
        {
            let body = json!({
                "bucket": BUCKET,
                "prefix": prefix,
                "keys": keys,
                "versions_per_key": 2,
                "delete_marker_every": if family == 0 { 10 } else { 0 },
                "size": 1024,
                "width": 64,
                "suffix": suffix,
                "spread": true,
            });
            let answer = self.control("POST", "/_double/seed", Some(&body)).await?;
            created += answer["versions"]
                .as_u64()
                .context("the seed answer has no version count")?;
        }
        Ok(created)
    }

    /// The double's counters (calls, versions deleted, SlowDown answers …).
    pub async fn stats(&self) -> Result<Value> {
        self.control("GET", "/_double/stats", None).await
    }

    /// Zeroes the counters.
    pub async fn reset(&self) -> Result<()> {
        self.control("POST", "/_double/reset", None).await?;
        Ok(())
    }

    /// Stops the process.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }

    /// A handle that reads the double's deleted-versions counter (for a sampler task).
    pub fn deleted_counter(&self) -> DeletedCounter {
        DeletedCounter {
            address: self.address.clone(),
        }
    }

    async fn control(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value> {
        control(&self.address, method, path, body).await
    }
}

/// Reads how many versions the double has deleted so far (its `versions_deleted` counter).
#[derive(Debug, Clone)]
pub struct DeletedCounter {
    address: String,
}

impl DeletedCounter {
    /// The double's count of deleted versions now.
    pub async fn read(&self) -> Result<u64> {
        let stats = control(&self.address, "GET", "/_double/stats", None).await?;
        Ok(counter(&stats, "versions_deleted"))
    }
}

/// One JSON request to a control endpoint of the double at `address` (HTTP/1.1, the connection
/// closed after it).
async fn control(address: &str, method: &str, path: &str, body: Option<&Value>) -> Result<Value> {
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut stream = TcpStream::connect(address)
        .await
        .with_context(|| format!("connect to the double at {address}"))?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, payload) = answer
        .split_once("\r\n\r\n")
        .with_context(|| format!("{method} {path}: no HTTP answer"))?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!("{method} {path}: {head}: {payload}");
    }
    serde_json::from_str(payload.trim())
        .with_context(|| format!("{method} {path}: not JSON: {payload}"))
}

/// A counter of the double's stats answer.
pub fn counter(stats: &Value, name: &str) -> u64 {
    stats[name].as_u64().unwrap_or(0)
}
