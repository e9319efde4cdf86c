//! Buffering listed versions into manifest chunks: one buffer per listing lane (the lanes are
//! listed side by side), two destinations (the frozen manifest and the late chunks). A chunk
//! never spans lanes (so never prefixes) and at most one per lane is held in memory.
//!
//! A full chunk is handed on when the lane's next version arrives (or the lane ends), so the
//! writer knows whether the chunk ends at a key boundary — the next version is of another key —
//! or inside one key's versions. A freeze stores that boundary so a retried attempt can list the
//! lane on after it.

use std::collections::HashMap;
use std::future::Future;

use crate::s3::ObjectVersion;
use crate::taxonomy::{ListingLane, ManifestEntry};

use super::failure::PhaseResult;
use super::listing::VersionSink;

/// One non-empty chunk of a lane, as handed to a [`ChunkDestination`] (which owns its
/// entries from then on: a destination that keeps them need not copy them).
#[derive(Debug, Clone)]
pub(super) struct Chunk<'a> {
    /// Encoded manifest entries, in listing order.
    pub(super) entries: Vec<String>,
    /// Bytes of their object versions, as listed.
    pub(super) bytes: u64,
    /// The chunk's last key when no later version of the lane has that key (the listing may
    /// continue after it); `None` when the chunk ends inside one key's versions.
    pub(super) resume_after_key: Option<&'a str>,
}

/// Where a full (or a lane's last) chunk of encoded manifest entries is written.
pub(super) trait ChunkDestination {
    /// Whether a listed version of `prefix` belongs in a chunk at all.
    fn wants(
        &self,
        prefix: &str,
        entry: &ManifestEntry,
    ) -> impl Future<Output = PhaseResult<bool>> + Send;
    /// Writes one chunk of `lane`.
    fn write(
        &mut self,
        lane: &ListingLane,
        chunk: Chunk<'_>,
    ) -> impl Future<Output = PhaseResult<()>> + Send;
}

/// A lane's next chunk, being filled.
#[derive(Default)]
struct Filling {
    entries: Vec<String>,
    bytes: u64,
    last_key: String,
}

/// A [`VersionSink`] that buffers the encoded entries its destination wants and hands them on in
/// chunks of `chunk_entries` (once the lane's next wanted version arrives) and at the end of
/// each lane.
pub(super) struct ChunkWriter<D> {
    /// Where chunks go.
    pub(super) destination: D,
    chunk_entries: usize,
    /// Per lane, its next chunk.
    buffered: HashMap<ListingLane, Filling>,
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

    /// Hands on the lane's buffered entries, if any; `ends_key` when no later version of the
    /// lane has the last one's key.
    async fn flush(&mut self, lane: &ListingLane, ends_key: bool) -> PhaseResult<()> {
        let Some(filling) = self.buffered.get_mut(lane) else {
            return Ok(());
        };
        if filling.entries.is_empty() {
            return Ok(());
        }
        let chunk = Chunk {
            entries: std::mem::replace(
                &mut filling.entries,
                Vec::with_capacity(self.chunk_entries),
            ),
            bytes: std::mem::take(&mut filling.bytes),
            resume_after_key: ends_key.then_some(filling.last_key.as_str()),
        };
        self.destination.write(lane, chunk).await?;
        Ok(())
    }
}

impl<D: ChunkDestination + Send> VersionSink for ChunkWriter<D> {
    async fn accept(
        &mut self,
        lane: &ListingLane,
        version: &ObjectVersion,
        entry: &ManifestEntry,
        encoded: String,
    ) -> PhaseResult<()> {
        if !self.destination.wants(&lane.prefix, entry).await? {
            return Ok(());
        }
        let full = self.buffered.get(lane).map(|filling| {
            (
                filling.entries.len() >= self.chunk_entries,
                filling.last_key != version.key,
            )
        });
        if let Some((true, ends_key)) = full {
            self.flush(lane, ends_key).await?;
        }
        if !self.buffered.contains_key(lane) {
            self.buffered.insert(lane.clone(), Filling::default());
        }
        let Some(filling) = self.buffered.get_mut(lane) else {
            return Ok(());
        };
        filling.entries.push(encoded);
        filling.bytes = filling.bytes.saturating_add(version.size);
        if filling.last_key != version.key {
            filling.last_key.clone_from(&version.key);
        }
        Ok(())
    }

    async fn lane_done(&mut self, lane: &ListingLane) -> PhaseResult<()> {
        self.flush(lane, true).await?;
        self.buffered.remove(lane);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::taxonomy::VersionKind;

    /// Every chunk written, in order: prefix, entries, bytes, resume key.
    type Written = (String, Vec<String>, u64, Option<String>);

    /// Records every chunk written, in order.
    #[derive(Default)]
    struct Recorded(Vec<Written>);

    impl ChunkDestination for Recorded {
        async fn wants(&self, _prefix: &str, _entry: &ManifestEntry) -> PhaseResult<bool> {
            Ok(true)
        }

        async fn write(&mut self, lane: &ListingLane, chunk: Chunk<'_>) -> PhaseResult<()> {
            self.0.push((
                lane.prefix.clone(),
                chunk.entries,
                chunk.bytes,
                chunk.resume_after_key.map(str::to_owned),
            ));
            Ok(())
        }
    }

    /// The lane that is the whole of `prefix`.
    fn whole(prefix: &str) -> ListingLane {
        ListingLane::whole(prefix.to_owned())
    }

    /// Hands the writer one listed version of `key`, as the scan does.
    async fn feed(writer: &mut ChunkWriter<Recorded>, prefix: &str, key: &str, version_id: &str) {
        let version = ObjectVersion {
            key: key.to_owned(),
            version_id: version_id.to_owned(),
            kind: VersionKind::Object,
            size: 10,
            is_latest: true,
        };
        let entry = version.manifest_entry();
        let encoded = entry.encode();
        writer
            .accept(&whole(prefix), &version, &entry, encoded)
            .await
            .unwrap_or(());
    }

    #[tokio::test]
    async fn interleaved_lanes_are_chunked_apart_and_each_flushed_when_it_ends() {
        let mut writer = ChunkWriter::new(Recorded::default(), 2);
        for (prefix, key) in [
            ("media/", "media/1"),
            ("thumbs/", "thumbs/1"),
            ("media/", "media/2"),
            ("thumbs/", "thumbs/2"),
            ("media/", "media/3"),
        ] {
            feed(&mut writer, prefix, key, "v").await;
        }
        writer.lane_done(&whole("thumbs/")).await.unwrap_or(());
        writer.lane_done(&whole("media/")).await.unwrap_or(());
        let written: Vec<(String, usize, u64, Option<String>)> = writer
            .destination
            .0
            .iter()
            .map(|(prefix, entries, bytes, key)| {
                (prefix.clone(), entries.len(), *bytes, key.clone())
            })
            .collect();
        assert_eq!(
            written,
            vec![
                ("media/".to_owned(), 2, 20, Some("media/2".to_owned())),
                ("thumbs/".to_owned(), 2, 20, Some("thumbs/2".to_owned())),
                ("media/".to_owned(), 1, 10, Some("media/3".to_owned()))
            ]
        );
        for (prefix, entries, _, _) in &writer.destination.0 {
            assert!(entries.iter().all(|e| e.contains(prefix.as_str())));
        }
    }

    #[tokio::test]
    async fn a_chunk_ending_inside_a_keys_versions_names_no_resume_key() {
        let mut writer = ChunkWriter::new(Recorded::default(), 2);
        for (key, version_id) in [
            ("m/a", "1"),
            ("m/b", "1"),
            ("m/b", "2"),
            ("m/b", "3"),
            ("m/c", "1"),
        ] {
            feed(&mut writer, "m/", key, version_id).await;
        }
        writer.lane_done(&whole("m/")).await.unwrap_or(());
        let keys: Vec<(usize, Option<String>)> = writer
            .destination
            .0
            .iter()
            .map(|(_, entries, _, key)| (entries.len(), key.clone()))
            .collect();
        // [a, b1] ends inside b's versions; [b2, b3] ends b (c follows); [c] ends the prefix.
        assert_eq!(
            keys,
            vec![
                (2, None),
                (2, Some("m/b".to_owned())),
                (1, Some("m/c".to_owned()))
            ]
        );
    }
}
