//! Buffering listed versions into manifest chunks: one buffer per prefix (the prefixes are listed
//! side by side), two destinations (the frozen manifest and the late chunks). A chunk never spans
//! prefixes and at most one per prefix is held in memory.

use std::collections::HashMap;
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
    /// Per prefix, the entries of its next chunk.
    buffered: HashMap<String, Vec<String>>,
}

impl<D: ChunkDestination + Send> ChunkWriter<D> {
    /// A writer handing `destination` chunks of at most `chunk_entries` entries (at least one).
    pub(super) fn new(destination: D, chunk_entries: usize) -> Self {
        Self {
            destination,
            chunk_entries: chunk_entries.max(1),
            buffered: HashMap::new(),
        }
    }

    async fn flush(&mut self, prefix: &str) -> PhaseResult<()> {
        let Some(entries) = self.buffered.get_mut(prefix) else {
            return Ok(());
        };
        if entries.is_empty() {
            return Ok(());
        }
        self.destination.write(prefix, entries).await?;
        entries.clear();
        Ok(())
    }
}

impl<D: ChunkDestination + Send> VersionSink for ChunkWriter<D> {
    async fn accept(&mut self, prefix: &str, version: &ObjectVersion) -> PhaseResult<()> {
        let entry = version.manifest_entry();
        if !self.destination.wants(prefix, &entry).await? {
            return Ok(());
        }
        let entries = self.buffered.entry(prefix.to_owned()).or_default();
        entries.push(entry.encode());
        if entries.len() >= self.chunk_entries {
            self.flush(prefix).await?;
        }
        Ok(())
    }

    async fn prefix_done(&mut self, prefix: &str) -> PhaseResult<()> {
        self.flush(prefix).await?;
        self.buffered.remove(prefix);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::taxonomy::VersionKind;

    /// Records every chunk written, in order.
    #[derive(Default)]
    struct Recorded(Vec<(String, Vec<String>)>);

    impl ChunkDestination for Recorded {
        async fn wants(&self, _prefix: &str, _entry: &ManifestEntry) -> PhaseResult<bool> {
            Ok(true)
        }

        async fn write(&mut self, prefix: &str, entries: &[String]) -> PhaseResult<()> {
            self.0.push((prefix.to_owned(), entries.to_vec()));
            Ok(())
        }
    }

    fn version(key: &str) -> ObjectVersion {
        ObjectVersion {
            key: key.to_owned(),
            version_id: "v".to_owned(),
            kind: VersionKind::Object,
            size: 1,
            is_latest: true,
        }
    }

    #[tokio::test]
    async fn interleaved_prefixes_are_chunked_apart_and_each_flushed_when_it_ends() {
        let mut writer = ChunkWriter::new(Recorded::default(), 2);
        for (prefix, key) in [
            ("media/", "media/1"),
            ("thumbs/", "thumbs/1"),
            ("media/", "media/2"),
            ("thumbs/", "thumbs/2"),
            ("media/", "media/3"),
        ] {
            writer.accept(prefix, &version(key)).await.unwrap_or(());
        }
        writer.prefix_done("thumbs/").await.unwrap_or(());
        writer.prefix_done("media/").await.unwrap_or(());
        let written: Vec<(String, usize)> = writer
            .destination
            .0
            .iter()
            .map(|(prefix, entries)| (prefix.clone(), entries.len()))
            .collect();
        assert_eq!(
            written,
            vec![
                ("media/".to_owned(), 2),
                ("thumbs/".to_owned(), 2),
                ("media/".to_owned(), 1)
            ]
        );
        for (prefix, entries) in &writer.destination.0 {
            assert!(entries.iter().all(|e| e.contains(prefix.as_str())));
        }
    }
}
