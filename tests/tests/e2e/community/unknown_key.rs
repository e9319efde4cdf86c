use testkit::prelude::*;
use testkit::refusal::{assert_one_event, request_row};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_key_shape_blocks_naming_the_key_until_removed_and_unblocked() {
    let (stack, cli, _worker) = with_worker("unknown", &[]).await;
    let target = Tenant::seed(&stack, "stray", small_plan()).await;
    // A writer we do not know put this under the community's media prefix.
    let (stray, _) = plant_stray_key(&stack, target.id).await;

    let (request_id, json) = cli.submit_blocked(&target.host, &[]).await;
    let id = request_id.to_string();
    let reason = json["blocked"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&stray),
        "the block must name the key: {json}"
    );
    let status = cli.status(&id, 1).await;
    assert!(
        status["blocked"]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains(&stray)
    );
    let request = request_row(&stack, request_id).await;
    assert!(
        request.blocked_reason.unwrap_or_default().contains(&stray),
        "the reason must be persisted in Postgres"
    );

    let blocked = cli
        .run(&["community", "list", "--state", "blocked", "--limit", "1000"])
        .await
        .expect_code(0)
        .json();
    let listed = blocked
        .as_array()
        .and_then(|rows| {
            rows.iter()
                .find(|r| r["request_id"] == id.as_str())
                .cloned()
        })
        .unwrap_or_else(|| panic!("`list --state blocked` must show {id}: {blocked}"));
    assert_eq!(
        listed["live"]["blocked"], true,
        "Temporal visibility agrees: {listed}"
    );

    // The operator removes the stray key (every version), then unblocks.
    remove_stray_key(&stack, target.id, &stray).await;
    let status = cli
        .unblock_until_awaiting_approval(&id, "carol", "removed stray upload")
        .await;
    let digest = inventory_digest(&status);
    cli.approve_and_finish(&id, &digest).await;
    target.assert_gone(&stack, "the target").await;
    let audit = cli.inspect(&id).await["audit"].clone();
    let events: Vec<String> = audit
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|e| e["event"].as_str().map(str::to_owned))
        .collect();
    assert!(events.iter().any(|e| e == "blocked"), "{events:?}");
    assert!(events.iter().any(|e| e == "unblocked"), "{events:?}");
    // The unblock keeps who acted, the remediation they gave and the block it lifted.
    let remediation = ("remediation", "removed stray upload");
    let unblocked = assert_one_event(&stack, request_id, "unblocked", "carol", remediation).await;
    assert!(
        unblocked.detail["blocked_reason"]
            .as_str()
            .unwrap_or_default()
            .contains(&stray),
        "{unblocked:?}"
    );
}

/// Each tenant prefix is listed in key ranges cut at hash digits 4, 8 and c. A key spelled
/// exactly as a cut (`media/{c}/8`, no writer's shape) lies on the border of two ranges: it is
/// listed (by the range that ends at it), refused naming it, and the deletion completes once it
/// is removed. Nothing at a border falls between two listings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_spelled_as_a_listing_cut_is_listed_and_refused_not_skipped() {
    let (stack, cli, _worker) = with_worker("unknown-cut", &[]).await;
    let target = Tenant::seed(&stack, "stray-cut", small_plan()).await;
    let cut = format!("media/{}/8", target.id);
    stack
        .objects
        .put_object(&cut, b"at the cut".to_vec())
        .await
        .unwrap_or_else(|e| panic!("planting {cut}: {e}"));

    let (request_id, json) = cli.submit_blocked(&target.host, &[]).await;
    let reason = json["blocked"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&format!("{cut:?}")),
        "the block must name the key at the cut: {json}"
    );

    remove_stray_key(&stack, target.id, &cut).await;
    let id = request_id.to_string();
    let status = cli
        .unblock_until_awaiting_approval(&id, "carol", "removed the key at the cut")
        .await;
    let digest = inventory_digest(&status);
    cli.approve_and_finish(&id, &digest).await;
    target.assert_gone(&stack, "the target").await;
}
