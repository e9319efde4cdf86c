//! Deletion requests: registration (at most one open per community), lookup, listing, inspection.

use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use sqlx::postgres::PgRow;
use uuid::Uuid;
use workflows::community::contracts::{ApprovalRecord, RegisterInput};

use super::audit::{AuditEvent, record_milestone, require_named};
use super::fence::FenceStatus;
use super::manifest::ChunkProgress;
use super::signed::consume_community_signature;
use super::stage::Stage;
use crate::Store;
use crate::catalog::closed_world::summary::ClosedWorldSummary;
use crate::certificates::AuditChainCheck;
use crate::communities::{Community, normalize_host};
use crate::error::{StoreError, StoreResult, violated_constraint};
use crate::failure::{Classified, Severity};
use crate::identity::{StoredSignature, signatures_of_request};
use workflows::community::contracts::TableCount;
use workflows::operator::Action;

/// The unique index that allows one open request per community.
const ONE_OPEN_PER_COMMUNITY: &str = "requests_one_open_per_community";

/// Columns of [`Request`], in its field order.
pub(crate) const REQUEST_COLUMNS: &str = "id, kind, community_id, host, target, workflow_id, requested_by, \
     reason, stage, inventory_digest, exec_generation, fence_generation, irreversible_at, \
     irreversible_pending_at, blocked_stage, blocked_reason, blocked_at, last_error, retry_count, created_at, updated_at, \
     completed_at";

/// A deletion request as recorded (the frozen documents are read through their own calls).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Request {
    /// Request id.
    pub id: Uuid,
    /// `community` or `user`.
    pub kind: String,
    /// The community (community requests).
    pub community_id: Option<Uuid>,
    /// The community's host at submission (community requests).
    pub host: Option<String>,
    /// The user target (user requests).
    pub target: Option<String>,
    /// The Temporal workflow driving it.
    pub workflow_id: String,
    /// Who asked for it.
    pub requested_by: String,
    /// Why.
    pub reason: Option<String>,
    /// Current stage.
    pub stage: String,
    /// sha256 of the frozen inventory, once frozen.
    pub inventory_digest: Option<String>,
    /// Current execution generation.
    pub exec_generation: i64,
    /// Fence generation recorded when the community was fenced.
    pub fence_generation: Option<i64>,
    /// When irreversible deletion began: S3 acknowledged the first deletion or abort.
    pub irreversible_at: Option<DateTime<Utc>>,
    /// Set right before the first destructive S3 call and cleared when `irreversible_at` is set
    /// (migration 0017): while set, whether S3 acted is unknown, so an abort is held.
    pub irreversible_pending_at: Option<DateTime<Utc>>,
    /// Phase that failed permanently, while blocked.
    pub blocked_stage: Option<String>,
    /// Why it is blocked.
    pub blocked_reason: Option<String>,
    /// Since when.
    pub blocked_at: Option<DateTime<Utc>>,
    /// Last failure (transient or permanent).
    pub last_error: Option<String>,
    /// Transient failures recorded.
    pub retry_count: i32,
    /// Submission time.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
    /// When it ended (retention pending or aborted).
    pub completed_at: Option<DateTime<Utc>>,
}

impl Request {
    /// The stage as a community stage (`None` for user requests).
    pub fn community_stage(&self) -> Option<Stage> {
        self.stage.parse().ok()
    }

    /// Whether the request is still open (not ended).
    pub fn is_open(&self) -> bool {
        self.completed_at.is_none()
    }
}

/// Which requests `list_requests` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestFilter {
    /// Not ended.
    Open,
    /// Waiting for an operator's unblock.
    Blocked,
    /// Ended (retention pending or aborted).
    Completed,
    /// Everything.
    All,
}

impl RequestFilter {
    /// The requests of `kind` this filter selects with `select` (`SELECT … FROM deletion.requests
    /// r …`), newest first (then by id), at most `limit`: one meaning of open, blocked and
    /// completed, and one order, for both deletions' lists.
    pub(crate) async fn list<T>(
        self,
        pool: &PgPool,
        select: &str,
        kind: &str,
        limit: u32,
    ) -> sqlx::Result<Vec<T>>
    where
        T: for<'r> sqlx::FromRow<'r, PgRow> + Send + Unpin,
    {
        let condition = match self {
            RequestFilter::Open => "r.completed_at IS NULL",
            RequestFilter::Blocked => "r.blocked_reason IS NOT NULL",
            RequestFilter::Completed => "r.completed_at IS NOT NULL",
            RequestFilter::All => "true",
        };
        let sql = format!(
            "{select} WHERE r.kind = '{kind}' AND {condition} \
             ORDER BY r.created_at DESC, r.id LIMIT $1"
        );
        sqlx::query_as::<_, T>(sqlx::AssertSqlSafe(sql))
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await
    }
}

impl FromStr for RequestFilter {
    type Err = StoreError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value {
            "open" => Ok(RequestFilter::Open),
            "blocked" => Ok(RequestFilter::Blocked),
            "completed" => Ok(RequestFilter::Completed),
            "all" => Ok(RequestFilter::All),
            other => Err(StoreError::InvalidInput {
                field: "filter",
                reason: format!("{other:?} is not one of open, blocked, completed, all"),
            }),
        }
    }
}

/// A durable stage milestone with its evidence.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Checkpoint {
    /// The stage (or milestone) reached.
    pub stage: String,
    /// When.
    pub reached_at: DateTime<Utc>,
    /// The execution generation that reached it.
    pub exec_generation: i64,
    /// Counts, digests.
    pub detail: serde_json::Value,
}

/// Everything the store knows about one request, for `buzz-deletion community inspect`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestInspection {
    /// The request row.
    pub request: Request,
    /// Approval evidence, once approved.
    pub approval: Option<ApprovalRecord>,
    /// Stage milestones, in order reached.
    pub checkpoints: Vec<Checkpoint>,
    /// The audit trail, oldest first.
    pub audit: Vec<AuditEvent>,
    /// The audit trail's hash chain, re-checked on this read.
    pub audit_chain: crate::certificates::AuditChainCheck,
    /// The signed receipt, once the request finished.
    pub receipt: Option<crate::certificates::ReceiptSummary>,
    /// Destructive-manifest progress.
    pub chunks: ChunkProgress,
    /// The community's fence, if any.
    pub fence: Option<FenceStatus>,
    /// Rows purged per tenant table so far.
    pub purged: Vec<TableCount>,
    /// Every operator signature recorded for the request (statement, SSHSIG, key), oldest
    /// first: what `deploy/local/verify-signatures` checks with `ssh-keygen -Y verify`.
    pub signatures: Vec<StoredSignature>,
    /// The closed world the frozen inventory recorded under its digest (the purge-set
    /// relations, the declarations relied on, the target's rows in key children, archives and
    /// refreshed views, the cross-reference counts); absent before an inventory is frozen, for
    /// inventories older than the closed world, and when the frozen inventory no longer matches
    /// its digest (the request's block names that).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub closed_world: Option<ClosedWorldSummary>,
}

impl Store {
    /// Records a community deletion request, resolving the host to its community.
    ///
    /// Idempotent for the same request id and host (returns the existing request). Refused with
    /// [`RequestError::UnknownHost`] when no community has the host, and with
    /// [`RequestError::OpenRequestExists`] (naming the open request) when the community already has
    /// one: the database's unique index decides, so two concurrent submissions cannot both win.
    /// The requester's `submit` signature is verified and consumed (for `consumer`) in the
    /// transaction that inserts the row, which names it; the requester recorded is the key's
    /// registered name.
    pub async fn register_community_request(
        &self,
        input: &RegisterInput,
        consumer: &str,
    ) -> StoreResult<Request> {
        require_named("requested_by", &input.requested_by)?;
        require_named("workflow_id", &input.workflow_id)?;
        let host = normalize_host(&input.host)?;
        if let Some(existing) = self.find_request(input.request_id).await? {
            return same_registration(existing, &host);
        }
        let community = self
            .community_by_host(&host)
            .await?
            .ok_or_else(|| StoreError::Request(RequestError::UnknownHost { host: host.clone() }))?;
        match self
            .insert_community_request(input, &community, consumer)
            .await
        {
            Ok(request) => Ok(request),
            Err(StoreError::Database(error)) => {
                match violated_constraint(&error).as_deref() {
                    Some(ONE_OPEN_PER_COMMUNITY) => {
                        match self.find_open_request_for_community(community.id).await? {
                            Some(open) if open.id == input.request_id => Ok(open),
                            Some(open) => {
                                Err(StoreError::Request(RequestError::OpenRequestExists {
                                    community_id: community.id,
                                    request_id: open.id,
                                }))
                            }
                            // The open request ended between the insert and this read.
                            None => Err(StoreError::Database(error)),
                        }
                    }
                    // A concurrent registration of the same request id won the race.
                    Some("requests_pkey") => {
                        let existing = self.get_request(input.request_id).await?;
                        same_registration(existing, &host)
                    }
                    Some("requests_workflow_id_key") => {
                        Err(StoreError::Request(RequestError::Conflict {
                            request_id: input.request_id,
                            detail: format!(
                                "workflow id {} already belongs to another request",
                                input.workflow_id
                            ),
                        }))
                    }
                    _ => Err(StoreError::Database(error)),
                }
            }
            Err(other) => Err(other),
        }
    }

    async fn insert_community_request(
        &self,
        input: &RegisterInput,
        community: &Community,
        consumer: &str,
    ) -> StoreResult<Request> {
        let mut tx = self.pool.begin().await?;
        let consumed = consume_community_signature(
            &mut tx,
            input.signed.as_ref(),
            (Action::Submit, input.request_id, &community.host, None),
            &input.requested_by,
            consumer,
        )
        .await?;
        let sql = format!(
            "INSERT INTO deletion.requests \
             (id, kind, community_id, host, workflow_id, requested_by, reason, stage, \
              requested_fingerprint, requested_nonce) \
             VALUES ($1, 'community', $2, $3, $4, $5, $6, 'submitted', $7, $8) \
             RETURNING {REQUEST_COLUMNS}"
        );
        let request = sqlx::query_as::<_, Request>(sqlx::AssertSqlSafe(sql))
            .bind(input.request_id)
            .bind(community.id)
            .bind(&community.host)
            .bind(&input.workflow_id)
            .bind(&consumed.name)
            .bind(input.reason.as_deref())
            .bind(&consumed.fingerprint)
            .bind(&consumed.nonce)
            .fetch_one(&mut *tx)
            .await?;
        let detail = serde_json::json!({
            "community_id": community.id,
            "host": community.host,
            "workflow_id": input.workflow_id,
            "reason": input.reason,
            "operator": consumed.fingerprint,
            "nonce": consumed.nonce,
        });
        record_milestone(
            &mut tx,
            request.id,
            Stage::Submitted.as_str(),
            0,
            &consumed.name,
            &detail,
        )
        .await?;
        tx.commit().await?;
        Ok(request)
    }

    /// The target every operator signature of the request names: what its submit signature
    /// named (the request row's host may be changed; the signature cannot), or the row's host
    /// for a request made before signatures.
    pub async fn signed_target(&self, request_id: Uuid) -> StoreResult<Option<String>> {
        let mut conn = self.pool.acquire().await?;
        super::signed::signed_target(&mut conn, request_id).await
    }

    /// The request, or `None`.
    pub async fn find_request(&self, request_id: Uuid) -> StoreResult<Option<Request>> {
        self.request_where("id = $1", request_id).await
    }

    /// The request `condition` (on `deletion.requests`, with `id` as `$1`) selects, if any.
    async fn request_where(&self, condition: &str, id: Uuid) -> StoreResult<Option<Request>> {
        let sql = format!("SELECT {REQUEST_COLUMNS} FROM deletion.requests WHERE {condition}");
        let request = sqlx::query_as::<_, Request>(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(request)
    }

    /// The request, or [`StoreError::NotFound`].
    pub async fn get_request(&self, request_id: Uuid) -> StoreResult<Request> {
        self.find_request(request_id)
            .await?
            .ok_or_else(|| StoreError::NotFound {
                what: "deletion request",
                id: request_id.to_string(),
            })
    }

    /// The community's open (not ended) request, if any.
    pub async fn find_open_request_for_community(
        &self,
        community_id: Uuid,
    ) -> StoreResult<Option<Request>> {
        let open = "kind = 'community' AND community_id = $1 \
                    AND stage NOT IN ('retention_pending', 'aborted')";
        self.request_where(open, community_id).await
    }

    /// Community requests, newest first, at most `limit` (clamped to 1..=1000); `user list`
    /// lists the user requests.
    pub async fn list_requests(
        &self,
        filter: RequestFilter,
        limit: u32,
    ) -> StoreResult<Vec<Request>> {
        let select = format!("SELECT {REQUEST_COLUMNS} FROM deletion.requests r");
        let limit = limit.clamp(1, 1000);
        Ok(filter.list(&self.pool, &select, "community", limit).await?)
    }

    /// The request with its approval, checkpoints, audit trail, chunk progress, fence and purge
    /// counts.
    pub async fn inspect(&self, request_id: Uuid) -> StoreResult<RequestInspection> {
        let request = self.get_request(request_id).await?;
        let checkpoints = sqlx::query_as::<_, Checkpoint>(
            "SELECT stage, reached_at, exec_generation, detail FROM deletion.checkpoints \
             WHERE request_id = $1 ORDER BY reached_at, stage",
        )
        .bind(request_id)
        .fetch_all(&self.pool)
        .await?;
        let audit_rows = {
            let mut conn = self.pool.acquire().await?;
            crate::chain::chain_rows(&mut conn, request_id).await?
        };
        let fence = match request.community_id {
            Some(community_id) => self.fence_status(community_id).await?,
            None => None,
        };
        let closed_world = match self.load_frozen_inventory(request_id).await {
            Ok(frozen) => frozen.catalog.closed_world,
            Err(StoreError::NotFound { .. }) => None,
            Err(error) if error.severity() == Severity::Permanent => None,
            Err(error) => return Err(error),
        };
        Ok(RequestInspection {
            closed_world,
            approval: self.approval_of(request_id).await?,
            checkpoints,
            // One read of the trail serves both the events and the re-check of their chain.
            audit: audit_rows.iter().cloned().map(AuditEvent::from).collect(),
            audit_chain: AuditChainCheck::of(&audit_rows),
            receipt: self.receipt_summary(request_id).await?,
            chunks: self.chunk_progress(request_id).await?,
            fence,
            purged: self.purge_progress(request_id).await?,
            signatures: signatures_of_request(&self.pool, request_id).await?,
            request,
        })
    }
}

/// Returns the existing request if it is the same registration, else a conflict.
fn same_registration(existing: Request, host: &str) -> StoreResult<Request> {
    if existing.kind == "community" && existing.host.as_deref() == Some(host) {
        Ok(existing)
    } else {
        Err(StoreError::Request(RequestError::Conflict {
            request_id: existing.id,
            detail: format!(
                "it is a {} request for {:?}, not for host {host}",
                existing.kind,
                existing.host.as_deref().or(existing.target.as_deref())
            ),
        }))
    }
}

/// Why a store call failed because a request cannot take the step asked of it (claim, stage, block, abort, transition): one part of [`crate::StoreError`].
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The caller's execution generation is no longer current: a later attempt claimed the request.
    #[error(
        "request {request_id}: execution generation {expected} is stale (current is {actual}); a \
         newer attempt owns this request, so this attempt must stop"
    )]
    StaleGeneration {
        /// The request.
        request_id: uuid::Uuid,
        /// The generation the caller holds.
        expected: i64,
        /// The generation recorded on the request.
        actual: i64,
    },
    /// The request is not at the stage the caller expects.
    #[error("request {request_id} is at stage {actual}, expected {expected}")]
    WrongStage {
        /// The request.
        request_id: uuid::Uuid,
        /// The stage(s) the call requires, `|`-separated.
        expected: String,
        /// The stage recorded on the request.
        actual: String,
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
    /// The request id is already used by a request for something else.
    #[error("request {request_id} already exists with different parameters: {detail}")]
    Conflict {
        /// The request id.
        request_id: uuid::Uuid,
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
        community_id: uuid::Uuid,
        /// The open request.
        request_id: uuid::Uuid,
    },
    /// The request is blocked; only `unblock` lets work on it resume.
    #[error("request {request_id} is blocked in phase {phase}: {reason}")]
    Blocked {
        /// The request.
        request_id: uuid::Uuid,
        /// The phase that failed.
        phase: String,
        /// The recorded failure.
        reason: String,
    },
    /// Abort refused: irreversible deletion already started.
    #[error(
        "request {request_id} passed the irreversible point (stage {stage}); it can no longer be \
         aborted and runs to completion"
    )]
    IrreversibleStarted {
        /// The request.
        request_id: uuid::Uuid,
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
        request_id: uuid::Uuid,
        /// When the call was recorded as pending.
        since: chrono::DateTime<chrono::Utc>,
    },
    /// A destructive step ran before the irreversible point was recorded.
    #[error("request {request_id}: the irreversible point was not recorded before deleting")]
    IrreversibleNotMarked {
        /// The request.
        request_id: uuid::Uuid,
    },
    /// Unblock refused: the request is not blocked.
    #[error("request {request_id} is not blocked")]
    NotBlocked {
        /// The request.
        request_id: uuid::Uuid,
    },
    /// `advance` is only for stages without their own dedicated call.
    #[error("stage {from} -> {to} is not a generic advance; use its dedicated store call")]
    TransitionNotGeneric {
        /// From.
        from: String,
        /// To.
        to: String,
    },
}

impl crate::failure::Classified for RequestError {
    fn severity(&self) -> crate::failure::Severity {
        match self {
            RequestError::StaleGeneration { .. } | RequestError::DestructiveCallPending { .. } => {
                crate::failure::Severity::Transient
            }
            _ => crate::failure::Severity::Permanent,
        }
    }
}
