use testkit::prelude::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_is_erased_in_all_three_stores_and_neighbours_are_byte_identical() {
    let (stack, cli, _worker) = with_worker("happy", &[]).await;

    let target_host = unique_host("target");
    let target = seed(&stack, &target_host, small_plan()).await;
    let mut neighbours = Vec::new();
    for tag in ["left", "right"] {
        let report = seed(&stack, &unique_host(tag), small_plan()).await;
        let before = snapshot(&stack, report.community_id).await;
        assert!(before.row_count() > 0 && !before.versions.is_empty() && !before.keys.is_empty());
        neighbours.push((report.community_id, before));
    }
    let target_before = snapshot(&stack, target.community_id).await;
    assert_eq!(target_before.keys.len(), 7);
    assert!(
        target_before
            .versions
            .iter()
            .any(|v| v.kind == activities::taxonomy::VersionKind::DeleteMarker),
        "the target must hold delete markers for the test to mean anything"
    );

    let (id, digest) = cli
        .submit(&target_host, "alice", &["--reason", "tenant asked"])
        .await;
    cli.approve(&id, "bob", &digest).await.expect_code(0);
    let watched = cli.watch_to_end_printing(&id).await;
    assert!(watched.stdout.contains("verified"), "{}", watched.stdout);

    let after = snapshot(&stack, target.community_id).await;
    after.assert_gone("the target");
    assert!(
        stack
            .store
            .community_by_id(target.community_id)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .is_none(),
        "the community row itself must be gone"
    );
    for (community, before) in &neighbours {
        assert_identical(
            before,
            &snapshot(&stack, *community).await,
            &format!("neighbour {community}"),
        );
    }

    let inspection = cli.inspect(&id).await;
    assert_eq!(inspection["request"]["stage"], "retention_pending");
    let audit = inspection["audit"].as_array().cloned().unwrap_or_default();
    let events: Vec<&str> = audit.iter().filter_map(|e| e["event"].as_str()).collect();
    let inventoried = audit.iter().find(|e| e["event"] == "inventoried");
    assert!(
        inventoried.is_some_and(|e| e["detail"].to_string().contains(&digest)),
        "the audit trail must hold the frozen digest: {events:?}"
    );
    assert!(
        audit
            .iter()
            .any(|e| e["event"] == "approved" && e["actor"] == "bob"),
        "the audit trail must hold bob's approval: {events:?}"
    );
    let stamps: Vec<&serde_json::Value> = audit
        .iter()
        .filter(|e| e["event"] == "chunk_stamped")
        .collect();
    let chunks_total = inspection["chunks"]["chunks_total"]
        .as_u64()
        .unwrap_or_default();
    assert!(chunks_total > 0);
    assert_eq!(
        stamps.len() as u64,
        chunks_total,
        "one stamp per chunk: {events:?}"
    );
    let stamped_versions: u64 = stamps
        .iter()
        .map(|e| e["detail"]["deleted"].as_u64().unwrap_or_default())
        .sum();
    assert_eq!(stamped_versions, target_before.versions.len() as u64);
    assert!(events.contains(&"logically_verified"), "{events:?}");
    assert_eq!(inspection["approval"]["inventory_digest"], digest);
}
