//! Every way a store call can fail, each variant classified once as permanent or transient.

use uuid::Uuid;

use crate::failure::{Classified, Severity};

/// SQLSTATE raised by the tenant write-fence trigger for a row write into a fenced community.
pub const FENCED_WRITE_SQLSTATE: &str = "BZ001";

/// SQLSTATE raised by the user-data trigger for a row write naming a user fenced for deletion
/// (migration 0012).
pub const USER_FENCED_WRITE_SQLSTATE: &str = "BZ006";

/// SQLSTATE raised when an append-only table (audit trail, approvals, checkpoints) is modified.
pub const APPEND_ONLY_SQLSTATE: &str = "BZ002";

/// Why a store call failed. `Classified::severity` says whether retrying can help.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be reached at all.
    #[error(
        "PostgreSQL not reachable at {url}: {source}. Check DATABASE_URL, or start the local stack \
         with `bash deploy/local/up && source .state/env`"
    )]
    Connect {
        /// The database URL with its password redacted.
        url: String,
        /// The driver's error.
        source: sqlx::Error,
    },
    /// The database schema is older than the migrations this binary embeds.
    #[error(
        "database schema is at migration {applied:?} but this binary needs {expected}: run \
         `buzz-deletion migrate`"
    )]
    SchemaOutdated {
        /// Highest migration applied successfully (`None`: never migrated).
        applied: Option<i64>,
        /// Highest migration embedded in this binary.
        expected: i64,
    },
    /// An applied migration differs from the one embedded in this binary.
    #[error(
        "migration {version} applied to the database differs from the one embedded in this binary; \
         the schema was changed outside `buzz-deletion migrate`"
    )]
    SchemaMismatch {
        /// The migration whose checksum differs.
        version: i64,
    },
    /// Running the migrations failed.
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The caller's execution generation is no longer current: a later attempt claimed the request.
    #[error(
        "request {request_id}: execution generation {expected} is stale (current is {actual}); a \
         newer attempt owns this request, so this attempt must stop"
    )]
    StaleGeneration {
        /// The request.
        request_id: Uuid,
        /// The generation the caller holds.
        expected: i64,
        /// The generation recorded on the request.
        actual: i64,
    },
    /// The request is not at the stage the caller expects.
    #[error("request {request_id} is at stage {actual}, expected {expected}")]
    WrongStage {
        /// The request.
        request_id: Uuid,
        /// The stage(s) the call requires, `|`-separated.
        expected: String,
        /// The stage recorded on the request.
        actual: String,
    },
    /// A row the call needs does not exist.
    #[error("{what} {id} not found")]
    NotFound {
        /// What was looked up.
        what: &'static str,
        /// Its identifier.
        id: String,
    },
    /// No community is served under the host.
    #[error(
        "no community is registered for host {host:?}: check the host name (it is matched \
         lower-cased), or seed it with `buzz-deletion demo seed --host {host}`"
    )]
    UnknownHost {
        /// The host as given.
        host: String,
    },
    /// An argument is unusable.
    #[error("invalid {field}: {reason}")]
    InvalidInput {
        /// The argument.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The request id is already used by a request for something else.
    #[error("request {request_id} already exists with different parameters: {detail}")]
    RequestConflict {
        /// The request id.
        request_id: Uuid,
        /// What differs.
        detail: String,
    },
    /// The community already has an open deletion request (the database allows one).
    #[error(
        "community {community_id} already has open deletion request {request_id}; finish or abort \
         it first"
    )]
    OpenRequestExists {
        /// The community.
        community_id: Uuid,
        /// The open request.
        request_id: Uuid,
    },
    /// The request is blocked; only `unblock` lets work on it resume.
    #[error("request {request_id} is blocked in phase {phase}: {reason}")]
    Blocked {
        /// The request.
        request_id: Uuid,
        /// The phase that failed.
        phase: String,
        /// The recorded failure.
        reason: String,
    },
    /// Serving writes admitted before quiescing are still running; the fence waits for them.
    #[error("community {community_id} still has {count} live serving write(s): {operations:?}")]
    ServingWritesLive {
        /// The community.
        community_id: Uuid,
        /// Live, unexpired, unreleased leases.
        count: u64,
        /// Their operations, deduplicated.
        operations: Vec<String>,
    },
    /// Leases left unreleased when the community was fenced may still cover a writer that is
    /// running (a paused process, a slow PutObject): the manifest is not frozen before every one
    /// of them is past its expiry plus the protected-operation bound.
    #[error(
        "community {community_id}: waiting on {count} stalled serving-write lease(s) until {until} \
         (expiry plus the protected-operation bound)"
    )]
    StalledServingWrites {
        /// The community.
        community_id: Uuid,
        /// Leases unreleased at fence time and still inside their bound.
        count: u64,
        /// When the last of them leaves its bound (database clock).
        until: chrono::DateTime<chrono::Utc>,
    },
    /// The user's fence is held by another deletion request.
    #[error(
        "user {pubkey} is already quiesced or fenced by deletion request {request_id}; finish or \
         abort that request first"
    )]
    UserFenceHeld {
        /// The user's pubkey.
        pubkey: String,
        /// The request holding the fence.
        request_id: Uuid,
    },
    /// The user cannot be fenced: this request has not quiesced them first.
    #[error("user {pubkey} is {state}, not quiescing for this request: quiesce before fencing")]
    UserNotQuiescing {
        /// The user's pubkey.
        pubkey: String,
        /// The fence state found.
        state: String,
    },
    /// Serving writes for the user admitted before quiescing are still running; the user fence
    /// waits for them.
    #[error("user {pubkey} still has {count} live serving write(s): {operations:?}")]
    LiveUserServingWrites {
        /// The user's pubkey.
        pubkey: String,
        /// Live, unexpired, unreleased user leases.
        count: u64,
        /// Their operations, deduplicated.
        operations: Vec<String>,
    },
    /// Leases for the user left unreleased when the user was fenced may still cover a running
    /// writer: the user's data is not purged before each is past its expiry plus the
    /// protected-operation bound.
    #[error(
        "user {pubkey}: waiting on {count} stalled serving-write lease(s) until {until} (expiry \
         plus the protected-operation bound)"
    )]
    StalledUserServingWrites {
        /// The user's pubkey.
        pubkey: String,
        /// Leases unreleased at fence time and still inside their bound.
        count: u64,
        /// When the last of them leaves its bound (database clock).
        until: chrono::DateTime<chrono::Utc>,
    },
    /// The community's fence is held in a way this request cannot use.
    #[error("community {community_id} fence is {state} for request {holder:?}: {reason}")]
    FenceConflict {
        /// The community.
        community_id: Uuid,
        /// The fence state found.
        state: String,
        /// The request holding it, if any.
        holder: Option<Uuid>,
        /// Why the call cannot proceed.
        reason: String,
    },
    /// The fence this request recorded is no longer in force (lifted or superseded).
    #[error(
        "request {request_id}: community {community_id} is not fenced at generation \
         {expected_generation:?} (found {state} at generation {generation})"
    )]
    FenceNotHeld {
        /// The request.
        request_id: Uuid,
        /// The community.
        community_id: Uuid,
        /// The generation recorded on the request when it fenced.
        expected_generation: Option<i64>,
        /// The fence state found.
        state: String,
        /// The generation found.
        generation: i64,
    },
    /// A digest does not match what it must match.
    #[error("request {request_id}: {what} digest mismatch (expected {expected}, got {actual})")]
    DigestMismatch {
        /// The request.
        request_id: Uuid,
        /// What the digest covers.
        what: &'static str,
        /// The digest it must equal.
        expected: String,
        /// The digest found or offered.
        actual: String,
    },
    /// The approval, the frozen inventory and the request row do not name the same thing: the
    /// request row (or the approval) was changed after approval. Never a reason to act on what
    /// the row now names.
    #[error(
        "request {request_id}: the deletion evidence does not match the request: {}. Approved \
         evidence never changes, so this means the records were tampered with or a bug rewrote \
         them; nothing was deleted on their word. Find who changed them (`buzz-deletion \
         community inspect {request_id}` shows the approved digest and the audit trail), restore \
         the request row, then unblock; or abort",
        differences.join("; ")
    )]
    EvidenceMismatch {
        /// The request.
        request_id: Uuid,
        /// Each disagreement, naming both sides.
        differences: Vec<String>,
    },
    /// The requester tried to approve their own request (two-person rule).
    #[error("request {request_id}: {approver} requested this deletion and cannot also approve it")]
    SelfApproval {
        /// The request.
        request_id: Uuid,
        /// The would-be approver.
        approver: String,
    },
    /// The request already carries approval evidence.
    #[error("request {request_id} is already approved by {approved_by}")]
    AlreadyApproved {
        /// The request.
        request_id: Uuid,
        /// Who approved it.
        approved_by: String,
    },
    /// Abort refused: irreversible deletion already started.
    #[error(
        "request {request_id} passed the irreversible point (stage {stage}); it can no longer be \
         aborted and runs to completion"
    )]
    IrreversibleStarted {
        /// The request.
        request_id: Uuid,
        /// Its stage.
        stage: String,
    },
    /// Abort not decided yet: a destructive S3 call may be in flight before the irreversible
    /// marker; its answer decides (acknowledged: refused; refused whole: allowed). Transient.
    #[error(
        "request {request_id}: a destructive S3 call has been pending since {since}, before the \
         irreversible marker; the abort is decided once S3 answers (retrying)"
    )]
    DestructiveCallPending {
        /// The request.
        request_id: Uuid,
        /// When the call was recorded as pending.
        since: chrono::DateTime<chrono::Utc>,
    },
    /// A destructive step ran before the irreversible point was recorded.
    #[error("request {request_id}: the irreversible point was not recorded before deleting")]
    IrreversibleNotMarked {
        /// The request.
        request_id: Uuid,
    },
    /// Unblock refused: the request is not blocked.
    #[error("request {request_id} is not blocked")]
    NotBlocked {
        /// The request.
        request_id: Uuid,
    },
    /// A relation of a tenant table has no write-fence trigger that fires for every write in
    /// every session; deleting could race live writes.
    #[error(
        "tenant table(s) without a buzz_write_fence trigger that fires on every write: {}; give \
         each the trigger BEFORE INSERT OR UPDATE FOR EACH ROW EXECUTE FUNCTION \
         buzz.refuse_fenced_write(), without WHEN or column list, enabled with ALTER TABLE … \
         ENABLE ALWAYS TRIGGER buzz_write_fence, and unblock",
        .problems.join("; ")
    )]
    CatalogUnfenced {
        /// Schema-qualified relations (tables, partitions, inheritance children) whose fence
        /// would not fire.
        tables: Vec<String>,
        /// One line per relation: its name and what is wrong with its fence.
        problems: Vec<String>,
    },
    /// A relation of a tenant table does not declare (soundly) which column holds the pubkey of
    /// the user a row belongs to, or that it holds no user data (migration 0011), or its declared
    /// column is not guaranteed to hold the pubkey in canonical form (migration 0016).
    #[error(
        "tenant table(s) without a sound user-data declaration: {}; give each relation the \
         trigger BEFORE INSERT OR UPDATE FOR EACH ROW EXECUTE FUNCTION buzz.user_data('<the text \
         column holding the user's 64-hex pubkey>' or 'none'), named buzz_user_data and enabled \
         with ALTER TABLE … ENABLE ALWAYS TRIGGER buzz_user_data, and guarantee a declared \
         column's canonical form with a CHECK (<column> ~ '^[0-9a-f]{{64}}$') \
         (docs/data-model.md, \"User data declarations\")",
        .problems.join("; ")
    )]
    UserDataUndeclared {
        /// Schema-qualified relations whose declaration is missing or unsound.
        tables: Vec<String>,
        /// One line per relation: its name and what is wrong.
        problems: Vec<String>,
    },
    /// A foreign key from a table that is not tenant data would change that table's rows when
    /// tenant rows are purged.
    #[error(
        "foreign key(s) from non-tenant tables into tenant tables would change non-tenant rows \
         during the purge: {}; drop the constraint (or change its ON DELETE action to NO ACTION \
         or RESTRICT) and unblock",
        .references.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    CatalogCascadingReference {
        /// The refused constraints.
        references: Vec<CascadingReference>,
    },
    /// The closed-world catalogue check found objects the deletion does not understand: each
    /// refusal names the object, what it could do to a tenant's rows, and the remedy.
    #[error(
        "the catalogue holds {} object(s) the deletion does not understand, refused before \
         anything is deleted: {}; after the remedy, unblock (or abort and submit again) \
         (docs/operations.md, \"Catalogue refusals\")",
        .refusals.len(),
        .refusals.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    CatalogRefused {
        /// One entry per refused object.
        refusals: Vec<CatalogRefusal>,
    },
    /// Rows of another owner reference the target's rows through a foreign key between two
    /// tenant relations: purging would delete, change or be refused by them.
    #[error(
        "{} row(s) of other owners reference the target's rows: {}; remove or re-point those \
         rows (or drop the key), then unblock (docs/operations.md, \"Cross-tenant references\")",
        .references.iter().map(|r| r.rows).sum::<u64>(),
        .references.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    CrossTenantReferences {
        /// One entry per constraint with referencing rows.
        references: Vec<CrossReferenceCount>,
    },
    /// A relation the approved inventory covered is no longer where it was (renamed, moved to
    /// another schema, detached, its tenant column dropped, its kind changed): purging or
    /// verifying without it would silently shrink the scope.
    #[error(
        "the deletion's scope shrank since the inventory was approved: {}; restore each \
         relation (rename or move it back, re-attach the partition, restore the column), then \
         unblock (docs/operations.md, \"Scope shrank\")",
        .problems.join("; ")
    )]
    ScopeShrank {
        /// One line per relation: its inventoried name and what changed.
        problems: Vec<String>,
    },
    /// A purge or verification statement failed in a way the store classified: it names the
    /// step, the relation and the remedy, never only a raw database message.
    #[error("{step} on {relation} failed: {reason} (SQLSTATE {sqlstate}); {remedy}")]
    PurgeStatementFailed {
        /// What was being done (`purging rows`, `verifying rows`, `refreshing a view`).
        step: &'static str,
        /// The relation, `schema.name`.
        relation: String,
        /// The SQLSTATE.
        sqlstate: String,
        /// What it means.
        reason: String,
        /// What the operator does.
        remedy: String,
    },
    /// The tenant catalog changed since the inventory was frozen.
    #[error("tenant catalog drifted since the inventory: added {added:?}, removed {removed:?}")]
    CatalogDrift {
        /// Tenant tables present now but not in the inventory.
        added: Vec<String>,
        /// Tenant tables in the inventory but gone now.
        removed: Vec<String>,
    },
    /// Tenant tables reference each other in a cycle, so no delete order exists.
    #[error("tenant tables reference each other in a cycle: {tables:?}")]
    CatalogCycle {
        /// The tables left unordered.
        tables: Vec<String>,
    },
    /// The destructive manifest is inconsistent with its chunks or its target.
    #[error("request {request_id}: destructive manifest rejected: {reason}")]
    ManifestMismatch {
        /// The request.
        request_id: Uuid,
        /// What is inconsistent.
        reason: String,
    },
    /// A chunk was stamped without every version acknowledged.
    #[error(
        "request {request_id}: chunk {chunk_no} holds {entries} versions but {acknowledged} were \
         acknowledged"
    )]
    ChunkIncomplete {
        /// The request.
        request_id: Uuid,
        /// The chunk.
        chunk_no: u32,
        /// Versions in the chunk.
        entries: u64,
        /// Versions acknowledged.
        acknowledged: u64,
    },
    /// Object deletion is not finished: chunks remain unstamped.
    #[error("request {request_id}: {pending} manifest chunk(s) are not stamped yet")]
    ChunksPending {
        /// The request.
        request_id: Uuid,
        /// Unstamped chunks.
        pending: u64,
    },
    /// `advance` is only for stages without their own dedicated call.
    #[error("stage {from} -> {to} is not a generic advance; use its dedicated store call")]
    TransitionNotGeneric {
        /// From.
        from: String,
        /// To.
        to: String,
    },
    /// A stored document does not decode.
    #[error("stored {what} is corrupt: {reason}")]
    Corrupt {
        /// What was read.
        what: &'static str,
        /// The decoder's explanation.
        reason: String,
    },
    /// An operator signature or key was refused (or the registry could not be read).
    #[error(transparent)]
    Identity(#[from] crate::identity::IdentityError),
    /// A receipt could not be issued, exported or audited.
    #[error(transparent)]
    Certificate(#[from] crate::certificates::CertificateStoreError),
    /// Any other database error; severity follows its SQLSTATE or driver error kind.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
}

impl Classified for StoreError {
    fn severity(&self) -> Severity {
        match self {
            // A stale generation means a newer attempt claimed the request: retrying re-claims
            // it, so only a live claimant's own failures can ever block the request.
            StoreError::Connect { .. }
            | StoreError::ServingWritesLive { .. }
            | StoreError::StalledServingWrites { .. }
            | StoreError::LiveUserServingWrites { .. }
            | StoreError::StalledUserServingWrites { .. }
            | StoreError::DestructiveCallPending { .. }
            | StoreError::StaleGeneration { .. } => Severity::Transient,
            StoreError::Database(error) => sqlx_severity(error),
            StoreError::Identity(error) => error.severity(),
            StoreError::Certificate(error) => error.severity(),
            _ => Severity::Permanent,
        }
    }
}

/// A foreign key whose delete action reaches from tenant data into a non-tenant table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CascadingReference {
    /// The constraint's name.
    pub constraint: String,
    /// The referencing (non-tenant) table, `schema.name`.
    pub referencing: String,
    /// The referenced tenant relation, `schema.name`.
    pub referenced: String,
    /// `CASCADE`, `SET NULL` or `SET DEFAULT`.
    pub action: String,
}

impl std::fmt::Display for CascadingReference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "constraint {} on {} references tenant table {} ON DELETE {}",
            self.constraint, self.referencing, self.referenced, self.action
        )
    }
}

/// One object the closed-world catalogue check refused.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CatalogRefusal {
    /// The object, with its kind (`trigger archive_events on buzz.events`, `table x.y`).
    pub object: String,
    /// What it could do to a tenant's rows.
    pub problem: String,
    /// What the owner does about it.
    pub remedy: String,
}

impl std::fmt::Display for CatalogRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} (remedy: {})",
            self.object, self.problem, self.remedy
        )
    }
}

/// Rows of other owners referencing the target's rows through one constraint.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CrossReferenceCount {
    /// The constraint.
    pub constraint: String,
    /// The referencing relation, `schema.name`.
    pub referencing: String,
    /// The referenced relation, `schema.name`.
    pub referenced: String,
    /// How many referencing rows belong to another owner.
    pub rows: u64,
    /// The communities those rows belong to (where the referencing relation says).
    pub communities: Vec<String>,
}

impl std::fmt::Display for CrossReferenceCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "constraint {} on {}: {} row(s) of {} reference rows of {} being deleted",
            self.constraint,
            self.referencing,
            self.rows,
            if self.communities.is_empty() {
                "other owners".to_owned()
            } else {
                format!("communities {}", self.communities.join(", "))
            },
            self.referenced
        )
    }
}

/// Whether a database error is a row write refused by a write fence: the community's (SQLSTATE
/// BZ001) or the user's (BZ006). The serving side treats both as "refused".
pub fn is_fenced_write(error: &sqlx::Error) -> bool {
    matches!(
        sqlstate(error).as_deref(),
        Some(FENCED_WRITE_SQLSTATE | USER_FENCED_WRITE_SQLSTATE)
    )
}

/// Whether a database error is a row write refused by the per-user write fence (SQLSTATE BZ006).
pub fn is_user_fenced_write(error: &sqlx::Error) -> bool {
    sqlstate(error).as_deref() == Some(USER_FENCED_WRITE_SQLSTATE)
}

/// Whether a database error is a modification refused on an append-only table (SQLSTATE BZ002).
pub fn is_append_only_refusal(error: &sqlx::Error) -> bool {
    sqlstate(error).as_deref() == Some(APPEND_ONLY_SQLSTATE)
}

/// The SQLSTATE of a database error, if it is one.
pub(crate) fn sqlstate(error: &sqlx::Error) -> Option<String> {
    match error {
        sqlx::Error::Database(db) => db.code().map(|code| code.into_owned()),
        _ => None,
    }
}

/// The constraint a database error names, if any.
pub(crate) fn violated_constraint(error: &sqlx::Error) -> Option<String> {
    match error {
        sqlx::Error::Database(db) => db.constraint().map(str::to_owned),
        _ => None,
    }
}

/// Transient: connection trouble, pool exhaustion, serialization/deadlock rollbacks, resource
/// shortage, operator intervention (restart, statement timeout) and lock timeouts. Everything else
/// (constraint violations, fenced writes, bad SQL, decode errors) cannot be fixed by retrying.
///
/// A wire-protocol violation (`Protocol`: "unexpected response from SSLRequest", a message cut
/// short) is connection trouble too: a connection that lost or garbled bytes on the network or to
/// a server crash speaks nonsense, and a fresh connection does not. The chaos run found it
/// blocking deletions as if it were permanent.
pub(crate) fn sqlx_severity(error: &sqlx::Error) -> Severity {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::BeginFailed => Severity::Transient,
        sqlx::Error::Database(db) => match db.code() {
            Some(code) => sqlstate_severity(&code),
            None => Severity::Permanent,
        },
        _ => Severity::Permanent,
    }
}

/// Severity of a SQLSTATE by class (first two characters) with the few exact codes that matter.
fn sqlstate_severity(code: &str) -> Severity {
    const TRANSIENT_CLASSES: [&str; 5] = [
        "08", // connection exception
        "40", // transaction rollback: serialization failure, deadlock
        "53", // insufficient resources
        "57", // operator intervention: admin shutdown, statement timeout
        "58", // system error (I/O)
    ];
    const LOCK_NOT_AVAILABLE: &str = "55P03";
    if code == LOCK_NOT_AVAILABLE
        || TRANSIENT_CLASSES
            .iter()
            .any(|class| code.starts_with(class))
    {
        Severity::Transient
    } else {
        Severity::Permanent
    }
}

/// Shorthand for store results.
pub type StoreResult<T> = Result<T, StoreError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_and_lock_sqlstates_are_transient_and_violations_permanent() {
        assert_eq!(sqlstate_severity("08006"), Severity::Transient);
        assert_eq!(sqlstate_severity("40001"), Severity::Transient);
        assert_eq!(sqlstate_severity("40P01"), Severity::Transient);
        assert_eq!(sqlstate_severity("57014"), Severity::Transient);
        assert_eq!(sqlstate_severity("55P03"), Severity::Transient);
        assert_eq!(sqlstate_severity("23505"), Severity::Permanent);
        assert_eq!(sqlstate_severity("23514"), Severity::Permanent);
        assert_eq!(
            sqlstate_severity(FENCED_WRITE_SQLSTATE),
            Severity::Permanent
        );
        assert_eq!(sqlstate_severity(APPEND_ONLY_SQLSTATE), Severity::Permanent);
        assert_eq!(
            sqlstate_severity(USER_FENCED_WRITE_SQLSTATE),
            Severity::Permanent
        );
    }

    #[test]
    fn user_fence_refusals_are_permanent_and_waits_transient() {
        let pubkey = "ab".repeat(32);
        let held = StoreError::UserFenceHeld {
            pubkey: pubkey.clone(),
            request_id: Uuid::nil(),
        };
        assert_eq!(held.severity(), Severity::Permanent);
        assert!(held.to_string().contains(&pubkey));
        let not_quiescing = StoreError::UserNotQuiescing {
            pubkey: pubkey.clone(),
            state: "serving".into(),
        };
        assert_eq!(
            not_quiescing.severity(),
            Severity::Permanent,
            "{not_quiescing}"
        );
        let live = StoreError::LiveUserServingWrites {
            pubkey: pubkey.clone(),
            count: 1,
            operations: vec!["s3_put".into()],
        };
        assert_eq!(live.severity(), Severity::Transient);
        let stalled = StoreError::StalledUserServingWrites {
            pubkey,
            count: 1,
            until: chrono::Utc::now(),
        };
        assert_eq!(stalled.severity(), Severity::Transient);
    }

    #[test]
    fn only_live_serving_writes_connectivity_and_stale_generations_are_transient() {
        let live = StoreError::ServingWritesLive {
            community_id: Uuid::nil(),
            count: 1,
            operations: vec!["s3_put".into()],
        };
        assert_eq!(live.severity(), Severity::Transient);
        assert_eq!(
            StoreError::Database(sqlx::Error::PoolTimedOut).severity(),
            Severity::Transient
        );
        // Seen by the chaos run through a half-open connection that was reset.
        let garbled = sqlx::Error::Protocol(
            "unexpected response from SSLRequest: 0x00 (sqlx_postgres::connection::tls:95)".into(),
        );
        assert_eq!(
            StoreError::Database(garbled).severity(),
            Severity::Transient
        );
        let stale = StoreError::StaleGeneration {
            request_id: Uuid::nil(),
            expected: 1,
            actual: 2,
        };
        assert_eq!(stale.severity(), Severity::Transient);
        let tampered = StoreError::EvidenceMismatch {
            request_id: Uuid::nil(),
            differences: vec!["the request row names community b".into()],
        };
        assert_eq!(tampered.severity(), Severity::Permanent);
        let message = tampered.to_string();
        assert!(
            message.contains("the request row names community b"),
            "{message}"
        );
        assert!(message.contains("tampered with or a bug"), "{message}");
        assert_eq!(
            StoreError::CatalogUnfenced {
                tables: vec![],
                problems: vec![]
            }
            .severity(),
            Severity::Permanent
        );
        let cascade = StoreError::CatalogCascadingReference {
            references: vec![CascadingReference {
                constraint: "notes_event_fk".into(),
                referencing: "public.notes".into(),
                referenced: "buzz.events".into(),
                action: "CASCADE".into(),
            }],
        };
        assert_eq!(cascade.severity(), Severity::Permanent);
        let message = cascade.to_string();
        for name in ["notes_event_fk", "public.notes", "buzz.events", "CASCADE"] {
            assert!(message.contains(name), "{message}");
        }
        assert_eq!(
            StoreError::Database(sqlx::Error::RowNotFound).severity(),
            Severity::Permanent
        );
    }

    #[test]
    fn unknown_host_tells_the_operator_what_to_check() {
        let message = StoreError::UnknownHost {
            host: "x.example".into(),
        }
        .to_string();
        assert!(message.contains("x.example"));
        assert!(message.contains("demo seed"));
    }
}
