use testkit::prelude::*;
use testkit::story::PacedDeletion;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkilled_worker_mid_delete_is_finished_by_a_new_worker_without_restamping() {
    // Small chunks and one DeleteObjects call at a time make deletion slow enough to kill.
    let worker_env = [("BUZZ_MANIFEST_CHUNK_ENTRIES", "60")];
    let deletion = PacedDeletion::start("crash", &worker_env, 200).await;
    let (stack, cli, id) = (&deletion.stack, &deletion.cli, &deletion.id);

    // Kill the worker once at least one chunk is stamped and others are still pending.
    let progress = deletion.wait_for_a_stamped_chunk().await;
    assert!(
        progress.chunks_stamped < progress.chunks_total,
        "deletion finished before the crash could be injected: {progress:?}"
    );
    deletion.worker.process.crash().await;

    let _second = WorkerProcess::start(&deletion.worker.queue, &worker_env).await;
    cli.watch_within(id, 500, 300).await;

    deletion.target.assert_gone(stack, "the target").await;

    let inspection = cli.inspect(id).await;
    let mut stamped: Vec<u64> = audit_of(&inspection)
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
