//! Irreversible object deletion: every frozen version, by explicit version id, chunk by chunk.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use uuid::Uuid;
use workflows::community::{DeleteChunksInput, DeleteProgress};

use crate::failure::{Classified, Severity};
use crate::s3::{BulkDeleteOutcome, DeleteFailureKind, MAX_VERSIONS_PER_DELETE, ObjectVersionRef};
use crate::store::{ChunkAck, ChunkProgress, ChunkSet, ExecToken, ManifestChunk, Stage, Store};
use crate::taxonomy::{ManifestEntry, is_tenant_owned_key};

use super::claim::{Claim, resumable};
use super::connection_budget::ConnectionBudget;
use super::failure::{PhaseError, PhaseResult};
use super::fence_gate::{FenceGate, HeldFence};
use super::heartbeat::{PhaseProgress, ProgressCell};
use super::marker::{CallEffect, Marker};
use super::own_task::OwnTask;
use super::uploads::abort_tenant_uploads;
use super::{Attempt, CommunityActivities};

/// The activity attempt from which a per-key `AccessDenied` in a DeleteObjects answer blocks the
/// request instead of being retried. Earlier attempts treat it like any partial acknowledgement
/// (a policy change may still be propagating); from this attempt on it is permanent and names
/// the key and version. The count is Temporal's attempt number of this `delete_chunks` call, so
/// any earlier transient failure of the same call counts too; with the default backoff (30 s,
/// doubling) the block comes about 90 s after the first failure. An `unblock` schedules a new
/// call, whose count starts again at 1.
pub const ACCESS_DENIED_BLOCK_ATTEMPT: u32 = 3;

/// Sends of one DeleteObjects call that may fail without a throttle (no answer, a 5xx, 408/409)
/// before the attempt fails: what the SDK's own retries gave before they were turned off for
/// this call, so that a throttle reaches the pacer at once. Throttles are retried without bound:
/// the prefix's rate falls to the floor meanwhile, and the attempt heartbeats throughout.
const TRANSIENT_SENDS: u32 = 3;

/// The backoff before a retried send: doubling from this, up to [`BACKOFF_MAX`], jittered.
const BACKOFF_BASE: Duration = Duration::from_millis(100);

/// The longest backoff before a retried send.
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Most answered chunks one grouped stamp takes (its transaction stays short).
const MAX_STAMP_GROUP: usize = 32;
/// The longest an answered chunk waits for its stamp while its group fills. A chunk answered but
/// not yet stamped when the attempt dies is deleted again by the next one (acknowledged as gone),
/// so the wait costs nothing but a little progress shown late.
const STAMP_WAIT_MAX: Duration = Duration::from_millis(250);

/// One DeleteObjects call: up to 1,000 versions of one chunk (so of one prefix).
struct DeleteCall {
    chunk_no: u32,
    prefix: String,
    versions: Vec<ObjectVersionRef>,
}

/// A sent call's final answer: its chunk and prefix, and what S3 acknowledged over every send.
struct CallAnswer {
    chunk_no: u32,
    prefix: String,
    outcome: BulkDeleteOutcome,
}

/// One prefix's side of the manifest: its chunks are read in order, and the lanes take turns,
/// so the calls in flight are spread over the tenant's prefixes (S3 partitions its request rate
/// by prefix) instead of working through all of `media/`, then `thumbs/`, then `_meta/`.
struct Lane {
    prefix: String,
    /// The highest chunk number read from this lane so far (`None`: before its first).
    last_read: Option<u32>,
    /// No unstamped chunk is left in this lane.
    done: bool,
}

/// What came back for one chunk so far.
#[derive(Default)]
struct ChunkTally {
    calls_left: usize,
    requested: u64,
    deleted: u64,
    first_failure: Option<String>,
}

/// Deletes pending manifest chunks, at most `max_chunks` per call, with at most `parallelism`
/// DeleteObjects calls in flight. A chunk is stamped only when every one of its versions was
/// acknowledged; the fence and the attempt's generation are checked in Postgres before and after
/// every DeleteObjects call, so a superseded attempt stops before its next irreversible call.
/// Resuming is simply "the first unstamped chunk": re-deleting an already-deleted version is
/// acknowledged, so a chunk whose stamp was lost to a crash converges on retry.
///
/// The irreversible marker is set by the first call S3 acknowledges ([`Marker`]); when the
/// attempt fails and S3 refused every call it made whole (a worker without the permission), the
/// marker stays unset and the request can still be aborted.
pub async fn delete_chunks(
    (acts, ctx): Attempt<'_>,
    input: DeleteChunksInput,
) -> PhaseResult<DeleteProgress> {
    let finished = async |_| {
        Ok(as_delete_progress(
            acts.store.chunk_progress(input.request_id).await?,
        ))
    };
    let claim = Claim::at(input.request_id, &[Stage::Drained, Stage::BindingsRemoved]);
    resumable((acts, ctx), claim, finished, async |token, progress| {
        acts.store.revalidate_frozen(input.request_id).await?;
        let marker = Marker::resolve(acts, &token).await?;
        let deleted = delete_everything((acts, ctx), &input, &token, &marker, progress).await;
        if let Err(error) = deleted {
            marker.settle_failure(&error.to_string()).await;
            return Err(error);
        }
        let mut current = acts.store.chunk_progress(input.request_id).await?;
        report(progress, &current);
        if current.chunks_stamped >= current.chunks_total {
            current = acts
                .store
                .mark_bindings_removed(
                    &token,
                    serde_json::json!({
                        "chunks": current.chunks_total,
                        "versions_deleted": current.versions_stamped,
                    }),
                )
                .await?;
        }
        Ok(as_delete_progress(current))
    })
    .await
}

/// The destructive calls of one attempt: first the multipart uploads in progress (no stalled
/// writer can complete an upload into a new object version once the versions below are gone),
/// then up to `max_chunks` pending chunks, or every pending chunk when fewer than a quarter of
/// that would be left for another call ([`call_budget`]).
async fn delete_everything(
    (acts, ctx): Attempt<'_>,
    input: &DeleteChunksInput,
    token: &ExecToken,
    marker: &Marker<'_>,
    progress: &ProgressCell,
) -> PhaseResult<()> {
    abort_tenant_uploads(acts, token, marker, progress).await?;
    let parallelism = usize::try_from(input.parallelism.max(1)).unwrap_or(1);
    let current = acts.store.chunk_progress(input.request_id).await?;
    report(progress, &current);
    let pending = current.chunks_total.saturating_sub(current.chunks_stamped);
    let mut stream = ChunkStream::new(
        token,
        marker,
        ChunkSet::Frozen,
        call_budget(input.max_chunks, pending),
        &current,
        ctx.info().attempt,
    );
    stream.run(acts, parallelism, progress).await
}

/// Chunks one `delete_chunks` call takes of the `pending` ones: `max_chunks` (at least one), or
/// all of them when the rest would be less than a quarter of `max_chunks`. A call that left a
/// few chunks behind would cost the workflow another activity call (its claim, checks, upload
/// scan, pipe ramp-up and drain) for a handful of chunks; taking them costs this call at most a
/// quarter more time, so the bound on each call's work, and on a run's history, stays.
fn call_budget(max_chunks: u64, pending: u64) -> u64 {
    let max_chunks = max_chunks.max(1);
    if pending <= max_chunks.saturating_add(max_chunks / 4) {
        pending.max(max_chunks)
    } else {
        max_chunks
    }
}

fn as_delete_progress(p: ChunkProgress) -> DeleteProgress {
    DeleteProgress {
        chunks_total: p.chunks_total,
        chunks_done: p.chunks_stamped,
        versions_deleted: p.versions_stamped,
        versions_total: p.versions_total,
    }
}

fn report(progress: &ProgressCell, p: &ChunkProgress) {
    progress.set(PhaseProgress {
        step: format!(
            "deleting object versions: chunk {} of {}",
            p.chunks_stamped, p.chunks_total
        ),
        done: p.versions_stamped,
        total: Some(p.versions_total),
        unit: "versions deleted".to_owned(),
        rates: Default::default(),
    });
}

/// Splits chunks into DeleteObjects calls, refusing any entry that is not this community's key.
fn plan_calls(community: Uuid, chunks: &[ManifestChunk]) -> PhaseResult<Vec<DeleteCall>> {
    let mut calls = Vec::new();
    for chunk in chunks {
        let mut versions = Vec::with_capacity(chunk.entries.len());
        for encoded in &chunk.entries {
            let entry = ManifestEntry::decode(encoded)?;
            if !is_tenant_owned_key(community, &entry.key) {
                return Err(PhaseError::ForeignManifestKey {
                    chunk_no: chunk.chunk_no,
                    key: entry.key,
                    community,
                });
            }
            versions.push(ObjectVersionRef::from(entry));
        }
        for slice in versions.chunks(MAX_VERSIONS_PER_DELETE) {
            calls.push(DeleteCall {
                chunk_no: chunk.chunk_no,
                prefix: chunk.prefix.clone(),
                versions: slice.to_vec(),
            });
        }
    }
    Ok(calls)
}

/// Pending chunks streamed through one pool of DeleteObjects calls.
///
/// Chunks are read, checked and split into calls by a [`ChunkReader`] on a task of its own, at
/// most [`READ_AHEAD`] chunks ahead of the calls issued, and the next chunk's calls are taken
/// only when a call slot is free and every call of the chunks taken before has been issued: the
/// pool never drains at a chunk boundary (nor idles on chunks smaller than the parallelism, nor
/// waits for a chunk's read), while memory holds at most the calls in flight plus a few read
/// chunks — the same whatever the manifest's size. Chunks are read from the tenant's prefixes in
/// turn ([`Lane`]), so each prefix is deleted under its own rate side by side with the others.
/// Streams either the frozen or the late chunks.
pub(super) struct ChunkStream<'t> {
    token: &'t ExecToken,
    /// Books every call's answer; the first acknowledgement sets the irreversible marker.
    marker: &'t Marker<'t>,
    /// Which chunks: the frozen manifest or the late chunks.
    set: ChunkSet,
    /// Chunks this attempt may read.
    max_chunks: u64,
    /// The chunks read ahead, started at the first chunk taken; `None` once every one was taken.
    reader: Option<ReadAhead>,
    /// The reader was started and has ended.
    read_all: bool,
    /// Calls of read chunks not yet issued, in chunk order.
    queued: VecDeque<DeleteCall>,
    /// Per read, not yet stamped chunk: what came back so far.
    tallies: HashMap<u32, ChunkTally>,
    /// Chunks whose every version was acknowledged, waiting for the next grouped stamp.
    answered: Vec<(u32, u64)>,
    /// When the oldest of `answered` was answered.
    answered_since: Option<tokio::time::Instant>,
    /// Answered chunks that make a stamp due: one per call slot (so a stamp's transaction serves
    /// a round of answers, not one), at most [`MAX_STAMP_GROUP`].
    stamp_group: usize,
    /// The grouped stamp being written, beside the calls in flight (at most one at a time).
    stamping: Option<tokio::task::JoinHandle<StampOutcome>>,
    /// Chunks stamped (by any attempt) and in the manifest, for the heartbeat.
    stamped: u64,
    total: u64,
    /// This activity attempt's number (1 for the first), for the `AccessDenied` bound.
    attempt: u32,
    /// The pooled connections the attempt's statements share (fence checks, chunk reads,
    /// stamps, the marker): at most two at once, whatever the parallelism.
    budget: ConnectionBudget,
}

impl<'t> ChunkStream<'t> {
    pub(super) fn new(
        token: &'t ExecToken,
        marker: &'t Marker<'t>,
        set: ChunkSet,
        max_chunks: u64,
        progress: &ChunkProgress,
        attempt: u32,
    ) -> Self {
        Self {
            token,
            marker,
            set,
            max_chunks,
            reader: None,
            read_all: false,
            queued: VecDeque::new(),
            tallies: HashMap::new(),
            answered: Vec::new(),
            answered_since: None,
            stamp_group: 1,
            stamping: None,
            stamped: progress.chunks_stamped,
            total: progress.chunks_total,
            attempt,
            budget: ConnectionBudget::new(),
        }
    }

    /// Deletes up to `chunks_left` chunks with at most `parallelism` calls in flight, stamping
    /// each chunk once every one of its versions was acknowledged, a round of chunks per stamp.
    /// A stamp is written beside the calls (its own task), and the free slots keep being filled
    /// while it is; the calls in flight also keep going while a chunk is read ([`driving`]).
    /// Stops at the first failure: no further call is sent once a failed answer is in, and the
    /// calls in flight are waited for, so every call the attempt sent has its answer booked with
    /// the marker before the failure is returned.
    pub(super) async fn run(
        &mut self,
        acts: &CommunityActivities,
        parallelism: usize,
        progress: &ProgressCell,
    ) -> PhaseResult<()> {
        self.stamp_group = parallelism.clamp(1, MAX_STAMP_GROUP);
        // Declared before the calls that borrow it, so it outlives them.
        let gate = FenceGate::new(HeldFence {
            store: &acts.store,
            token: self.token,
            budget: self.budget.clone(),
        });
        let mut in_flight = FuturesUnordered::new();
        let result = self
            .pump(acts, &gate, parallelism, progress, &mut in_flight)
            .await;
        if result.is_err() {
            self.marker.halt();
            while in_flight.next().await.is_some() {}
            // The chunks fully answered before the failure keep their stamps when the fence
            // still allows it; otherwise the retry deletes them again (acknowledged as gone).
            let _kept = self.stamp_answered(acts).await;
        }
        result
    }

    async fn pump<'f>(
        &mut self,
        acts: &'f CommunityActivities,
        gate: &'f FenceGate<HeldFence<'f>>,
        parallelism: usize,
        progress: &ProgressCell,
        in_flight: &mut FuturesUnordered<IssuedCall<'f>>,
    ) -> PhaseResult<()>
    where
        't: 'f,
    {
        let (marker, budget) = (self.marker, self.budget.clone());
        // Answers that arrived while a chunk read or a marker write was awaited: the
        // calls in flight are driven through every one of those, so none of them stalls (its
        // fence checks, its pacing, its answer) while the task does its own Postgres work.
        let mut arrived = VecDeque::new();
        loop {
            // Fill every free slot, reading the next chunk only when no read call is left; a
            // failed call waiting in `arrived` stops the filling (nothing more is sent).
            while in_flight.len() < parallelism && !arrived.iter().any(Result::is_err) {
                if self.queued.is_empty() {
                    driving(self.read_next_chunk(acts), in_flight, &mut arrived).await?;
                }
                let Some(call) = self.queued.pop_front() else {
                    break;
                };
                // Recorded by the task, before the call can be sent (see `marker`).
                driving(budget.spend(marker.before_call()), in_flight, &mut arrived).await?;
                in_flight.push(Box::pin(issue(acts, gate, marker, call)));
            }
            let result = match arrived.pop_front() {
                Some(result) => result,
                None => match self.next_wake(in_flight).await {
                    Wake::Answer(result) => result,
                    Wake::Stamped(outcome) => {
                        self.book_stamp(acts, outcome)?;
                        if self.stamp_due() {
                            self.start_stamp(acts);
                        }
                        continue;
                    }
                    Wake::Drained => return self.stamp_answered(acts).await,
                },
            };
            driving(
                budget.spend(marker.confirm_if_acknowledged()),
                in_flight,
                &mut arrived,
            )
            .await?;
            let CallAnswer {
                chunk_no,
                prefix,
                outcome,
            } = result?;
            self.settle(chunk_no, &outcome)?;
            // One stamp per round of answers: due once a chunk per call slot is answered, or
            // the oldest answered chunk has waited long enough. It is written beside the calls
            // in flight (the slots keep being refilled meanwhile); answers that come in while
            // it is written join the next group. What is left is stamped when the pipe drains.
            if self.stamp_due() {
                self.start_stamp(acts);
            }
            let step = format!(
                "deleting object versions: chunk {} of {}",
                self.stamped, self.total
            );
            let rate = acts.pacer.rate(&prefix);
            if let Some(rate) = rate {
                acts.settings.metrics.delete_rate(&prefix, rate);
            }
            progress.update(|p| {
                p.done = p.done.saturating_add(outcome.deleted);
                p.step = step;
                if let Some(rate) = rate {
                    p.rates.insert(prefix, rate);
                }
            });
        }
    }

    /// Takes the next read chunk's calls; a chunk without entries is stamped at once.
    async fn read_next_chunk(&mut self, acts: &CommunityActivities) -> PhaseResult<()> {
        while self.queued.is_empty() && !self.read_all {
            let reader = self.reader.get_or_insert_with(|| {
                ChunkReader::start(
                    acts.store.clone(),
                    self.budget.clone(),
                    self.token.clone(),
                    self.set,
                    self.max_chunks,
                )
            });
            let Some(planned) = reader.chunks.recv().await else {
                self.reader = None;
                self.read_all = true;
                return Ok(());
            };
            let PlannedChunk { chunk_no, calls } = planned?;
            if calls.is_empty() {
                self.answered.push((chunk_no, 0));
                self.stamp_answered(acts).await?;
                continue;
            }
            for call in calls {
                let tally = self.tallies.entry(call.chunk_no).or_default();
                tally.calls_left += 1;
                tally.requested += call.versions.len() as u64;
                self.queued.push_back(call);
            }
        }
        Ok(())
    }

    /// Books one call's answer; a chunk whose last call this was joins the chunks waiting for
    /// the next grouped stamp.
    fn settle(&mut self, chunk_no: u32, outcome: &BulkDeleteOutcome) -> PhaseResult<()> {
        if let Some(denied) = access_denied_block(chunk_no, outcome, self.attempt) {
            return Err(denied);
        }
        let Some(tally) = self.tallies.get_mut(&chunk_no) else {
            return Ok(());
        };
        tally.calls_left = tally.calls_left.saturating_sub(1);
        tally.deleted += outcome.deleted;
        if tally.first_failure.is_none() {
            tally.first_failure = first_problem(outcome);
        }
        if tally.calls_left > 0 {
            return Ok(());
        }
        let Some(tally) = self.tallies.remove(&chunk_no) else {
            return Ok(());
        };
        if tally.deleted != tally.requested || tally.first_failure.is_some() {
            return Err(PhaseError::PartialAcknowledgement {
                chunk_no,
                acknowledged: tally.deleted,
                requested: tally.requested,
                first_failure: tally
                    .first_failure
                    .unwrap_or_else(|| "acknowledgement count short".to_owned()),
            });
        }
        self.answered.push((chunk_no, tally.deleted));
        self.answered_since
            .get_or_insert_with(tokio::time::Instant::now);
        Ok(())
    }

    /// Whether the answered chunks should be stamped now (see [`ChunkStream::stamp_group`]).
    fn stamp_due(&self) -> bool {
        self.answered.len() >= self.stamp_group
            || self
                .answered_since
                .is_some_and(|since| since.elapsed() >= STAMP_WAIT_MAX)
    }

    /// Waits for the next thing the loop acts on: a call's answer, the stamp being written, or
    /// neither left (every call answered, no stamp in flight).
    async fn next_wake<'f>(&mut self, in_flight: &mut FuturesUnordered<IssuedCall<'f>>) -> Wake {
        let stamping = self.stamping.as_mut();
        let has_stamp = stamping.is_some();
        let stamp = async {
            match stamping {
                Some(handle) => handle.await,
                None => std::future::pending().await,
            }
        };
        // The stamp first: answers come far more often, and a finished stamp must be booked
        // (and the next one started) even while they keep coming.
        tokio::select! {
            biased;
            outcome = stamp, if has_stamp => Wake::Stamped(outcome),
            Some(answer) = in_flight.next(), if !in_flight.is_empty() => Wake::Answer(answer),
            else => Wake::Drained,
        }
    }

    /// Starts stamping the answered chunks, unless a stamp is being written already (they wait
    /// for the next one). The stamp runs as its own task: it holds the request's row lock while
    /// it writes, and must finish whatever the loop awaits meanwhile.
    fn start_stamp(&mut self, acts: &CommunityActivities) {
        if self.stamping.is_some() || self.answered.is_empty() {
            return;
        }
        let answered = std::mem::take(&mut self.answered);
        self.answered_since = None;
        let (store, token, set) = (acts.store.clone(), self.token.clone(), self.set);
        let budget = self.budget.clone();
        self.stamping = Some(tokio::spawn(async move {
            let result = budget
                .spend(store.stamp_chunks_of(&token, set, &acks_of(&answered)))
                .await
                .map(|_| ());
            StampOutcome { answered, result }
        }));
    }

    /// Books a finished stamp: its chunks count as stamped, or its error ends the attempt.
    fn book_stamp(
        &mut self,
        acts: &CommunityActivities,
        outcome: Result<StampOutcome, tokio::task::JoinError>,
    ) -> PhaseResult<()> {
        self.stamping = None;
        // A stamp task that did not finish (the runtime shutting down): its chunks are deleted
        // again by the next attempt, acknowledged as gone.
        let StampOutcome { answered, result } = outcome.map_err(|_| PhaseError::Cancelled)?;
        result?;
        let deleted: u64 = answered.iter().map(|(_, deleted)| deleted).sum();
        self.stamped += u64::try_from(answered.len()).unwrap_or(u64::MAX);
        acts.settings.metrics.objects_deleted(deleted);
        Ok(())
    }

    /// Waits for the stamp being written, then stamps every chunk still answered in one
    /// transaction (one lock, evidence and fence check for the group; one `chunk_stamped` event
    /// per chunk) and waits for that too.
    async fn stamp_answered(&mut self, acts: &CommunityActivities) -> PhaseResult<()> {
        if let Some(handle) = self.stamping.take() {
            self.book_stamp(acts, handle.await)?;
        }
        self.start_stamp(acts);
        if let Some(handle) = self.stamping.take() {
            self.book_stamp(acts, handle.await)?;
        }
        Ok(())
    }
}

/// Chunks the reader may hold ready beyond the one being taken: enough that a free call slot
/// never waits for a chunk's read, few enough that memory stays a handful of chunks.
const READ_AHEAD: usize = 2;

/// One read chunk, checked and split into DeleteObjects calls.
struct PlannedChunk {
    chunk_no: u32,
    calls: Vec<DeleteCall>,
}

/// The chunks a [`ChunkReader`] reads ahead, and its task (aborted when this is dropped).
struct ReadAhead {
    chunks: tokio::sync::mpsc::Receiver<PhaseResult<PlannedChunk>>,
    _task: OwnTask<()>,
}

/// Reads the pending chunks of a set lane by lane in turn, each checked against its digest
/// (by the store) and its keys against the community ([`plan_calls`]), up to `chunks_left`.
struct ChunkReader {
    store: Store,
    budget: ConnectionBudget,
    token: ExecToken,
    set: ChunkSet,
    chunks_left: u64,
    /// The prefixes' lanes, read at the first chunk.
    lanes: Option<Vec<Lane>>,
    /// The lane whose turn is next.
    next_lane: usize,
}

impl ChunkReader {
    /// Starts reading on a task of its own, [`READ_AHEAD`] chunks ahead of the taker. The first
    /// failure is handed on and ends the reading; so does the taker dropping the receiver.
    fn start(
        store: Store,
        budget: ConnectionBudget,
        token: ExecToken,
        set: ChunkSet,
        chunks_left: u64,
    ) -> ReadAhead {
        let (ready, chunks) = tokio::sync::mpsc::channel(READ_AHEAD);
        let mut reader = ChunkReader {
            store,
            budget,
            token,
            set,
            chunks_left,
            lanes: None,
            next_lane: 0,
        };
        let task = OwnTask::spawn(async move {
            while reader.chunks_left > 0 {
                let planned = match reader.next_chunk().await {
                    Ok(None) => return,
                    Ok(Some(chunk)) => {
                        reader.chunks_left -= 1;
                        plan_calls(reader.token.community_id, std::slice::from_ref(&chunk)).map(
                            |calls| PlannedChunk {
                                chunk_no: chunk.chunk_no,
                                calls,
                            },
                        )
                    }
                    Err(error) => Err(error),
                };
                let failed = planned.is_err();
                if ready.send(planned).await.is_err() || failed {
                    return;
                }
            }
        });
        ReadAhead {
            chunks,
            _task: task,
        }
    }

    /// The next pending chunk of the lane whose turn it is (skipping lanes with none left), or
    /// `None` when every lane is done.
    async fn next_chunk(&mut self) -> PhaseResult<Option<ManifestChunk>> {
        let (store, token, set) = (&self.store, &self.token, self.set);
        if self.lanes.is_none() {
            let prefixes = self
                .budget
                .spend(store.pending_prefixes(token, set))
                .await?;
            self.lanes = Some(
                prefixes
                    .into_iter()
                    .map(|(prefix, first)| Lane {
                        prefix,
                        last_read: first.checked_sub(1),
                        done: false,
                    })
                    .collect(),
            );
        }
        let lanes = self.lanes.get_or_insert_with(Vec::new);
        for _ in 0..lanes.len() {
            let turn = self.next_lane % lanes.len();
            self.next_lane = turn + 1;
            let lane = &mut lanes[turn];
            if lane.done {
                continue;
            }
            match self
                .budget
                .spend(store.next_pending_chunk_in(token, set, &lane.prefix, lane.last_read))
                .await?
            {
                Some(chunk) => {
                    lane.last_read = Some(chunk.chunk_no);
                    return Ok(Some(chunk));
                }
                None => lane.done = true,
            }
        }
        Ok(None)
    }
}

/// What woke the delete loop ([`ChunkStream::next_wake`]).
enum Wake {
    /// A call's answer.
    Answer(PhaseResult<CallAnswer>),
    /// The stamp being written finished.
    Stamped(Result<StampOutcome, tokio::task::JoinError>),
    /// Nothing is in flight and no stamp is being written.
    Drained,
}

/// A grouped stamp's chunks (number, versions deleted) and how writing it went.
struct StampOutcome {
    answered: Vec<(u32, u64)>,
    result: PhaseResult<()>,
}

/// The acknowledgements of fully answered chunks, for a grouped stamp.
fn acks_of(answered: &[(u32, u64)]) -> Vec<(u32, ChunkAck)> {
    answered
        .iter()
        .map(|&(chunk_no, deleted)| {
            let ack = ChunkAck {
                deleted,
                already_missing: 0,
            };
            (chunk_no, ack)
        })
        .collect()
}

/// A DeleteObjects call in flight.
type IssuedCall<'f> = std::pin::Pin<Box<dyn Future<Output = PhaseResult<CallAnswer>> + Send + 'f>>;

/// Awaits `work` while driving the calls `in_flight`, keeping in `arrived` (in arrival order)
/// the answers that come back meanwhile. Without it, a call in flight is polled only when the
/// task next waits on the pool: every stamp and chunk read would freeze the whole pipe.
async fn driving<'f, T>(
    work: impl Future<Output = T>,
    in_flight: &mut FuturesUnordered<IssuedCall<'f>>,
    arrived: &mut VecDeque<PhaseResult<CallAnswer>>,
) -> T {
    let mut work = std::pin::pin!(work);
    loop {
        tokio::select! {
            biased;
            done = &mut work => return done,
            Some(answer) = in_flight.next(), if !in_flight.is_empty() => arrived.push_back(answer),
        }
    }
}

/// One irreversible call (recorded as pending with the marker by the caller): paced per prefix,
/// every send bracketed by fence checks (through the attempt's [`FenceGate`]: each a check that
/// started after the send was ready, or after the answer came back) so a superseded attempt
/// issues nothing more once its successor has claimed the request, and every answer booked with
/// the marker before anything
/// else. A throttle (the whole call, or some of its versions answered `SlowDown`) lowers the
/// prefix's rate and re-sends what was throttled after a jittered backoff, never failing the
/// attempt; another transient failure is re-sent up to [`TRANSIENT_SENDS`] sends in all. Holds
/// no transaction: it runs concurrently with the task's own Postgres writes (see `marker`).
async fn issue(
    acts: &CommunityActivities,
    gate: &FenceGate<HeldFence<'_>>,
    marker: &Marker<'_>,
    call: DeleteCall,
) -> PhaseResult<CallAnswer> {
    let DeleteCall {
        chunk_no,
        prefix,
        versions,
    } = call;
    let mut outcome = BulkDeleteOutcome {
        requested: versions.len() as u64,
        ..BulkDeleteOutcome::default()
    };
    let mut pending = versions;
    let (mut throttles, mut failures) = (0_u32, 0_u32);
    loop {
        let admitted = acts.pacer.admit(&prefix, pending.len()).await;
        gate.held().await?;
        if !marker.start_call() {
            return Err(PhaseError::Cancelled);
        }
        let (sent, answer) = send_on_own_task(acts, pending).await?;
        pending = sent;
        marker.book(CallEffect::of_delete(&answer));
        // The retry's number, and whether it is a throttle's.
        let (retry, throttled) = match answer {
            Err(error) if error.is_throttle() => {
                throttles += 1;
                (throttles, true)
            }
            Err(error) => {
                failures += 1;
                if failures >= TRANSIENT_SENDS || error.severity() == Severity::Permanent {
                    return Err(error.into());
                }
                (failures, false)
            }
            Ok(answer) => {
                let (throttled, answered) = split_throttled(answer);
                acts.pacer.acknowledged(&prefix, answered.deleted);
                outcome.deleted += answered.deleted;
                outcome.failed.extend(answered.failed);
                outcome.unacknowledged.extend(answered.unacknowledged);
                if throttled.is_empty() {
                    gate.held().await?;
                    return Ok(CallAnswer {
                        chunk_no,
                        prefix,
                        outcome,
                    });
                }
                pending = throttled;
                throttles += 1;
                (throttles, true)
            }
        };
        if throttled {
            let rate = acts.pacer.throttled(&prefix, admitted);
            acts.settings.metrics.throttled(&prefix);
            acts.settings.metrics.delete_rate(&prefix, rate);
        }
        tokio::time::sleep(backoff(retry)).await;
    }
}

/// Sends one DeleteObjects call on a task of its own ([`OwnTask`]) and gives back the versions
/// sent with the answer. The SDK's work on a call (the request's XML, its signature, the
/// answer's parsing) is most of the worker's CPU while deleting; on its own task it runs on any
/// of the runtime's threads instead of all on the one that drives the delete loop. Dropping the
/// returned future aborts the call, as dropping the call itself would.
async fn send_on_own_task(
    acts: &CommunityActivities,
    versions: Vec<ObjectVersionRef>,
) -> PhaseResult<(
    Vec<ObjectVersionRef>,
    Result<BulkDeleteOutcome, crate::s3::ObjectStoreError>,
)> {
    let objects = acts.objects.clone();
    OwnTask::spawn(async move {
        let answer = objects.delete_versions(&versions).await;
        (versions, answer)
    })
    .await
}

/// Splits a DeleteObjects answer into the versions answered `SlowDown` (to be re-sent) and the
/// rest of the answer.
fn split_throttled(mut answer: BulkDeleteOutcome) -> (Vec<ObjectVersionRef>, BulkDeleteOutcome) {
    let (throttled, failed): (Vec<_>, Vec<_>) = answer
        .failed
        .into_iter()
        .partition(|failure| failure.kind() == DeleteFailureKind::Throttled);
    answer.failed = failed;
    let throttled = throttled
        .into_iter()
        .map(|failure| ObjectVersionRef {
            key: failure.key,
            version_id: failure.version_id,
        })
        .collect();
    (throttled, answer)
}

/// The wait before the `retry`th re-send of a call: [`BACKOFF_BASE`] doubled per retry up to
/// [`BACKOFF_MAX`], then a random half of it dropped (so calls throttled together do not come
/// back together).
fn backoff(retry: u32) -> Duration {
    let ceiling = BACKOFF_BASE
        .saturating_mul(1 << retry.saturating_sub(1).min(10))
        .min(BACKOFF_MAX);
    let jitter = std::collections::hash_map::RandomState::new().hash_one(retry) % 1_000;
    ceiling / 2 + ceiling.mul_f64(jitter as f64 / 2_000.0)
}

/// The permanent block for a per-key `AccessDenied` in `outcome`, once `attempt` reached
/// [`ACCESS_DENIED_BLOCK_ATTEMPT`]; `None` while it should still be retried (or nothing was
/// denied). Classified by the per-key error code, never by its message.
fn access_denied_block(
    chunk_no: u32,
    outcome: &BulkDeleteOutcome,
    attempt: u32,
) -> Option<PhaseError> {
    if attempt < ACCESS_DENIED_BLOCK_ATTEMPT {
        return None;
    }
    let denied = outcome
        .failed
        .iter()
        .find(|failure| failure.kind() == DeleteFailureKind::AccessDenied)?;
    Some(PhaseError::VersionDeleteDenied {
        chunk_no,
        key: denied.key.clone(),
        version_id: denied.version_id.clone(),
        attempts: attempt,
    })
}

/// The first failed or unacknowledged version of a DeleteObjects answer, for the error message.
fn first_problem(outcome: &BulkDeleteOutcome) -> Option<String> {
    if let Some(f) = outcome.failed.first() {
        return Some(format!(
            "{}@{}: {}: {}",
            f.key, f.version_id, f.code, f.message
        ));
    }
    outcome
        .unacknowledged
        .first()
        .map(|v| format!("{}@{}: not acknowledged", v.key, v.version_id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::taxonomy::VersionKind;

    fn chunk(community: Uuid, chunk_no: u32, n: usize) -> ManifestChunk {
        let entries = (0..n)
            .map(|i| {
                ManifestEntry::new(
                    format!("media/{community}/{:064x}", i),
                    format!("v{i}"),
                    VersionKind::Object,
                )
                .encode()
            })
            .collect();
        ManifestChunk {
            chunk_no,
            prefix: format!("media/{community}/"),
            entries,
        }
    }

    #[test]
    fn a_call_takes_a_small_remnant_along_but_never_more_than_a_quarter_extra() {
        // 203 chunks at 100 a call: 100, then the last 103 (3 would be left over).
        assert_eq!(call_budget(100, 203), 100);
        assert_eq!(call_budget(100, 103), 103);
        assert_eq!(call_budget(100, 125), 125);
        assert_eq!(call_budget(100, 126), 100);
        // Fewer pending than a call's budget: the budget stands (the stream stops at the end).
        assert_eq!(call_budget(100, 7), 100);
        // A budget of zero is one chunk; below four chunks a quarter is nothing.
        assert_eq!(call_budget(0, 1), 1);
        assert_eq!(call_budget(0, 2), 1);
        assert_eq!(call_budget(3, 4), 3);
        assert_eq!(call_budget(u64::MAX, u64::MAX), u64::MAX);
    }

    #[test]
    fn calls_never_exceed_one_thousand_versions_and_cover_every_entry() {
        let community = Uuid::new_v4();
        let calls = plan_calls(
            community,
            &[chunk(community, 0, 2500), chunk(community, 1, 3)],
        )
        .unwrap_or_default();
        assert_eq!(calls.len(), 4);
        assert!(
            calls
                .iter()
                .all(|c| c.versions.len() <= MAX_VERSIONS_PER_DELETE)
        );
        let total: usize = calls.iter().map(|c| c.versions.len()).sum();
        assert_eq!(total, 2503);
    }

    #[test]
    fn a_manifest_entry_of_another_community_refuses_the_whole_batch() {
        let community = Uuid::new_v4();
        let neighbour = Uuid::new_v4();
        let error = plan_calls(community, &[chunk(neighbour, 3, 1)]).err();
        assert!(matches!(
            error,
            Some(PhaseError::ForeignManifestKey { chunk_no: 3, .. })
        ));
    }

    fn answer(codes: &[(&str, &str)]) -> BulkDeleteOutcome {
        BulkDeleteOutcome {
            requested: codes.len() as u64 + 1,
            deleted: 1,
            failed: codes
                .iter()
                .map(|(key, code)| crate::s3::DeleteFailure {
                    key: (*key).into(),
                    version_id: format!("v-{key}"),
                    code: (*code).into(),
                    message: "AccessDenied".into(),
                })
                .collect(),
            unacknowledged: vec![],
        }
    }

    #[test]
    fn access_denied_is_retried_below_the_bound_and_blocks_naming_the_key_from_it() {
        let outcome = answer(&[("a", "InternalError"), ("b", "AccessDenied")]);
        for attempt in 1..ACCESS_DENIED_BLOCK_ATTEMPT {
            assert!(
                access_denied_block(4, &outcome, attempt).is_none(),
                "{attempt}"
            );
        }
        for attempt in [ACCESS_DENIED_BLOCK_ATTEMPT, ACCESS_DENIED_BLOCK_ATTEMPT + 5] {
            let error = access_denied_block(4, &outcome, attempt);
            assert!(
                matches!(
                    &error,
                    Some(PhaseError::VersionDeleteDenied { chunk_no: 4, key, version_id, attempts })
                        if key == "b" && version_id == "v-b" && *attempts == attempt
                ),
                "{error:?}"
            );
            let error = error.unwrap_or(PhaseError::Cancelled);
            assert_eq!(
                crate::failure::Classified::severity(&error),
                crate::failure::Severity::Permanent
            );
            assert!(error.to_string().contains("\"b\" version v-b"), "{error}");
        }
    }

    #[test]
    fn other_per_key_errors_never_block_whatever_the_attempt_or_message() {
        // The message says AccessDenied, the code does not: the code decides.
        let outcome = answer(&[("a", "InternalError"), ("b", "SlowDown")]);
        assert!(access_denied_block(0, &outcome, 1_000).is_none());
        assert!(access_denied_block(0, &answer(&[]), 1_000).is_none());
    }

    #[test]
    fn versions_answered_slowdown_are_re_sent_and_the_rest_of_the_answer_kept() {
        let failure = |key: &str, code: &str| crate::s3::DeleteFailure {
            key: key.into(),
            version_id: format!("v-{key}"),
            code: code.into(),
            message: "Please reduce your request rate.".into(),
        };
        let answer = BulkDeleteOutcome {
            requested: 4,
            deleted: 1,
            failed: vec![
                failure("a", "SlowDown"),
                failure("b", "InternalError"),
                failure("c", "SlowDown"),
            ],
            unacknowledged: vec![],
        };
        let (throttled, rest) = split_throttled(answer);
        assert_eq!(
            throttled,
            vec![
                ObjectVersionRef {
                    key: "a".into(),
                    version_id: "v-a".into()
                },
                ObjectVersionRef {
                    key: "c".into(),
                    version_id: "v-c".into()
                },
            ]
        );
        assert_eq!(rest.deleted, 1);
        assert_eq!(rest.failed.len(), 1);
        assert_eq!(rest.failed[0].code, "InternalError");
    }

    #[test]
    fn backoff_doubles_up_to_its_bound_and_keeps_at_least_half_of_it() {
        for retry in 1..40 {
            let ceiling = BACKOFF_BASE
                .saturating_mul(1 << (retry - 1).min(10))
                .min(BACKOFF_MAX);
            for _ in 0..20 {
                let wait = backoff(retry);
                assert!(wait >= ceiling / 2 && wait <= ceiling, "{retry}: {wait:?}");
            }
        }
        assert!(backoff(1) <= BACKOFF_BASE);
        assert!(backoff(30) >= BACKOFF_MAX / 2);
    }

    #[test]
    fn partial_acknowledgement_names_the_first_failed_version() {
        let outcome = BulkDeleteOutcome {
            requested: 2,
            deleted: 1,
            failed: vec![crate::s3::DeleteFailure {
                key: "k".into(),
                version_id: "v".into(),
                code: "InternalError".into(),
                message: "boom".into(),
            }],
            unacknowledged: vec![],
        };
        assert_eq!(
            first_problem(&outcome).as_deref(),
            Some("k@v: InternalError: boom")
        );
    }
}
