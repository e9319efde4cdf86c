//! A phase's claim on its request, then its work, heartbeating the progress it reports: the
//! opening every claiming phase shares.

use uuid::Uuid;

use crate::store::{ExecToken, Stage};

use super::failure::PhaseResult;
use super::heartbeat::{ProgressCell, heartbeating};
use super::{Attempt, CommunityActivities};

/// What a phase claims: its request, at one of the stages the phase runs at.
#[derive(Debug, Clone, Copy)]
pub(super) struct Claim<'s> {
    request_id: Uuid,
    stages: &'s [Stage],
    /// Whether the work may start only under the fence (see [`Claim::fenced_at`]).
    fenced: bool,
}

impl<'s> Claim<'s> {
    /// The request `request_id`, claimed at one of `stages` (see `Store::claim`).
    pub(super) fn at(request_id: Uuid, stages: &'s [Stage]) -> Self {
        Self {
            request_id,
            stages,
            fenced: false,
        }
    }

    /// [`Claim::at`] for a phase past the fence: before its work, the frozen inventory is re-read
    /// (refusing a damaged one) and the attempt's claim must still hold the fence.
    pub(super) fn fenced_at(request_id: Uuid, stages: &'s [Stage]) -> Self {
        Self {
            fenced: true,
            ..Self::at(request_id, stages)
        }
    }

    /// Claims the request for this attempt (bumping its generation).
    async fn take(self, acts: &CommunityActivities) -> PhaseResult<ExecToken> {
        Ok(acts.store.claim(self.request_id, self.stages).await?)
    }
}

/// Claims the request for this attempt, then runs `work` with the claim's token, heartbeating the
/// progress it reports (see [`heartbeating`]).
pub(super) async fn claimed<T>(
    (acts, ctx): Attempt<'_>,
    claim: Claim<'_>,
    work: impl AsyncFnOnce(ExecToken, &ProgressCell) -> PhaseResult<T>,
) -> PhaseResult<T> {
    let token = claim.take(acts).await?;
    heartbeating_with((acts, ctx), claim, token, work).await
}

/// [`claimed`] for a phase that leaves the request at the last stage of its claim: a claim that
/// finds the request there is a retry after the phase finished, answered by `finished` from what
/// that attempt recorded, without working (or heartbeating) again.
pub(super) async fn resumable<T>(
    (acts, ctx): Attempt<'_>,
    claim: Claim<'_>,
    finished: impl AsyncFnOnce(ExecToken) -> PhaseResult<T>,
    work: impl AsyncFnOnce(ExecToken, &ProgressCell) -> PhaseResult<T>,
) -> PhaseResult<T> {
    let token = claim.take(acts).await?;
    if claim.stages.last() == Some(&token.stage) {
        return finished(token).await;
    }
    heartbeating_with((acts, ctx), claim, token, work).await
}

/// Runs `work` with the claim's token and a fresh progress cell, heartbeating it; a fenced claim
/// first checks the frozen inventory and the fence.
async fn heartbeating_with<T>(
    (acts, ctx): Attempt<'_>,
    claim: Claim<'_>,
    token: ExecToken,
    work: impl AsyncFnOnce(ExecToken, &ProgressCell) -> PhaseResult<T>,
) -> PhaseResult<T> {
    let progress = ProgressCell::default();
    heartbeating(ctx, &progress, async {
        if claim.fenced {
            acts.store.load_frozen_inventory(token.request_id).await?;
            acts.store.verify_fence(&token).await?;
        }
        work(token, &progress).await
    })
    .await
}
