//! The server's shared state: buckets, the id counter, counters, and the runtime tuning
//! (latencies, delete rate limit) that `/_double/config` changes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};

use crate::limiter::{Limiter, partition};
use crate::store::{Objects, Uploads};

/// One bucket: its versions and its unfinished multipart uploads.
#[derive(Debug)]
pub struct Bucket {
    /// Versions and markers.
    pub objects: RwLock<Objects>,
    /// Unfinished multipart uploads.
    pub uploads: Mutex<Uploads>,
    /// Creation time.
    pub created: SystemTime,
}

impl Bucket {
    fn new() -> Self {
        Self {
            objects: RwLock::new(Objects::default()),
            uploads: Mutex::new(Uploads::default()),
            created: SystemTime::now(),
        }
    }
}

/// Latency and rate-limit settings, changeable at runtime.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Tuning {
    /// Sleep before answering DeleteObjects, DeleteObject and AbortMultipartUpload.
    pub latency_ms_delete: u64,
    /// Sleep before answering the listings.
    pub latency_ms_list: u64,
    /// Sleep before answering anything else.
    pub latency_ms_other: u64,
    /// Deleted keys a second per partition (token bucket of one second's capacity); 0 = none.
    pub delete_rate_per_partition: f64,
    /// The partition of a key ends at its `partition_depth`-th `/`.
    pub partition_depth: usize,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            latency_ms_delete: 0,
            latency_ms_list: 0,
            latency_ms_other: 0,
            delete_rate_per_partition: 0.0,
            partition_depth: 2,
        }
    }
}

/// A partial [`Tuning`]: the fields a `/_double/config` call changes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TuningChange {
    /// See [`Tuning::latency_ms_delete`].
    pub latency_ms_delete: Option<u64>,
    /// See [`Tuning::latency_ms_list`].
    pub latency_ms_list: Option<u64>,
    /// See [`Tuning::latency_ms_other`].
    pub latency_ms_other: Option<u64>,
    /// See [`Tuning::delete_rate_per_partition`].
    pub delete_rate_per_partition: Option<f64>,
    /// See [`Tuning::partition_depth`].
    pub partition_depth: Option<usize>,
}

/// How an S3 operation is delayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpClass {
    /// Deletes.
    Delete,
    /// Listings.
    List,
    /// Everything else.
    Other,
}

impl OpClass {
    /// The class of the S3 operation `name` (as s3s names it, e.g. `DeleteObjects`).
    pub fn of(name: &str) -> Self {
        match name {
            "DeleteObjects" | "DeleteObject" | "AbortMultipartUpload" => OpClass::Delete,
            "ListObjectVersions"
            | "ListObjectsV2"
            | "ListObjects"
            | "ListMultipartUploads"
            | "ListParts"
            | "ListBuckets" => OpClass::List,
            _ => OpClass::Other,
        }
    }
}

/// Counters reported by `/_double/stats`.
#[derive(Debug, Default)]
pub struct Stats {
    operations: Mutex<BTreeMap<String, u64>>,
    versions_deleted: AtomicU64,
    delete_markers_created: AtomicU64,
    slow_downs: Mutex<BTreeMap<String, u64>>,
}

/// A copy of the counters.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StatsSnapshot {
    /// Calls per S3 operation.
    pub operations: BTreeMap<String, u64>,
    /// Versions and markers removed by version-exact deletes.
    pub versions_deleted: u64,
    /// Delete markers created by deletes without a version id.
    pub delete_markers_created: u64,
    /// SlowDown answers in total.
    pub slow_down_total: u64,
    /// SlowDown answers per partition lacking tokens.
    pub slow_down_by_partition: BTreeMap<String, u64>,
}

impl Stats {
    /// Counts one call of `operation`.
    pub fn count_operation(&self, operation: &str) {
        let mut operations = self.operations.lock();
        match operations.get_mut(operation) {
            Some(count) => *count += 1,
            None => {
                operations.insert(operation.to_owned(), 1);
            }
        }
    }

    /// Counts removed versions.
    pub fn add_deleted(&self, versions: u64) {
        self.versions_deleted.fetch_add(versions, Ordering::Relaxed);
    }

    /// Counts created delete markers.
    pub fn add_markers(&self, markers: u64) {
        self.delete_markers_created
            .fetch_add(markers, Ordering::Relaxed);
    }

    /// Counts one SlowDown answer for each lacking partition.
    pub fn add_slow_down(&self, partitions: &[String]) {
        let mut slow = self.slow_downs.lock();
        for partition in partitions {
            *slow.entry(partition.clone()).or_default() += 1;
        }
    }

    /// Zeroes every counter.
    pub fn reset(&self) {
        self.operations.lock().clear();
        self.slow_downs.lock().clear();
        self.versions_deleted.store(0, Ordering::Relaxed);
        self.delete_markers_created.store(0, Ordering::Relaxed);
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> StatsSnapshot {
        let slow_down_by_partition = self.slow_downs.lock().clone();
        StatsSnapshot {
            operations: self.operations.lock().clone(),
            versions_deleted: self.versions_deleted.load(Ordering::Relaxed),
            delete_markers_created: self.delete_markers_created.load(Ordering::Relaxed),
            slow_down_total: slow_down_by_partition.values().sum(),
            slow_down_by_partition,
        }
    }
}

/// Everything the S3 handlers and the control endpoints share.
#[derive(Debug)]
pub struct State {
    buckets: RwLock<HashMap<String, Arc<Bucket>>>,
    next_id: AtomicU64,
    /// Counters.
    pub stats: Stats,
    tuning: RwLock<Tuning>,
    limiter: Mutex<Limiter>,
    started: Instant,
    /// The region requests must be signed for.
    pub region: String,
}

impl State {
    /// A server state with no buckets.
    pub fn new(region: String, tuning: Tuning) -> Self {
        Self {
            buckets: RwLock::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            stats: Stats::default(),
            tuning: RwLock::new(tuning),
            limiter: Mutex::new(Limiter::new(tuning.delete_rate_per_partition)),
            started: Instant::now(),
            region,
        }
    }

    /// Reserves `count` consecutive ids; returns the first.
    pub fn reserve_ids(&self, count: u64) -> u64 {
        self.next_id.fetch_add(count, Ordering::Relaxed)
    }

    /// A new id.
    pub fn new_id(&self) -> u64 {
        self.reserve_ids(1)
    }

    /// Creates `name` unless it exists; true when created.
    pub fn create_bucket(&self, name: &str) -> bool {
        let mut buckets = self.buckets.write();
        if buckets.contains_key(name) {
            return false;
        }
        buckets.insert(name.to_owned(), Arc::new(Bucket::new()));
        true
    }

    /// The bucket `name`.
    pub fn bucket(&self, name: &str) -> Option<Arc<Bucket>> {
        self.buckets.read().get(name).cloned()
    }

    /// Every bucket, sorted by name.
    pub fn buckets(&self) -> Vec<(String, Arc<Bucket>)> {
        let mut all: Vec<_> = self
            .buckets
            .read()
            .iter()
            .map(|(name, bucket)| (name.clone(), Arc::clone(bucket)))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// The current tuning.
    pub fn tuning(&self) -> Tuning {
        *self.tuning.read()
    }

    /// Applies a change; returns the new tuning. A new rate keeps the buckets' tokens (capped),
    /// a new partition depth starts every partition full.
    pub fn retune(&self, change: TuningChange) -> Tuning {
        let mut tuning = self.tuning.write();
        if let Some(ms) = change.latency_ms_delete {
            tuning.latency_ms_delete = ms;
        }
        if let Some(ms) = change.latency_ms_list {
            tuning.latency_ms_list = ms;
        }
        if let Some(ms) = change.latency_ms_other {
            tuning.latency_ms_other = ms;
        }
        let mut limiter = self.limiter.lock();
        if let Some(rate) = change.delete_rate_per_partition {
            tuning.delete_rate_per_partition = rate.max(0.0);
            limiter.set_rate(tuning.delete_rate_per_partition);
        }
        if let Some(depth) = change.partition_depth
            && depth != tuning.partition_depth
        {
            tuning.partition_depth = depth;
            limiter.reset();
        }
        *tuning
    }

    /// The injected latency of an operation class.
    pub fn latency(&self, class: OpClass) -> Duration {
        let tuning = self.tuning.read();
        Duration::from_millis(match class {
            OpClass::Delete => tuning.latency_ms_delete,
            OpClass::List => tuning.latency_ms_list,
            OpClass::Other => tuning.latency_ms_other,
        })
    }

    /// Charges one token per key to the keys' partitions, all or nothing. On refusal the
    /// lacking partitions' SlowDown counters are incremented and returned.
    pub fn charge_deletes<'k>(
        &self,
        keys: impl Iterator<Item = &'k str>,
    ) -> Result<(), Vec<String>> {
        let tuning = self.tuning();
        if tuning.delete_rate_per_partition <= 0.0 {
            return Ok(());
        }
        let mut costs: HashMap<&str, u64> = HashMap::new();
        for key in keys {
            *costs
                .entry(partition(key, tuning.partition_depth))
                .or_default() += 1;
        }
        let demand: Vec<(&str, u64)> = costs.into_iter().collect();
        let now = self.started.elapsed();
        let refused = self.limiter.lock().try_take(&demand, now);
        refused.inspect_err(|lacking| self.stats.add_slow_down(lacking))
    }
}

/// Now, in Unix seconds.
pub fn unix_now() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u32::try_from(d.as_secs()).unwrap_or(u32::MAX))
}
