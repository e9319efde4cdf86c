use std::time::Duration;

use temporalio_client::{WorkflowGetResultOptions, WorkflowStartOptions};
use temporalio_common::protos::temporal::api::testservice::v1::UnlockTimeSkippingRequest;
use temporalio_sdk::Runtime;
use workflows::stack_check::{StackCheck, StackCheckInput};

use testkit::prelude::*;
use testkit::temporal::start_test_server;
use testkit::workers::startup_worker;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stack_check_round_trips_every_store_on_the_dev_server() {
    let (_stack, cli, _worker) = with_worker("stack", &[]).await;
    let run = cli
        .run(&["stack-check", "--sleep-secs", "1"])
        .await
        .expect_code(0);
    let report = run.json();
    assert_eq!(report["touched"]["redis_keys_round_tripped"], 1);
    assert!(
        report["touched"]["postgres_schema_version"]
            .as_i64()
            .unwrap_or_default()
            >= 1
    );
    assert!(
        !report["touched"]["s3_version_id"]
            .as_str()
            .unwrap_or_default()
            .is_empty()
    );
    assert_eq!(report["slept_secs"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hour_long_timer_finishes_in_seconds_on_the_time_skipping_server() {
    let _shared = outage_lock().read().await;
    let stack = stack().await;
    let (mut server, client) = start_test_server(None).await;
    let runtime = Runtime::from_current_tokio(Default::default()).unwrap_or_else(|e| panic!("{e}"));
    let queue = unique_queue("timeskip");
    let mut worker = startup_worker(&runtime, &stack, &client, &queue, Duration::from_secs(5));
    let shutdown = worker.shutdown_handle();
    let (worker_result, report) = tokio::join!(worker.run(), async {
        let handle = client
            .start_workflow(
                StackCheck::run,
                StackCheckInput {
                    nonce: "time-skip".into(),
                    sleep_secs: 3600,
                },
                WorkflowStartOptions::new(queue.clone(), unique_queue("wf")).build(),
            )
            .await
            .unwrap_or_else(|e| panic!("start: {e}"));
        // Nothing waits for a signal, so time skipping can be unlocked right away.
        client
            .connection()
            .test_service()
            .unlock_time_skipping(tonic::Request::new(UnlockTimeSkippingRequest {}))
            .await
            .unwrap_or_else(|e| panic!("unlock time skipping: {e}"));
        let result = tokio::time::timeout(
            Duration::from_secs(60),
            handle.get_result(WorkflowGetResultOptions::default()),
        )
        .await;
        shutdown();
        result
    });
    worker_result.unwrap_or_else(|e| panic!("worker: {e}"));
    let report = report
        .unwrap_or_else(|_| panic!("a one-hour timer did not finish within 60 s of wall time"))
        .unwrap_or_else(|e| panic!("workflow failed: {e}"));
    assert_eq!(report.slept_secs, 3600);
    assert_eq!(report.touched.s3_echo, "time-skip");
    server.shutdown().await;
}
