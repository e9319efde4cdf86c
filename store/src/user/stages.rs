//! Stage-history writes: starting a handler attempt, saving its outcome, and committing the
//! transition the workflow decided. Every write locks the request row first, so writes of one
//! request are serialised and the generation check cannot race.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;
use uuid::Uuid;
use workflows::user::policy::Transition;
use workflows::user::resume::run_id_of;
use workflows::user::{
    CommitTransitionInput, CommittedTransition, RetryState, StageSpec, TransitionCommand,
};

use super::error::UserStoreError;
use super::views::{StageRowView, select_stage_rows, stage_columns};
use super::{UserStore, UserStoreResult, audit, commit_audited, retry_state, rfc3339};
use crate::claim::{RequestKind, claim_request};
use crate::user::faults::FaultPoint;

type Tx<'a> = sqlx::Transaction<'a, sqlx::Postgres>;

/// How a handler attempt begins.
#[derive(Debug, Clone, PartialEq)]
pub enum StageStart {
    /// An earlier attempt saved the handler's result: it must not run again.
    AlreadyCompleted {
        /// The saved result.
        result: serde_json::Value,
        /// The token of the run whose attempt executed the handler (None before migration 0009
        /// or when the starter named no run).
        run_token: Option<String>,
    },
    /// This attempt owns the row; its writes must carry `generation`.
    Started {
        /// The request execution generation this attempt claimed.
        generation: i64,
        /// The row as started (status running, attempt incremented).
        row: Box<StageRowView>,
    },
}

/// Locks the user request row and returns its lifecycle stage and execution generation.
async fn lock_request(tx: &mut Tx<'_>, request_id: Uuid) -> UserStoreResult<(String, i64)> {
    sqlx::query_as(
        "SELECT stage, exec_generation FROM deletion.requests \
         WHERE id = $1 AND kind = 'user' FOR UPDATE",
    )
    .bind(request_id)
    .fetch_optional(&mut **tx)
    .await?
    .ok_or(UserStoreError::UnknownRequest(request_id))
}

/// Locks stage row `stage_id` of request `request_id`.
async fn lock_stage(
    tx: &mut Tx<'_>,
    request_id: Uuid,
    stage_id: Uuid,
) -> UserStoreResult<StageRowView> {
    sqlx::query_as::<_, StageRowView>(select_stage_rows!("id = $1 AND request_id = $2 FOR UPDATE"))
        .bind(stage_id)
        .bind(request_id)
        .fetch_optional(&mut **tx)
        .await?
        .ok_or(UserStoreError::NotCurrent {
            request_id,
            stage_id,
        })
}

/// Inserts `spec` as the new pending, current row after `previous`.
async fn insert_stage(
    tx: &mut Tx<'_>,
    request_id: Uuid,
    spec: &StageSpec,
    previous: Option<Uuid>,
) -> UserStoreResult<StageRowView> {
    Ok(sqlx::query_as::<_, StageRowView>(concat!(
        "INSERT INTO deletion.user_stage_history \
             (id, request_id, stage, community_id, status, is_current, inputs, previous_stage_id) \
         VALUES (gen_random_uuid(), $1, $2, $3, 'pending', true, $4, $5) RETURNING ",
        stage_columns!()
    ))
    .bind(request_id)
    .bind(spec.stage.as_str())
    .bind(spec.community_id)
    .bind(&spec.inputs)
    .bind(previous)
    .fetch_one(&mut **tx)
    .await?)
}

/// The row created after `stage_id`, if any.
async fn successor_of(tx: &mut Tx<'_>, stage_id: Uuid) -> UserStoreResult<Option<StageRowView>> {
    stage_row_where(tx, select_stage_rows!("previous_stage_id = $1"), stage_id).await
}

/// The one stage row `sql` (a [`select_stage_rows`] with `$1` bound to `id`) finds, if any.
async fn stage_row_where(
    tx: &mut Tx<'_>,
    sql: &'static str,
    id: Uuid,
) -> UserStoreResult<Option<StageRowView>> {
    Ok(sqlx::query_as::<_, StageRowView>(sql)
        .bind(id)
        .fetch_optional(&mut **tx)
        .await?)
}

/// Refuses a handler start while the database's clock is before the request's saved retry
/// deadline. The deadline was stamped with the database's clock (`now()` at the failure), so the
/// same clock decides; the caller's (workflow) clock is never trusted for it. Runs under the
/// request row lock.
async fn refuse_before_deadline(
    tx: &mut Tx<'_>,
    request_id: Uuid,
    stage_id: Uuid,
) -> UserStoreResult<()> {
    let (deadline, now): (Option<DateTime<Utc>>, DateTime<Utc>) = sqlx::query_as(
        "SELECT next_attempt_at, now() FROM deletion.requests WHERE id = $1 AND kind = 'user'",
    )
    .bind(request_id)
    .fetch_one(&mut **tx)
    .await?;
    match deadline {
        Some(deadline) if now < deadline => Err(UserStoreError::RetryNotDue {
            request_id,
            stage_id,
            next_attempt_at: rfc3339(deadline),
            database_now: rfc3339(now),
        }),
        _ => Ok(()),
    }
}

/// Refuses a handler start for execution `caller` when another execution resumed the request
/// (the request row is already locked by the caller's transaction).
async fn refuse_superseded(tx: &mut Tx<'_>, request_id: Uuid, caller: &str) -> UserStoreResult<()> {
    let owner: Option<String> =
        sqlx::query_scalar("SELECT owner_run_id FROM deletion.requests WHERE id = $1")
            .bind(request_id)
            .fetch_one(&mut **tx)
            .await?;
    match owner {
        Some(owner) if owner != caller => Err(UserStoreError::SupersededExecution {
            request_id,
            owner,
            caller: caller.to_string(),
        }),
        _ => Ok(()),
    }
}

/// Refuses a write of an attempt whose generation is no longer the request's.
fn check_generation(request_id: Uuid, held: i64, current: i64) -> UserStoreResult<()> {
    if held == current {
        Ok(())
    } else {
        Err(UserStoreError::StaleGeneration {
            request_id,
            held,
            current,
        })
    }
}

fn committed(
    current: Option<&StageRowView>,
    request_stage: &str,
) -> UserStoreResult<CommittedTransition> {
    Ok(CommittedTransition {
        current: current.map(StageRowView::to_record).transpose()?,
        request_completed: request_stage == "completed",
    })
}

impl UserStore {
    /// Saves the transition the workflow decided, atomically, and bumps the execution generation
    /// (so no older handler attempt can write afterwards).
    ///
    /// `Initialize` creates the initial row of an approved request with empty history.
    /// `Advance` leaves the completed current row with its decision and creates the successor —
    /// or completes the request — and clears the retry state. A repeat of a committed transition
    /// returns what it created; a different transition from an already-left row is refused.
    pub async fn commit_transition(
        &self,
        input: &CommitTransitionInput,
    ) -> UserStoreResult<CommittedTransition> {
        let request_id = input.request_id;
        let conflict = |reason: String| UserStoreError::TransitionConflict { request_id, reason };
        let mut tx = self.pool.begin().await?;
        let (request_stage, _) = lock_request(&mut tx, request_id).await?;
        let result = match &input.command {
            TransitionCommand::Initialize { first } => {
                let existing = stage_row_where(
                    &mut tx,
                    select_stage_rows!("request_id = $1 AND previous_stage_id IS NULL"),
                    request_id,
                )
                .await?;
                if let Some(initial) = existing {
                    // A retried Initialize finds the row it created; anything else is not ours.
                    if initial.stage != first.stage.as_str() || request_stage == "completed" {
                        return Err(conflict(format!(
                            "the request already has initial stage {} ({})",
                            initial.id, initial.stage
                        )));
                    }
                    let current = if initial.is_current {
                        Some(initial)
                    } else {
                        current_row(&mut tx, request_id).await?
                    };
                    return committed(current.as_ref(), &request_stage);
                }
                if request_stage != "approved" {
                    return Err(UserStoreError::WrongRequestStage {
                        request_id,
                        expected: "approved with no stage rows",
                        actual: request_stage,
                    });
                }
                let row = insert_stage(&mut tx, request_id, first, None).await?;
                bump_generation(&mut tx, request_id, "running").await?;
                committed(Some(&row), "running")
            }
            TransitionCommand::Advance {
                from_stage_id,
                transition,
                successor,
            } => {
                if transition.next.is_some() != successor.is_some() {
                    return Err(conflict(
                        "the decision and the successor row disagree on whether the request continues"
                            .into(),
                    ));
                }
                let from = lock_stage(&mut tx, request_id, *from_stage_id).await?;
                if !from.is_current {
                    let saved: Option<Transition> = from
                        .transition
                        .clone()
                        .map(serde_json::from_value)
                        .transpose()
                        .map_err(|e| {
                            UserStoreError::CorruptRow(format!("stage row {}: {e}", from.id))
                        })?;
                    if saved.as_ref() != Some(transition) {
                        return Err(conflict(format!(
                            "stage row {} was already left with decision {saved:?}",
                            from.id
                        )));
                    }
                    // A retry of this very transition: answer what it created.
                    let successor_row = successor_of(&mut tx, from.id).await?;
                    return committed(successor_row.as_ref(), &request_stage);
                }
                if from.status != "completed" {
                    return Err(conflict(format!(
                        "stage row {} is {}, not completed",
                        from.id, from.status
                    )));
                }
                let decision = serde_json::to_value(transition)
                    .map_err(|e| conflict(format!("cannot encode the decision: {e}")))?;
                sqlx::query(
                    "UPDATE deletion.user_stage_history SET is_current = false, transition = $2 \
                     WHERE id = $1",
                )
                .bind(from.id)
                .bind(&decision)
                .execute(&mut *tx)
                .await?;
                self.faults.pass(FaultPoint::TransitionRowLeft).await;
                match successor {
                    Some(spec) => {
                        let row = insert_stage(&mut tx, request_id, spec, Some(from.id)).await?;
                        bump_generation(&mut tx, request_id, "running").await?;
                        committed(Some(&row), "running")
                    }
                    None => {
                        bump_generation(&mut tx, request_id, "completed").await?;
                        audit(
                            &mut tx,
                            request_id,
                            "workflow",
                            "user.completed",
                            json!({"last_stage_id": from.id}),
                        )
                        .await?;
                        let key = self
                            .receipt_key
                            .as_ref()
                            .ok_or(crate::certificates::CertificateStoreError::NoSigningKey)?;
                        crate::certificates::issue_receipt(
                            &mut tx,
                            key.signing_key(),
                            request_id,
                            crate::certificates::ReceiptFor::User,
                        )
                        .await?;
                        committed(None, "completed")
                    }
                }
            }
        };
        self.faults.pass(FaultPoint::TransitionBeforeCommit).await;
        tx.commit().await?;
        result
    }

    /// Starts a handler attempt on the current row `stage_id`: bumps the request's execution
    /// generation, marks the row running (attempt + 1, latest start now, first start kept) and
    /// returns the generation every later write of this attempt must carry. A row whose result is
    /// already saved is not started again. A start while the database's clock is before the saved
    /// retry deadline is refused ([`UserStoreError::RetryNotDue`]).
    pub async fn start_stage(
        &self,
        request_id: Uuid,
        stage_id: Uuid,
        executor_id: Option<&str>,
    ) -> UserStoreResult<StageStart> {
        self.start_stage_for_run(request_id, stage_id, executor_id, None)
            .await
    }

    /// [`UserStore::start_stage`] on behalf of the workflow run `run_token`, which is saved on
    /// the row with the start (and answered back when the row is already completed).
    pub async fn start_stage_for_run(
        &self,
        request_id: Uuid,
        stage_id: Uuid,
        executor_id: Option<&str>,
        run_token: Option<&str>,
    ) -> UserStoreResult<StageStart> {
        let mut tx = self.pool.begin().await?;
        let (request_stage, _) = lock_request(&mut tx, request_id).await?;
        if !matches!(request_stage.as_str(), "running" | "retry_wait") {
            return Err(UserStoreError::WrongRequestStage {
                request_id,
                expected: "running or retry_wait",
                actual: request_stage,
            });
        }
        if let Some(caller) = run_token.and_then(run_id_of) {
            refuse_superseded(&mut tx, request_id, caller).await?;
        }
        let row = lock_stage(&mut tx, request_id, stage_id).await?;
        if !row.is_current {
            return Err(UserStoreError::NotCurrent {
                request_id,
                stage_id,
            });
        }
        if row.status == "completed" {
            let result = row.result.clone().ok_or_else(|| {
                UserStoreError::CorruptRow(format!("completed stage row {stage_id} has no result"))
            })?;
            return Ok(StageStart::AlreadyCompleted {
                result,
                run_token: row.handler_run_token,
            });
        }
        refuse_before_deadline(&mut tx, request_id, stage_id).await?;
        let generation = claim_request(&mut tx, request_id, RequestKind::User)
            .await?
            .ok_or(UserStoreError::UnknownRequest(request_id))?;
        sqlx::query("UPDATE deletion.requests SET stage = 'running' WHERE id = $1")
            .bind(request_id)
            .execute(&mut *tx)
            .await?;
        let row = sqlx::query_as::<_, StageRowView>(concat!(
            "UPDATE deletion.user_stage_history \
             SET status = 'running', attempt = attempt + 1, exec_generation = $2, executor_id = $3, \
                 started_at = now(), first_started_at = COALESCE(first_started_at, now()), \
                 finished_at = NULL, handler_run_token = $4 \
             WHERE id = $1 RETURNING ",
            stage_columns!()
        ))
        .bind(stage_id)
        .bind(generation)
        .bind(executor_id)
        .bind(run_token)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(StageStart::Started {
            generation,
            row: Box::new(row),
        })
    }

    /// Saves the handler's result on its row (completed, still current) — only while
    /// `generation` is still the request's.
    pub async fn save_stage_result(
        &self,
        request_id: Uuid,
        stage_id: Uuid,
        generation: i64,
        result: &serde_json::Value,
    ) -> UserStoreResult<()> {
        let mut tx = self.pool.begin().await?;
        let end = AttemptEnd::Completed { result };
        end_attempt(&mut tx, request_id, stage_id, generation, end).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Saves the handler's failure: the row stays current and becomes failed; the request goes to
    /// `retry_wait` with the error, one more retry and a deadline `retry_delay` from now — only
    /// while `generation` is still the request's.
    pub async fn save_stage_failure(
        &self,
        request_id: Uuid,
        stage_id: Uuid,
        generation: i64,
        error: &str,
        retry_delay: Duration,
    ) -> UserStoreResult<RetryState> {
        let attempt = (request_id, stage_id, generation);
        self.save_failed_attempt(attempt, error, RetryWait::After(retry_delay))
            .await
    }
}

impl UserStore {
    /// Saves a handler's refusal that needs an operator (a real user's safety check failed): the
    /// row stays current and becomes failed, the request goes to `retry_wait` with the error as
    /// its last error AND its blocked reason, so nothing runs until `user unblock` — only while
    /// `generation` is still the request's.
    pub async fn save_stage_blocked(
        &self,
        request_id: Uuid,
        stage_id: Uuid,
        generation: i64,
        error: &str,
    ) -> UserStoreResult<RetryState> {
        let attempt = (request_id, stage_id, generation);
        self.save_failed_attempt(attempt, error, RetryWait::Blocked)
            .await
    }

    /// Ends the running attempt (`request_id`, `stage_id`, `generation`) failed with `error`
    /// and moves the request to `retry_wait` as `wait` says, with the audit event that explains
    /// it, in one transaction; returns the request's retry state.
    async fn save_failed_attempt(
        &self,
        (request_id, stage_id, generation): (Uuid, Uuid, i64),
        error: &str,
        wait: RetryWait,
    ) -> UserStoreResult<RetryState> {
        let mut tx = self.pool.begin().await?;
        let end = AttemptEnd::Failed { error };
        end_attempt(&mut tx, request_id, stage_id, generation, end).await?;
        let (retry_count, next_attempt_at) =
            enter_retry_wait(&mut tx, request_id, error, wait).await?;
        let (event, detail) = match wait {
            RetryWait::After(_) => (
                "user.stage_failed",
                json!({"stage_id": stage_id, "error": error, "retry_count": retry_count}),
            ),
            RetryWait::Blocked => (
                "user.blocked",
                json!({"stage_id": stage_id, "reason": error}),
            ),
        };
        commit_audited(tx, request_id, "workflow", event, detail).await?;
        Ok(retry_state(retry_count, next_attempt_at))
    }
}

/// How long a request whose attempt failed waits in `retry_wait`.
#[derive(Clone, Copy)]
enum RetryWait {
    /// Until the delay from now has passed.
    After(Duration),
    /// Until an operator unblocks it: the error is its blocked reason too.
    Blocked,
}

/// Moves the request to `retry_wait` with `error` as its last error and one more retry, waiting
/// as `wait` says: with a deadline `delay` from now, or blocked (`error` is its blocked reason
/// too, and nothing runs until `user unblock`). Returns the retry count and the deadline.
async fn enter_retry_wait(
    tx: &mut Tx<'_>,
    request_id: Uuid,
    error: &str,
    wait: RetryWait,
) -> UserStoreResult<(i32, DateTime<Utc>)> {
    let update = match wait {
        RetryWait::After(delay) => sqlx::query_as(
            "UPDATE deletion.requests \
             SET stage = 'retry_wait', last_error = $2, retry_count = retry_count + 1, \
                 next_attempt_at = now() + make_interval(secs => $3::double precision / 1000), \
                 updated_at = now() \
             WHERE id = $1 RETURNING retry_count, next_attempt_at",
        )
        .bind(request_id)
        .bind(error)
        .bind(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX)),
        RetryWait::Blocked => sqlx::query_as(
            "UPDATE deletion.requests \
             SET stage = 'retry_wait', last_error = $2, retry_count = retry_count + 1, \
                 next_attempt_at = now(), blocked_reason = $2, blocked_stage = 'retry_wait', \
                 blocked_at = now(), updated_at = now() \
             WHERE id = $1 RETURNING retry_count, next_attempt_at",
        )
        .bind(request_id)
        .bind(error),
    };
    Ok(update.fetch_one(&mut **tx).await?)
}

/// How a handler attempt ended.
enum AttemptEnd<'a> {
    /// With this result.
    Completed { result: &'a serde_json::Value },
    /// With this error.
    Failed { error: &'a str },
}

/// Ends the running attempt of row `stage_id` under the request row lock. Refuses a stale
/// `generation`, and a row that is no longer this attempt's running, current row.
async fn end_attempt(
    tx: &mut Tx<'_>,
    request_id: Uuid,
    stage_id: Uuid,
    generation: i64,
    end: AttemptEnd<'_>,
) -> UserStoreResult<()> {
    let (_, current) = lock_request(tx, request_id).await?;
    check_generation(request_id, generation, current)?;
    let (status, result, error) = match end {
        AttemptEnd::Completed { result } => ("completed", Some(result), None),
        AttemptEnd::Failed { error } => ("failed", None, Some(error)),
    };
    let updated = sqlx::query(
        "UPDATE deletion.user_stage_history \
         SET status = $3, result = COALESCE($4, result), last_error = COALESCE($5, last_error), \
             finished_at = now() \
         WHERE id = $1 AND request_id = $2 AND is_current AND status = 'running' \
           AND exec_generation = $6",
    )
    .bind(stage_id)
    .bind(request_id)
    .bind(status)
    .bind(result)
    .bind(error)
    .bind(generation)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    if updated == 0 {
        return Err(UserStoreError::NotCurrent {
            request_id,
            stage_id,
        });
    }
    Ok(())
}

/// The request's current row, if any.
async fn current_row(tx: &mut Tx<'_>, request_id: Uuid) -> UserStoreResult<Option<StageRowView>> {
    stage_row_where(
        tx,
        select_stage_rows!("request_id = $1 AND is_current"),
        request_id,
    )
    .await
}

/// Moves the request to `stage` after a committed transition: bumps the execution generation
/// and clears the retry state and any blocked reason (a successful transition ends any retry
/// episode, and shows the block was resolved).
async fn bump_generation(tx: &mut Tx<'_>, request_id: Uuid, stage: &str) -> UserStoreResult<()> {
    sqlx::query(
        "UPDATE deletion.requests \
         SET stage = $2, exec_generation = exec_generation + 1, retry_count = 0, \
             next_attempt_at = NULL, last_error = NULL, updated_at = now(), \
             blocked_stage = NULL, blocked_reason = NULL, blocked_at = NULL, \
             completed_at = CASE WHEN $2 = 'completed' THEN now() ELSE completed_at END \
         WHERE id = $1",
    )
    .bind(request_id)
    .bind(stage)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
