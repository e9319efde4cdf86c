//! Compatibility with histories recorded by earlier builds: every `tests/histories/*.json` (the
//! Rust client's history JSON, made by `deploy/local/record-histories` or an older recording)
//! must replay against today's workflow code, command for command. A deletion that runs for
//! hours lives through deploys; a worker that cannot replay its history wedges it.
//!
//! The replayer needs no server: it feeds the recorded events to a replay-only worker. A new
//! file in the directory is picked up without touching this test; a recorded file is never
//! regenerated to make a change pass (`docs/upgrades.md`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use temporalio_client::WorkflowHistory;
use temporalio_sdk::workflow_replayer::{WorkflowReplayer, WorkflowReplayerOptions};
use workflows::community::CommunityDeletion;
use workflows::stack_check::StackCheck;
use workflows::sweep::TaxonomySweep;
use workflows::user::UserDeletion;

/// The recorded histories, sorted by name.
fn recorded_histories() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/histories");
    let entries =
        std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    let mut files: Vec<PathBuf> = entries
        .map(|entry| {
            entry
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .path()
        })
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    files.sort();
    files
}

/// A replayer with every workflow the worker registers (`worker/src/startup.rs`,
/// `build_worker`), under the same types and therefore the same names.
fn replayer() -> WorkflowReplayer {
    let options = WorkflowReplayerOptions::new()
        .register_workflow::<StackCheck>()
        .and_then(|o| o.register_workflow::<CommunityDeletion>())
        .and_then(|o| o.register_workflow::<UserDeletion>())
        .and_then(|o| o.register_workflow::<TaxonomySweep>())
        .unwrap_or_else(|e| panic!("registering the workflows for replay: {e}"))
        .build();
    WorkflowReplayer::new(options).unwrap_or_else(|e| panic!("replayer: {e}"))
}

#[tokio::test]
async fn every_recorded_history_replays_against_todays_workflow_code() {
    let files = recorded_histories();
    assert!(
        !files.is_empty(),
        "workflows/tests/histories/ holds no *.json: record them with deploy/local/record-histories"
    );
    let replayer = replayer();
    let mut failures = Vec::new();
    for file in &files {
        let name = file.file_name().unwrap_or_default().to_string_lossy();
        let started = Instant::now();
        let bytes = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let outcome = match WorkflowHistory::from_json(&bytes) {
            Ok(history) => replayer
                .replay_workflow(history)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(format!("not a history in the client's JSON: {e}")),
        };
        match outcome {
            Ok(()) => eprintln!("replayed {name} in {:?}", started.elapsed()),
            Err(reason) => failures.push(format!("{name}: {reason}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} recorded histories do not replay against today's workflow code:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}
