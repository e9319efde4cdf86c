use std::time::Duration;

use demo::SeedPlan;

use testkit::prelude::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkilled_worker_mid_delete_is_finished_by_a_new_worker_without_restamping() {
    let _shared = outage_lock().read().await;
    let stack = stack().await;
    let queue = unique_queue("crash");
    // Small chunks and one DeleteObjects call at a time make deletion slow enough to kill.
    let worker_env = [("BUZZ_MANIFEST_CHUNK_ENTRIES", "60")];
    let first = WorkerProcess::start(&queue, &worker_env).await;
    let cli = Cli::new(&queue);
    let host = unique_host("crash");
    let plan = SeedPlan {
        objects: 200,
        versions: 3,
        delete_markers: 10,
        rows: 5,
        redis_keys: 5,
        parallelism: 16,
    };
    let target = seed(&stack, &host, plan).await;
    let (id, digest) = cli
        .submit(
            &host,
            "alice",
            &["--delete-parallelism", "1", "--chunks-per-call", "1000"],
        )
        .await;
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
    first.crash().await;

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

    let inspection = cli
        .run(&["community", "inspect", &id])
        .await
        .expect_code(0)
        .json();
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
