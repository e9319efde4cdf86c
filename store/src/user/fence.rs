//! The per-user write fence (migration 0012): serving → quiescing → fenced for one user's
//! deletion request, and back to serving when that request is aborted before its irreversible
//! point.
//!
//! The fence row lives in `deletion.user_fences`, keyed by the user's 64-hex pubkey. The
//! `buzz_user_data` trigger of every tenant relation holds the row `FOR SHARE` (creating it
//! `serving` when the user has none yet) before it lets a row naming the user be written, and
//! refuses it with SQLSTATE BZ006 once `fenced`; per-user serving-write leases hold it the same
//! way. [`Store::fence_user`] takes the row `FOR UPDATE` (after creating it the same way), so it
//! cannot commit past a write that passed the trigger and is still uncommitted: it waits for it
//! (up to `lock_timeout`, then fails transiently).
//!
//! Every change bumps `generation` and appends an audit event (`user.quiesced`, `user.fenced`,
//! `user.unfenced`) in the same transaction. Lock order: the request's audit chain (its request
//! row), then the fence row. The row mechanism (lock, state change, live and stalled lease
//! refusals) is the one the community fence shares (`store/fences.rs`).

use crate::FenceError;
use std::time::Duration;

use serving::LiveServingWrites;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::Store;
use crate::chain::lock_chain;
use crate::community::audit::{WORKFLOW_ACTOR, insert_audit};
use crate::error::{StoreError, StoreResult};
use crate::fences::{
    FenceState, ScopedFenceStatus, StalledServingWrites, fence_row, lock_fence_row,
    require_no_live_serving_writes, set_fence, set_fence_lock_timeout,
};

/// A user's fence row (keyed by the user's 64-hex pubkey; `request_id` is `None` for a row
/// created by a serving write).
pub type UserFenceStatus = ScopedFenceStatus<String>;

/// Refuses, before any SQL, a value that is not a user's pubkey: 64 lowercase hex digits, the
/// rule of [`serving::pubkey_problem`] (the relay's; the workflows crate keeps a copy, which
/// `serving`'s tests hold to the same verdicts).
pub fn validate_user_pubkey(field: &'static str, pubkey: &str) -> StoreResult<()> {
    match serving::pubkey_problem(pubkey) {
        None => Ok(()),
        Some(problem) => Err(StoreError::InvalidInput {
            field,
            reason: format!("{pubkey:?} is not a 64-hex lowercase pubkey: {problem}"),
        }),
    }
}

/// Locks the request's audit chain first (its request row, or an advisory lock when there is
/// none), then the user's fence row `FOR UPDATE`, creating it `serving` if missing.
async fn lock_user_fence(
    conn: &mut PgConnection,
    request_id: Uuid,
    pubkey: &str,
) -> StoreResult<UserFenceStatus> {
    set_fence_lock_timeout(conn).await?;
    lock_chain(conn, request_id).await?;
    lock_fence_row(conn, &pubkey.to_owned()).await
}

/// Sets the user's fence state for `request_id`, bumping the generation, and records `event`
/// in the request's audit trail; returns the new row.
async fn set_user_fence(
    conn: &mut PgConnection,
    request_id: Uuid,
    pubkey: &str,
    state: FenceState,
    event: &str,
) -> StoreResult<UserFenceStatus> {
    let status = set_fence(conn, &pubkey.to_owned(), state, request_id).await?;
    let detail = serde_json::json!({
        "pubkey": pubkey,
        "state": state,
        "fence_generation": status.generation,
    });
    insert_audit(conn, Some(request_id), WORKFLOW_ACTOR, event, &detail).await?;
    Ok(status)
}

/// The refusal of a fence held by another request.
fn held_by_other(status: &UserFenceStatus, request_id: Uuid) -> Option<StoreError> {
    match status.request_id {
        Some(holder) if status.state != FenceState::Serving && holder != request_id => {
            Some(StoreError::Fence(FenceError::UserFenceHeld {
                pubkey: status.key.clone(),
                request_id: holder,
            }))
        }
        _ => None,
    }
}

impl Store {
    /// One fence change by `request_id`: checks the pubkey, locks the request's audit chain and
    /// the fence row (created `serving` if missing), refuses with [`FenceError::UserFenceHeld`]
    /// while another request holds it, then asks `wanted` about the fence found: an error
    /// refuses (nothing committed), `false` keeps it as it is (returned as found), `true` moves
    /// it to `to` and records `event`. Fencing also refuses while a serving write for the user
    /// is live.
    async fn change_user_fence(
        &self,
        request_id: Uuid,
        pubkey: &str,
        to: FenceState,
        event: &str,
        wanted: impl FnOnce(&UserFenceStatus) -> StoreResult<bool>,
    ) -> StoreResult<UserFenceStatus> {
        validate_user_pubkey("pubkey", pubkey)?;
        let mut tx = self.pool.begin().await?;
        let fence = lock_user_fence(&mut tx, request_id, pubkey).await?;
        if let Some(refusal) = held_by_other(&fence, request_id) {
            return Err(refusal);
        }
        if !wanted(&fence)? {
            tx.commit().await?;
            return Ok(fence);
        }
        if to == FenceState::Fenced {
            require_no_live_serving_writes(&mut tx, &fence.key).await?;
        }
        let status = set_user_fence(&mut tx, request_id, pubkey, to, event).await?;
        tx.commit().await?;
        Ok(status)
    }

    /// The user's fence row, if they have one (a user who never wrote since migration 0012 and
    /// was never quiesced has none: they are served).
    pub async fn user_fence_status(&self, pubkey: &str) -> StoreResult<Option<UserFenceStatus>> {
        validate_user_pubkey("pubkey", pubkey)?;
        fence_row(&self.pool, &pubkey.to_owned()).await
    }

    /// Starts quiescing the user for `request_id`: new serving-write leases for them are refused
    /// from now on, while admitted ones may renew and finish (row writes still pass). Idempotent
    /// when this request already holds the fence quiescing or fenced; refused with
    /// [`FenceError::UserFenceHeld`] (permanent) while another request holds it.
    pub async fn quiesce_user(
        &self,
        request_id: Uuid,
        pubkey: &str,
    ) -> StoreResult<UserFenceStatus> {
        self.change_user_fence(
            request_id,
            pubkey,
            FenceState::Quiescing,
            "user.quiesced",
            |fence| Ok(fence.state == FenceState::Serving),
        )
        .await
    }

    /// Fences the user for `request_id` once no serving write for them is live: every row write
    /// naming them (BZ006) and every lease for them is refused from now on. The fence row is
    /// taken `FOR UPDATE` under a 5 s `lock_timeout`, so a row write that passed the trigger and
    /// has not committed makes this wait, then fail transiently (SQLSTATE 55P03). Refused with
    /// [`FenceError::LiveUserServingWrites`] (transient) while a live user lease exists, with
    /// [`FenceError::UserNotQuiescing`] unless this request quiesced the user, and with
    /// [`FenceError::UserFenceHeld`] while another request holds the fence. Idempotent when this
    /// request already fenced the user.
    pub async fn fence_user(&self, request_id: Uuid, pubkey: &str) -> StoreResult<UserFenceStatus> {
        self.change_user_fence(
            request_id,
            pubkey,
            FenceState::Fenced,
            "user.fenced",
            |fence| match fence.state {
                FenceState::Fenced => Ok(false),
                FenceState::Quiescing => Ok(true),
                FenceState::Serving => Err(StoreError::Fence(FenceError::UserNotQuiescing {
                    pubkey: pubkey.to_owned(),
                    state: fence.state.to_string(),
                })),
            },
        )
        .await
    }

    /// Lifts the user's fence back to serving (an abort before the irreversible point): only the
    /// request holding it may ([`FenceError::UserFenceHeld`] otherwise); idempotent when the user
    /// is already served.
    pub async fn lift_user_fence(
        &self,
        request_id: Uuid,
        pubkey: &str,
    ) -> StoreResult<UserFenceStatus> {
        self.change_user_fence(
            request_id,
            pubkey,
            FenceState::Serving,
            "user.unfenced",
            |fence| Ok(fence.state != FenceState::Serving),
        )
        .await
    }

    /// Unreleased, unexpired leases for the user, in any community, and their operations.
    pub async fn live_user_serving_writes(&self, pubkey: &str) -> StoreResult<LiveServingWrites> {
        validate_user_pubkey("pubkey", pubkey)?;
        self.live_serving_writes_of(&pubkey.to_owned()).await
    }

    /// The drain gate of a user deletion: refuses with [`FenceError::StalledUserServingWrites`]
    /// (transient) while a lease for the user left unreleased at fence time (the fence row's
    /// `updated_at`) is still inside `expires_at + bound`; `bound` is
    /// [`serving::MAX_PROTECTED_OPERATION`] in production. A user without a fence row has
    /// no stalled writes.
    pub async fn require_no_stalled_user_serving_writes(
        &self,
        pubkey: &str,
        bound: Duration,
    ) -> StoreResult<StalledServingWrites> {
        validate_user_pubkey("pubkey", pubkey)?;
        self.require_no_stalled_serving_writes_of(&pubkey.to_owned(), bound)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_64_lowercase_hex_is_a_pubkey() {
        assert!(validate_user_pubkey("pubkey", &"0a".repeat(32)).is_ok());
        for bad in [
            String::new(),
            "0a".repeat(31),
            "0A".repeat(32),
            format!("{}g", "0".repeat(63)),
            format!("{}'", "0".repeat(63)),
            "0a".repeat(33),
        ] {
            assert!(
                matches!(
                    validate_user_pubkey("pubkey", &bad),
                    Err(StoreError::InvalidInput {
                        field: "pubkey",
                        ..
                    })
                ),
                "{bad:?}"
            );
        }
    }
}
