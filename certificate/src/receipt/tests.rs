use super::*;
use serde_json::json;

/// The request id of [`sample_receipt`].
pub(crate) fn sample_request_id() -> Uuid {
    Uuid::parse_str("6f1c2b0e-8a44-4c57-9a0e-2f0b5a1d9c33").unwrap()
}

/// The community [`sample_receipt`] is about.
pub(crate) fn sample_subject() -> Subject {
    Subject::Community {
        community_id: Uuid::parse_str("0b9e2f4c-3d5a-4e61-8f70-9a1b2c3d4e5f").unwrap(),
        host: "chess.example.org".to_owned(),
    }
}

/// The v2 form of [`sample_receipt`]: the same facts, its manifest stating the three chunk
/// stamps ([`sample_chunk_stamps`]) by their count and Merkle root.
pub(crate) fn sample_receipt_v2(key_id: &str) -> Receipt {
    let mut receipt = sample_receipt(key_id);
    receipt.format = RECEIPT_FORMAT.to_owned();
    let mut fold = StampFold::new("/chunk_stamps");
    for stamp in sample_chunk_stamps() {
        fold.push(&stamp).unwrap();
    }
    receipt.manifest = ManifestFacts::rooted(receipt.manifest.digest.clone(), &fold);
    receipt
}

/// The chunk stamps of [`sample_receipt`].
pub(crate) fn sample_chunk_stamps() -> Vec<ChunkStamp> {
    sample_receipt("k").manifest.chunks.unwrap_or_default()
}

/// A realistic v1 community receipt: 2 tables, 3 chunks (the last one late), 6 audit events.
pub(crate) fn sample_receipt(key_id: &str) -> Receipt {
    let chunk = |no: u64, prefix: &str, entries, deleted, missing, late, at: &str| ChunkStamp {
        chunk_no: no,
        prefix: prefix.to_owned(),
        entries,
        versions_deleted: deleted,
        already_missing: missing,
        late,
        stamped_at: at.to_owned(),
    };
    let table = |name: &str, rows| TableRows {
        table: name.to_owned(),
        rows,
    };
    Receipt {
        format: RECEIPT_FORMAT_V1.to_owned(),
        request_id: sample_request_id(),
        kind: ReceiptKind::Community,
        subject: sample_subject(),
        requested_by: "ops:alice".to_owned(),
        requested_at: "2026-11-30T20:00:00.000001Z".to_owned(),
        approval: ApprovalFacts {
            approved_by: "ops:bob".to_owned(),
            approved_at: "2026-11-30T20:05:00.000000Z".to_owned(),
            inventory_digest: "1f".repeat(32),
        },
        inventory: InventoryFacts {
            digest: "1f".repeat(32),
            tables: vec![table("posts", 1200), table("members", 40)],
            object_versions: 7,
            object_bytes: 123_456,
            redis_keys: 9,
            multipart_uploads: 1,
            relations: vec![],
            declarations: vec![],
        },
        manifest: ManifestFacts::listed(
            "2e".repeat(32),
            vec![
                chunk(
                    0,
                    "communities/0b9e/a",
                    4,
                    4,
                    0,
                    false,
                    "2026-11-30T20:10:00.000000Z",
                ),
                chunk(
                    1,
                    "communities/0b9e/b",
                    3,
                    2,
                    1,
                    false,
                    "2026-11-30T20:11:00.000000Z",
                ),
                chunk(
                    2,
                    "communities/0b9e/",
                    2,
                    2,
                    0,
                    true,
                    "2026-11-30T20:15:00.000000Z",
                ),
            ],
        ),
        purge: PurgeFacts {
            tables: vec![table("posts", 1200), table("members", 39)],
            rows_total: 1239,
            redis_keys_purged: 9,
            multipart_uploads_aborted: 1,
        },
        generations: Generations {
            fence_generation: Some(3),
            exec_generation: 2,
        },
        verification: json!({
            "objects_remaining": 0,
            "rows_remaining": {"posts": 0, "members": 0},
            "redis_keys_remaining": 0,
            "passed": true,
            "note": null,
            "checked": []
        }),
        stages: vec![
            StageReached {
                stage: "approved".to_owned(),
                reached_at: "2026-11-30T20:05:00.000000Z".to_owned(),
            },
            StageReached {
                stage: "objects_deleted".to_owned(),
                reached_at: "2026-11-30T20:15:00.000000Z".to_owned(),
            },
            StageReached {
                stage: "verified".to_owned(),
                reached_at: "2026-11-30T20:20:00.000000Z".to_owned(),
            },
        ],
        audit_chain: ChainHead {
            length: 6,
            head_hash: "3d".repeat(32),
            head_row_id: 60,
        },
        completed_at: "2026-11-30T20:20:00.000000Z".to_owned(),
        key_id: key_id.to_owned(),
        signed_at: "2026-11-30T20:21:00.000000Z".to_owned(),
    }
}

/// A v1 receipt's listed chunks, to edit.
fn chunks_of(receipt: &mut Receipt) -> &mut Vec<ChunkStamp> {
    receipt.manifest.chunks.get_or_insert_with(Vec::new)
}

fn fields(receipt: &Receipt) -> Vec<String> {
    check_counts(receipt).into_iter().map(|p| p.field).collect()
}

#[test]
fn sample_receipt_is_consistent_and_round_trips() {
    let receipt = sample_receipt("ed25519:0123456789abcdef");
    assert_eq!(check_counts(&receipt), vec![]);
    let value = serde_json::to_value(&receipt).unwrap();
    assert_eq!(value["kind"], "community");
    assert_eq!(value["subject"]["type"], "community");
    assert_eq!(value["generations"]["fence_generation"], 3);
    let back: Receipt = serde_json::from_value(value).unwrap();
    assert_eq!(back, receipt);
}

#[test]
fn unknown_members_and_wrong_types_do_not_parse() {
    let value = serde_json::to_value(sample_receipt("k")).unwrap();
    for (pointer, replacement) in [
        (
            "/subject",
            json!({"type": "community", "community_id": Uuid::nil(), "host": "h", "x": 1}),
        ),
        (
            "/purge/tables/0",
            json!({"table": "posts", "rows": 1, "extra": true}),
        ),
        ("/purge/rows_total", json!("1239")),
        ("/purge/rows_total", json!(-1)),
        ("/kind", json!("group")),
        (
            "/subject",
            json!({"type": "user", "community_id": Uuid::nil(), "host": "h"}),
        ),
    ] {
        let mut changed = value.clone();
        *changed.pointer_mut(pointer).unwrap() = replacement;
        assert!(
            serde_json::from_value::<Receipt>(changed).is_err(),
            "{pointer} accepted"
        );
    }
    let mut added = value.clone();
    added["extra"] = json!(1);
    assert!(serde_json::from_value::<Receipt>(added).is_err());
}

type Edit = Box<dyn Fn(&mut Receipt)>;

#[test]
fn each_count_rule_names_its_field() {
    let base = sample_receipt("k");
    let cases: Vec<(Edit, &[&str])> = vec![
        (
            Box::new(|r| r.manifest.versions_total += 1),
            &["/manifest/versions_total"],
        ),
        (
            Box::new(|r| r.manifest.versions_deleted -= 1),
            &["/manifest/versions_deleted"],
        ),
        (
            Box::new(|r| r.manifest.already_missing += 1),
            &["/manifest/already_missing"],
        ),
        (
            Box::new(|r| {
                chunks_of(r)[1].versions_deleted += 1;
                r.manifest.versions_deleted += 1;
            }),
            &["/manifest/chunks/1/entries"],
        ),
        (
            Box::new(|r| chunks_of(r)[2].chunk_no = 3),
            &["/manifest/chunks/2/chunk_no"],
        ),
        (
            Box::new(|r| chunks_of(r).swap(0, 1)),
            &["/manifest/chunks/0/chunk_no", "/manifest/chunks/1/chunk_no"],
        ),
        (
            Box::new(|r| r.purge.rows_total += 1),
            &["/purge/rows_total"],
        ),
        (
            Box::new(|r| r.approval.inventory_digest = "00".repeat(32)),
            &["/approval/inventory_digest"],
        ),
        (
            Box::new(|r| r.signed_at = "soon".to_owned()),
            &["/signed_at"],
        ),
        (
            Box::new(|r| r.completed_at = "2026-13-01T00:00:00Z".to_owned()),
            &["/completed_at"],
        ),
        (
            Box::new(|r| r.stages[1].reached_at = String::new()),
            &["/stages/1/reached_at"],
        ),
        (
            Box::new(|r| r.audit_chain.length = 0),
            &["/audit_chain/length"],
        ),
        (
            Box::new(|r| {
                r.subject = Subject::User {
                    target_hash: "aa".repeat(32),
                    target_salt: "bb".repeat(16),
                }
            }),
            &["/subject/type"],
        ),
    ];
    for (change, expected) in cases {
        let mut receipt = base.clone();
        change(&mut receipt);
        assert_eq!(fields(&receipt), expected.to_vec(), "{expected:?}");
    }
}

#[test]
fn user_receipt_with_empty_lists_is_consistent() {
    let mut receipt = sample_receipt("k");
    receipt.kind = ReceiptKind::User;
    let salt = new_salt().unwrap();
    receipt.subject = Subject::User {
        target_hash: target_commitment("@carol:example.org", &salt).unwrap(),
        target_salt: salt,
    };
    receipt.inventory.tables = vec![];
    receipt.inventory.object_versions = 0;
    receipt.manifest.chunks = Some(vec![]);
    receipt.manifest.versions_total = 0;
    receipt.manifest.versions_deleted = 0;
    receipt.manifest.already_missing = 0;
    receipt.purge.tables = vec![];
    receipt.purge.rows_total = 0;
    receipt.generations.fence_generation = None;
    receipt.audit_chain = ChainHead::empty();
    assert_eq!(check_counts(&receipt), vec![]);
}

#[test]
fn target_commitment_is_salted_sha256() {
    assert_eq!(
        target_commitment("abc", "").unwrap(),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    // sha256(0x61 'a' || "bc") = sha256("abc")
    assert_eq!(
        target_commitment("bc", "61").unwrap(),
        target_commitment("abc", "").unwrap()
    );
    let salt = new_salt().unwrap();
    assert_eq!(salt.len(), 32);
    assert_ne!(salt, new_salt().unwrap());
    assert_ne!(
        target_commitment("@carol:example.org", &salt).unwrap(),
        target_commitment("@carol:example.org", &new_salt().unwrap()).unwrap()
    );
    assert!(matches!(
        target_commitment("x", "zz"),
        Err(KeyError::InvalidSalt { .. })
    ));
}

fn relation(
    name: &str,
    role: &str,
    root: &str,
    relkind: &str,
    column: Option<&str>,
) -> InventoriedRelation {
    InventoriedRelation {
        relation: name.to_owned(),
        oid: 16_384 + name.len() as u64,
        role: role.to_owned(),
        root: root.to_owned(),
        relkind: relkind.to_owned(),
        tenant_column: column.map(str::to_owned),
    }
}

/// The sample receipt as issued now: it states five inventoried relations (a partitioned tenant
/// table and its partition, a plain tenant table, a key child, the community row), the purge
/// counted every root, and the verification names every relation.
pub(crate) fn receipt_with_relations(key_id: &str) -> Receipt {
    let mut receipt = sample_receipt(key_id);
    receipt.inventory.tables = vec![
        TableRows {
            table: "buzz.members".to_owned(),
            rows: 40,
        },
        TableRows {
            table: "buzz.posts".to_owned(),
            rows: 1200,
        },
    ];
    receipt.inventory.relations = vec![
        relation(
            "buzz.communities",
            "community row",
            "buzz.communities",
            "r",
            Some("id"),
        ),
        relation(
            "buzz.members",
            "tenant table",
            "buzz.members",
            "r",
            Some("community_id"),
        ),
        relation(
            "buzz.post_tags",
            "key child through post_tags_post_fk",
            "buzz.post_tags",
            "r",
            None,
        ),
        relation(
            "buzz.posts",
            "tenant table",
            "buzz.posts",
            "p",
            Some("community_id"),
        ),
        relation(
            "buzz.posts_2026",
            "tenant relation of buzz.posts",
            "buzz.posts",
            "r",
            Some("community_id"),
        ),
    ];
    let table = |name: &str, rows| TableRows {
        table: name.to_owned(),
        rows,
    };
    receipt.purge.tables = vec![
        table("buzz.communities", 1),
        table("buzz.members", 39),
        table("buzz.post_tags", 0),
        table("buzz.posts", 1200),
    ];
    receipt.purge.rows_total = 1240;
    receipt.verification = json!({
        "tables_checked": 2,
        "prefixes_checked": 3,
        "redis_empty_passes": 2,
        "relations": [
            "buzz.communities", "buzz.members", "buzz.post_tags", "buzz.posts", "buzz.posts_2026"
        ]
    });
    receipt
}

#[test]
fn a_receipt_stating_its_relations_is_consistent_and_round_trips() {
    let receipt = receipt_with_relations("k");
    assert_eq!(check_counts(&receipt), vec![]);
    assert_eq!(coverage_problems(&receipt), vec![]);
    let value = serde_json::to_value(&receipt).unwrap();
    assert_eq!(
        value["inventory"]["relations"][0]["relation"],
        "buzz.communities"
    );
    assert_eq!(
        value["inventory"]["relations"][2]["tenant_column"],
        serde_json::Value::Null
    );
    let back: Receipt = serde_json::from_value(value).unwrap();
    assert_eq!(back, receipt);
}

#[test]
fn a_relation_missing_from_the_purge_facts_is_named() {
    // The purge facts lose the partitioned table's count: the table and its partition are both
    // uncovered (the partition's rows are counted under its root).
    let mut receipt = receipt_with_relations("k");
    receipt.purge.tables.retain(|t| t.table != "buzz.posts");
    receipt.purge.rows_total = 40;
    assert_eq!(
        fields(&receipt),
        vec!["/inventory/relations/3", "/inventory/relations/4"]
    );
    let problems = coverage_problems(&receipt);
    assert!(
        problems[1].problem.contains("buzz.posts_2026")
            && problems[1]
                .problem
                .contains("/purge/tables has no count for buzz.posts")
            && problems[1]
                .problem
                .contains("fewer relations than the inventory"),
        "{problems:?}"
    );
    // A key child whose zero count was not recorded is uncovered too.
    let mut receipt = receipt_with_relations("k");
    receipt.purge.tables.retain(|t| t.table != "buzz.post_tags");
    assert_eq!(fields(&receipt), vec!["/inventory/relations/2"]);
}

#[test]
fn a_relation_missing_from_the_verification_facts_is_named() {
    let mut receipt = receipt_with_relations("k");
    receipt.verification["relations"] = json!([
        "buzz.communities",
        "buzz.members",
        "buzz.post_tags",
        "buzz.posts"
    ]);
    assert_eq!(fields(&receipt), vec!["/inventory/relations/4"]);
    let problems = coverage_problems(&receipt);
    assert!(
        problems[0].problem.contains("buzz.posts_2026")
            && problems[0]
                .problem
                .contains("/verification/relations does not name it"),
        "{problems:?}"
    );

    let mut receipt = receipt_with_relations("k");
    receipt.verification["relations"][1] = json!(7);
    assert_eq!(
        fields(&receipt),
        vec!["/verification/relations/1", "/inventory/relations/1"]
    );

    // A verification recorded without the list names none of them: one problem, at the list.
    let mut receipt = receipt_with_relations("k");
    if let Some(report) = receipt.verification.as_object_mut() {
        report.remove("relations");
    }
    assert_eq!(fields(&receipt), vec!["/verification/relations"]);
    assert!(
        coverage_problems(&receipt)[0]
            .problem
            .contains("5 inventoried relation(s)")
    );
}

#[test]
fn an_old_receipt_without_relations_parses_and_recanonicalises_byte_identically() {
    // A receipt as issued before receipts stated relations: no `relations` member at all.
    let old = serde_json::to_value(sample_receipt("k")).unwrap();
    assert!(old["inventory"].get("relations").is_none());
    let parsed: Receipt = serde_json::from_value(old.clone()).unwrap();
    assert!(parsed.inventory.relations.is_empty());
    assert_eq!(
        crate::canonical::canonical_json(&serde_json::to_value(&parsed).unwrap()).unwrap(),
        crate::canonical::canonical_json(&old).unwrap()
    );
    // It states no relations, so no coverage rule applies (its verification names none).
    assert_eq!(check_counts(&parsed), vec![]);
    // An explicit empty list means the same and is never written.
    let mut explicit = old.clone();
    explicit["inventory"]["relations"] = json!([]);
    let parsed: Receipt = serde_json::from_value(explicit).unwrap();
    assert_eq!(serde_json::to_value(&parsed).unwrap(), old);
    // Members of a stated relation are checked strictly.
    let mut extra = serde_json::to_value(receipt_with_relations("k")).unwrap();
    extra["inventory"]["relations"][0]["schema"] = json!("buzz");
    assert!(serde_json::from_value::<Receipt>(extra).is_err());
}

#[test]
fn declarations_are_stated_and_absent_ones_keep_an_old_receipt_byte_identical() {
    let mut receipt = sample_receipt("k");
    let old = serde_json::to_value(&receipt).unwrap();
    assert!(old["inventory"].get("declarations").is_none(), "{old}");
    receipt.inventory.declarations = vec![DeclarationFacts {
        object: "trigger archive_events on buzz.events".to_owned(),
        declaration: "archives into history.events_archive".to_owned(),
    }];
    let stated = serde_json::to_value(&receipt).unwrap();
    assert_eq!(
        stated["inventory"]["declarations"][0]["declaration"],
        "archives into history.events_archive"
    );
    let parsed: Receipt = serde_json::from_value(stated).unwrap();
    assert_eq!(parsed, receipt);
}

#[test]
fn a_v2_receipt_states_the_stamps_by_count_and_root_and_keeps_its_sums() {
    let receipt = sample_receipt_v2("k");
    assert_eq!(check_counts(&receipt), vec![]);
    let stamps = receipt.manifest.stamps.clone().unwrap();
    assert_eq!(stamps.count, 3);
    assert_eq!(
        (
            receipt.manifest.versions_total,
            receipt.manifest.versions_deleted,
            receipt.manifest.already_missing
        ),
        (9, 8, 1)
    );
    let json = serde_json::to_value(&receipt).unwrap();
    assert!(json["manifest"].get("chunks").is_none(), "{json}");
    assert_eq!(json["manifest"]["stamps"]["count"], 3);
    let back: Receipt = serde_json::from_value(json).unwrap();
    assert_eq!(back, receipt);

    // The sums must still balance, though the stamps themselves are not in the receipt.
    let mut unbalanced = receipt.clone();
    unbalanced.manifest.already_missing = 0;
    assert_eq!(fields(&unbalanced), ["/manifest/versions_total"]);
}

#[test]
fn a_manifest_of_the_other_formats_shape_is_named() {
    let mut listed_v2 = sample_receipt("k");
    listed_v2.format = RECEIPT_FORMAT.to_owned();
    assert_eq!(
        fields(&listed_v2),
        ["/manifest/stamps", "/manifest/chunks"],
        "a v2 receipt listing its chunks, without a root"
    );
    let mut rooted_v1 = sample_receipt_v2("k");
    rooted_v1.format = RECEIPT_FORMAT_V1.to_owned();
    assert_eq!(fields(&rooted_v1), ["/manifest/chunks", "/manifest/stamps"]);
    let mut unknown = sample_receipt_v2("k");
    unknown.format = "buzz-deletion-receipt/v3".to_owned();
    assert_eq!(fields(&unknown)[0], "/format");
    let mut bad_root = sample_receipt_v2("k");
    if let Some(stamps) = bad_root.manifest.stamps.as_mut() {
        stamps.merkle_root = "XYZ".to_owned();
    }
    assert_eq!(fields(&bad_root), ["/manifest/stamps/merkle_root"]);
}
