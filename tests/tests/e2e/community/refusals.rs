use std::time::Duration;

use activities::serving::acquire_serving_write;

use testkit::prelude::*;
use testkit::refusal::{assert_one_event, stage_approval_and_audit};

/// The request row and approval as Postgres holds them, to prove a refusal changed nothing.
async fn durable_state(stack: &Stack, id: &str) -> (String, Option<String>, usize) {
    stage_approval_and_audit(stack, id.parse().unwrap_or_default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_submissions_are_refused_with_a_message_that_says_what_to_do() {
    let _shared = outage_lock().read().await;
    let _stack = stack().await;
    let cli = Cli::new(&unique_queue("usage"));
    cli.run(&[
        "community",
        "submit",
        "--host",
        "  ",
        "--requested-by",
        "alice",
    ])
    .await
    .expect_refusal_naming(2, "--host is empty");
    // A retry cap below the first retry delay is refused before anything is recorded.
    let run = cli
        .run(&[
            "community",
            "submit",
            "--host",
            &unique_host("caps"),
            "--retry-initial-secs",
            "30",
            "--retry-max-secs",
            "5",
        ])
        .await
        .expect_code(2);
    assert!(
        run.stderr
            .contains("--retry-max-secs 5 is below --retry-initial-secs 30"),
        "{}",
        run.stderr
    );
    let unknown = unique_host("nobody");
    cli.run(&[
        "community",
        "submit",
        "--host",
        &unknown,
        "--requested-by",
        "alice",
    ])
    .await
    .expect_refusal_naming(1, "no community has host");
    cli.approve(&uuid::Uuid::new_v4().to_string(), "bob", "x")
        .await
        .expect_refusal_naming(1, "no deletion request has id");
    let run = cli.run(&["community", "status", "not-a-uuid"]).await;
    assert_eq!(
        run.code, 2,
        "a malformed id is a usage error: {}",
        run.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_refusals_change_nothing_and_abort_before_deletion_serves_the_community_again() {
    let fence_wait = [("BUZZ_FENCE_WAIT_SECS", "1")];
    let (stack, cli, _worker, target) = with_target("refusals", &fence_wait).await;
    let host = &target.host;
    let (id, digest) = cli.submit(host, "alice", &[]).await;

    let second = cli
        .run(&[
            "community",
            "submit",
            "--host",
            host,
            "--requested-by",
            "dave",
        ])
        .await
        .expect_code(1);
    assert!(
        second.stderr.contains(&id),
        "a second request must name the first: {}",
        second.stderr
    );

    let before = durable_state(&stack, &id).await;
    assert_eq!(before.0, "inventoried");
    for (approver, digest_given, expect) in [
        ("bob", "0".repeat(64), "digest"),
        ("alice", digest.clone(), "two-person"),
        (" ALICE ", digest.clone(), "two-person"),
    ] {
        let run = cli
            .approve(&id, approver, &digest_given)
            .await
            .expect_code(1);
        assert!(
            run.stderr.to_lowercase().contains(expect),
            "refusal for {approver:?} should mention {expect}: {}",
            run.stderr
        );
        assert_eq!(
            durable_state(&stack, &id).await,
            before,
            "a refused approval changed state"
        );
    }
    cli.unblock(&id, "carol", "nothing")
        .await
        .expect_refusal_naming(1, "not blocked");

    // A serving write in flight holds the fence back, so the abort lands before deletion.
    let lease = acquire_serving_write(&stack.serving, target.id, "slow_upload")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    cli.approve(&id, "bob", &digest).await.expect_code(0);
    cli.approve(&id, "erin", &digest)
        .await
        .expect_refusal_naming(1, "refused");
    cli.wait_status(&id, 60, |s| s["phase"] == "fencing").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    cli.abort(&id, "carol", "customer withdrew")
        .await
        .expect_code(0);
    let status = cli.wait_status(&id, 60, |s| s["phase"] == "aborted").await;
    assert_eq!(status["abort"]["actor"], "carol");
    // The audit trail keeps who aborted and the reason given: the signed abort, then the
    // abort itself, each once.
    let request = id.parse().unwrap_or_default();
    for name in ["abort_signed", "aborted"] {
        let reason = ("reason", "customer withdrew");
        assert_one_event(&stack, request, name, "carol", reason).await;
    }
    lease.finish().await.unwrap_or_else(|e| panic!("{e}"));

    // Served again: a new serving write is admitted and rows can be written.
    let guard = acquire_serving_write(&stack.serving, target.id, "after_abort")
        .await
        .unwrap_or_else(|e| panic!("after an abort serving writes must be admitted: {e}"));
    guard.finish().await.unwrap_or_else(|e| panic!("{e}"));
    demo::seed_rows(&stack.serving, target.id, 1)
        .await
        .unwrap_or_else(|e| panic!("after an abort row writes must succeed: {e}"));
    let after = snapshot(&stack, target.id).await;
    assert!(
        !after.versions.is_empty() && !after.keys.is_empty(),
        "an abort deletes nothing"
    );
    let (stage, _, _) = durable_state(&stack, &id).await;
    assert_eq!(stage, "aborted");
    cli.abort(&id, "carol", "again")
        .await
        .expect_refusal_naming(1, "refused");
}
