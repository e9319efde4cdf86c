//! Freezing the destructive manifest: the post-drain listing, streamed into chunk rows.

use workflows::community::{ManifestSummary, RequestRef};

use crate::serving::MAX_PROTECTED_OPERATION;
use crate::store::{ChunkTail, ExecToken, MANIFEST_CHUNK_MAX_ENTRIES, NewChunk, Stage, Store};
use crate::taxonomy::ManifestEntry;

use super::Attempt;
use super::chunk_writer::{Chunk, ChunkDestination, ChunkWriter};
use super::claim::{Claim, resumable};
use super::failure::PhaseResult;
use super::listing::scan_tenant_prefixes_from;
use super::uploads::scan_tenant_uploads;

/// Chunks a freeze hands to the store in one transaction. A chunk not yet stored when the attempt
/// dies is listed again by the next one (it resumes after the last chunk stored), so a group
/// costs at most this many chunks re-listed, and saves the request lock, fence check and commit
/// of all but one of them.
const CHUNKS_PER_WRITE: usize = 4;

/// The frozen manifest's chunk rows, numbered in listing order after those already stored,
/// written [`CHUNKS_PER_WRITE`] at a time.
struct FrozenChunks<'a> {
    store: &'a Store,
    token: &'a ExecToken,
    next_chunk_no: u32,
    /// Numbered chunks not yet stored: number, prefix, entries, tail.
    pending: Vec<(u32, String, Vec<String>, ChunkTail)>,
}

impl FrozenChunks<'_> {
    /// Stores every pending chunk (one transaction).
    async fn store_pending(&mut self) -> PhaseResult<()> {
        let chunks: Vec<NewChunk<'_>> = self
            .pending
            .iter()
            .map(|(chunk_no, prefix, entries, tail)| NewChunk {
                chunk_no: *chunk_no,
                prefix,
                entries,
                tail,
            })
            .collect();
        self.store
            .append_manifest_chunks(self.token, &chunks)
            .await?;
        self.pending.clear();
        Ok(())
    }
}

impl ChunkDestination for FrozenChunks<'_> {
    async fn wants(&self, _prefix: &str, _entry: &ManifestEntry) -> PhaseResult<bool> {
        Ok(true)
    }

    async fn write(&mut self, prefix: &str, chunk: Chunk<'_>) -> PhaseResult<()> {
        let tail = ChunkTail {
            bytes: chunk.bytes,
            resume_after_key: chunk.resume_after_key.map(str::to_owned),
        };
        self.pending
            .push((self.next_chunk_no, prefix.to_owned(), chunk.entries, tail));
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
/// stored (each prefix listed on after its last key stored whole), never from the start.
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
            },
            acts.settings
                .manifest_chunk_entries
                .clamp(1, MANIFEST_CHUNK_MAX_ENTRIES),
        );
        let prefixes = scan_tenant_prefixes_from(
            &acts.objects,
            token.community_id,
            progress,
            &mut writer,
            resume.prefixes,
        )
        .await?;
        writer.destination.store_pending().await?;
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
