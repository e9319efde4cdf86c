use std::time::Duration;

use testkit::prelude::*;
use testkit::seed::{ONE_DELETE_AT_A_TIME, paced_plan};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkilled_worker_mid_delete_is_finished_by_a_new_worker_without_restamping() {
    // Small chunks and one DeleteObjects call at a time make deletion slow enough to kill.
    let worker_env = [("BUZZ_MANIFEST_CHUNK_ENTRIES", "60")];
    let (stack, cli, first) = with_worker("crash", &worker_env).await;
    let queue = first.queue.clone();
    let host = unique_host("crash");
    let plan = paced_plan(200);
    let target = seed(&stack, &host, plan).await;
    let (id, digest) = cli.submit(&host, "alice", &ONE_DELETE_AT_A_TIME).await;
    cli.approve(&id, "bob", &digest).await.expect_code(0);

    // Kill the worker once at least one chunk is stamped and others are still pending.
    let request_id: uuid::Uuid = id.parse().unwrap_or_default();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let progress = stack
            .store
            .chunk_progress(request_id)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        if progress.chunks_stamped >= 1 {
            assert!(
                progress.chunks_stamped < progress.chunks_total,
                "deletion finished before the crash could be injected: {progress:?}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no chunk was ever stamped"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    first.process.crash().await;

    let _second = WorkerProcess::start(&queue, &worker_env).await;
    cli.run(&[
        "community",
        "watch",
        &id,
        "--interval-ms",
        "500",
        "--timeout-secs",
        "300",
    ])
    .await
    .expect_code(0);

    let after = snapshot(&stack, target.community_id).await;
    after.assert_gone("the target");

    let inspection = cli.inspect(&id).await;
    let mut stamped: Vec<u64> = inspection["audit"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|e| e["event"] == "chunk_stamped")
        .filter_map(|e| e["detail"]["chunk_no"].as_u64())
        .collect();
    let total = inspection["chunks"]["chunks_total"]
        .as_u64()
        .unwrap_or_default();
    stamped.sort_unstable();
    let before_dedup = stamped.len();
    stamped.dedup();
    assert_eq!(before_dedup, stamped.len(), "a chunk was stamped twice");
    assert_eq!(
        stamped.len() as u64,
        total,
        "every chunk stamped exactly once"
    );
}
