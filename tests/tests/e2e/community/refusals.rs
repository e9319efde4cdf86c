use std::time::Duration;

use activities::serving::acquire_serving_write;

use testkit::prelude::*;

/// The request row and approval as Postgres holds them, to prove a refusal changed nothing.
async fn durable_state(stack: &Stack, id: &str) -> (String, Option<String>, usize) {
    let id = id.parse().unwrap_or_default();
    let request = stack
        .store
        .get_request(id)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let approval = stack
        .store
        .approval_of(id)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let audit = stack
        .store
        .audit_events(id)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    (request.stage, approval.map(|a| a.approved_by), audit.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_submissions_are_refused_with_a_message_that_says_what_to_do() {
    let _shared = outage_lock().read().await;
    let _stack = stack().await;
    let cli = Cli::new(&unique_queue("usage"));
    let run = cli
        .run(&[
            "community",
            "submit",
            "--host",
            "  ",
            "--requested-by",
            "alice",
        ])
        .await
        .expect_code(2);
    assert!(run.stderr.contains("--host is empty"), "{}", run.stderr);
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
    let run = cli
        .run(&[
            "community",
            "submit",
            "--host",
            &unknown,
            "--requested-by",
            "alice",
        ])
        .await
        .expect_code(1);
    assert!(
        run.stderr.contains("no community has host"),
        "{}",
        run.stderr
    );
    let run = cli
        .run(&[
            "community",
            "approve",
            &uuid::Uuid::new_v4().to_string(),
            "--approved-by",
            "bob",
            "--inventory-digest",
            "x",
        ])
        .await
        .expect_code(1);
    assert!(
        run.stderr.contains("no deletion request has id"),
        "{}",
        run.stderr
    );
    let run = cli.run(&["community", "status", "not-a-uuid"]).await;
    assert_eq!(
        run.code, 2,
        "a malformed id is a usage error: {}",
        run.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_refusals_change_nothing_and_abort_before_deletion_serves_the_community_again() {
    let _shared = outage_lock().read().await;
    let stack = stack().await;
    let queue = unique_queue("refusals");
    let _worker = WorkerProcess::start(&queue, &[("BUZZ_FENCE_WAIT_SECS", "1")]).await;
    let cli = Cli::new(&queue);
    let host = unique_host("refusals");
    let target = seed(&stack, &host, small_plan()).await;
    let (id, digest) = cli.submit(&host, "alice", &[]).await;

    let second = cli
        .run(&[
            "community",
            "submit",
            "--host",
            &host,
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
            .run(&[
                "community",
                "approve",
                &id,
                "--approved-by",
                approver,
                "--inventory-digest",
                &digest_given,
            ])
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
    let run = cli
        .run(&[
            "community",
            "unblock",
            &id,
            "--unblocked-by",
            "carol",
            "--reason",
            "nothing",
        ])
        .await
        .expect_code(1);
    assert!(run.stderr.contains("not blocked"), "{}", run.stderr);

    // A serving write in flight holds the fence back, so the abort lands before deletion.
    let lease = acquire_serving_write(&stack.serving, target.community_id, "slow_upload")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    cli.approve(&id, "bob", &digest).await.expect_code(0);
    let again = cli
        .run(&[
            "community",
            "approve",
            &id,
            "--approved-by",
            "erin",
            "--inventory-digest",
            &digest,
        ])
        .await
        .expect_code(1);
    assert!(again.stderr.contains("refused"), "{}", again.stderr);
    cli.wait_status(&id, 60, |s| s["phase"] == "fencing").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    cli.run(&[
        "community",
        "abort",
        &id,
        "--aborted-by",
        "carol",
        "--reason",
        "customer withdrew",
    ])
    .await
    .expect_code(0);
    let status = cli.wait_status(&id, 60, |s| s["phase"] == "aborted").await;
    assert_eq!(status["abort"]["actor"], "carol");
    // The audit trail keeps who aborted and the reason given: the signed abort, then the
    // abort itself, each once.
    let audit = stack
        .store
        .audit_events(id.parse().unwrap_or_default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for name in ["abort_signed", "aborted"] {
        let events: Vec<_> = audit.iter().filter(|e| e.event == name).collect();
        assert_eq!(events.len(), 1, "one {name} event: {audit:?}");
        assert_eq!(events[0].actor, "carol", "{name}: {:?}", events[0]);
        assert_eq!(
            events[0].detail["reason"], "customer withdrew",
            "{name}: {:?}",
            events[0]
        );
    }
    lease.finish().await.unwrap_or_else(|e| panic!("{e}"));

    // Served again: a new serving write is admitted and rows can be written.
    let guard = acquire_serving_write(&stack.serving, target.community_id, "after_abort")
        .await
        .unwrap_or_else(|e| panic!("after an abort serving writes must be admitted: {e}"));
    guard.finish().await.unwrap_or_else(|e| panic!("{e}"));
    demo::seed_rows(&stack.serving, target.community_id, 1)
        .await
        .unwrap_or_else(|e| panic!("after an abort row writes must succeed: {e}"));
    let after = snapshot(&stack, target.community_id).await;
    assert!(
        !after.versions.is_empty() && !after.keys.is_empty(),
        "an abort deletes nothing"
    );
    let (stage, _, _) = durable_state(&stack, &id).await;
    assert_eq!(stage, "aborted");
    let run = cli
        .run(&[
            "community",
            "abort",
            &id,
            "--aborted-by",
            "carol",
            "--reason",
            "again",
        ])
        .await
        .expect_code(1);
    assert!(run.stderr.contains("refused"), "{}", run.stderr);
}
