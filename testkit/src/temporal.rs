//! Temporal for the tests: a client of the shared dev server, the `temporal` CLI against it (what
//! an operator without our CLI, or the Web UI, sends), and a fresh time-skipping test server with
//! the search attributes registered.

use std::process::Stdio;

use stack_config::env as stack_env;
use temporalio_client::{Client, ClientOptions, ConnectionOptions};
use temporalio_common::protos::temporal::api::enums::v1::IndexedValueType;
use temporalio_common::protos::temporal::api::operatorservice::v1::AddSearchAttributesRequest;
use tokio::process::Command;

use crate::cli::CliRun;
use crate::env::{HOW_TO_START, required, temporal_namespace};
use crate::test_server::TestServer;

/// Connects to the Temporal server at `address` in `namespace`, as `identity` when given.
pub async fn connect(address: &str, namespace: &str, identity: Option<&str>) -> Client {
    let url = url::Url::parse(&format!("http://{address}"))
        .unwrap_or_else(|e| panic!("Temporal address {address}: {e}"));
    let connection = match identity {
        Some(identity) => ConnectionOptions::new(url)
            .identity(identity.to_owned())
            .build(),
        None => ConnectionOptions::new(url).build(),
    };
    stack_config::temporal::client_connect(
        connection,
        ClientOptions::new(namespace.to_owned()).build(),
    )
    .await
    .unwrap_or_else(|e| panic!("Temporal not reachable at {address}: {e}\n{HOW_TO_START}"))
}

/// A client of the shared dev server (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE).
pub async fn dev_client() -> Client {
    connect(
        &required(stack_env::TEMPORAL_ADDRESS),
        &temporal_namespace(),
        None,
    )
    .await
}

/// What the server answers (`RESOURCE_EXHAUSTED`, cause `BUSY_WORKFLOW`) when it could not take
/// a workflow's lock in time: the request was refused whole, nothing of it applied. The CLI does
/// not retry it; an operator would, so the tests do.
const WORKFLOW_BUSY: &str = "Workflow is busy";

/// How often, and how far apart, a command the server refused as busy is sent again.
const BUSY_ATTEMPTS: u32 = 10;
const BUSY_PAUSE: std::time::Duration = std::time::Duration::from_millis(500);

/// Runs the Temporal CLI (`TEMPORAL_CLI_EXE`) against the shared dev server, sending a command
/// again while the server refuses it as busy (see [`WORKFLOW_BUSY`]).
pub async fn temporal_cli(args: &[&str]) -> CliRun {
    let mut attempt = 1;
    loop {
        let run = temporal_cli_once(args).await;
        if run.code == 0 || !run.stderr.contains(WORKFLOW_BUSY) || attempt == BUSY_ATTEMPTS {
            return run;
        }
        attempt += 1;
        tokio::time::sleep(BUSY_PAUSE).await;
    }
}

async fn temporal_cli_once(args: &[&str]) -> CliRun {
    let output = Command::new(required("TEMPORAL_CLI_EXE"))
        .args(args)
        .args([
            "--address",
            &required(stack_env::TEMPORAL_ADDRESS),
            "--namespace",
            &temporal_namespace(),
        ])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap_or_else(|e| panic!("could not run the temporal CLI: {e}"));
    CliRun::from_output(&output)
}

/// `temporal workflow COMMAND… -w WORKFLOW_ID --name NAME --input PAYLOAD`.
async fn to_workflow(command: &[&str], workflow_id: &str, name: &str, payload: &str) -> CliRun {
    let mut args = vec!["workflow"];
    args.extend_from_slice(command);
    args.extend(["-w", workflow_id, "--name", name, "--input", payload]);
    temporal_cli(&args).await
}

/// `temporal workflow update execute` of update `name` with the JSON `payload`, as an operator
/// without our CLI would send it.
pub async fn temporal_update(workflow_id: &str, name: &str, payload: &str) -> CliRun {
    to_workflow(&["update", "execute"], workflow_id, name, payload).await
}

/// `temporal workflow signal` of signal `name` with the JSON `payload`: the Web UI's path.
pub async fn temporal_signal(workflow_id: &str, name: &str, payload: &str) -> CliRun {
    to_workflow(&["signal"], workflow_id, name, payload).await
}

/// `temporal workflow signal` of `name` with the JSON `payload`: what the Web UI's "Send a
/// Signal" dialog sends. Panics unless the CLI succeeds.
pub async fn web_ui_signal(workflow_id: &str, name: &str, payload: &str) {
    let sent = temporal_signal(workflow_id, name, payload).await;
    assert!(sent.code == 0, "signal {name}: {}", sent.stderr);
}

/// A fresh time-skipping test server (`TEMPORAL_TEST_SERVER_EXE`) with every search attribute
/// of `workflows::search` registered in `default`, and a client of it (as `identity` when given).
pub async fn start_test_server(identity: Option<&str>) -> (TestServer, Client) {
    let exe = required("TEMPORAL_TEST_SERVER_EXE");
    let server = TestServer::start(&exe)
        .await
        .unwrap_or_else(|e| panic!("the Temporal test server did not start: {e}; {HOW_TO_START}"));
    let client = connect(&server.target, "default", identity).await;
    let search_attributes = workflows::search::ALL
        .iter()
        .map(|(name, kind)| {
            let kind = match *kind {
                "Bool" => IndexedValueType::Bool,
                _ => IndexedValueType::Keyword,
            };
            ((*name).to_owned(), kind as i32)
        })
        .collect();
    client
        .connection()
        .operator_service()
        .add_search_attributes(tonic::Request::new(AddSearchAttributesRequest {
            search_attributes,
            namespace: "default".into(),
        }))
        .await
        .unwrap_or_else(|e| panic!("registering the search attributes on the test server: {e}"));
    (server, client)
}
