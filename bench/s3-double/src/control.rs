//! The control endpoints under `/_double/` (not S3, no auth): seed, stats, reset, clear and
//! config. Requests and answers are JSON.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use s3s::{Body, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::state::{State, StatsSnapshot, Tuning, TuningChange, unix_now};
use crate::store::SeedPlan;

/// The path prefix of the control endpoints.
pub const PREFIX: &str = "/_double/";

/// Largest control request body.
const MAX_BODY: usize = 1 << 20;

/// Largest number of versions one seed call may create.
const MAX_SEED_VERSIONS: u64 = 100_000_000;

/// `POST /_double/seed`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct SeedRequest {
    bucket: String,
    prefix: String,
    keys: u64,
    #[serde(default = "one")]
    versions_per_key: u64,
    #[serde(default)]
    delete_marker_every: u64,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    uploads: u64,
    /// Digits the key index is padded to, at least (64: a content-hash-shaped key).
    #[serde(default)]
    width: usize,
    /// Appended to every key.
    #[serde(default)]
    suffix: String,
    /// Names spread over the hex digits as content hashes are (`SeedPlan::spread`).
    #[serde(default)]
    spread: bool,
}

fn one() -> u64 {
    1
}

/// `POST /_double/clear`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClearRequest {
    bucket: String,
}

/// What one bucket holds.
#[derive(Debug, Clone, Serialize)]
struct BucketStats {
    versions: u64,
    keys: usize,
    uploads: usize,
}

/// `GET /_double/stats`.
#[derive(Debug, Clone, Serialize)]
struct StatsAnswer {
    #[serde(flatten)]
    counters: StatsSnapshot,
    versions_stored: u64,
    keys_stored: usize,
    uploads_stored: usize,
    buckets: BTreeMap<String, BucketStats>,
    tuning: Tuning,
}

#[derive(Debug, thiserror::Error)]
enum ControlError {
    #[error("no such control endpoint: {0} {1}")]
    NotFound(Method, String),
    #[error("no such bucket: {0}")]
    NoSuchBucket(String),
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl ControlError {
    fn status(&self) -> StatusCode {
        match self {
            ControlError::NotFound(..) | ControlError::NoSuchBucket(_) => StatusCode::NOT_FOUND,
            ControlError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ControlError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// Answers one control request.
pub async fn handle(state: Arc<State>, req: Request<Incoming>) -> HttpResponse {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let answer = match (&method, &path[PREFIX.len()..]) {
        (&Method::POST, "seed") => match read_json::<SeedRequest>(req).await {
            Ok(seed_request) => seed(&state, seed_request).await,
            Err(error) => Err(error),
        },
        (&Method::GET, "stats") => Ok(stats(&state)),
        (&Method::POST, "reset") => {
            state.stats.reset();
            Ok(json!({"reset": true}))
        }
        (&Method::POST, "clear") => match read_json::<ClearRequest>(req).await {
            Ok(clear_request) => clear(&state, &clear_request.bucket).await,
            Err(error) => Err(error),
        },
        (&Method::GET, "config") => Ok(json!(state.tuning())),
        (&Method::POST, "config") => match read_json::<TuningChange>(req).await {
            Ok(change) => configure(&state, change),
            Err(error) => Err(error),
        },
        _ => Err(ControlError::NotFound(method, path)),
    };
    match answer {
        Ok(value) => respond(StatusCode::OK, &value),
        Err(error) => respond(error.status(), &json!({"error": error.to_string()})),
    }
}

fn respond(status: StatusCode, value: &serde_json::Value) -> HttpResponse {
    let mut response = Response::new(Body::from(value.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

async fn read_json<T: for<'de> Deserialize<'de>>(
    req: Request<Incoming>,
) -> Result<T, ControlError> {
    let body = Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| ControlError::BadRequest(format!("cannot read the body: {e}")))?
        .to_bytes();
    serde_json::from_slice(&body).map_err(|e| ControlError::BadRequest(e.to_string()))
}

async fn seed(state: &Arc<State>, request: SeedRequest) -> Result<serde_json::Value, ControlError> {
    let bucket = state
        .bucket(&request.bucket)
        .ok_or_else(|| ControlError::NoSuchBucket(request.bucket.clone()))?;
    let plan = SeedPlan {
        prefix: request.prefix,
        keys: request.keys,
        versions_per_key: request.versions_per_key,
        delete_marker_every: request.delete_marker_every,
        size: request.size,
        uploads: request.uploads,
        width: request.width.min(256),
        suffix: request.suffix,
        spread: request.spread,
    };
    let total = plan
        .keys
        .checked_mul(plan.versions_per_key.saturating_add(1))
        .filter(|&t| t <= MAX_SEED_VERSIONS);
    if total.is_none() || plan.uploads > MAX_SEED_VERSIONS {
        return Err(ControlError::BadRequest(format!(
            "at most {MAX_SEED_VERSIONS} versions and uploads a call"
        )));
    }
    let started = Instant::now();
    let first = state.reserve_ids(plan.id_total());
    let now = unix_now();
    let seeded = tokio::task::spawn_blocking(move || {
        let versions = plan.version_total();
        let built = plan.build_versions(first, now);
        bucket.objects.write().merge_seeded(&plan.prefix, built);
        let upload_keys = plan.upload_keys(first + versions);
        let mut uploads = bucket.uploads.lock();
        for (key, id) in &upload_keys {
            uploads.create(key, *id, now);
        }
        (versions, upload_keys.len(), plan.keys)
    })
    .await
    .map_err(|e| ControlError::Internal(e.to_string()))?;
    let (versions, uploads, keys) = seeded;
    Ok(json!({
        "versions": versions,
        "keys": keys,
        "uploads": uploads,
        "seconds": started.elapsed().as_secs_f64(),
    }))
}

fn stats(state: &State) -> serde_json::Value {
    let mut buckets = BTreeMap::new();
    for (name, bucket) in state.buckets() {
        let (versions, keys) = {
            let objects = bucket.objects.read();
            (objects.version_count(), objects.key_count())
        };
        let uploads = bucket.uploads.lock().len();
        buckets.insert(
            name,
            BucketStats {
                versions,
                keys,
                uploads,
            },
        );
    }
    let answer = StatsAnswer {
        counters: state.stats.snapshot(),
        versions_stored: buckets.values().map(|b| b.versions).sum(),
        keys_stored: buckets.values().map(|b| b.keys).sum(),
        uploads_stored: buckets.values().map(|b| b.uploads).sum(),
        buckets,
        tuning: state.tuning(),
    };
    json!(answer)
}

async fn clear(state: &Arc<State>, name: &str) -> Result<serde_json::Value, ControlError> {
    let bucket = state
        .bucket(name)
        .ok_or_else(|| ControlError::NoSuchBucket(name.to_owned()))?;
    let (taken, versions) = bucket.objects.write().take_all();
    let uploads = bucket.uploads.lock().clear();
    // Freeing millions of versions takes a while; not on the runtime's threads.
    tokio::task::spawn_blocking(move || drop(taken))
        .await
        .map_err(|e| ControlError::Internal(e.to_string()))?;
    Ok(json!({"versions_dropped": versions, "uploads_dropped": uploads}))
}

fn configure(state: &State, change: TuningChange) -> Result<serde_json::Value, ControlError> {
    if change
        .delete_rate_per_partition
        .is_some_and(|rate| !rate.is_finite() || rate < 0.0)
    {
        return Err(ControlError::BadRequest(
            "delete_rate_per_partition must be a finite number >= 0".to_owned(),
        ));
    }
    Ok(json!(state.retune(change)))
}
