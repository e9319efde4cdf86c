//! The rendering of a [`Report`] and the JSON field names every command group uses for the same
//! concept: `request_id` and `inventory_digest`, with the deprecated `id` / `digest` still next to
//! them for one release.

use super::*;
use uuid::Uuid;
use workflows::community::status::{BlockedInfo, DeletionStatus, Progress};
use workflows::community::{ApprovalRecord, InventorySummary, Phase};

#[test]
fn a_report_renders_its_document_as_json_and_its_text_as_table() {
    let report = Report::new(&serde_json::json!({"a": 1}), "a  1\n").expect("report");
    assert_eq!(report.render(OutputFormat::Json), "{\n  \"a\": 1\n}\n");
    assert_eq!(report.render(OutputFormat::Table), "a  1\n");
    assert_eq!(report.exit_code(), 0);
    let failing = report.failing(1, "blocked");
    assert_eq!(failing.exit_code(), 1);
    assert_eq!(failing.error.as_deref(), Some("blocked"));
    // A payload to paste is one compact line whatever the format.
    let line = Report::json_line(&serde_json::json!({"b": [1, 2]})).expect("report");
    assert_eq!(line.render(OutputFormat::Json), "{\"b\":[1,2]}\n");
    assert_eq!(line.render(OutputFormat::Table), "{\"b\":[1,2]}\n");
}

#[test]
fn current_names_add_request_id_and_inventory_digest_and_keep_the_old_ones() {
    let named = current_names(serde_json::json!({"id": "r1", "digest": "d1", "x": 1}));
    assert_eq!(named["request_id"], "r1");
    assert_eq!(named["inventory_digest"], "d1");
    assert_eq!(named["id"], "r1", "deprecated field kept for one release");
    assert_eq!(
        named["digest"], "d1",
        "deprecated field kept for one release"
    );
    // A value already under the new name wins over the old one.
    let both = current_names(serde_json::json!({"digest": "old", "inventory_digest": "new"}));
    assert_eq!(both["inventory_digest"], "new");
    // Only the object described: a nested stage row's `id` is not a request id.
    let nested = current_names_at(
        serde_json::json!({"request": {"id": "r1"}, "stages": [{"id": "s1"}]}),
        "request",
    );
    assert_eq!(nested["request"]["request_id"], "r1");
    assert!(nested["stages"][0].get("request_id").is_none());
    assert!(nested.get("request_id").is_none());
    let each = current_names_each(serde_json::json!([{"id": "a"}, {"id": "b"}]));
    assert_eq!(each[1]["request_id"], "b");
}

fn frozen_status(request_id: Uuid) -> DeletionStatus {
    DeletionStatus {
        request_id,
        community_id: Some(Uuid::nil()),
        host: "b.example".into(),
        requested_by: "alice".into(),
        submitted: None,
        phase: Phase::Submitted,
        blocked: None,
        last_error: None,
        approval: Some(ApprovalRecord {
            approved_by: "bob".into(),
            approved_at: "2026-11-30T18:00:00Z".into(),
            digest: "sha256:frozen".into(),
            note: None,
            signed: None,
        }),
        inventory: Some(InventorySummary {
            digest: "sha256:frozen".into(),
            tables: Vec::new(),
            prefixes: Vec::new(),
            redis_keys: 0,
            uploads: Vec::new(),
        }),
        progress: Progress::default(),
        fence_generation: None,
        verification: None,
        abort: None,
        run_number: 1,
    }
}

#[test]
fn community_submit_names_the_request_and_digest_like_user_submit() {
    let id = Uuid::new_v4();
    let status = frozen_status(id);
    let community = crate::commands::community::submitted_document(
        id,
        "community-deletion-x",
        "b.example",
        Uuid::nil(),
        &status,
    );
    assert_eq!(community["request_id"], id.to_string());
    assert_eq!(community["inventory_digest"], "sha256:frozen");
    assert_eq!(community["digest"], "sha256:frozen", "deprecated, kept");
    let next = community["next"].as_str().unwrap_or_default();
    assert!(next.contains("--inventory-digest sha256:frozen"), "{next}");
    assert!(!next.contains("--digest "), "{next}");

    let inventory = workflows::user::UserInventory::demo("demo:alice").expect("demo inventory");
    let registration = workflows::user::Registration {
        id,
        workflow_id: "user-deletion-x".into(),
        target: "demo:alice".into(),
        inventory_digest: inventory.digest(),
        inventory,
    };
    let user = crate::commands::user::registration_document(&registration).expect("document");
    assert_eq!(user["request_id"], id.to_string());
    assert_eq!(user["id"], id.to_string(), "deprecated, kept");
    assert_eq!(user["inventory_digest"], registration.inventory_digest);
    // The same concept has the same name in both groups.
    for field in ["request_id", "inventory_digest"] {
        assert!(
            community.get(field).is_some() && user.get(field).is_some(),
            "{field}"
        );
    }
}

#[test]
fn community_status_carries_inventory_digest_at_the_top_and_in_the_approval() {
    let id = Uuid::new_v4();
    let document =
        crate::commands::community::status_document(&frozen_status(id), None).expect("document");
    assert_eq!(document["request_id"], id.to_string());
    assert_eq!(document["inventory_digest"], "sha256:frozen");
    assert_eq!(document["approval"]["inventory_digest"], "sha256:frozen");
    assert_eq!(
        document["approval"]["digest"], "sha256:frozen",
        "deprecated, kept"
    );
    assert_eq!(document["inventory"]["digest"], "sha256:frozen");
    assert!(document.get("pending_activity").is_some());
}

#[test]
fn a_document_keeps_the_field_order_of_its_type() {
    #[derive(Serialize)]
    struct Declared {
        zebra: u8,
        apple: u8,
    }
    let report = Report::new(&Declared { zebra: 1, apple: 2 }, "").expect("report");
    let json = report.render(OutputFormat::Json);
    assert!(json.find("zebra") < json.find("apple"), "{json}");
    let line = Report::json_line(&Declared { zebra: 1, apple: 2 }).expect("report");
    assert_eq!(
        line.render(OutputFormat::Table),
        "{\"zebra\":1,\"apple\":2}\n"
    );
}

#[test]
fn a_watch_waits_through_an_unblock_being_recorded_and_stops_at_a_block() {
    let mut status = frozen_status(Uuid::new_v4());
    status.phase = Phase::DeletingObjects;
    assert!(!crate::commands::community::watch_ends(&status), "running");
    status.blocked = Some(BlockedInfo {
        phase: Phase::DeletingObjects,
        reason: "chunk 12 was edited".into(),
        since: "2026-12-03T10:00:00Z".into(),
        unblocking: true,
    });
    assert!(
        !crate::commands::community::watch_ends(&status),
        "an accepted unblock is being recorded: the phase runs again in a moment"
    );
    let line = crate::render::community::progress_line(&status, None);
    assert!(
        line.contains("UNBLOCKING") && !line.contains("BLOCKED:"),
        "{line}"
    );
    if let Some(blocked) = status.blocked.as_mut() {
        blocked.unblocking = false;
    }
    assert!(crate::commands::community::watch_ends(&status), "blocked");
    let line = crate::render::community::progress_line(&status, None);
    assert!(line.contains("BLOCKED: chunk 12 was edited"), "{line}");
    // A status from a worker that predates the field reads as blocked, waiting for an operator.
    let old = serde_json::json!({"phase": "deleting_objects", "reason": "r", "since": "s"});
    let old: BlockedInfo = serde_json::from_value(old).expect("old block");
    assert!(old.awaits_operator());
    status.blocked = None;
    status.phase = Phase::RetentionPending;
    assert!(crate::commands::community::watch_ends(&status), "done");
}
