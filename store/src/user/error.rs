//! Every way a user-deletion store call can fail, each classified once as permanent or transient.

use uuid::Uuid;
use workflows::user::StoredInventoryError;
use workflows::user::policy::MAX_STAGES;

use workflows::contract::{RETRY_NOT_DUE_FAILURE_TYPE, STALE_GENERATION_FAILURE_TYPE};

use crate::failure::{Classified, Report, Severity};

/// SQLSTATE class of integrity-constraint violations: the write contradicts the schema's
/// invariants, so retrying the same write cannot succeed.
const INTEGRITY_VIOLATION_CLASS: &str = "23";

/// Why a user-deletion store call failed.
#[derive(Debug, thiserror::Error)]
pub enum UserStoreError {
    /// The database failed or refused the statement.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// The completion's receipt could not be issued.
    #[error(transparent)]
    Certificate(#[from] crate::certificates::CertificateStoreError),
    /// No user-deletion request has this id.
    #[error("user-deletion request {0} does not exist")]
    UnknownRequest(Uuid),
    /// The request row already exists with other contents (a different target, digest or workflow).
    #[error("request {0} is already registered with a different target, inventory or workflow")]
    RegistrationConflict(Uuid),
    /// The inventory handed to registration is not the frozen demo inventory of its target.
    #[error("refused inventory for request {request_id}: {reason}")]
    InventoryRefused {
        /// The request.
        request_id: Uuid,
        /// What is wrong with it.
        reason: String,
    },
    /// The approval contradicts the request (digest, two-person rule, already approved).
    #[error("approval of request {request_id} refused: {reason}")]
    ApprovalRefused {
        /// The request.
        request_id: Uuid,
        /// Why.
        reason: String,
    },
    /// The request's lifecycle stage does not allow the call.
    #[error("request {request_id} is {actual}; this call needs {expected}")]
    WrongRequestStage {
        /// The request.
        request_id: Uuid,
        /// What the call needs.
        expected: &'static str,
        /// What the request is.
        actual: String,
    },
    /// The stage row is not the request's current row (or not the request's at all).
    #[error("stage row {stage_id} is not the current row of request {request_id}")]
    NotCurrent {
        /// The request.
        request_id: Uuid,
        /// The row.
        stage_id: Uuid,
    },
    /// A newer attempt bumped the request's execution generation: this attempt must stop.
    #[error(
        "request {request_id}: execution generation {held} is stale (current is {current}); a newer attempt owns the request"
    )]
    StaleGeneration {
        /// The request.
        request_id: Uuid,
        /// The generation this attempt holds.
        held: i64,
        /// The request's generation.
        current: i64,
    },
    /// A handler start on behalf of a workflow execution that no longer owns the request (a
    /// newer execution resumed it).
    #[error(
        "request {request_id}: execution {caller} was superseded by execution {owner}; it may not start a handler"
    )]
    SupersededExecution {
        /// The request.
        request_id: Uuid,
        /// The execution that owns the request.
        owner: String,
        /// The execution that asked.
        caller: String,
    },
    /// A transition that contradicts what is saved (a different decision on an already-left row,
    /// or leaving a row that is not completed).
    #[error("transition refused for request {request_id}: {reason}")]
    TransitionConflict {
        /// The request.
        request_id: Uuid,
        /// Why.
        reason: String,
    },
    /// A saved row cannot be read back into its typed form.
    #[error("unreadable saved row: {0}")]
    CorruptRow(String),
    /// The stored inventory is not the approved one, of a version this build does not know, or
    /// too large: nothing may run from it.
    #[error("request {request_id}: {source}")]
    StoredInventory {
        /// The request.
        request_id: Uuid,
        /// What is wrong with the stored inventory.
        source: StoredInventoryError,
    },
    /// The stage history has more rows than reconstruction may read; the read stopped there.
    #[error(
        "request {request_id} has more than {MAX_STAGES} stage rows (the limit reconstruction reads); refusing to read its history"
    )]
    TooManyStages {
        /// The request.
        request_id: Uuid,
    },
    /// The database's clock is before the request's saved retry deadline: the handler may not
    /// start yet, whatever the caller's clock says.
    #[error(
        "request {request_id}: the store refused to start stage row {stage_id} before its retry deadline {next_attempt_at} (database time {database_now}); the retry deadline has not passed"
    )]
    RetryNotDue {
        /// The request.
        request_id: Uuid,
        /// The row whose handler was to start.
        stage_id: Uuid,
        /// The saved deadline (RFC 3339).
        next_attempt_at: String,
        /// The database's `now()` when it refused (RFC 3339).
        database_now: String,
    },
    /// An operator signature was refused (or the registry could not be read).
    #[error(transparent)]
    Identity(#[from] crate::identity::IdentityError),
    /// A store call shared with the community side failed (the user's write fence).
    #[error(transparent)]
    Store(#[from] crate::StoreError),
    /// An abort after a purge started: rows, objects or keys may already be gone.
    #[error(
        "request {request_id} cannot be aborted: its irreversible point is passed ({stage} of \
         stage row {stage_id} started, so data may already be deleted); run it to the end instead"
    )]
    IrreversibleStarted {
        /// The request.
        request_id: Uuid,
        /// The first purge row that started.
        stage_id: Uuid,
        /// Its stage.
        stage: String,
    },
    /// The request is blocked: nothing runs until an operator remedies and unblocks it.
    #[error(
        "request {request_id} is blocked: {reason} — remedy it, then `buzz-deletion user unblock \
         {request_id} --reason …`"
    )]
    Blocked {
        /// The request.
        request_id: Uuid,
        /// Why it blocked.
        reason: String,
    },
    /// An unblock of a request that is not blocked.
    #[error("request {0} is not blocked: there is nothing to unblock")]
    NotBlocked(Uuid),
    /// An abort while a handler attempt is marked running.
    #[error(
        "request {request_id}: stage row {stage_id} is running; stop the run first \
         (`buzz-deletion user stop {request_id}`), then abort"
    )]
    HandlerRunning {
        /// The request.
        request_id: Uuid,
        /// The running row.
        stage_id: Uuid,
    },
}

impl UserStoreError {
    /// Whether the error is a refused write of a stale attempt (or of a superseded execution).
    pub fn is_stale_generation(&self) -> bool {
        matches!(
            self,
            UserStoreError::StaleGeneration { .. } | UserStoreError::SupersededExecution { .. }
        )
    }

    /// Whether the error is the store's refusal of a handler start before the retry deadline.
    pub fn is_retry_not_due(&self) -> bool {
        matches!(self, UserStoreError::RetryNotDue { .. })
    }
}

impl Classified for UserStoreError {
    fn severity(&self) -> Severity {
        match self {
            UserStoreError::Database(sqlx::Error::Database(db))
                if db
                    .code()
                    .is_some_and(|code| code.starts_with(INTEGRITY_VIOLATION_CLASS)) =>
            {
                Severity::Permanent
            }
            // Connection loss, pool exhaustion, serialization failures: a retry can succeed.
            UserStoreError::Database(_) => Severity::Transient,
            UserStoreError::Certificate(error) => error.severity(),
            UserStoreError::Identity(error) => error.severity(),
            UserStoreError::Store(error) => error.severity(),
            UserStoreError::IrreversibleStarted { .. }
            | UserStoreError::HandlerRunning { .. }
            | UserStoreError::Blocked { .. }
            | UserStoreError::NotBlocked(_) => Severity::Permanent,
            UserStoreError::UnknownRequest(_)
            | UserStoreError::RegistrationConflict(_)
            | UserStoreError::InventoryRefused { .. }
            | UserStoreError::ApprovalRefused { .. }
            | UserStoreError::WrongRequestStage { .. }
            | UserStoreError::NotCurrent { .. }
            | UserStoreError::StaleGeneration { .. }
            | UserStoreError::SupersededExecution { .. }
            | UserStoreError::TransitionConflict { .. }
            | UserStoreError::CorruptRow(_)
            | UserStoreError::StoredInventory { .. }
            | UserStoreError::TooManyStages { .. }
            | UserStoreError::RetryNotDue { .. } => Severity::Permanent,
        }
    }

    /// Permanent failures are non-retryable with a type the workflow and the Web UI can tell
    /// apart: a stale generation (or superseded execution) and a start before the retry deadline
    /// have their own; transient ones are retried with backoff.
    fn report(&self) -> Report {
        let typed = |type_name| Report::Typed {
            type_name,
            non_retryable: true,
        };
        if self.is_stale_generation() {
            typed(STALE_GENERATION_FAILURE_TYPE)
        } else if self.is_retry_not_due() {
            typed(RETRY_NOT_DUE_FAILURE_TYPE)
        } else {
            Report::BySeverity
        }
    }
}
