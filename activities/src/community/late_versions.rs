//! Object versions that appear under a tenant prefix after the manifest was frozen: how
//! verification names them, and how the unblock removes them.
//!
//! Verification that lists a version which no manifest chunk holds does not retry (retrying
//! cannot make it go away): it fails with [`PhaseError::LateObjectVersion`], a permanent failure
//! naming key, version id and kind, and the request blocks. After the operator's unblock the
//! workflow runs [`delete_late_versions`]: it re-lists the tenant prefixes, appends every version
//! no chunk holds as *late chunks* of the request (`store::late`), deletes them by explicit
//! version id through the same call pool, pacing, fence/generation checks before and after each
//! DeleteObjects, and stamping as the frozen manifest, and only then lets verification run again.

use workflows::community::{LateVersionsReport, RequestRef};

use crate::s3::ObjectVersion;
use crate::store::{ChunkSet, ExecToken, MANIFEST_CHUNK_MAX_ENTRIES, Store};
use crate::taxonomy::{ListingLane, ManifestEntry};

use super::chunk_writer::{Chunk, ChunkDestination, ChunkWriter};
use super::claim::{Claim, claimed};
use super::delete::ChunkStream;
use super::failure::{PhaseError, PhaseResult};
use super::heartbeat::{PhaseProgress, ProgressCell};
use super::listing::scan_tenant_prefixes;
use super::marker::Marker;
use super::{Attempt, CommunityActivities};

/// DeleteObjects calls in flight while deleting late chunks (they are few and small).
const LATE_DELETE_PARALLELISM: usize = 4;

/// What a version verification still lists means: a version some chunk holds was deleted and is
/// still listed (the store lags: transient), one no chunk holds appeared after the freeze
/// (permanent, blocks naming it).
pub async fn surviving_version(
    acts: &CommunityActivities,
    token: &ExecToken,
    prefix: &str,
    version: &ObjectVersion,
) -> PhaseError {
    let detail = format!(
        "{}@{} ({})",
        version.key,
        version.version_id,
        version.kind.as_str()
    );
    match acts
        .store
        .manifest_lists_version(token.request_id, prefix, &version.manifest_entry())
        .await
    {
        Ok(true) => PhaseError::StillPresent {
            what: "an object version",
            detail,
        },
        Ok(false) => PhaseError::LateObjectVersion {
            prefix: prefix.to_owned(),
            key: version.key.clone(),
            version_id: version.version_id.clone(),
            kind: version.kind.as_str().to_owned(),
        },
        Err(error) => error.into(),
    }
}

/// Deletes every object version under the tenant prefixes that no chunk holds, as late chunks.
/// Idempotent: late chunks a previous attempt appended are deleted and stamped first, and a
/// version some chunk already holds is never appended again.
pub async fn delete_late_versions(
    (acts, ctx): Attempt<'_>,
    input: RequestRef,
) -> PhaseResult<LateVersionsReport> {
    let claim = Claim::at(input.request_id, ChunkSet::Late.stages());
    claimed((acts, ctx), claim, async |token, progress| {
        acts.store.revalidate_frozen(input.request_id).await?;
        acts.store.verify_fence(&token).await?;
        delete_pending_late_chunks(acts, &token, progress, ctx.info().attempt).await?;
        let mut appender = ChunkWriter::new(
            LateChunks {
                store: &acts.store,
                token: &token,
            },
            MANIFEST_CHUNK_MAX_ENTRIES,
        );
        scan_tenant_prefixes(&acts.objects, token.community_id, progress, &mut appender).await?;
        delete_pending_late_chunks(acts, &token, progress, ctx.info().attempt).await?;
        let (late_chunks, stamped, late_versions_deleted) =
            acts.store.late_chunk_progress(input.request_id).await?;
        if stamped < late_chunks {
            return Err(PhaseError::Store(crate::store::StoreError::Manifest(
                crate::store::ManifestError::ChunksPending {
                    request_id: input.request_id,
                    pending: late_chunks - stamped,
                },
            )));
        }
        Ok(LateVersionsReport {
            late_chunks,
            late_versions_deleted,
        })
    })
    .await
}

/// Deletes and stamps every unstamped late chunk.
async fn delete_pending_late_chunks(
    acts: &CommunityActivities,
    token: &ExecToken,
    progress: &ProgressCell,
    attempt: u32,
) -> PhaseResult<()> {
    let current = acts.store.chunk_progress(token.request_id).await?;
    let step = "deleting late object versions";
    progress.set(PhaseProgress::counting(step, 0, "versions deleted"));
    // Late chunks are deleted only past the irreversible point (the store refuses them before).
    let marker = Marker::already_set(acts, token);
    let mut stream = ChunkStream::new(token, &marker, ChunkSet::Late, u64::MAX, &current, attempt);
    stream.run(acts, LATE_DELETE_PARALLELISM, progress).await
}

/// The request's late chunks: every listed version no chunk holds yet.
struct LateChunks<'a> {
    store: &'a Store,
    token: &'a ExecToken,
}

impl ChunkDestination for LateChunks<'_> {
    async fn wants(&self, prefix: &str, entry: &ManifestEntry) -> PhaseResult<bool> {
        // A version some chunk holds was deleted already (its chunk is stamped) and is still
        // listed: the store lags, and verification retries until it does not.
        Ok(!self
            .store
            .manifest_lists_version(self.token.request_id, prefix, entry)
            .await?)
    }

    async fn write(&mut self, lane: &ListingLane, chunk: Chunk<'_>) -> PhaseResult<()> {
        self.store
            .append_late_chunk(self.token, &lane.prefix, &chunk.entries)
            .await?;
        Ok(())
    }
}
