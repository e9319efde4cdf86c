use std::time::Duration;

use temporalio_client::{
    Client, ClientOptions, ConnectionOptions, WorkflowGetResultOptions, WorkflowStartOptions,
};
use temporalio_common::protos::temporal::api::enums::v1::IndexedValueType;
use temporalio_common::protos::temporal::api::operatorservice::v1::AddSearchAttributesRequest;
use temporalio_common::protos::temporal::api::testservice::v1::UnlockTimeSkippingRequest;
use temporalio_sdk::Runtime;
use temporalio_sdk_core::ephemeral_server::{EphemeralExe, TestServerConfig};
use workflows::stack_check::{StackCheck, StackCheckInput};

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stack_check_round_trips_every_store_on_the_dev_server() {
    let _shared = outage_lock().read().await;
    let _stack = stack().await;
    let queue = unique_queue("stack");
    let _worker = WorkerProcess::start(&queue, &[]).await;
    let run = Cli::new(&queue)
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
    let exe = std::env::var("TEMPORAL_TEST_SERVER_EXE").unwrap_or_else(|_| {
        panic!(
            "TEMPORAL_TEST_SERVER_EXE is not set: run `bash deploy/local/up && source .state/env`"
        )
    });
    let mut server = TestServerConfig::builder()
        .exe(EphemeralExe::ExistingPath(exe.clone()))
        .build()
        .start_server()
        .await
        .unwrap_or_else(|e| panic!("could not start the time-skipping server {exe}: {e}"));
    let url =
        url::Url::parse(&format!("http://{}", server.target)).unwrap_or_else(|e| panic!("{e}"));
    let client = Client::connect(
        ConnectionOptions::new(url).build(),
        ClientOptions::new("default").build(),
    )
    .await
    .unwrap_or_else(|e| panic!("connect to the test server: {e}"));
    client
        .connection()
        .operator_service()
        .add_search_attributes(tonic::Request::new(AddSearchAttributesRequest {
            search_attributes: workflows::search::ALL
                .iter()
                .map(|(name, kind)| {
                    let kind = if *kind == "Bool" {
                        IndexedValueType::Bool
                    } else {
                        IndexedValueType::Keyword
                    };
                    ((*name).to_owned(), kind as i32)
                })
                .collect(),
            namespace: "default".into(),
        }))
        .await
        .unwrap_or_else(|e| panic!("register search attributes: {e}"));

    let deps = worker::startup::Dependencies {
        store: stack.store.clone(),
        objects: stack.objects.clone(),
        cache: stack.cache.clone(),
        client: client.clone(),
    };
    let runtime = Runtime::from_current_tokio(Default::default()).unwrap_or_else(|e| panic!("{e}"));
    let queue = unique_queue("timeskip");
    let mut worker = worker::startup::build_worker(
        &runtime,
        &deps,
        &queue,
        Default::default(),
        Duration::from_secs(5),
    )
    .unwrap_or_else(|e| panic!("{e}"));
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
    let _ = server.shutdown().await;
}
