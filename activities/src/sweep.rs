//! The `TaxonomySweep` activity: list the whole bucket, classify every key, record what was found.
//!
//! What counts as *unknown*: every key that is not an exact writer shape under its own tenant
//! prefix ([`KeyShape::Tenant`]). That includes keys that merely look like a tenant prefix
//! ([`KeyShape::UnknownUnderTenantPrefix`], which would block a deletion of that community) and
//! keys outside every tenant prefix ([`KeyShape::Outside`]): a writer that stores tenant data
//! elsewhere escapes every deletion, and finding such writers is what a bucket-wide sweep is for.
//! The one exception is the worker's own stack-check probe under [`PROBE_PREFIX`], which is
//! written and removed within one activity and belongs to no tenant.
//!
//! Memory stays bounded by one listing page plus the sample, whatever the bucket's size.

use std::sync::Arc;

use chrono::{DateTime, SecondsFormat, Utc};
use temporalio_macros::activities;
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use workflows::sweep::{SWEEP_UNKNOWN_KEY_SAMPLE, SweepInput, SweepRecord};

use crate::failure::{Classified, Report, Severity, activity_error};
use crate::s3::{ObjectStore, ObjectStoreError};
use crate::stack_check::PROBE_PREFIX;
use crate::store::{Store, StoreError, TaxonomySweep, TaxonomySweepInput};
use crate::taxonomy::{KeyShape, classify_key};

/// Keys per ListObjectsV2 call (the S3 maximum).
const LIST_PAGE_SIZE: u64 = 1000;

/// Whether a listed key counts as an unknown shape (see the module documentation).
pub fn is_unknown_shape(key: &str) -> bool {
    !key.starts_with(PROBE_PREFIX) && !matches!(classify_key(key), KeyShape::Tenant { .. })
}

/// Running counts of one sweep.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepTally {
    /// Objects listed so far.
    pub listed_objects: u64,
    /// Unknown shapes among them.
    pub unknown_object_count: u64,
    /// The first unknown keys, verbatim.
    pub unknown_key_sample: Vec<String>,
    /// Sample size this sweep keeps.
    sample_limit: usize,
}

impl SweepTally {
    /// An empty tally keeping at most `sample` unknown keys (never more than the record's 100).
    pub fn new(sample: u32) -> Self {
        let limit = sample.min(SWEEP_UNKNOWN_KEY_SAMPLE);
        Self {
            sample_limit: usize::try_from(limit).unwrap_or_default(),
            ..Self::default()
        }
    }

    /// The heartbeat detail a person reads in the Web UI's pending-activity panel.
    pub fn progress(&self) -> serde_json::Value {
        serde_json::json!({
            "step": "listing the bucket",
            "listed_objects": self.listed_objects,
            "unknown_object_count": self.unknown_object_count,
        })
    }

    /// Counts one listed key.
    pub fn observe(&mut self, key: &str) {
        self.listed_objects += 1;
        if is_unknown_shape(key) {
            self.unknown_object_count += 1;
            if self.unknown_key_sample.len() < self.sample_limit {
                self.unknown_key_sample.push(key.to_owned());
            }
        }
    }
}

/// Why a sweep did not finish.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// Listing the bucket failed.
    #[error(transparent)]
    Objects(#[from] ObjectStoreError),
    /// Recording the sweep failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The input cannot be swept.
    #[error("invalid sweep input: {0}")]
    InvalidInput(&'static str),
    /// Temporal cancelled the attempt.
    #[error("sweep cancelled")]
    Cancelled,
}

impl Classified for SweepError {
    fn severity(&self) -> Severity {
        match self {
            SweepError::Objects(e) => e.severity(),
            SweepError::Store(e) => e.severity(),
            SweepError::InvalidInput(_) => Severity::Permanent,
            SweepError::Cancelled => Severity::Transient,
        }
    }

    fn report(&self) -> Report {
        match self {
            SweepError::Cancelled => Report::Cancelled,
            _ => Report::BySeverity,
        }
    }
}

/// The stores a sweep reads and writes.
#[derive(Debug, Clone)]
pub struct SweepActivities {
    store: Store,
    objects: ObjectStore,
}

impl SweepActivities {
    /// Binds the sweep to the bucket it lists and the store it records in.
    pub fn new(store: Store, objects: ObjectStore) -> Self {
        Self { store, objects }
    }

    /// Lists up to `input.object_cap` objects, then records the sweep.
    async fn scan(
        &self,
        ctx: &ActivityContext,
        input: SweepInput,
    ) -> Result<SweepRecord, SweepError> {
        if input.object_cap == 0 {
            return Err(SweepError::InvalidInput("object_cap must be at least 1"));
        }
        let started_at = Utc::now();
        let mut tally = SweepTally::new(input.unknown_sample);
        let mut continuation: Option<String> = None;
        let mut reached_cap = false;
        loop {
            let remaining = input.object_cap - tally.listed_objects;
            let page_size = i32::try_from(remaining.min(LIST_PAGE_SIZE)).unwrap_or(1);
            let page = tokio::select! {
                biased;
                _ = ctx.cancelled() => return Err(SweepError::Cancelled),
                page = self.objects.list_objects_page(continuation.take(), page_size) => page?,
            };
            let (keys, next) = page;
            for key in &keys {
                tally.observe(key);
            }
            // A heartbeat that cannot be encoded is not worth failing the sweep for.
            let _ = ctx.record_heartbeat(tally.progress()).await;
            match next {
                None => break,
                Some(_) if tally.listed_objects >= input.object_cap => {
                    reached_cap = true;
                    break;
                }
                Some(token) => continuation = Some(token),
            }
        }
        let recorded = self
            .store
            .record_taxonomy_sweep(&TaxonomySweepInput {
                started_at,
                object_cap: input.object_cap,
                listed_objects: tally.listed_objects,
                unknown_object_count: tally.unknown_object_count,
                unknown_key_sample: tally.unknown_key_sample,
                reached_cap,
            })
            .await?;
        Ok(as_record(recorded))
    }
}

/// The workflow-facing copy of a stored sweep (the workflows crate has no clock types).
pub fn as_record(sweep: TaxonomySweep) -> SweepRecord {
    SweepRecord {
        id: sweep.id,
        started_at: rfc3339(sweep.found.started_at),
        finished_at: rfc3339(sweep.finished_at),
        object_cap: sweep.found.object_cap,
        listed_objects: sweep.found.listed_objects,
        unknown_object_count: sweep.found.unknown_object_count,
        unknown_key_sample: sweep.found.unknown_key_sample,
        reached_cap: sweep.found.reached_cap,
    }
}

fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

#[activities]
impl SweepActivities {
    /// Lists the bucket page by page, heartbeating the running tally, and records the sweep.
    #[activity(definition = workflows::sweep::ScanBucket)]
    pub async fn scan_bucket(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: SweepInput,
    ) -> Result<SweepRecord, ActivityError> {
        self.scan(&ctx, input).await.map_err(activity_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use temporalio_common::ActivityDefinition;

    /// The worker registers the scan under the name the workflow schedules it by.
    #[test]
    fn the_scan_is_implemented_under_its_contract_name() {
        assert_eq!(
            SweepActivities::scan_bucket.name(),
            workflows::sweep::ScanBucket.name()
        );
    }

    const HASH: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const COMMUNITY: &str = "3f2c1e9a-7b4d-4c8e-9a1f-2b3c4d5e6f70";

    #[test]
    fn exact_writer_shapes_are_known_and_everything_else_but_the_probe_is_unknown() {
        for known in [
            format!("media/{COMMUNITY}/{HASH}"),
            format!("thumbs/{COMMUNITY}/{HASH}.webp"),
            format!("_meta/{COMMUNITY}/{HASH}.json"),
            format!("{PROBE_PREFIX}0d7c4b52-0a51-4d53-9b1e-6f1f2b1d7a11"),
        ] {
            assert!(
                !is_unknown_shape(&known),
                "{known} must not count as unknown"
            );
        }
        for unknown in [
            format!("media/{COMMUNITY}/notes.txt"),
            format!("media/{}/{HASH}", COMMUNITY.to_uppercase()),
            format!("thumbs/{COMMUNITY}/{HASH}.png"),
            format!("avatars/{COMMUNITY}/{HASH}"),
            "backup.tar".to_owned(),
            format!("/media/{COMMUNITY}/{HASH}"),
        ] {
            assert!(
                is_unknown_shape(&unknown),
                "{unknown} must count as unknown"
            );
        }
    }

    #[test]
    fn the_sample_stops_at_its_limit_while_the_count_goes_on() {
        let mut tally = SweepTally::new(2);
        for i in 0..5 {
            tally.observe(&format!("stray/{i}"));
        }
        tally.observe(&format!("media/{COMMUNITY}/{HASH}"));
        assert_eq!(tally.listed_objects, 6);
        assert_eq!(tally.unknown_object_count, 5);
        assert_eq!(tally.unknown_key_sample, vec!["stray/0", "stray/1"]);
    }

    #[test]
    fn a_sample_larger_than_the_record_keeps_is_clamped_to_one_hundred() {
        let mut tally = SweepTally::new(5000);
        for i in 0..150 {
            tally.observe(&format!("stray/{i}"));
        }
        assert_eq!(tally.unknown_object_count, 150);
        assert_eq!(tally.unknown_key_sample.len(), 100);
    }
}
