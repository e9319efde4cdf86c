//! Freezing the destructive manifest: the post-drain listing, streamed into chunk rows.

use workflows::community::{ManifestSummary, RequestRef};

use crate::serving::MAX_PROTECTED_OPERATION;
use crate::store::{ChunkTail, ExecToken, MANIFEST_CHUNK_MAX_ENTRIES, NewChunk, Stage, Store};
use crate::taxonomy::{ListingLane, ManifestEntry};

use super::Attempt;
use super::chunk_writer::{Chunk, ChunkDestination, ChunkWriter};
use super::claim::{Claim, resumable};
use super::failure::PhaseResult;
use super::listing::scan_lanes;
use super::own_task::OwnTask;
use super::uploads::scan_tenant_uploads;

/// Chunks a freeze hands to the store in one transaction. A chunk not yet stored when the attempt
/// dies is listed again by the next one (each lane resumes after its last chunk stored), so a
/// group costs at most this many chunks re-listed, and saves the request lock, fence check and
/// commit of all but one of them.
const CHUNKS_PER_WRITE: usize = 4;

/// A numbered chunk not yet stored: number, prefix, entries, tail.
type PendingChunk = (u32, String, Vec<String>, ChunkTail);

/// The frozen manifest's chunk rows, numbered in the order the lanes hand them over after those
/// already stored, written [`CHUNKS_PER_WRITE`] at a time. A group is written on a task of its
/// own beside the listing (the next group waits for it), so the scan goes on with the next pages
/// while a group is checked and stored; groups are stored in order, one at a time, so what is
/// stored is always every chunk up to some number, and within each lane a run of its chunks from
/// its first, after whose last key boundary a retried attempt resumes that lane.
struct FrozenChunks<'a> {
    store: &'a Store,
    token: &'a ExecToken,
    next_chunk_no: u32,
    /// Numbered chunks not yet handed to a write.
    pending: Vec<PendingChunk>,
    /// The group being written (at most one).
    writing: Option<OwnTask<PhaseResult<()>>>,
}

impl FrozenChunks<'_> {
    /// Waits for the group being written, then starts writing the pending chunks (one
    /// transaction).
    async fn store_pending(&mut self) -> PhaseResult<()> {
        self.written().await?;
        if self.pending.is_empty() {
            return Ok(());
        }
        let group = std::mem::take(&mut self.pending);
        let (store, token) = (self.store.clone(), self.token.clone());
        self.writing = Some(OwnTask::spawn(async move {
            let chunks: Vec<NewChunk<'_>> = group
                .iter()
                .map(|(chunk_no, prefix, entries, tail)| NewChunk {
                    chunk_no: *chunk_no,
                    prefix,
                    entries,
                    tail,
                })
                .collect();
            store.append_manifest_chunks(&token, &chunks).await?;
            Ok(())
        }));
        Ok(())
    }

    /// Waits for the group being written, if any.
    async fn written(&mut self) -> PhaseResult<()> {
        match self.writing.take() {
            Some(writing) => writing.await?,
            None => Ok(()),
        }
    }

    /// Stores every chunk not stored yet and waits until it is.
    async fn store_all(&mut self) -> PhaseResult<()> {
        self.store_pending().await?;
        self.written().await
    }
}

impl ChunkDestination for FrozenChunks<'_> {
    async fn wants(&self, _prefix: &str, _entry: &ManifestEntry) -> PhaseResult<bool> {
        Ok(true)
    }

    async fn write(&mut self, lane: &ListingLane, chunk: Chunk<'_>) -> PhaseResult<()> {
        let tail = ChunkTail {
            bytes: chunk.bytes,
            resume_after_key: chunk.resume_after_key.map(str::to_owned),
            lane_after: lane.after.clone(),
            lane_through: lane.through.clone(),
        };
        self.pending
            .push((self.next_chunk_no, lane.prefix.clone(), chunk.entries, tail));
        self.next_chunk_no += 1;
        if self.pending.len() >= CHUNKS_PER_WRITE {
            self.store_pending().await?;
        }
        Ok(())
    }
}

/// Streams the post-fence, post-drain version listing into chunk rows and binds the per-prefix
/// digests to the request atomically with the `fenced → drained` advance. A retry after the bind
/// returns the bound manifest; a retry before it continues after the chunks earlier attempts
/// stored (each lane listed on after its last key stored whole), never from the start.
pub async fn freeze_manifest(
    (acts, ctx): Attempt<'_>,
    input: RequestRef,
) -> PhaseResult<ManifestSummary> {
    let finished = async |token: ExecToken| {
        Ok(acts
            .store
            .load_destructive_manifest(token.request_id)
            .await?)
    };
    let claim = Claim::fenced_at(input.request_id, &[Stage::Fenced, Stage::Drained]);
    resumable((acts, ctx), claim, finished, async |token, progress| {
        // The drain waited for stalled leases; refuse (transiently) to list before it did.
        acts.store
            .require_no_stalled_serving_writes(token.community_id, MAX_PROTECTED_OPERATION)
            .await?;
        let resume = acts.store.freeze_resume_point(&token).await?;
        if resume.chunks_kept > 0 || resume.chunks_cleared > 0 {
            tracing::info!(
                request_id = %token.request_id,
                chunks_kept = resume.chunks_kept,
                versions_kept = resume.versions_kept(),
                chunks_cleared = resume.chunks_cleared,
                "freeze resumes after what earlier attempts stored"
            );
        }
        let mut writer = ChunkWriter::new(
            FrozenChunks {
                store: &acts.store,
                token: &token,
                next_chunk_no: resume.next_chunk_no,
                pending: Vec::new(),
                writing: None,
            },
            acts.settings
                .manifest_chunk_entries
                .clamp(1, MANIFEST_CHUNK_MAX_ENTRIES),
        );
        let scanned = scan_lanes(
            &acts.objects,
            token.community_id,
            progress,
            &mut writer,
            resume.lanes,
        )
        .await;
        let prefixes = match scanned {
            Ok(prefixes) => prefixes,
            Err(error) => {
                // The chunks handed over were listed whole before the failure (the other lanes
                // listed to their end): they land first, so the retry (after an unblock, say)
                // resumes after them instead of listing them again.
                if let Err(unwritten) = writer.destination.store_all().await {
                    tracing::warn!(
                        request_id = %token.request_id,
                        error = %unwritten,
                        "chunks listed before the freeze failed were not stored"
                    );
                }
                return Err(error);
            }
        };
        writer.destination.store_all().await?;
        // Uploads are aborted as listed after the irreversible point; this listing only makes an
        // upload of unknown key shape block here, while abort is still possible.
        scan_tenant_uploads(&acts.objects, token.community_id, progress).await?;
        let summary = ManifestSummary {
            chunks: u64::from(writer.destination.next_chunk_no),
            versions: prefixes.iter().map(|p| p.versions).sum(),
            prefixes,
        };
        acts.store
            .bind_destructive_manifest(&token, &summary)
            .await?;
        Ok(summary)
    })
    .await
}
