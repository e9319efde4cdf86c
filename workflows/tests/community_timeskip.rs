//! Orchestration tests of `CommunityDeletion` on the time-skipping Temporal test server, with
//! in-memory fake activities (the real activities are tested in the `activities` crate and
//! end to end in `tests/`).
//!
//! Time skipping stays locked while a test talks to a waiting workflow (approval, unblock):
//! unlocked, the server would jump an idle workflow to its timeout. Each test unlocks it once
//! only activities and retry backoff remain.

mod support;

use std::future::Future;
use std::sync::MutexGuard;

use support::fakes::{FROZEN_DIGEST, FakeStores, Ledger, Misbehaviour, community_of};
use support::{Deletion, HOST, REQUESTER, json_payload, payload, run, run_deletion};
use temporalio_client::WorkflowHistory;
use temporalio_client::errors::WorkflowGetResultError;
use workflows::community::{CANCEL_ACTOR, Phase, RequestEvent, Tuning};

const APPROVER: &str = "bob";

fn small_manifest() -> FakeStores {
    FakeStores::with_chunks(3)
}

/// A small manifest whose `activity` fails permanently once with `message`.
fn failing_once(activity: &'static str, message: &str) -> FakeStores {
    small_manifest().failing(activity, Misbehaviour::permanent(message))
}

/// Runs `body` once the deletion, approved, is blocked in object deletion before the
/// irreversible marker (its first claim was refused).
async fn run_blocked_before_the_marker<F, Fut>(body: F)
where
    F: FnOnce(Deletion) -> Fut,
    Fut: Future<Output = ()>,
{
    let fakes = small_manifest().failing_before_the_marker();
    run(fakes, |deletion| async move {
        deletion.approve_frozen(APPROVER).await;
        let blocked = deletion.wait_blocked().await;
        assert_eq!(blocked.phase, Phase::DeletingObjects);
        assert!(!deletion.fakes.ledger().irreversible);
        body(deletion).await;
    })
    .await;
}

/// Runs `body` once the deletion, approved, has started `activity`, which is held until released.
async fn run_approved_until_held<F, Fut>(activity: &'static str, body: F)
where
    F: FnOnce(Deletion) -> Fut,
    Fut: Future<Output = ()>,
{
    run(small_manifest().holding(activity), |deletion| async move {
        deletion.approve_frozen(APPROVER).await;
        deletion.wait_for_activity(activity).await;
        body(deletion).await;
    })
    .await;
}

/// Whether the audit trail holds a `Blocked` event.
fn ever_blocked(deletion: &Deletion) -> bool {
    deletion
        .fakes
        .events()
        .iter()
        .any(|e| matches!(e, RequestEvent::Blocked { .. }))
}

/// Waits for the recorded refusal of `actor`'s abort.
async fn wait_for_abort_refused(deletion: &Deletion, what: &str, actor: &str) {
    deletion
        .wait_for_event(
            what,
            |e| matches!(e, RequestEvent::AbortRefused { actor: by, .. } if by == actor),
        )
        .await;
}

/// Cancels the workflow, which must end cancelled after one abort by [`CANCEL_ACTOR`] that
/// lifted the fence; returns the ledger for further checks.
async fn cancelled_into_an_abort(deletion: &Deletion) -> MutexGuard<'_, Ledger> {
    deletion.cancel().await;
    let ended = deletion.result().await;
    assert!(
        matches!(ended, Err(WorkflowGetResultError::Cancelled { .. })),
        "{ended:?}"
    );
    let ledger = deletion.fakes.ledger();
    assert_eq!(ledger.aborts.len(), 1);
    assert_eq!(ledger.aborts[0].abort.actor, CANCEL_ACTOR);
    assert!(!ledger.fenced && !ledger.quiescing);
    ledger
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_update_rejects_wrong_digest_self_approval_and_wrong_phase_without_state_change() {
    let fakes = small_manifest().holding("community.inventory");
    run(fakes, |deletion| async move {
        deletion.wait_for_activity("community.inventory").await;
        let early = deletion.approve(APPROVER, FROZEN_DIGEST).await.unwrap_err();
        assert!(
            early.contains("phase submitted, not awaiting_approval"),
            "{early}"
        );

        deletion.fakes.release("community.inventory");
        let waiting = deletion.await_approval().await;
        assert_eq!(
            waiting.inventory.as_ref().map(|i| i.digest.as_str()),
            Some(FROZEN_DIGEST)
        );

        let wrong_digest = deletion
            .approve(APPROVER, "sha256:stale")
            .await
            .unwrap_err();
        assert!(
            wrong_digest.contains("does not match the frozen inventory digest"),
            "{wrong_digest}"
        );
        let self_approval = deletion
            .approve("  ALICE ", FROZEN_DIGEST)
            .await
            .unwrap_err();
        assert!(self_approval.contains("two-person rule"), "{self_approval}");
        let anonymous = deletion.approve(" ", FROZEN_DIGEST).await.unwrap_err();
        assert!(anonymous.contains("approved_by is empty"), "{anonymous}");

        let unchanged = deletion.status().await;
        assert_eq!(unchanged.phase, Phase::AwaitingApproval);
        assert_eq!(unchanged.approval, None);
        assert_eq!(deletion.fakes.attempts("community.record_approval"), 0);
        assert_eq!(deletion.fakes.attempts("community.preflight"), 0);
        assert!(
            deletion.fakes.events().is_empty(),
            "a refused update leaves no audit event"
        );

        let record = deletion.approve(APPROVER, FROZEN_DIGEST).await.unwrap();
        assert_eq!(record.approved_by, APPROVER);
        assert_eq!(record.digest, FROZEN_DIGEST);
        assert_eq!(
            deletion.fakes.ledger().approvals.len(),
            1,
            "evidence persisted before the update returned"
        );
        let second = deletion.approve("carol", FROZEN_DIGEST).await.unwrap_err();
        assert!(second.contains("already approved by bob"), "{second}");

        let done = deletion.runs_to_retention().await;
        assert_eq!(
            done.approval.map(|a| a.approved_by),
            Some(APPROVER.to_string())
        );
        assert_eq!(deletion.fakes.attempts("community.record_approval"), 1);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_approval_signal_is_recorded_and_changes_nothing() {
    run(small_manifest(), |deletion| async move {
        deletion.await_approval().await;

        deletion.signal_approve(APPROVER, "sha256:stale").await;
        deletion
            .wait_for_event("ApprovalRejected (wrong digest)", |e| {
                matches!(e, RequestEvent::ApprovalRejected { actor, reason }
                    if actor == APPROVER && reason.contains("does not match the frozen inventory digest"))
            })
            .await;
        deletion.signal_approve(REQUESTER, FROZEN_DIGEST).await;
        deletion
            .wait_for_event("ApprovalRejected (self-approval)", |e| {
                matches!(e, RequestEvent::ApprovalRejected { actor, reason }
                    if actor == REQUESTER && reason.contains("two-person rule"))
            })
            .await;

        let unchanged = deletion.status().await;
        assert_eq!(unchanged.phase, Phase::AwaitingApproval);
        assert_eq!(unchanged.approval, None);
        assert_eq!(deletion.fakes.attempts("community.record_approval"), 0);
        assert_eq!(deletion.fakes.attempts("community.preflight"), 0);

        deletion.signal_approve(APPROVER, FROZEN_DIGEST).await;
        deletion.wait_for("approval recorded", |s| s.approval.is_some()).await;
        let done = deletion.runs_to_retention().await;
        assert_eq!(done.approval.map(|a| a.approved_by), Some(APPROVER.to_string()));
        assert_eq!(deletion.fakes.ledger().approvals.len(), 1);
    })
    .await;
}

/// What the Web UI lets an operator send instead of the documented JSON: a wrong object, a
/// known field with a typo beside it, no input, several inputs, `null`, an array, bytes that
/// are not JSON at all.
fn malformed_inputs() -> Vec<Vec<temporalio_common::protos::temporal::api::common::v1::Payload>> {
    vec![
        vec![json_payload(r#"{"garbage": 1}"#)],
        vec![json_payload(&format!(
            r#"{{"approved_by": "bob", "digest": "{FROZEN_DIGEST}", "actor": "bob", "reason": "x", "typo": 1}}"#
        ))],
        vec![],
        vec![json_payload("{}"), json_payload("{}")],
        vec![payload("binary/null", b"")],
        vec![json_payload(r#"["bob", "x"]"#)],
        vec![payload("binary/plain", b"approve it please")],
        vec![json_payload("{not json")],
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_signals_are_recorded_refusals_and_never_wedge_the_workflow() {
    let fakes = failing_once("community.preflight", "version-list permission missing");
    run(fakes, |deletion| async move {
        let is_refusal = |e: &RequestEvent| {
            matches!(e, RequestEvent::ApprovalRejected { reason, .. }
                | RequestEvent::AbortRefused { reason, .. }
                | RequestEvent::UnblockRejected { reason, .. } if reason.starts_with("malformed "))
        };
        let refusals = |deletion: &Deletion| {
            deletion.fakes.events().iter().filter(|e| is_refusal(e)).count()
        };
        let per_point = 3 * malformed_inputs().len();
        deletion.await_approval().await;
        for name in ["approve", "abort", "unblock"] {
            for input in malformed_inputs() {
                deletion.signal_raw(name, input).await;
            }
        }
        deletion
            .wait_for("every malformed signal refused while awaiting approval", |_| {
                refusals(&deletion) == per_point
            })
            .await;
        let waiting = deletion.status().await;
        assert_eq!(waiting.phase, Phase::AwaitingApproval);
        assert_eq!((waiting.approval, waiting.abort), (None, None));
        assert_eq!(deletion.fakes.attempts("community.record_approval"), 0);

        deletion.signal_approve(APPROVER, FROZEN_DIGEST).await;
        let blocked = deletion.wait_blocked().await;
        for name in ["approve", "abort", "unblock"] {
            for input in malformed_inputs() {
                deletion.signal_raw(name, input).await;
            }
        }
        deletion
            .wait_for("every malformed signal refused while blocked", |_| {
                refusals(&deletion) == 2 * per_point
            })
            .await;
        let still = deletion.status().await;
        assert_eq!(still.blocked, blocked.blocked, "nothing unblocked it");
        assert_eq!(still.abort, None, "nothing aborted it");
        let garbage = deletion.fakes.events().into_iter().find(|e| {
            matches!(e, RequestEvent::ApprovalRejected { reason, .. } if reason.contains("\"garbage\""))
        });
        assert!(
            matches!(&garbage, Some(RequestEvent::ApprovalRejected { actor, reason })
                if actor == "unknown" && reason.contains(r#"{"approved_by": "<operator>""#)),
            "{garbage:?}"
        );

        deletion
            .signal_raw(
                "unblock",
                vec![json_payload(&signed_unblock(
                    &deletion,
                    "carol",
                    "granted the permission",
                ))],
            )
            .await;
        deletion.wait_for("unblocked", |s| s.blocked.is_none()).await;
        deletion.runs_to_retention().await;
        assert_eq!(deletion.fakes.ledger().approvals.len(), 1);
        deletion.replay_every_run().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_before_irreversible_point_ends_aborted_and_lifts_fence() {
    run_approved_until_held("community.drain", |deletion| async move {
        let draining = deletion.status().await;
        assert_eq!(draining.phase, Phase::Draining);
        assert_eq!(draining.fence_generation, Some(1));
        assert!(deletion.fakes.ledger().fenced);

        let refused = deletion.abort("carol", " ").await.unwrap_err();
        assert!(refused.contains("reason is empty"), "{refused}");
        let outcome = deletion.abort("carol", "wrong tenant").await.unwrap();
        assert_eq!(outcome, Phase::Aborted);

        {
            let ledger = deletion.fakes.ledger();
            assert!(
                !ledger.fenced && !ledger.quiescing,
                "the fence is lifted: the community is served again"
            );
            assert_eq!(
                ledger.generation, 2,
                "the abort bumped the generation past the fence's"
            );
            assert_eq!(ledger.aborts.len(), 1);
            assert_eq!(ledger.aborts[0].abort.actor, "carol");
        }
        assert_eq!(deletion.fakes.attempts("community.freeze_manifest"), 0);
        assert_eq!(deletion.fakes.attempts("community.delete_chunks"), 0);

        let done = deletion.result().await.unwrap();
        assert_eq!(done.phase, Phase::Aborted);
        assert_eq!(done.fence_generation, Some(2));
        assert_eq!(done.abort.map(|a| a.actor), Some("carol".to_string()));
        let (_, stage, _, blocked) = deletion.search_attributes().await;
        assert_eq!(stage.as_deref(), Some("aborted"));
        assert_eq!(blocked, Some(false));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_after_irreversible_point_is_refused_recorded_and_deletion_completes() {
    run_approved_until_held("community.delete_chunks", |deletion| async move {
        assert_eq!(deletion.status().await.phase, Phase::DeletingObjects);

        let refused = deletion
            .abort("carol", "changed my mind")
            .await
            .unwrap_err();
        assert!(
            refused.contains("deletion passed the irreversible point")
                && refused.contains("abort refused"),
            "{refused}"
        );
        wait_for_abort_refused(&deletion, "AbortRefused (update)", "carol").await;
        deletion.signal_abort("dave", "from the web ui").await;
        deletion
            .wait_for_event("AbortRefused (signal)", |e| {
                matches!(e, RequestEvent::AbortRefused { actor, reason }
                if actor == "dave" && reason.contains("irreversible point"))
            })
            .await;
        assert_eq!(deletion.status().await.abort, None);

        deletion.fakes.release("community.delete_chunks");
        let done = deletion.runs_to_retention().await;
        assert!(done.verification.is_some());
        let ledger = deletion.fakes.ledger();
        assert!(ledger.aborts.is_empty(), "no abort ran");
        assert!(ledger.completed);
        assert!(ledger.fenced, "the fence stays: the community is gone");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_failure_blocks_until_unblock_then_retries_the_phase() {
    let stray = "unknown key shape under tenant prefix: media/x/not-a-hash";
    let fakes = failing_once("community.freeze_manifest", stray);
    run(fakes, |deletion| async move {
        deletion.await_approval().await;
        let not_blocked = deletion.unblock("bob", "nothing to fix").await.unwrap_err();
        assert!(not_blocked.contains("request is not blocked (phase awaiting_approval)"), "{not_blocked}");

        deletion.approve(APPROVER, FROZEN_DIGEST).await.unwrap();
        let blocked = deletion.wait_blocked().await;
        let info = blocked.blocked.clone().unwrap();
        assert_eq!(info.phase, Phase::Draining);
        assert!(info.reason.contains(stray), "{}", info.reason);
        assert!(info.since.ends_with('Z'), "{}", info.since);
        deletion
            .wait_for_event("Blocked", |e| {
                matches!(e, RequestEvent::Blocked { phase, reason } if phase == "draining" && reason.contains(stray))
            })
            .await;
        let (_, stage, _, flag) = deletion.search_attributes().await;
        assert_eq!((stage.as_deref(), flag), (Some("draining"), Some(true)));
        assert_eq!(deletion.fakes.attempts("community.freeze_manifest"), 1, "a permanent failure is not retried");

        let anonymous = deletion.unblock("", "removed the key").await.unwrap_err();
        assert!(anonymous.contains("actor is empty"), "{anonymous}");
        let retried = deletion.unblock("bob", "removed the stray key").await.unwrap();
        assert_eq!(retried, Phase::Draining);
        deletion
            .wait_for_event("Unblocked", |e| matches!(e, RequestEvent::Unblocked { actor, .. } if actor == "bob"))
            .await;

        let done = deletion.runs_to_retention().await;
        assert_eq!(done.blocked, None);
        assert_eq!(deletion.fakes.attempts("community.freeze_manifest"), 2, "the same phase ran again");
        let (_, _, _, flag) = deletion.search_attributes().await;
        assert_eq!(flag, Some(false));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_object_version_blocks_verification_and_its_unblock_deletes_it_before_verifying_again()
{
    let fakes = small_manifest();
    let late = "media/x/late@v-late (object)";
    fakes.ledger().late_versions = vec![late.to_string()];
    run(fakes, |deletion| async move {
        deletion.approve_frozen(APPROVER).await;
        let blocked = deletion.wait_blocked().await;
        let info = blocked.blocked.clone().unwrap();
        assert_eq!(info.phase, Phase::Verifying);
        assert!(info.reason.contains(late), "{}", info.reason);
        assert_eq!(
            deletion.fakes.attempts("community.verify"),
            1,
            "not retried: it blocks"
        );
        assert_eq!(
            deletion.fakes.attempts("community.delete_late_versions"),
            0,
            "nothing before the unblock"
        );
        assert!(!deletion.fakes.ledger().completed);

        let retried = deletion
            .unblock("bob", "the stalled writer is gone")
            .await
            .unwrap();
        assert_eq!(retried, Phase::Verifying);
        let done = deletion.runs_to_retention().await;
        assert_eq!(done.blocked, None);
        assert_eq!(done.progress.late_versions_deleted, 1);
        assert_eq!(deletion.fakes.attempts("community.delete_late_versions"), 1);
        assert_eq!(
            deletion.fakes.attempts("community.verify"),
            2,
            "verified again after the late deletion"
        );
        assert!(deletion.fakes.ledger().completed);
        deletion.replay_every_run().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_failures_retry_with_backoff_and_complete() {
    let fakes = small_manifest();
    fakes.misbehave(
        "community.fence",
        Misbehaviour {
            transient: 3,
            message: "a serving-write lease is still live".into(),
            ..Misbehaviour::default()
        },
    );
    run(fakes, |deletion| async move {
        deletion.approve_frozen(APPROVER).await;
        // Backoff of 30 s, 60 s and 120 s: only time skipping lets this finish.
        let done = deletion.runs_to_retention().await;
        assert_eq!(deletion.fakes.attempts("community.fence"), 4);
        assert_eq!(done.blocked, None);
        assert!(!ever_blocked(&deletion), "a transient failure never blocks");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_loop_continues_as_new_and_history_stays_bounded() {
    let chunks = 130;
    let tuning = Tuning {
        chunks_per_call: 1,
        ..Tuning::default()
    };
    let rounds_per_run = u64::from(tuning.delete_rounds_per_run);
    run_deletion(
        FakeStores::with_chunks(chunks),
        tuning,
        |deletion| async move {
            deletion.approve_frozen(APPROVER).await;
            let done = deletion.runs_to_retention().await;
            assert_eq!(done.progress.chunks_done, chunks);
            assert_eq!(done.progress.versions_deleted, done.progress.versions_total);
            let expected_runs = chunks.div_ceil(rounds_per_run);
            assert_eq!(u64::from(done.run_number) + 1, expected_runs);
            {
                let ledger = deletion.fakes.ledger();
                assert_eq!(ledger.chunk_stamps.len() as u64, chunks);
                assert!(
                    ledger.chunk_stamps.values().all(|&n| n == 1),
                    "no chunk stamped twice"
                );
            }

            let events = deletion.events_per_run().await;
            eprintln!("history events per run: {events:?}");
            assert_eq!(
                events.len() as u64,
                expected_runs,
                "one history per run: {events:?}"
            );
            assert!(
                events.iter().all(|&n| n < 2000),
                "every run stays under 2,000 events: {events:?}"
            );
            // A run's history depends on the rounds per run, not on the tenant's size.
            let per_round_budget = 8 * rounds_per_run as usize + 150;
            assert!(
                events.iter().all(|&n| n <= per_round_budget),
                "{events:?} > {per_round_budget}"
            );
            assert_eq!(
                deletion.memo("approved_by").await.as_deref(),
                Some(APPROVER)
            );
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_query_reports_phase_progress_and_blocked_reason() {
    let fakes = FakeStores::with_chunks(5);
    let refusal = "stale generation 1 < 2: a newer attempt owns the request";
    fakes.misbehave(
        "community.delete_chunks",
        Misbehaviour {
            succeed_first: 2,
            ..Misbehaviour::permanent(refusal)
        },
    );
    let tuning = Tuning {
        chunks_per_call: 1,
        ..Tuning::default()
    };
    run_deletion(fakes, tuning, |deletion| async move {
        let waiting = deletion.await_approval().await;
        assert_eq!(waiting.host, HOST);
        assert_eq!(waiting.requested_by, REQUESTER);
        assert_eq!(waiting.community_id, Some(community_of(HOST)));
        deletion.approve(APPROVER, FROZEN_DIGEST).await.unwrap();

        let status = deletion
            .wait_for("blocked in object deletion", |s| s.blocked.is_some())
            .await;
        assert_eq!(status.phase, Phase::DeletingObjects);
        let blocked = status.blocked.clone().unwrap();
        assert_eq!(blocked.phase, Phase::DeletingObjects);
        assert!(blocked.reason.contains(refusal), "{}", blocked.reason);
        assert!(
            status
                .last_error
                .as_deref()
                .unwrap_or_default()
                .contains(refusal)
        );
        assert_eq!(status.progress.chunks_total, 5);
        assert_eq!(status.progress.chunks_done, 2);
        assert_eq!(status.progress.versions_total, 50);
        assert_eq!(status.progress.versions_deleted, 20);
        assert_eq!(status.fence_generation, Some(1));
        assert_eq!(
            status.approval.as_ref().map(|a| a.approved_by.as_str()),
            Some(APPROVER)
        );
        assert_eq!(
            status.inventory.as_ref().map(|i| i.digest.as_str()),
            Some(FROZEN_DIGEST)
        );
        assert_eq!(status.run_number, 0);

        let (kind, stage, community, flag) = deletion.search_attributes().await;
        assert_eq!(kind.as_deref(), Some("community"));
        assert_eq!(stage.as_deref(), Some("deleting_objects"));
        assert_eq!(community, Some(community_of(HOST).to_string()));
        assert_eq!(flag, Some(true));
        assert_eq!(deletion.memo("host").await.as_deref(), Some(HOST));
        assert_eq!(
            deletion.memo("requested_by").await.as_deref(),
            Some(REQUESTER)
        );
        assert_eq!(
            deletion.memo("approved_by").await.as_deref(),
            Some(APPROVER)
        );

        deletion
            .unblock("bob", "reclaimed the request")
            .await
            .unwrap();
        let done = deletion.runs_to_retention().await;
        assert_eq!(done.blocked, None);
        assert_eq!(done.progress.chunks_done, 5);
        assert_eq!(done.progress.rows_purged, 42);
        assert_eq!(done.progress.keys_purged, 7);
        assert_eq!(done.verification.map(|v| v.redis_empty_passes), Some(2));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflow_cancellation_before_irreversible_point_aborts_as_temporal_cancel() {
    run(small_manifest(), |deletion| async move {
        deletion.await_approval().await;
        let ledger = cancelled_into_an_abort(&deletion).await;
        assert_eq!(ledger.approvals.len(), 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflow_cancellation_after_irreversible_point_is_refused_recorded_and_deletion_completes()
{
    run_approved_until_held("community.delete_chunks", |deletion| async move {
        deletion.cancel().await;
        deletion
            .wait_for_event("AbortRefused (cancellation)", |e| {
                matches!(e, RequestEvent::AbortRefused { actor, reason }
                if actor == CANCEL_ACTOR && reason.contains("irreversible point"))
            })
            .await;
        deletion.fakes.release("community.delete_chunks");
        deletion.runs_to_retention().await;
        assert!(deletion.fakes.ledger().aborts.is_empty());
        assert!(deletion.fakes.ledger().completed);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_refusal_ends_the_workflow_failed_with_its_message() {
    let fakes = failing_once("community.register", "unknown host target.example");
    run(fakes, |deletion| async move {
        let ended = deletion.result().await;
        match ended {
            Err(WorkflowGetResultError::Failed(failure)) => {
                assert!(
                    format!("{failure:?}").contains("unknown host target.example"),
                    "{failure:?}"
                )
            }
            other => panic!("expected a failed workflow, got {other:?}"),
        }
        assert_eq!(deletion.fakes.attempts("community.inventory"), 0);
    })
    .await;
}

/// The cancellation comes in the last run: the Java time-skipping test server fails the workflow
/// task that continues as new after a cancellation request (`Internal: Generated message class
/// StartWorkflowExecutionRequest missing method getNamespace`); `temporal server start-dev`
/// accepts it, and this scenario passes there with the cancellation in the first run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn histories_with_refusals_blocks_cancellation_and_continue_as_new_replay_deterministically()
{
    let fakes = FakeStores::with_chunks(6);
    fakes.misbehave(
        "community.delete_chunks",
        Misbehaviour {
            succeed_first: 1,
            ..Misbehaviour::permanent("partial DeleteObjects acknowledgement left unrepaired")
        },
    );
    fakes.hold_after("community.delete_chunks", 4);
    let tuning = Tuning {
        chunks_per_call: 1,
        delete_rounds_per_run: 2,
        ..Tuning::default()
    };
    run_deletion(fakes, tuning, |deletion| async move {
        deletion.await_approval().await;
        deletion
            .approve(REQUESTER, FROZEN_DIGEST)
            .await
            .unwrap_err();
        deletion.signal_approve(APPROVER, "sha256:stale").await;
        deletion
            .wait_for_event("ApprovalRejected", |e| {
                matches!(e, RequestEvent::ApprovalRejected { .. })
            })
            .await;
        deletion.approve(APPROVER, FROZEN_DIGEST).await.unwrap();
        deletion.wait_blocked().await;
        deletion.abort("carol", "too late").await.unwrap_err();
        deletion.unblock("bob", "repaired the chunk").await.unwrap();

        deletion
            .wait_for("the third run", |s| s.run_number == 2)
            .await;
        deletion.cancel().await;
        wait_for_abort_refused(&deletion, "AbortRefused (cancellation)", CANCEL_ACTOR).await;
        deletion.fakes.release("community.delete_chunks");
        let done = deletion.runs_to_retention().await;
        assert_eq!(
            done.run_number, 2,
            "six chunks at two calls per run take three runs"
        );

        deletion.replay_every_run().await;
    })
    .await;
}

/// Blocked while deleting objects, but before the database's irreversible marker (the claim was
/// refused): the abort is accepted, the abort activity lifts the fence, and the request ends
/// aborted; nothing was deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_of_a_block_in_object_deletion_before_the_marker_ends_aborted_and_lifts_the_fence() {
    run_blocked_before_the_marker(|deletion| async move {
        let outcome = deletion
            .abort("carol", "wrong tenant after all")
            .await
            .unwrap();
        assert_eq!(outcome, Phase::Aborted);
        let done = deletion.result().await.unwrap();
        assert_eq!(done.phase, Phase::Aborted);
        assert_eq!(done.abort.map(|a| a.actor), Some("carol".to_string()));
        let ledger = deletion.fakes.ledger();
        assert!(
            !ledger.fenced && !ledger.quiescing,
            "the community is served again"
        );
        assert_eq!(ledger.aborts.len(), 1, "the abort ran once");
        assert!(ledger.chunk_stamps.is_empty(), "nothing was deleted");
        assert!(!ledger.irreversible);
    })
    .await;
}

/// Blocked while deleting objects after the marker: the abort is accepted tentatively, the abort
/// activity refuses (and records the refusal), the request stays blocked, and after unblock the
/// deletion completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_of_a_block_after_the_marker_is_refused_by_the_database_and_the_block_stays() {
    let fakes = failing_once(
        "community.delete_chunks",
        "partial acknowledgement left unrepaired",
    );
    run(fakes, |deletion| async move {
        deletion.approve_frozen(APPROVER).await;
        deletion.wait_blocked().await;
        assert!(deletion.fakes.ledger().irreversible);

        let refused = deletion.abort("carol", "too late").await.unwrap_err();
        assert!(
            refused.contains("the database recorded it before this abort")
                && refused.contains("abort refused"),
            "{refused}"
        );
        wait_for_abort_refused(&deletion, "AbortRefused (by the database)", "carol").await;
        let still = deletion.status().await;
        assert!(still.blocked.is_some(), "blocked stays blocked");
        assert_eq!(still.abort, None);
        assert_eq!(still.phase, Phase::DeletingObjects);
        // Known now: a second abort is refused without asking the database again.
        let again = deletion.abort("dave", "still too late").await.unwrap_err();
        assert!(again.contains("irreversible point"), "{again}");
        assert_eq!(deletion.fakes.attempts("community.abort"), 1);

        deletion.unblock("bob", "repaired").await.unwrap();
        deletion.runs_to_retention().await;
        let ledger = deletion.fakes.ledger();
        assert!(ledger.aborts.is_empty());
        assert!(ledger.completed);
    })
    .await;
}

/// A late zombie claims after the live attempt, so the live attempt's next write is refused with
/// a stale generation. Whether the activity sends it retryable (as it does now) or non-retryable
/// (as an older worker did), the request never blocks: the phase runs again and completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_generation_failure_never_blocks_the_request() {
    let fakes = small_manifest();
    let stale = "request x: execution generation 4 is stale (current is 5)";
    fakes.misbehave(
        "community.fence",
        Misbehaviour {
            stale: 2,
            stale_non_retryable: true,
            message: stale.into(),
            ..Misbehaviour::default()
        },
    );
    fakes.misbehave(
        "community.delete_chunks",
        Misbehaviour {
            stale: 1,
            message: stale.into(),
            ..Misbehaviour::default()
        },
    );
    run(fakes, |deletion| async move {
        deletion.approve_frozen(APPROVER).await;
        let done = deletion.runs_to_retention().await;
        assert_eq!(done.blocked, None);
        assert_eq!(deletion.fakes.attempts("community.fence"), 3);
        assert_eq!(deletion.fakes.attempts("community.delete_chunks"), 2);
        assert!(
            !ever_blocked(&deletion),
            "a stale generation never blocks: {:?}",
            deletion.fakes.events()
        );
    })
    .await;
}

/// A workflow cancellation while blocked in object deletion before the marker: the database
/// decides it is still an abort, the fence is lifted, and the run ends Canceled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflow_cancellation_of_a_block_before_the_marker_aborts_and_ends_canceled() {
    run_blocked_before_the_marker(|deletion| async move {
        let ledger = cancelled_into_an_abort(&deletion).await;
        assert!(ledger.chunk_stamps.is_empty());
    })
    .await;
}

/// A history recorded on the dev server by a worker built before the signal handlers took raw
/// payloads (their argument was the typed request): a refused `approve` (stale digest), `abort`
/// (empty actor) and `unblock` (not blocked) signal, then the approving signal, through to
/// completion. Today's code must replay it command for command.
#[tokio::test]
async fn a_history_recorded_before_signals_took_raw_payloads_still_replays() {
    let recorded = include_bytes!("histories/signals_before_raw_decoding.json");
    let history = WorkflowHistory::from_json(recorded).expect("the recorded history parses");
    support::replayer()
        .replay_workflow(history)
        .await
        .expect("the recorded history replays deterministically");
}

/// The JSON of an unblock signed (as the fakes accept it) by `actor`'s key.
fn signed_unblock(deletion: &Deletion, actor: &str, reason: &str) -> String {
    let unblock = workflows::community::UnblockRequest {
        actor: actor.into(),
        reason: reason.into(),
        signed: Some(support::fake_signed(
            workflows::operator::Action::Unblock,
            actor,
            deletion.request_id,
            None,
        )),
    };
    serde_json::to_string(&unblock).unwrap_or_default()
}
