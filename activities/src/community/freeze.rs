//! Freezing the destructive manifest: the post-drain listing, streamed into chunk rows.

use workflows::community::{ManifestSummary, RequestRef};

use crate::serving::MAX_PROTECTED_OPERATION;
use crate::store::{ExecToken, MANIFEST_CHUNK_MAX_ENTRIES, Stage, Store};
use crate::taxonomy::ManifestEntry;

use super::Attempt;
use super::chunk_writer::{ChunkDestination, ChunkWriter};
use super::claim::{Claim, resumable};
use super::failure::PhaseResult;
use super::listing::scan_tenant_prefixes;
use super::uploads::scan_tenant_uploads;

/// The frozen manifest's chunk rows, numbered from 0 in listing order.
struct FrozenChunks<'a> {
    store: &'a Store,
    token: &'a ExecToken,
    next_chunk_no: u32,
}

impl ChunkDestination for FrozenChunks<'_> {
    async fn wants(&self, _prefix: &str, _entry: &ManifestEntry) -> PhaseResult<bool> {
        Ok(true)
    }

    async fn write(&mut self, prefix: &str, entries: &[String]) -> PhaseResult<()> {
        self.store
            .append_manifest_chunk(self.token, self.next_chunk_no, prefix, entries)
            .await?;
        self.next_chunk_no += 1;
        Ok(())
    }
}

/// Streams the post-fence, post-drain version listing into chunk rows and binds the per-prefix
/// digests to the request atomically with the `fenced → drained` advance. A retry after the bind
/// returns the bound manifest; a retry before it rewrites the unbound chunks from scratch.
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
        acts.store.clear_unbound_manifest_chunks(&token).await?;
        let mut writer = ChunkWriter::new(
            FrozenChunks {
                store: &acts.store,
                token: &token,
                next_chunk_no: 0,
            },
            acts.settings
                .manifest_chunk_entries
                .clamp(1, MANIFEST_CHUNK_MAX_ENTRIES),
        );
        let prefixes =
            scan_tenant_prefixes(&acts.objects, token.community_id, progress, &mut writer).await?;
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
