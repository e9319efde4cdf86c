//! The AWS SDK for Rust, configured exactly as the project's client (rustls on ring, path-style,
//! static keys, checksums only when required), against the real binary on an ephemeral port.

use std::collections::HashSet;
use std::process::Stdio;
use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{BucketVersioningStatus, Delete, ObjectIdentifier};
use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

const ACCESS_KEY: &str = "itest-access";
const SECRET_KEY: &str = "itest-secret";
const BUCKET: &str = "itest";
const PREFIX: &str = "media/0b7e4b6c-3c1e-4c55-9d6b-6f1f5a1c2d3e/";

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The server process, killed when dropped.
struct Double {
    child: Child,
    addr: String,
}

impl Double {
    /// CPU seconds the server process used so far (Linux `/proc`), for the measurement.
    fn cpu_seconds(&self) -> f64 {
        let Some(pid) = self.child.id() else {
            return 0.0;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let after_name = stat.rsplit(')').next().unwrap_or_default();
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        // utime and stime are fields 14 and 15 of stat, 12 and 13 after the name.
        let ticks: f64 = [11, 12]
            .iter()
            .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<f64>().ok()))
            .sum();
        ticks / 100.0
    }
}

async fn start() -> Result<Double, Box<dyn std::error::Error>> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_buzz-s3-double"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--bucket",
            BUCKET,
            "--access-key",
            ACCESS_KEY,
            "--secret-key",
            SECRET_KEY,
        ])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut line = String::new();
    tokio::time::timeout(
        Duration::from_secs(10),
        BufReader::new(stdout).read_line(&mut line),
    )
    .await??;
    let url = line.trim().rsplit(' ').next().ok_or("no address printed")?;
    let addr = url.trim_start_matches("http://").to_owned();
    Ok(Double { child, addr })
}

fn client(addr: &str, secret: &str, retries: bool) -> Client {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    let retry = if retries {
        RetryConfig::standard()
    } else {
        RetryConfig::disabled()
    };
    let config = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .http_client(http)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(ACCESS_KEY, secret, None, None, "itest"))
        .endpoint_url(format!("http://{addr}"))
        .force_path_style(true)
        .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
        .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
        .retry_config(retry)
        .build();
    Client::from_conf(config)
}

/// One control call over a plain HTTP/1.1 connection.
async fn control(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Result<Value, Box<dyn std::error::Error>> {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut stream = TcpStream::connect(addr).await?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (head, json) = response.split_once("\r\n\r\n").ok_or("no HTTP body")?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    Ok(serde_json::from_str(json)?)
}

/// Every `(key, version id, is marker, is latest)` under the prefix, paged by 1000.
async fn list_all(
    s3: &Client,
    pages: &mut usize,
) -> Result<Vec<(String, String, bool, bool)>, Box<dyn std::error::Error>> {
    let mut all = Vec::new();
    let mut marker: Option<(String, String)> = None;
    loop {
        let (key_marker, version_marker) = marker.clone().unzip();
        let page = s3
            .list_object_versions()
            .bucket(BUCKET)
            .prefix(PREFIX)
            .max_keys(1000)
            .set_key_marker(key_marker)
            .set_version_id_marker(version_marker)
            .send()
            .await?;
        *pages += 1;
        let entries = page.versions().len() + page.delete_markers().len();
        assert!(entries <= 1000);
        for v in page.versions() {
            all.push((
                v.key().unwrap_or_default().to_owned(),
                v.version_id().unwrap_or_default().to_owned(),
                false,
                v.is_latest().unwrap_or(false),
            ));
        }
        for m in page.delete_markers() {
            all.push((
                m.key().unwrap_or_default().to_owned(),
                m.version_id().unwrap_or_default().to_owned(),
                true,
                m.is_latest().unwrap_or(false),
            ));
        }
        if page.is_truncated() == Some(true) {
            marker = Some((
                page.next_key_marker().ok_or("NextKeyMarker")?.to_owned(),
                page.next_version_id_marker()
                    .ok_or("NextVersionIdMarker")?
                    .to_owned(),
            ));
        } else {
            return Ok(all);
        }
    }
}

fn delete_request(versions: &[(String, String)]) -> Result<Delete, Box<dyn std::error::Error>> {
    let objects = versions
        .iter()
        .map(|(key, id)| ObjectIdentifier::builder().key(key).version_id(id).build())
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Delete::builder()
        .set_objects(Some(objects))
        .quiet(false)
        .build()?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aws_sdk_pages_deletes_and_sees_slow_down() -> TestResult {
    let double = start().await?;
    let addr = double.addr.as_str();
    let s3 = client(addr, SECRET_KEY, false);

    // The stack check: bucket reachable, versioning Enabled.
    s3.head_bucket().bucket(BUCKET).send().await?;
    let versioning = s3.get_bucket_versioning().bucket(BUCKET).send().await?;
    assert_eq!(versioning.status(), Some(&BucketVersioningStatus::Enabled));

    // A wrong secret is refused (SigV4 is verified).
    let forged = client(addr, "wrong-secret", false);
    let refused = forged.head_bucket().bucket(BUCKET).send().await;
    let Err(SdkError::ServiceError(refused)) = refused else {
        return Err(format!("a forged signature was accepted: {refused:?}").into());
    };
    assert_eq!(refused.raw().status().as_u16(), 403);

    // 1,000 keys x 2 versions + a marker on every 2nd key = 2,500 versions; 3 uploads.
    let seeded = control(
        addr,
        "POST",
        "/_double/seed",
        Some(
            json!({"bucket": BUCKET, "prefix": PREFIX, "keys": 1000, "versions_per_key": 2,
                    "delete_marker_every": 2, "size": 100, "uploads": 3}),
        ),
    )
    .await?;
    assert_eq!(seeded["versions"], 2500);

    let mut pages = 0;
    let listed = list_all(&s3, &mut pages).await?;
    assert_eq!(pages, 3);
    assert_eq!(listed.len(), 2500);
    let unique: HashSet<_> = listed.iter().map(|(k, v, ..)| (k, v)).collect();
    assert_eq!(unique.len(), 2500);
    assert_eq!(listed.iter().filter(|e| e.2).count(), 500);
    assert!(
        listed.iter().filter(|e| e.2).all(|e| e.3),
        "markers are latest"
    );
    assert_eq!(
        listed.iter().filter(|e| e.3).count(),
        1000,
        "one latest a key"
    );

    // Version-exact deletes, 1,000 a call; markers reported as such.
    let mut acknowledged = 0;
    let mut markers_reported = 0;
    let versions: Vec<(String, String)> = listed
        .iter()
        .map(|(k, v, ..)| (k.clone(), v.clone()))
        .collect();
    for chunk in versions.chunks(1000) {
        let output = s3
            .delete_objects()
            .bucket(BUCKET)
            .delete(delete_request(chunk)?)
            .send()
            .await?;
        assert!(output.errors().is_empty());
        acknowledged += output.deleted().len();
        for deleted in output.deleted() {
            if deleted.delete_marker() == Some(true) {
                markers_reported += 1;
                assert_eq!(deleted.delete_marker_version_id(), deleted.version_id());
            }
        }
    }
    assert_eq!(acknowledged, 2500);
    assert_eq!(markers_reported, 500);
    assert!(list_all(&s3, &mut pages).await?.is_empty());

    // Already deleted, never existing and `null` ids are acknowledged as deleted.
    let ghosts = vec![
        versions[0].clone(),
        (format!("{PREFIX}never"), "00000000deadbeef".to_owned()),
        (format!("{PREFIX}.probe"), "null".to_owned()),
    ];
    let output = s3
        .delete_objects()
        .bucket(BUCKET)
        .delete(delete_request(&ghosts)?)
        .send()
        .await?;
    assert_eq!(output.deleted().len(), 3);

    // More than 1,000 keys is MalformedXML.
    let too_many: Vec<(String, String)> = (0..1001)
        .map(|i| (format!("{PREFIX}{i}"), "0000000000000001".to_owned()))
        .collect();
    let refused = s3
        .delete_objects()
        .bucket(BUCKET)
        .delete(delete_request(&too_many)?)
        .send()
        .await;
    assert_eq!(
        refused
            .err()
            .and_then(|e| e.code().map(str::to_owned))
            .as_deref(),
        Some("MalformedXML")
    );

    // Writes and reads.
    let key = format!("{PREFIX}written");
    let first = s3
        .put_object()
        .bucket(BUCKET)
        .key(&key)
        .body(ByteStream::from_static(b"hello"))
        .send()
        .await?;
    let first_id = first.version_id().ok_or("no version id")?.to_owned();
    assert_eq!(first.e_tag(), Some("\"5d41402abc4b2a76b9719d911017c592\""));
    let marker = s3.delete_object().bucket(BUCKET).key(&key).send().await?;
    assert_eq!(marker.delete_marker(), Some(true));
    let marker_id = marker.version_id().ok_or("no marker id")?.to_owned();
    assert!(marker_id > first_id, "ids are monotonic");
    let gone = s3.get_object().bucket(BUCKET).key(&key).send().await;
    assert!(matches!(&gone, Err(SdkError::ServiceError(e)) if e.err().is_no_such_key()));
    let body = s3
        .get_object()
        .bucket(BUCKET)
        .key(&key)
        .version_id(&first_id)
        .send()
        .await?
        .body
        .collect()
        .await?
        .into_bytes();
    assert_eq!(&body[..], b"hello");
    let head = s3
        .head_object()
        .bucket(BUCKET)
        .key(&key)
        .version_id(&first_id)
        .send()
        .await?;
    assert_eq!(head.content_length(), Some(5));
    let removed = s3
        .delete_object()
        .bucket(BUCKET)
        .key(&key)
        .version_id(&marker_id)
        .send()
        .await?;
    assert_eq!(removed.delete_marker(), Some(true));
    let objects = s3
        .list_objects_v2()
        .bucket(BUCKET)
        .max_keys(10)
        .send()
        .await?;
    assert_eq!(objects.key_count(), Some(1));

    // Multipart uploads: listed, aborted, and an unknown upload is NoSuchUpload.
    let uploads = s3
        .list_multipart_uploads()
        .bucket(BUCKET)
        .prefix(PREFIX)
        .max_uploads(2)
        .send()
        .await?;
    assert_eq!(uploads.uploads().len(), 2);
    assert_eq!(uploads.is_truncated(), Some(true));
    let rest = s3
        .list_multipart_uploads()
        .bucket(BUCKET)
        .prefix(PREFIX)
        .key_marker(uploads.next_key_marker().unwrap_or_default())
        .upload_id_marker(uploads.next_upload_id_marker().unwrap_or_default())
        .send()
        .await?;
    assert_eq!(rest.uploads().len(), 1);
    let upload = &rest.uploads()[0];
    let abort = || {
        s3.abort_multipart_upload()
            .bucket(BUCKET)
            .key(upload.key().unwrap_or_default())
            .upload_id(upload.upload_id().unwrap_or_default())
            .send()
    };
    abort().await?;
    let again = abort().await;
    assert!(matches!(&again, Err(SdkError::ServiceError(e)) if e.err().is_no_such_upload()));

    // Rate limit: 10 keys a second per partition; 11 keys in one call is SlowDown (503).
    control(
        addr,
        "POST",
        "/_double/config",
        Some(json!({"delete_rate_per_partition": 10})),
    )
    .await?;
    let eleven: Vec<(String, String)> = (0..11)
        .map(|i| (format!("{PREFIX}k{i}"), "0000000000000001".to_owned()))
        .collect();
    let throttled = s3
        .delete_objects()
        .bucket(BUCKET)
        .delete(delete_request(&eleven)?)
        .send()
        .await;
    let Err(SdkError::ServiceError(throttled)) = throttled else {
        return Err(format!("expected SlowDown, got {throttled:?}").into());
    };
    assert_eq!(throttled.raw().status().as_u16(), 503);
    assert_eq!(throttled.err().code(), Some("SlowDown"));
    assert_eq!(
        throttled.err().message(),
        Some("Please reduce your request rate.")
    );
    // Within the budget it passes; the SDK's own retries see SlowDown too.
    s3.delete_objects()
        .bucket(BUCKET)
        .delete(delete_request(&eleven[..10])?)
        .send()
        .await?;
    let retrying = client(addr, SECRET_KEY, true);
    let still = retrying
        .delete_objects()
        .bucket(BUCKET)
        .delete(delete_request(&eleven)?)
        .send()
        .await;
    assert_eq!(
        still
            .err()
            .and_then(|e| e.code().map(str::to_owned))
            .as_deref(),
        Some("SlowDown")
    );

    let stats = control(addr, "GET", "/_double/stats", None).await?;
    assert_eq!(stats["operations"]["DeleteObjects"], 10, "{stats}");
    assert_eq!(stats["versions_deleted"], 2501, "{stats}");
    assert!(
        stats["slow_down_by_partition"][PREFIX].as_u64() >= Some(2),
        "{stats}"
    );
    assert_eq!(stats["versions_stored"], 1, "{stats}");
    assert_eq!(stats["uploads_stored"], 2, "{stats}");
    control(addr, "POST", "/_double/reset", None).await?;
    let stats = control(addr, "GET", "/_double/stats", None).await?;
    assert_eq!(stats["versions_deleted"], 0, "{stats}");
    let cleared = control(
        addr,
        "POST",
        "/_double/clear",
        Some(json!({"bucket": BUCKET})),
    )
    .await?;
    assert_eq!(cleared["versions_dropped"], 1, "{cleared}");
    Ok(())
}

/// Rough throughput of the raw server: lists then deletes 1,000,000 seeded versions with
/// 1,000-version DeleteObjects calls, `CONCURRENCY` in flight. Run with
/// `cargo test --release -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a test"]
async fn delete_throughput() -> TestResult {
    const KEYS: u64 = 500_000;
    const CONCURRENCY: usize = 8;
    let double = start().await?;
    let addr = double.addr.as_str();
    let s3 = client(addr, SECRET_KEY, false);
    let seeded = control(
        addr,
        "POST",
        "/_double/seed",
        Some(json!({"bucket": BUCKET, "prefix": PREFIX, "keys": KEYS, "versions_per_key": 2})),
    )
    .await?;
    println!("seeded {seeded}");

    let started = std::time::Instant::now();
    let cpu = double.cpu_seconds();
    let mut pages = 0;
    let listed = list_all(&s3, &mut pages).await?;
    let listing = started.elapsed();
    println!(
        "listed {} versions in {pages} pages, {:.2}s: {:.0} versions/s",
        listed.len(),
        listing.as_secs_f64(),
        listed.len() as f64 / listing.as_secs_f64()
    );
    println!(
        "server CPU while listing: {:.2}s",
        double.cpu_seconds() - cpu
    );

    let chunks: Vec<Vec<(String, String)>> = listed
        .chunks(1000)
        .map(|c| c.iter().map(|(k, v, ..)| (k.clone(), v.clone())).collect())
        .collect();
    let queue = std::sync::Arc::new(tokio::sync::Mutex::new(chunks));
    let started = std::time::Instant::now();
    let cpu = double.cpu_seconds();
    let mut workers = Vec::new();
    for _ in 0..CONCURRENCY {
        let queue = std::sync::Arc::clone(&queue);
        let s3 = s3.clone();
        workers.push(tokio::spawn(async move {
            let mut deleted = 0usize;
            loop {
                let Some(chunk) = queue.lock().await.pop() else {
                    return Ok::<usize, String>(deleted);
                };
                let delete = delete_request(&chunk).map_err(|e| e.to_string())?;
                let output = s3
                    .delete_objects()
                    .bucket(BUCKET)
                    .delete(delete)
                    .send()
                    .await
                    .map_err(|e| format!("{e:?}"))?;
                deleted += output.deleted().len();
            }
        }));
    }
    let mut deleted = 0;
    for worker in workers {
        deleted += worker.await??;
    }
    let deleting = started.elapsed();
    println!(
        "deleted {deleted} versions in {} calls ({CONCURRENCY} in flight), {:.2}s: {:.0} versions/s",
        deleted.div_ceil(1000),
        deleting.as_secs_f64(),
        deleted as f64 / deleting.as_secs_f64()
    );
    println!(
        "server CPU while deleting: {:.2}s",
        double.cpu_seconds() - cpu
    );
    let stats = control(addr, "GET", "/_double/stats", None).await?;
    assert_eq!(stats["versions_stored"], 0, "{stats}");
    Ok(())
}
