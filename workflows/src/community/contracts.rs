//! Contracts of the activities `CommunityDeletion` calls: name, typed input, typed output.
//!
//! Every activity is idempotent or reconciled: it claims the request in Postgres (bumping the
//! request's execution generation), checks the stage it expects, and makes every progress write
//! conditional on that generation, so a zombie attempt can never stamp progress after its
//! successor started.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::activity_contracts;
use crate::operator::SignedAction;

/// Names the request an activity works on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRef {
    /// The deletion request id (also the suffix of the workflow id).
    pub request_id: Uuid,
}

/// What the operator asked for, recorded as the request row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterInput {
    /// Request id chosen by the starter.
    pub request_id: Uuid,
    /// The workflow id driving this request.
    pub workflow_id: String,
    /// Canonical community host name.
    pub host: String,
    /// Operator who asked for the deletion.
    pub requested_by: String,
    /// Free-text reason.
    pub reason: Option<String>,
    /// The requester's signed `submit` statement; verified against the operator registry in the
    /// transaction that records the request.
    #[serde(default)]
    pub signed: Option<SignedAction>,
}

/// The registered request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisteredRequest {
    /// The request id.
    pub request_id: Uuid,
    /// The community the host resolved to.
    pub community_id: Uuid,
}

/// Row count of one tenant table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableCount {
    /// Schema-qualified table name, e.g. `buzz.events`.
    pub table: String,
    /// Rows of the community in that table.
    pub rows: u64,
}

/// Summary of the versions under one tenant prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefixSummary {
    /// The prefix, e.g. `media/{community}/`.
    pub prefix: String,
    /// Object versions plus delete markers.
    pub versions: u64,
    /// Bytes of the object versions.
    pub bytes: u64,
    /// Order-independent digest over (key, version id, kind) of every version.
    pub keys_digest: String,
}

/// The multipart uploads in progress under one tenant prefix (initiated, never completed: no
/// version lists them, yet completing one creates an object).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadSummary {
    /// The prefix, e.g. `media/{community}/`.
    pub prefix: String,
    /// Uploads in progress, with or without uploaded parts.
    pub uploads: u64,
    /// Order-independent digest over (key, upload id) of every upload.
    pub uploads_digest: String,
}

/// The frozen inventory as the operator approves it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InventorySummary {
    /// sha256 (hex) over the canonical encoding of the frozen inventory.
    pub digest: String,
    /// Tenant tables found in the catalog, with row counts.
    pub tables: Vec<TableCount>,
    /// The three tenant prefixes.
    pub prefixes: Vec<PrefixSummary>,
    /// Keys in the community's Redis namespace when the inventory was taken.
    pub redis_keys: u64,
    /// Multipart uploads in progress under the three tenant prefixes (empty in inventories
    /// frozen before uploads were counted).
    #[serde(default)]
    pub uploads: Vec<UploadSummary>,
}

/// An approval as the operator submits it (update `approve` and signal `approve`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApproveRequest {
    /// The approving operator; must differ from the requester.
    pub approved_by: String,
    /// The frozen inventory digest the approver looked at.
    pub digest: String,
    /// Optional note kept with the evidence.
    #[serde(default)]
    pub note: Option<String>,
    /// The approver's signed `approve` statement (required; absent only in messages that are
    /// then refused).
    #[serde(default)]
    pub signed: Option<SignedAction>,
}

/// Input of `community.record_approval`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalInput {
    /// The request being approved.
    pub request_id: Uuid,
    /// The approval as submitted (already validated by the workflow).
    pub approval: ApproveRequest,
}

/// Approval evidence as persisted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    /// The approving operator.
    pub approved_by: String,
    /// RFC 3339 time the evidence row was written.
    pub approved_at: String,
    /// The digest approved.
    pub digest: String,
    /// The note, if any.
    pub note: Option<String>,
    /// The approver's signed statement as stored (absent in records made before signatures).
    #[serde(default)]
    pub signed: Option<SignedAction>,
}

/// An operator's abort (update `abort`, signal `abort`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AbortRequest {
    /// The operator aborting.
    pub actor: String,
    /// Why.
    pub reason: String,
    /// The operator's signed `abort` statement (a workflow cancellation has none).
    #[serde(default)]
    pub signed: Option<SignedAction>,
}

/// Input of `community.abort`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AbortInput {
    /// The request to end.
    pub request_id: Uuid,
    /// Who and why.
    pub abort: AbortRequest,
}

/// Result of `community.abort`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AbortOutcome {
    /// The fence generation after lifting quiescing/fence (bumped).
    pub fence_generation: u64,
}

/// An operator's unblock (update `unblock`, signal `unblock`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnblockRequest {
    /// The operator unblocking.
    pub actor: String,
    /// The remediation done.
    pub reason: String,
    /// The operator's signed `unblock` statement.
    #[serde(default)]
    pub signed: Option<SignedAction>,
}

/// Something that happened to a request that is not a stage advance, for the audit trail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum RequestEvent {
    /// An approval (usually a signal from the Web UI) was refused; nothing changed.
    ApprovalRejected {
        /// Who tried.
        actor: String,
        /// Why it was refused.
        reason: String,
    },
    /// An abort or a workflow cancellation arrived after the irreversible point and was refused.
    AbortRefused {
        /// Who tried (`temporal-cancel` for a workflow cancellation).
        actor: String,
        /// Why it was refused.
        reason: String,
    },
    /// An unblock was refused (the request was not blocked).
    UnblockRejected {
        /// Who tried.
        actor: String,
        /// Why it was refused.
        reason: String,
    },
    /// A permanent failure blocked the request; it waits for `unblock`.
    Blocked {
        /// The phase that failed.
        phase: String,
        /// The failure, as the activity reported it.
        reason: String,
    },
    /// An operator unblocked the request after remediation; the phase is retried.
    Unblocked {
        /// Who.
        actor: String,
        /// The remediation.
        reason: String,
        /// The operator's signed `unblock` statement, verified when the event is recorded.
        #[serde(default)]
        signed: Option<SignedAction>,
    },
}

/// Input of `community.record_event`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventInput {
    /// The request.
    pub request_id: Uuid,
    /// What happened.
    pub event: RequestEvent,
}

/// Result of `community.fence`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceOutcome {
    /// The fence generation recorded on the request.
    pub fence_generation: u64,
}

/// Result of `community.drain`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainOutcome {
    /// Relays that received `DisconnectCommunity`.
    pub disconnect_receivers: u64,
}

/// Result of `community.freeze_manifest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestSummary {
    /// Chunks written (each at most 10,000 versions, never spanning prefixes).
    pub chunks: u64,
    /// Versions in the manifest.
    pub versions: u64,
    /// Per-prefix counts and digests bound to the request.
    pub prefixes: Vec<PrefixSummary>,
}

/// Input of `community.delete_chunks`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteChunksInput {
    /// The request.
    pub request_id: Uuid,
    /// Stop after stamping this many chunks (keeps one activity bounded); the workflow loops.
    pub max_chunks: u64,
    /// DeleteObjects calls in flight at once.
    pub parallelism: u32,
}

/// Progress of object deletion after one `community.delete_chunks` call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteProgress {
    /// Chunks in the manifest.
    pub chunks_total: u64,
    /// Chunks stamped so far (all calls).
    pub chunks_done: u64,
    /// Versions acknowledged deleted so far (all calls).
    pub versions_deleted: u64,
    /// Versions in the manifest.
    pub versions_total: u64,
}

impl DeleteProgress {
    /// Whether every chunk is stamped.
    pub fn complete(&self) -> bool {
        self.chunks_done >= self.chunks_total
    }
}

/// Input of `community.purge_postgres`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurgeInput {
    /// The request.
    pub request_id: Uuid,
    /// Rows deleted per statement, so no statement holds locks for long.
    pub batch_rows: u32,
}

/// Result of `community.purge_postgres`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurgeReport {
    /// Rows deleted per tenant table (this and earlier attempts).
    pub tables: Vec<TableCount>,
    /// Sum of `tables`.
    pub rows_deleted: u64,
}

/// Result of `community.purge_cache`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheReport {
    /// Keys unlinked.
    pub keys_unlinked: u64,
}

/// Result of `community.verify`: absence proven in every store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerificationReport {
    /// Tenant tables checked (each had zero rows of the community).
    pub tables_checked: u64,
    /// Prefixes listed (each listed no version).
    pub prefixes_checked: u64,
    /// Complete empty SCAN passes of the Redis namespace (two).
    pub redis_empty_passes: u32,
}

/// Result of `community.delete_late_versions`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateVersionsReport {
    /// Late chunks of the request (this and earlier calls), all stamped.
    pub late_chunks: u64,
    /// Versions in them, all acknowledged deleted.
    pub late_versions_deleted: u64,
}

activity_contracts! {
    /// Records the request row (at most one open per community; unknown host refused).
    Register = "community.register": RegisterInput => RegisteredRequest;
    /// Scans the catalog and lists the three prefixes; freezes inventory and digest.
    Inventory = "community.inventory": RequestRef => InventorySummary;
    /// Persists approval evidence bound to the frozen digest.
    RecordApproval = "community.record_approval": ApprovalInput => ApprovalRecord;
    /// Appends an event to the audit trail (and records/clears the blocked reason).
    RecordEvent = "community.record_event": EventInput => ();
    /// Checks version-list permission per prefix and catalog drift since the inventory.
    Preflight = "community.preflight": RequestRef => ();
    /// Quiesces serving writes, then fences once no live serving-write lease remains.
    Fence = "community.fence": RequestRef => FenceOutcome;
    /// Publishes DisconnectCommunity and requires serving writes drained.
    Drain = "community.drain": RequestRef => DrainOutcome;
    /// Streams the post-drain version listing into manifest chunks and binds their digests.
    FreezeManifest = "community.freeze_manifest": RequestRef => ManifestSummary;
    /// Deletes pending manifest chunks by explicit version id and stamps each when fully acked.
    DeleteChunks = "community.delete_chunks": DeleteChunksInput => DeleteProgress;
    /// Deletes the community's rows in every tenant table in batches, then the community row.
    PurgePostgres = "community.purge_postgres": PurgeInput => PurgeReport;
    /// SCAN + UNLINK of `buzz:{community}:*`.
    PurgeCache = "community.purge_cache": RequestRef => CacheReport;
    /// Proves absence: zero rows, empty prefixes, two empty Redis SCAN passes.
    Verify = "community.verify": RequestRef => VerificationReport;
    /// After an unblock of a late-version block: re-lists the tenant prefixes, appends every
    /// version in no chunk as late manifest chunks and deletes and stamps them.
    DeleteLateVersions = "community.delete_late_versions": RequestRef => LateVersionsReport;
    /// Marks the request retention-pending (terminal).
    Complete = "community.complete": RequestRef => ();
    /// Lifts quiescing/fence (bumping the generation) and ends the request aborted.
    Abort = "community.abort": AbortInput => AbortOutcome;
    /// Verifies an abort's signature against the operator registry and records it (signature
    /// row and audit event, one transaction) before the abort counts; returns the abort under
    /// the operator's registered name.
    AcceptAbort = "community.accept_abort": AbortInput => AbortRequest;
}
