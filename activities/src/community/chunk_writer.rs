//! Buffering listed versions into manifest chunks: one buffer, two destinations (the frozen
//! manifest and the late chunks). A chunk never spans prefixes and at most one is held in memory.

use std::future::Future;

use crate::s3::ObjectVersion;
use crate::taxonomy::ManifestEntry;

use super::failure::PhaseResult;
use super::listing::VersionSink;

/// Where a full (or a prefix's last) chunk of encoded manifest entries is written.
pub(super) trait ChunkDestination {
    /// Whether a listed version of `prefix` belongs in a chunk at all.
    fn wants(
        &self,
        prefix: &str,
        entry: &ManifestEntry,
    ) -> impl Future<Output = PhaseResult<bool>> + Send;
    /// Writes one non-empty chunk of `prefix`.
    fn write(
        &mut self,
        prefix: &str,
        entries: &[String],
    ) -> impl Future<Output = PhaseResult<()>> + Send;
}

/// A [`VersionSink`] that buffers the encoded entries its destination wants and hands them on
/// every `chunk_entries` entries and at the end of each prefix.
pub(super) struct ChunkWriter<D> {
    /// Where chunks go.
    pub(super) destination: D,
    chunk_entries: usize,
    buffered: Vec<String>,
}

impl<D: ChunkDestination + Send> ChunkWriter<D> {
    /// A writer handing `destination` chunks of at most `chunk_entries` entries (at least one).
    pub(super) fn new(destination: D, chunk_entries: usize) -> Self {
        Self {
            destination,
            chunk_entries: chunk_entries.max(1),
            buffered: Vec::new(),
        }
    }

    async fn flush(&mut self, prefix: &str) -> PhaseResult<()> {
        if self.buffered.is_empty() {
            return Ok(());
        }
        self.destination.write(prefix, &self.buffered).await?;
        self.buffered.clear();
        Ok(())
    }
}

impl<D: ChunkDestination + Send> VersionSink for ChunkWriter<D> {
    async fn accept(&mut self, prefix: &str, version: &ObjectVersion) -> PhaseResult<()> {
        let entry = version.manifest_entry();
        if !self.destination.wants(prefix, &entry).await? {
            return Ok(());
        }
        self.buffered.push(entry.encode());
        if self.buffered.len() >= self.chunk_entries {
            self.flush(prefix).await?;
        }
        Ok(())
    }

    async fn prefix_done(&mut self, prefix: &str) -> PhaseResult<()> {
        self.flush(prefix).await
    }
}
