//! The closed-world rules, one catalogue shape at a time, without a server.

use std::collections::BTreeMap;

use super::*;
use crate::catalog::closed_world::facts::{
    KeyFact, PublicationFact, ReadsFact, RelationFact, RuleFact, TriggerFact,
};
use crate::catalog::closed_world::scope::{Scope, ScopePlan};
use crate::catalog::tenant_tree::{RelationKind, TenantRelation};

fn relation(oid: i64, schema: &str, name: &str, relkind: &str, community_id: bool) -> RelationFact {
    RelationFact {
        oid,
        schema: schema.into(),
        name: name.into(),
        relkind: relkind.into(),
        has_community_id: community_id,
        parents: Vec::new(),
        can_select: true,
        can_delete: true,
        can_insert: true,
        has_replica_identity: true,
        row_security: false,
        sees_every_row: true,
        large_object_columns: Vec::new(),
        comment: None,
        foreign_options: Vec::new(),
        owner: "buzz".into(),
    }
}

fn tenant_table(oid: i64, name: &str) -> TenantTable {
    TenantTable {
        schema: "buzz".into(),
        name: name.into(),
        relations: vec![TenantRelation {
            oid,
            schema: "buzz".into(),
            name: name.into(),
            kind: RelationKind::Heap,
            fence: None,
        }],
    }
}

fn key(name: &str, from: i64, to: i64, on_delete: &str) -> KeyFact {
    KeyFact {
        oid: from * 100 + to,
        name: name.into(),
        referencing_oid: from,
        referenced_oid: to,
        columns: vec!["event_id".into()],
        referenced_columns: vec!["id".into()],
        on_delete: on_delete.into(),
        comment: None,
    }
}

/// `buzz.communities` (1) and `buzz.events` (2), the base of every case.
fn base() -> (CatalogFacts, Vec<TenantTable>) {
    let facts = CatalogFacts {
        relations: vec![
            relation(1, "buzz", "communities", "r", false),
            relation(2, "buzz", "events", "r", true),
        ],
        refresher_owner: Some("buzz".into()),
        ..CatalogFacts::default()
    };
    (facts, vec![tenant_table(2, "events")])
}

#[test]
fn a_key_only_child_is_refused_until_its_key_is_declared() {
    let (mut facts, tenant) = base();
    facts.relations.push(event_tags(3));
    facts.keys.push(key("event_tags_event_id_fkey", 3, 2, "a"));
    let refused = classify(&facts, &tenant).err().unwrap_or_default();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(
        refused[0].object,
        "foreign key event_tags_event_id_fkey on buzz.event_tags"
    );
    assert!(
        refused[0].remedy.contains("tenant data through this key"),
        "{refused:?}"
    );

    facts.keys[0].comment = Some("buzz-deletion: tenant data through this key".into());
    let world = classify(&facts, &tenant).unwrap_or_default();
    assert_eq!(world.key_children.len(), 1);
    assert_eq!(
        world.key_children[0].relation.qualified(),
        "buzz.event_tags"
    );
    assert_eq!(world.key_children[0].parent_oid, 2);
}

// ---------------------------------------------------------------------------------------------
// Helpers for the cases below.

/// `buzz-deletion: <text>`, as a comment.
fn declare(text: &str) -> Option<String> {
    Some(format!("{PREFIX} {text}"))
}

/// The refusals of a catalogue that must be refused.
fn refused(facts: &CatalogFacts, tenant: &[TenantTable]) -> Vec<CatalogRefusal> {
    match classify(facts, tenant) {
        Ok(world) => panic!("expected refusals, got {world:#?}"),
        Err(refusals) => refusals,
    }
}

/// The world of a catalogue that must be accepted.
fn accepted(facts: &CatalogFacts, tenant: &[TenantTable]) -> ClosedWorld {
    match classify(facts, tenant) {
        Ok(world) => world,
        Err(refusals) => panic!("expected acceptance, got {refusals:#?}"),
    }
}

/// The single refusal.
fn only(refusals: &[CatalogRefusal]) -> &CatalogRefusal {
    assert_eq!(refusals.len(), 1, "{refusals:#?}");
    &refusals[0]
}

/// The single refusal is of `object`, for exactly `problem`, with exactly `remedy`.
fn assert_only_refusal(refusals: &[CatalogRefusal], object: &str, problem: &str, remedy: &str) {
    let refusal = only(refusals);
    assert_eq!(refusal.object, object);
    assert_eq!(refusal.problem, problem);
    assert_eq!(refusal.remedy, remedy);
}

/// The refusal of `object` whose problem contains `problem`.
fn refusal<'a>(refusals: &'a [CatalogRefusal], object: &str, problem: &str) -> &'a CatalogRefusal {
    refusals
        .iter()
        .find(|r| r.object == object && r.problem.contains(problem))
        .unwrap_or_else(|| panic!("no refusal of {object:?} for {problem:?} in {refusals:#?}"))
}

/// The world holds the community table and nothing beyond the tenant tables.
fn assert_nothing_beyond_the_tenant_tables(world: &ClosedWorld) {
    assert_eq!(
        *world,
        ClosedWorld {
            communities_oid: 1,
            ..ClosedWorld::default()
        }
    );
}

/// The world relied on exactly one declaration: `object` declared `declaration`.
fn assert_declared_only(world: &ClosedWorld, object: &str, declaration: &str) {
    assert_eq!(
        world.declared,
        vec![DeclaredObject {
            object: object.into(),
            declaration: declaration.into(),
        }]
    );
}

fn objects(refusals: &[CatalogRefusal]) -> Vec<&str> {
    refusals.iter().map(|r| r.object.as_str()).collect()
}

fn key_on(name: &str, from: i64, to: i64, columns: &[&str], referenced: &[&str]) -> KeyFact {
    KeyFact {
        columns: columns.iter().map(|c| (*c).to_owned()).collect(),
        referenced_columns: referenced.iter().map(|c| (*c).to_owned()).collect(),
        ..key(name, from, to, "a")
    }
}

/// A key declared "tenant data through this key".
fn membership(name: &str, from: i64, to: i64, columns: &[&str], referenced: &[&str]) -> KeyFact {
    KeyFact {
        comment: declare("tenant data through this key"),
        ..key_on(name, from, to, columns, referenced)
    }
}

/// `buzz.event_tags` (`oid`): a table without community_id, a key-only child once its key into
/// `buzz.events` is declared.
fn event_tags(oid: i64) -> RelationFact {
    relation(oid, "buzz", "event_tags", "r", false)
}

/// `event_tags_event_id_fkey` from `buzz.event_tags` (`oid`) into `buzz.events` (2), declared
/// "tenant data through this key".
fn event_tags_key(oid: i64) -> KeyFact {
    membership("event_tags_event_id_fkey", oid, 2, &["event_id"], &["id"])
}

fn trigger(on: i64, name: &str, tgtype: i32, function: &str) -> TriggerFact {
    TriggerFact {
        relation_oid: on,
        name: name.into(),
        tgtype,
        function: function.into(),
        security_definer: false,
        function_owner: "buzz".into(),
        comment: None,
    }
}

fn rule(on: i64, name: &str, event: &str, is_instead: bool) -> RuleFact {
    RuleFact {
        relation_oid: on,
        name: name.into(),
        event: event.into(),
        is_instead,
        comment: None,
    }
}

fn reads(view: i64, source: i64) -> ReadsFact {
    ReadsFact {
        view_oid: view,
        source_oid: source,
    }
}

fn publication(name: &str, publishes_deletes: bool) -> PublicationFact {
    PublicationFact {
        name: name.into(),
        publishes_deletes,
        all_tables: false,
        relation_oids: Vec::new(),
        schemas: Vec::new(),
    }
}

fn named(oid: i64, schema: &str, name: &str) -> NamedRelation {
    NamedRelation {
        oid,
        schema: schema.into(),
        name: name.into(),
    }
}

/// `archive.events_history` (oid 3): a valid archive table.
fn archive_table() -> RelationFact {
    relation(3, "archive", "events_history", "r", true)
}

/// An AFTER DELETE row trigger on `buzz.events` declared to archive into `target`.
fn archiving_trigger(target: &str) -> TriggerFact {
    TriggerFact {
        comment: declare(&format!("archives into {target}")),
        ..trigger(
            2,
            "archive_events",
            TRIGGER_ROW | TRIGGER_DELETE,
            "buzz.archive_event",
        )
    }
}

/// The base with `archive` and an AFTER DELETE row trigger on `buzz.events` declared to archive
/// into `archive.events_history`.
fn archiving_into(archive: RelationFact) -> (CatalogFacts, Vec<TenantTable>) {
    let (mut facts, tenant) = base();
    facts.relations.push(archive);
    facts
        .triggers
        .push(archiving_trigger("archive.events_history"));
    (facts, tenant)
}

/// `reports.daily_counts` (oid 3), a materialized view reading `buzz.events` directly.
fn daily_counts(community_id: bool, comment: Option<String>) -> (CatalogFacts, Vec<TenantTable>) {
    let (mut facts, tenant) = base();
    facts.relations.push(RelationFact {
        comment,
        ..relation(3, "reports", "daily_counts", "m", community_id)
    });
    facts.reads.push(reads(3, 2));
    (facts, tenant)
}

/// `buzz.events` as a partitioned root (2) with one partition `buzz.events_2024` (3).
fn partitioned_events() -> (CatalogFacts, Vec<TenantTable>) {
    let (mut facts, _) = base();
    facts.relations[1].relkind = "p".into();
    facts.relations.push(RelationFact {
        parents: vec![2],
        ..relation(3, "buzz", "events_2024", "r", true)
    });
    let mut events = tenant_table(2, "events");
    events.relations[0].kind = RelationKind::Partitioned;
    events.relations.push(TenantRelation {
        oid: 3,
        schema: "buzz".into(),
        name: "events_2024".into(),
        kind: RelationKind::Heap,
        fence: None,
    });
    (facts, vec![events])
}

// ---------------------------------------------------------------------------------------------
// The base, and buzz.communities.

#[test]
fn the_base_catalogue_is_accepted_with_nothing_beyond_the_tenant_tables() {
    let (facts, tenant) = base();
    let world = accepted(&facts, &tenant);
    assert_eq!(world.communities_oid, 1);
    assert_nothing_beyond_the_tenant_tables(&world);
}

#[test]
fn a_missing_communities_table_is_refused() {
    let (mut facts, tenant) = base();
    facts.relations.remove(0);
    let refusals = refused(&facts, &tenant);
    let refusal = only(&refusals);
    assert_eq!(refusal.object, "buzz.communities");
    assert_eq!(refusal.problem, "is missing or not an ordinary table");
    assert!(
        refusal.remedy.contains("buzz-deletion migrate"),
        "{refusal:?}"
    );
}

#[test]
fn a_communities_relation_that_is_not_an_ordinary_table_is_refused() {
    let (mut facts, tenant) = base();
    facts.relations[0].relkind = "p".into();
    let refusals = refused(&facts, &tenant);
    assert_eq!(only(&refusals).object, "buzz.communities");
    assert_eq!(refusals[0].problem, "is missing or not an ordinary table");
}

// ---------------------------------------------------------------------------------------------
// Foreign keys into the purge set.

#[test]
fn a_key_from_another_schema_into_communities_is_refused_whatever_its_action() {
    for (action, words, consequence) in [
        (
            "a",
            "ON DELETE NO ACTION",
            "the purge would fail on it after objects were already deleted",
        ),
        (
            "r",
            "ON DELETE RESTRICT",
            "the purge would fail on it after objects were already deleted",
        ),
        (
            "c",
            "ON DELETE CASCADE",
            "the purge would delete its rows, which no inventory lists",
        ),
        (
            "n",
            "ON DELETE SET NULL",
            "the purge would change its rows, which no inventory lists",
        ),
        (
            "d",
            "ON DELETE SET DEFAULT",
            "the purge would change its rows, which no inventory lists",
        ),
    ] {
        let (mut facts, tenant) = base();
        facts
            .relations
            .push(relation(3, "crm", "accounts", "r", false));
        facts.keys.push(KeyFact {
            on_delete: action.into(),
            ..key_on("accounts_community_fkey", 3, 1, &["community"], &["id"])
        });
        let refusals = refused(&facts, &tenant);
        let refusal = only(&refusals);
        assert_eq!(
            refusal.object, "foreign key accounts_community_fkey on crm.accounts",
            "{action}"
        );
        assert_eq!(
            refusal.problem,
            format!(
                "references buzz.communities ({words}) from crm.accounts, which is not tenant \
                 data: {consequence}"
            ),
            "{action}"
        );
        assert_eq!(
            refusal.remedy,
            "drop the key, or give crm.accounts a community_id column in schema buzz, or \
             declare it: COMMENT ON CONSTRAINT \"accounts_community_fkey\" ON crm.accounts IS \
             'buzz-deletion: tenant data through this key'",
            "{action}"
        );
    }
}

#[test]
fn a_key_from_outside_into_a_tenant_table_is_refused() {
    let (mut facts, tenant) = base();
    facts
        .relations
        .push(relation(3, "crm", "tickets", "r", false));
    facts.keys.push(KeyFact {
        on_delete: "c".into(),
        ..key("tickets_event_id_fkey", 3, 2, "c")
    });
    let refusals = refused(&facts, &tenant);
    let refusal = only(&refusals);
    assert_eq!(
        refusal.object,
        "foreign key tickets_event_id_fkey on crm.tickets"
    );
    assert!(
        refusal
            .problem
            .starts_with("references buzz.events (ON DELETE CASCADE) from crm.tickets"),
        "{refusal:?}"
    );
}

#[test]
fn a_key_from_a_tenant_table_into_communities_on_community_id_is_fine() {
    let (mut facts, tenant) = base();
    facts.keys.push(KeyFact {
        on_delete: "c".into(),
        ..key_on("events_community_id_fkey", 2, 1, &["community_id"], &["id"])
    });
    let world = accepted(&facts, &tenant);
    assert!(world.key_children.is_empty());
    assert!(world.declared.is_empty());
    assert_eq!(
        world.cross_keys,
        vec![CrossKey {
            name: "events_community_id_fkey".into(),
            referencing_oid: 2,
            referenced_oid: 1,
            columns: vec!["community_id".into()],
            referenced_columns: vec!["id".into()],
        }]
    );
}

// ---------------------------------------------------------------------------------------------
// Key-only children.

#[test]
fn a_declared_key_child_chains_to_a_grandchild_declared_on_it() {
    let (mut facts, tenant) = base();
    facts.relations.push(event_tags(3));
    facts
        .relations
        .push(relation(4, "buzz", "event_tag_votes", "r", false));
    // The grandchild's key first: it joins only once its parent has.
    facts.keys.push(membership(
        "event_tag_votes_tag_fkey",
        4,
        3,
        &["tag_id"],
        &["id"],
    ));
    facts.keys.push(event_tags_key(3));
    let world = accepted(&facts, &tenant);
    assert_eq!(
        world.key_children,
        vec![
            KeyChild {
                relation: named(3, "buzz", "event_tags"),
                key: "event_tags_event_id_fkey".into(),
                columns: vec!["event_id".into()],
                parent_oid: 2,
                parent_columns: vec!["id".into()],
            },
            KeyChild {
                relation: named(4, "buzz", "event_tag_votes"),
                key: "event_tag_votes_tag_fkey".into(),
                columns: vec!["tag_id".into()],
                parent_oid: 3,
                parent_columns: vec!["id".into()],
            },
        ]
    );
    let declared: Vec<(&str, &str)> = world
        .declared
        .iter()
        .map(|d| (d.object.as_str(), d.declaration.as_str()))
        .collect();
    assert_eq!(
        declared,
        vec![
            (
                "foreign key event_tag_votes_tag_fkey on buzz.event_tag_votes",
                "tenant data through this key"
            ),
            (
                "foreign key event_tags_event_id_fkey on buzz.event_tags",
                "tenant data through this key"
            ),
        ]
    );
    assert!(world.cross_keys.is_empty(), "{:?}", world.cross_keys);
    assert!(world.unrelated.is_empty(), "{:?}", world.unrelated);
}

/// The refusals of `buzz.event_tags`-like child (3) → `buzz.events` declared as a membership key.
fn declared_child(child: RelationFact, extra: Vec<RelationFact>) -> Vec<CatalogRefusal> {
    let (mut facts, tenant) = base();
    facts.relations.push(child);
    facts.relations.extend(extra);
    facts.keys.push(event_tags_key(3));
    refused(&facts, &tenant)
}

fn assert_declared_child_refused(refusals: &[CatalogRefusal], on: &str, because: &str) {
    let object = format!("foreign key event_tags_event_id_fkey on {on}");
    let refusal = refusal(
        refusals,
        &object,
        "is declared 'tenant data through this key' but",
    );
    assert_eq!(
        refusal.problem,
        format!("is declared 'tenant data through this key' but {because}")
    );
    assert_eq!(
        refusal.remedy,
        "remove the declaration (COMMENT ON CONSTRAINT … IS NULL) and reshape the table"
    );
    // And, not joining the purge set, its key is a key from outside.
    refusal_fn(refusals, &object, "which is not tenant data");
}

/// [`refusal`] under another name, for use where a local shadows it.
fn refusal_fn<'a>(
    refusals: &'a [CatalogRefusal],
    object: &str,
    problem: &str,
) -> &'a CatalogRefusal {
    refusal(refusals, object, problem)
}

#[test]
fn a_key_child_with_a_community_id_column_is_refused() {
    let refusals = declared_child(relation(3, "crm", "event_notes", "r", true), Vec::new());
    assert_declared_child_refused(
        &refusals,
        "crm.event_notes",
        "it has a community_id column: it is tenant data by its own column, not by a key",
    );
    assert_eq!(
        objects(&refusals),
        vec![
            "foreign key event_tags_event_id_fkey on crm.event_notes",
            "foreign key event_tags_event_id_fkey on crm.event_notes",
            "table crm.event_notes",
        ]
    );
}

#[test]
fn a_partitioned_key_child_is_refused() {
    let refusals = declared_child(relation(3, "buzz", "event_tags", "p", false), Vec::new());
    assert_declared_child_refused(
        &refusals,
        "buzz.event_tags",
        "a key-only child must be an ordinary table (not partitioned, not foreign)",
    );
    assert_eq!(refusals.len(), 2, "{refusals:#?}");
}

#[test]
fn a_foreign_key_child_is_refused() {
    let refusals = declared_child(relation(3, "buzz", "event_tags", "f", false), Vec::new());
    assert_declared_child_refused(
        &refusals,
        "buzz.event_tags",
        "a key-only child must be an ordinary table (not partitioned, not foreign)",
    );
}

#[test]
fn a_key_child_with_an_inheritance_parent_is_refused() {
    let child = RelationFact {
        parents: vec![5],
        ..event_tags(3)
    };
    let refusals = declared_child(child, vec![relation(5, "buzz", "all_tags", "r", false)]);
    assert_declared_child_refused(
        &refusals,
        "buzz.event_tags",
        "a key-only child must have no partitions, inheritance parents or children",
    );
    assert_eq!(refusals.len(), 2, "{refusals:#?}");
}

#[test]
fn a_key_child_with_children_is_refused() {
    let grandchild = RelationFact {
        parents: vec![3],
        ..relation(5, "buzz", "event_tags_old", "r", false)
    };
    let refusals = declared_child(event_tags(3), vec![grandchild]);
    assert_declared_child_refused(
        &refusals,
        "buzz.event_tags",
        "a key-only child must have no partitions, inheritance parents or children",
    );
    assert_eq!(refusals.len(), 2, "{refusals:#?}");
}

#[test]
fn a_key_child_in_the_evidence_schema_is_refused() {
    let refusals = declared_child(
        relation(3, "deletion", "event_marks", "r", false),
        Vec::new(),
    );
    assert_declared_child_refused(
        &refusals,
        "deletion.event_marks",
        "the deletion's evidence schema holds no tenant data",
    );
    assert_eq!(refusals.len(), 2, "{refusals:#?}");
}

#[test]
fn a_key_child_declaring_two_membership_keys_is_refused() {
    let (mut facts, tenant) = base();
    facts.relations.push(event_tags(3));
    facts.keys.push(membership(
        "event_tags_community_fkey",
        3,
        1,
        &["community"],
        &["id"],
    ));
    facts.keys.push(event_tags_key(3));
    assert_only_refusal(
        &refused(&facts, &tenant),
        "buzz.event_tags",
        "declares more than one key 'tenant data through this key'",
        "declare exactly one membership key per key-only child table",
    );
}

#[test]
fn a_malformed_declaration_on_a_key_into_tenant_data_is_refused_naming_the_grammar() {
    let (mut facts, tenant) = base();
    facts.relations.push(event_tags(3));
    facts.keys.push(KeyFact {
        comment: Some("buzz-deletion: tenant data".into()),
        ..key("event_tags_event_id_fkey", 3, 2, "a")
    });
    let refusals = refused(&facts, &tenant);
    let object = "foreign key event_tags_event_id_fkey on buzz.event_tags";
    let malformed = refusal(&refusals, object, "is not a declaration");
    assert!(malformed.problem.contains(GRAMMAR), "{malformed:?}");
    assert_eq!(
        malformed.remedy,
        format!("correct or remove the comment: it must be one of {GRAMMAR}")
    );
    refusal(&refusals, object, "which is not tenant data");
    assert_eq!(refusals.len(), 2, "{refusals:#?}");
}

// ---------------------------------------------------------------------------------------------
// Cross keys.

#[test]
fn a_key_between_two_tenant_tables_is_a_cross_key_but_a_membership_key_is_not() {
    let (mut facts, mut tenant) = base();
    facts
        .relations
        .push(relation(3, "buzz", "replies", "r", true));
    facts.relations.push(event_tags(4));
    tenant.push(tenant_table(3, "replies"));
    facts.keys.push(key("replies_event_id_fkey", 3, 2, "c"));
    facts.keys.push(event_tags_key(4));
    let world = accepted(&facts, &tenant);
    assert_eq!(
        world.cross_keys,
        vec![CrossKey {
            name: "replies_event_id_fkey".into(),
            referencing_oid: 3,
            referenced_oid: 2,
            columns: vec!["event_id".into()],
            referenced_columns: vec!["id".into()],
        }]
    );
    assert_eq!(world.key_children.len(), 1);
    assert_eq!(world.key_children[0].key, "event_tags_event_id_fkey");
}

#[test]
fn a_key_from_a_tenant_table_into_a_key_child_is_a_cross_key() {
    let (mut facts, mut tenant) = base();
    facts
        .relations
        .push(relation(3, "buzz", "replies", "r", true));
    facts.relations.push(event_tags(4));
    tenant.push(tenant_table(3, "replies"));
    facts.keys.push(event_tags_key(4));
    facts
        .keys
        .push(key_on("replies_tag_fkey", 3, 4, &["tag_id"], &["id"]));
    let world = accepted(&facts, &tenant);
    let names: Vec<&str> = world.cross_keys.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(names, vec!["replies_tag_fkey"]);
}

// ---------------------------------------------------------------------------------------------
// Triggers.

#[test]
fn the_projects_own_triggers_pass() {
    let (mut facts, tenant) = base();
    facts.triggers = vec![
        trigger(2, "buzz_write_fence", 31, "buzz.refuse_fenced_write"),
        trigger(2, "buzz_user_data", 21, "buzz.user_data"),
        trigger(
            1,
            "communities_fence_row",
            5,
            "buzz.create_serving_fence_row",
        ),
        trigger(
            1,
            "communities_write_fence",
            27,
            "buzz.refuse_fenced_community_update",
        ),
    ];
    let world = accepted(&facts, &tenant);
    assert!(world.declared.is_empty(), "{:?}", world.declared);
}

#[test]
fn a_project_trigger_name_running_another_function_is_refused() {
    let (mut facts, tenant) = base();
    facts.triggers.push(trigger(
        2,
        "buzz_write_fence",
        TRIGGER_ROW | TRIGGER_BEFORE | TRIGGER_INSERT | TRIGGER_UPDATE | TRIGGER_DELETE,
        "public.refuse_fenced_write",
    ));
    let refusals = refused(&facts, &tenant);
    let refusal = only(&refusals);
    assert_eq!(refusal.object, "trigger buzz_write_fence on buzz.events");
    assert_eq!(
        refusal.problem,
        "is a trigger the deletion does not understand (BEFORE INSERT OR UPDATE OR DELETE FOR \
         EACH ROW executing public.refuse_fenced_write()): it could copy, keep or re-route rows \
         of the community being deleted"
    );
}

#[test]
fn a_project_trigger_on_the_wrong_relation_is_refused() {
    let (mut facts, tenant) = base();
    // The communities' own trigger on a tenant table, and a tenant trigger on communities.
    facts.triggers.push(trigger(
        2,
        "communities_write_fence",
        27,
        "buzz.refuse_fenced_community_update",
    ));
    facts.triggers.push(trigger(
        1,
        "buzz_write_fence",
        31,
        "buzz.refuse_fenced_write",
    ));
    let refusals = refused(&facts, &tenant);
    assert_eq!(
        objects(&refusals),
        vec![
            "trigger buzz_write_fence on buzz.communities",
            "trigger communities_write_fence on buzz.events",
        ]
    );
}

/// The refusal of one undeclared trigger `name` on `buzz.events`.
fn undeclared_trigger(trigger: TriggerFact) -> CatalogRefusal {
    let (mut facts, tenant) = base();
    facts.triggers.push(trigger);
    let refusals = refused(&facts, &tenant);
    only(&refusals).clone()
}

#[test]
fn an_undeclared_after_delete_trigger_is_refused() {
    let refusal = undeclared_trigger(trigger(
        2,
        "log_delete",
        TRIGGER_ROW | TRIGGER_DELETE,
        "public.log_delete",
    ));
    assert_eq!(refusal.object, "trigger log_delete on buzz.events");
    assert!(
        refusal
            .problem
            .contains("(AFTER DELETE FOR EACH ROW executing public.log_delete())"),
        "{refusal:?}"
    );
    assert_eq!(
        refusal.remedy,
        "drop it, or declare what it does: COMMENT ON TRIGGER \"log_delete\" ON buzz.events IS \
         'buzz-deletion: harmless' or 'buzz-deletion: archives into <schema>.<table>'"
    );
}

#[test]
fn an_undeclared_before_delete_trigger_is_refused() {
    let refusal = undeclared_trigger(trigger(
        2,
        "keep_deleted",
        TRIGGER_ROW | TRIGGER_BEFORE | TRIGGER_DELETE,
        "public.keep_deleted",
    ));
    assert_eq!(refusal.object, "trigger keep_deleted on buzz.events");
    assert!(
        refusal
            .problem
            .contains("(BEFORE DELETE FOR EACH ROW executing public.keep_deleted())"),
        "{refusal:?}"
    );
}

#[test]
fn an_undeclared_security_definer_trigger_is_refused() {
    let refusal = undeclared_trigger(TriggerFact {
        security_definer: true,
        ..trigger(2, "notify_insert", TRIGGER_INSERT, "public.notify_insert")
    });
    assert_eq!(refusal.object, "trigger notify_insert on buzz.events");
    assert!(
        refusal.problem.contains(
            "(AFTER INSERT FOR EACH STATEMENT executing public.notify_insert(), SECURITY DEFINER)"
        ),
        "{refusal:?}"
    );
}

#[test]
fn an_undeclared_trigger_on_communities_is_refused() {
    let (mut facts, tenant) = base();
    facts.triggers.push(trigger(
        1,
        "audit",
        TRIGGER_ROW | TRIGGER_DELETE | TRIGGER_UPDATE,
        "public.audit",
    ));
    let refusals = refused(&facts, &tenant);
    let refusal = only(&refusals);
    assert_eq!(refusal.object, "trigger audit on buzz.communities");
    assert!(
        refusal
            .problem
            .contains("(AFTER UPDATE OR DELETE FOR EACH ROW executing public.audit())"),
        "{refusal:?}"
    );
}

#[test]
fn a_trigger_declared_harmless_passes_and_is_listed() {
    let (mut facts, tenant) = base();
    facts.triggers.push(TriggerFact {
        comment: declare("harmless"),
        ..trigger(
            2,
            "log_delete",
            TRIGGER_ROW | TRIGGER_DELETE,
            "public.log_delete",
        )
    });
    let world = accepted(&facts, &tenant);
    assert_declared_only(&world, "trigger log_delete on buzz.events", "harmless");
    assert!(world.archives.is_empty());
}

#[test]
fn a_trigger_declared_archiving_adds_its_archive_to_the_purge_set() {
    let (facts, tenant) = archiving_into(archive_table());
    let world = accepted(&facts, &tenant);
    assert_eq!(
        world.archives,
        vec![ArchiveTable {
            relation: named(3, "archive", "events_history"),
            sources: vec![2],
        }]
    );
    assert_declared_only(
        &world,
        "trigger archive_events on buzz.events",
        "archives into archive.events_history",
    );
    // A member: neither unrelated nor a stray community_id table.
    assert!(world.unrelated.is_empty(), "{:?}", world.unrelated);
}

#[test]
fn a_trigger_and_a_rule_archiving_into_one_table_add_it_once() {
    let (mut facts, tenant) = archiving_into(archive_table());
    facts.rules.push(RuleFact {
        comment: declare("archives into archive.events_history"),
        ..rule(2, "archive_deletes", "4", false)
    });
    let world = accepted(&facts, &tenant);
    assert_eq!(world.archives.len(), 1, "{:?}", world.archives);
    assert_eq!(world.archives[0].sources, vec![2]);
    assert_eq!(world.declared.len(), 2, "{:?}", world.declared);
}

#[test]
fn a_trigger_archiving_into_a_missing_table_is_refused() {
    let (mut facts, tenant) = base();
    facts
        .triggers
        .push(archiving_trigger("archive.events_history"));
    assert_only_refusal(
        &refused(&facts, &tenant),
        "trigger archive_events on buzz.events",
        "declares it archives into archive.events_history, which does not exist",
        "correct the declaration to name the archive table",
    );
}

const ARCHIVE_REMEDY: &str = "archive into an ordinary table outside schema buzz with a \
     community_id column that the worker may SELECT and DELETE";

#[test]
fn a_trigger_archiving_into_a_tenant_table_is_refused() {
    let (mut facts, mut tenant) = base();
    facts
        .relations
        .push(relation(3, "buzz", "events_history", "r", true));
    tenant.push(tenant_table(3, "events_history"));
    facts
        .triggers
        .push(archiving_trigger("buzz.events_history"));
    let refusals = refused(&facts, &tenant);
    let refusal = only(&refusals);
    assert_eq!(refusal.object, "trigger archive_events on buzz.events");
    assert!(
        refusal.problem.starts_with(
            "archives into buzz.events_history, which is a tenant table: its write fence"
        ),
        "{refusal:?}"
    );
    assert_eq!(refusal.remedy, ARCHIVE_REMEDY);
}

#[test]
fn a_trigger_archiving_into_communities_is_refused() {
    let (mut facts, tenant) = base();
    facts.triggers.push(archiving_trigger("buzz.communities"));
    let refusals = refused(&facts, &tenant);
    assert!(
        only(&refusals)
            .problem
            .starts_with("archives into buzz.communities, which is a tenant table"),
        "{refusals:?}"
    );
}

#[test]
fn a_trigger_archiving_into_a_key_child_is_refused() {
    let (mut facts, tenant) = base();
    facts.relations.push(event_tags(4));
    facts.keys.push(event_tags_key(4));
    facts.triggers.push(archiving_trigger("buzz.event_tags"));
    let refusals = refused(&facts, &tenant);
    assert_eq!(
        only(&refusals).object,
        "trigger archive_events on buzz.events"
    );
    assert_eq!(
        refusals[0].problem,
        "archives into buzz.event_tags, which is a key-only child table"
    );
}

#[test]
fn a_trigger_archiving_into_a_table_without_community_id_is_refused() {
    let (facts, tenant) = archiving_into(relation(3, "archive", "events_history", "r", false));
    let refusals = refused(&facts, &tenant);
    let refusal = only(&refusals);
    assert_eq!(refusal.object, "trigger archive_events on buzz.events");
    assert_eq!(
        refusal.problem,
        "archives into archive.events_history, which has no community_id column, so the \
         target's archived rows cannot be found"
    );
    assert_eq!(refusal.remedy, ARCHIVE_REMEDY);
}

#[test]
fn a_trigger_archiving_into_a_table_the_worker_cannot_read_and_purge_is_refused() {
    for (can_select, can_delete) in [(true, false), (false, true), (false, false)] {
        let (facts, tenant) = archiving_into(RelationFact {
            can_select,
            can_delete,
            ..archive_table()
        });
        let refusals = refused(&facts, &tenant);
        let refusal = refusal(
            &refusals,
            "trigger archive_events on buzz.events",
            "archives into",
        );
        assert_eq!(
            refusal.problem,
            "archives into archive.events_history, which cannot be read and purged by the worker \
             (GRANT SELECT, DELETE ON it TO buzz_deletion_worker)"
        );
        // Left outside the purge set, its community_id column is refused too.
        refusal_fn(&refusals, "table archive.events_history", "community_id");
        assert_eq!(refusals.len(), 2, "{refusals:#?}");
    }
}

#[test]
fn an_archive_its_writer_may_not_insert_into_is_refused_naming_the_grant() {
    // A function running as the deleting role, which lacks INSERT on the archive.
    let (facts, tenant) = archiving_into(RelationFact {
        can_insert: false,
        ..archive_table()
    });
    let refusals = refused(&facts, &tenant);
    let denied = refusal(
        &refusals,
        "trigger archive_events on buzz.events",
        "runs as the deleting role, which may not INSERT",
    );
    assert!(
        denied
            .remedy
            .starts_with("GRANT INSERT ON archive.events_history TO buzz_deletion_worker"),
        "{denied:?}"
    );

    // A SECURITY DEFINER function owned by a role that does not own the archive.
    let (mut facts, tenant) = base();
    facts.relations.push(archive_table());
    facts.triggers.push(TriggerFact {
        security_definer: true,
        function_owner: "auditor".into(),
        ..archiving_trigger("archive.events_history")
    });
    let refusals = refused(&facts, &tenant);
    refusal(
        &refusals,
        "trigger archive_events on buzz.events",
        "with the rights of auditor",
    );
}

#[test]
fn an_archive_its_writer_may_insert_into_is_accepted() {
    // The deleting role with INSERT; a SECURITY DEFINER function of the archive's owner (even
    // when the worker may not insert).
    for (can_insert, definer) in [(true, false), (false, true)] {
        let (mut facts, tenant) = base();
        facts.relations.push(RelationFact {
            can_insert,
            ..archive_table()
        });
        facts.triggers.push(TriggerFact {
            security_definer: definer,
            ..archiving_trigger("archive.events_history")
        });
        accepted(&facts, &tenant);
    }
}

#[test]
fn a_trigger_archiving_into_a_partitioned_or_inherited_table_is_refused() {
    let (facts, tenant) = archiving_into(relation(3, "archive", "events_history", "p", true));
    let refusals = refused(&facts, &tenant);
    refusal(
        &refusals,
        "trigger archive_events on buzz.events",
        "archives into archive.events_history, which is not an ordinary table",
    );

    let (mut facts, tenant) = base();
    facts.relations.push(RelationFact {
        parents: vec![4],
        ..archive_table()
    });
    facts
        .relations
        .push(relation(4, "archive", "history", "r", false));
    facts
        .triggers
        .push(archiving_trigger("archive.events_history"));
    let refusals = refused(&facts, &tenant);
    refusal(
        &refusals,
        "trigger archive_events on buzz.events",
        "archives into archive.events_history, which has partitions, inheritance parents or \
         children",
    );
}

#[test]
fn a_trigger_declared_refreshed_by_the_deletion_is_refused() {
    let (mut facts, tenant) = base();
    facts.triggers.push(TriggerFact {
        comment: declare("refreshed by the deletion"),
        ..trigger(
            2,
            "log_delete",
            TRIGGER_ROW | TRIGGER_DELETE,
            "public.log_delete",
        )
    });
    assert_only_refusal(
        &refused(&facts, &tenant),
        "trigger log_delete on buzz.events",
        "is declared 'refreshed by the deletion', which does not apply to a trigger",
        "declare it 'harmless' or 'archives into <schema>.<table>'",
    );
}

#[test]
fn a_trigger_with_a_malformed_declaration_is_refused_naming_the_grammar() {
    let (mut facts, tenant) = base();
    facts.triggers.push(TriggerFact {
        comment: Some("buzz-deletion: keeps history".into()),
        ..trigger(
            2,
            "log_delete",
            TRIGGER_ROW | TRIGGER_DELETE,
            "public.log_delete",
        )
    });
    let refusals = refused(&facts, &tenant);
    let object = "trigger log_delete on buzz.events";
    // Declaring nothing, it is also refused as an undeclared trigger.
    refusal_fn(
        &refusals,
        object,
        "is a trigger the deletion does not understand",
    );
    assert_eq!(refusals.len(), 2, "{refusals:#?}");
    let refusal = refusal(&refusals, object, "is not a declaration");
    assert!(
        refusal
            .problem
            .contains("\"buzz-deletion: keeps history\" starts with \"buzz-deletion:\" but is not a declaration"),
        "{refusal:?}"
    );
    assert!(refusal.problem.contains(GRAMMAR), "{refusal:?}");
    assert_eq!(
        refusal.remedy,
        format!("correct or remove the comment: it must be one of {GRAMMAR}")
    );
}

#[test]
fn an_ordinary_comment_on_a_trigger_declares_nothing() {
    let refusal = undeclared_trigger(TriggerFact {
        comment: Some("keeps history for support".into()),
        ..trigger(
            2,
            "log_delete",
            TRIGGER_ROW | TRIGGER_DELETE,
            "public.log_delete",
        )
    });
    assert!(
        refusal
            .problem
            .starts_with("is a trigger the deletion does not understand"),
        "{refusal:?}"
    );
}

#[test]
fn triggers_outside_the_purge_set_are_not_judged() {
    let (mut facts, tenant) = base();
    facts
        .relations
        .push(relation(3, "crm", "settings", "r", false));
    facts.triggers.push(trigger(
        3,
        "log_delete",
        TRIGGER_ROW | TRIGGER_DELETE,
        "public.log_delete",
    ));
    accepted(&facts, &tenant);
}

// ---------------------------------------------------------------------------------------------
// Rules.

#[test]
fn a_do_instead_rule_is_refused_even_when_declared() {
    for (event, word) in [
        ("1", "SELECT"),
        ("2", "UPDATE"),
        ("3", "INSERT"),
        ("4", "DELETE"),
    ] {
        for comment in [
            None,
            declare("harmless"),
            declare("archives into archive.events_history"),
        ] {
            let (mut facts, tenant) = base();
            facts.relations.push(archive_table());
            facts.rules.push(RuleFact {
                comment: comment.clone(),
                ..rule(2, "keep_events", event, true)
            });
            let refusals = refused(&facts, &tenant);
            let refusal = refusal(&refusals, "rule keep_events on buzz.events", "DO INSTEAD");
            assert_eq!(
                refusal.problem,
                format!(
                    "is a DO INSTEAD rule ON {word}: the rows the deletion reads, deletes or \
                     proves gone would not be the rows stored"
                ),
                "{comment:?}"
            );
            assert_eq!(
                refusal.remedy,
                "drop it (DROP RULE \"keep_events\" ON buzz.events); an INSTEAD rule cannot be \
                 declared"
            );
            // An INSTEAD rule adds no archive: the archive table stays outside, refused for its
            // community_id column.
            assert_eq!(
                objects(&refusals),
                vec![
                    "rule keep_events on buzz.events",
                    "table archive.events_history"
                ],
                "{comment:?}"
            );
        }
    }
}

#[test]
fn a_do_instead_nothing_rule_on_delete_is_refused() {
    let (mut facts, tenant) = base();
    facts.rules.push(RuleFact {
        comment: declare("harmless"),
        ..rule(2, "never_delete", "4", true)
    });
    let refusals = refused(&facts, &tenant);
    let refusal = only(&refusals);
    assert_eq!(refusal.object, "rule never_delete on buzz.events");
    assert!(
        refusal
            .problem
            .starts_with("is a DO INSTEAD rule ON DELETE"),
        "{refusal:?}"
    );
    assert!(refusal.remedy.contains("cannot be declared"), "{refusal:?}");
}

#[test]
fn an_undeclared_do_also_delete_rule_is_refused() {
    let (mut facts, tenant) = base();
    facts.rules.push(rule(2, "log_deletes", "4", false));
    assert_only_refusal(
        &refused(&facts, &tenant),
        "rule log_deletes on buzz.events",
        "is a DO ALSO rule ON DELETE the deletion does not understand",
        "drop it, or declare it: COMMENT ON RULE \"log_deletes\" ON buzz.events IS \
         'buzz-deletion: harmless' or 'buzz-deletion: archives into <schema>.<table>'",
    );
}

#[test]
fn a_do_also_rule_declared_harmless_passes_and_is_listed() {
    let (mut facts, tenant) = base();
    facts.rules.push(RuleFact {
        comment: declare("harmless"),
        ..rule(2, "log_deletes", "4", false)
    });
    let world = accepted(&facts, &tenant);
    assert_declared_only(&world, "rule log_deletes on buzz.events", "harmless");
}

#[test]
fn a_do_also_rule_declared_archiving_adds_its_archive() {
    let (mut facts, tenant) = base();
    facts.relations.push(archive_table());
    facts.rules.push(RuleFact {
        comment: declare("archives into archive.events_history"),
        ..rule(1, "archive_communities", "4", false)
    });
    let world = accepted(&facts, &tenant);
    assert_eq!(
        world.archives,
        vec![ArchiveTable {
            relation: named(3, "archive", "events_history"),
            sources: vec![1],
        }]
    );
    assert_declared_only(
        &world,
        "rule archive_communities on buzz.communities",
        "archives into archive.events_history",
    );
}

#[test]
fn a_rule_declared_not_tenant_data_is_refused() {
    let (mut facts, tenant) = base();
    facts.rules.push(RuleFact {
        comment: declare("not tenant data"),
        ..rule(2, "log_deletes", "4", false)
    });
    let refusals = refused(&facts, &tenant);
    let refusal = only(&refusals);
    assert_eq!(refusal.object, "rule log_deletes on buzz.events");
    assert_eq!(
        refusal.problem,
        "is declared 'not tenant data', which does not apply to a rule"
    );
}

// ---------------------------------------------------------------------------------------------
// Row-level security, grants, large objects.

#[test]
fn row_security_the_worker_does_not_bypass_is_refused() {
    let (mut facts, tenant) = base();
    facts.relations[1].row_security = true;
    facts.relations[1].sees_every_row = false;
    let refusals = refused(&facts, &tenant);
    let refusal = only(&refusals);
    assert_eq!(refusal.object, "buzz.events");
    assert!(
        refusal
            .problem
            .starts_with("has row-level security the worker's role does not bypass"),
        "{refusal:?}"
    );
    assert_eq!(
        refusal.remedy,
        "ALTER TABLE buzz.events DISABLE ROW LEVEL SECURITY (and NO FORCE ROW LEVEL SECURITY), \
         or run the worker as a role with BYPASSRLS"
    );
}

#[test]
fn row_security_the_worker_bypasses_passes() {
    let (mut facts, tenant) = base();
    facts.relations[1].row_security = true;
    facts.relations[1].sees_every_row = true;
    facts.relations[0].row_security = true;
    accepted(&facts, &tenant);
}

#[test]
fn a_purge_set_relation_without_select_or_delete_is_refused() {
    for (at, object) in [(0, "buzz.communities"), (1, "buzz.events")] {
        for (can_select, can_delete) in [(false, true), (true, false), (false, false)] {
            let (mut facts, tenant) = base();
            facts.relations[at].can_select = can_select;
            facts.relations[at].can_delete = can_delete;
            assert_only_refusal(
                &refused(&facts, &tenant),
                object,
                "cannot be read and purged by the worker's role",
                &format!("GRANT SELECT, DELETE ON {object} TO buzz_deletion_worker"),
            );
        }
    }
}

#[test]
fn a_key_child_without_delete_is_refused() {
    let (mut facts, tenant) = base();
    facts.relations.push(RelationFact {
        can_delete: false,
        ..event_tags(3)
    });
    facts.keys.push(event_tags_key(3));
    let refusals = refused(&facts, &tenant);
    assert_eq!(only(&refusals).object, "buzz.event_tags");
    assert_eq!(
        refusals[0].problem,
        "cannot be read and purged by the worker's role"
    );
}

#[test]
fn a_partitioned_tenant_root_needs_no_delete_grant_of_its_own() {
    let (mut facts, tenant) = partitioned_events();
    facts.relations[1].can_delete = false;
    accepted(&facts, &tenant);
    facts.relations[1].can_select = false;
    let refusals = refused(&facts, &tenant);
    assert_eq!(only(&refusals).object, "buzz.events");
}

#[test]
fn large_object_columns_are_refused_naming_the_column() {
    let (mut facts, tenant) = base();
    facts.relations[1].large_object_columns = vec!["attachment".into(), "thumbnail".into()];
    let refusals = refused(&facts, &tenant);
    assert_eq!(
        objects(&refusals),
        vec!["buzz.events.attachment", "buzz.events.thumbnail"]
    );
    for refusal in &refusals {
        assert_eq!(
            refusal.problem,
            "references large objects (type oid or lo), which deleting the row leaves behind"
        );
        assert!(refusal.remedy.contains("bytea"), "{refusal:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Publications.

fn assert_publishes(refusals: &[CatalogRefusal], publication: &str, names: &[&str]) {
    let object = format!("publication {publication}");
    assert_eq!(
        objects(refusals),
        vec![object.as_str(); names.len()],
        "{refusals:#?}"
    );
    for name in names {
        let refusal = refusal(
            refusals,
            &object,
            &format!("publishes {name} without deletes: the purged rows would survive"),
        );
        assert_eq!(
            refusal.remedy,
            format!(
                "ALTER PUBLICATION \"{publication}\" SET (publish = 'insert, update, delete, \
                 truncate'), or drop {name} from it"
            )
        );
    }
}

#[test]
fn an_all_tables_publication_without_deletes_is_refused() {
    let (mut facts, tenant) = base();
    facts
        .relations
        .push(relation(3, "crm", "settings", "r", false));
    facts.publications.push(PublicationFact {
        all_tables: true,
        ..publication("everything", false)
    });
    let refusals = refused(&facts, &tenant);
    assert_publishes(
        &refusals,
        "everything",
        &["buzz.communities", "buzz.events"],
    );
}

#[test]
fn a_schema_publication_without_deletes_is_refused() {
    let (mut facts, tenant) = base();
    facts.publications.push(PublicationFact {
        schemas: vec!["buzz".into()],
        ..publication("serving", false)
    });
    let refusals = refused(&facts, &tenant);
    assert_publishes(&refusals, "serving", &["buzz.communities", "buzz.events"]);
}

#[test]
fn a_publication_of_another_schema_is_not_judged() {
    let (mut facts, tenant) = base();
    facts.publications.push(PublicationFact {
        schemas: vec!["crm".into()],
        ..publication("crm", false)
    });
    accepted(&facts, &tenant);
}

#[test]
fn an_explicit_relation_publication_without_deletes_is_refused() {
    let (mut facts, tenant) = base();
    facts.publications.push(PublicationFact {
        relation_oids: vec![2],
        ..publication("events_feed", false)
    });
    let refusals = refused(&facts, &tenant);
    assert_publishes(&refusals, "events_feed", &["buzz.events"]);
}

#[test]
fn a_partition_whose_parent_is_published_without_deletes_is_refused() {
    let (mut facts, tenant) = partitioned_events();
    facts.publications.push(PublicationFact {
        relation_oids: vec![2],
        ..publication("events_feed", false)
    });
    let refusals = refused(&facts, &tenant);
    assert_publishes(
        &refusals,
        "events_feed",
        &["buzz.events", "buzz.events_2024"],
    );
}

#[test]
fn a_publication_of_deletes_from_a_table_without_replica_identity_is_refused() {
    let (mut facts, tenant) = partitioned_events();
    // The leaf partition has no replica identity (no primary key); the parent holds no rows.
    if let Some(leaf) = facts.relations.iter_mut().find(|r| r.oid == 3) {
        leaf.has_replica_identity = false;
    }
    facts.publications.push(PublicationFact {
        relation_oids: vec![2],
        ..publication("events_feed", true)
    });
    let refusals = refused(&facts, &tenant);
    assert_eq!(
        objects(&refusals),
        vec!["publication events_feed"],
        "{refusals:#?}"
    );
    let published = refusal(
        &refusals,
        "publication events_feed",
        "publishes deletes of buzz.events_2024, which has no replica identity",
    );
    assert!(
        published
            .remedy
            .starts_with("ALTER TABLE buzz.events_2024 REPLICA IDENTITY FULL"),
        "{published:?}"
    );
}

#[test]
fn a_publication_with_deletes_passes() {
    let (mut facts, tenant) = base();
    facts.publications.push(PublicationFact {
        all_tables: true,
        schemas: vec!["buzz".into()],
        relation_oids: vec![1, 2],
        ..publication("everything", true)
    });
    accepted(&facts, &tenant);
}

// ---------------------------------------------------------------------------------------------
// Materialized views.

const MATVIEW: &str = "materialized view reports.daily_counts";

#[test]
fn a_materialized_view_reading_a_tenant_table_is_refused_undeclared() {
    let (facts, tenant) = daily_counts(true, None);
    assert_only_refusal(
        &refused(&facts, &tenant),
        MATVIEW,
        "reads tenant data and keeps a copy of it that the purge does not reach",
        "drop it, or declare it: COMMENT ON MATERIALIZED VIEW reports.daily_counts IS \
         'buzz-deletion: refreshed by the deletion' (it needs a community_id column)",
    );
}

#[test]
fn a_materialized_view_reading_a_tenant_table_through_a_view_is_refused_undeclared() {
    let (mut facts, tenant) = base();
    facts
        .relations
        .push(relation(3, "reports", "daily_counts", "m", true));
    facts
        .relations
        .push(relation(4, "reports", "recent_events", "v", false));
    facts
        .relations
        .push(relation(5, "reports", "recent_events_2", "v", false));
    facts.reads = vec![reads(3, 5), reads(5, 4), reads(4, 2)];
    let refusals = refused(&facts, &tenant);
    assert_eq!(only(&refusals).object, MATVIEW);
    assert!(
        refusals[0].problem.starts_with("reads tenant data"),
        "{refusals:?}"
    );
}

#[test]
fn a_materialized_view_reading_a_key_child_or_another_copy_is_refused_undeclared() {
    let (mut facts, tenant) = base();
    facts
        .relations
        .push(relation(3, "reports", "daily_counts", "m", true));
    facts.relations.push(event_tags(4));
    facts.relations.push(RelationFact {
        comment: declare("not tenant data"),
        ..relation(5, "reports", "tag_copy", "m", false)
    });
    facts.keys.push(event_tags_key(4));
    // daily_counts reads tag_copy, which reads the key child.
    facts.reads = vec![reads(3, 5), reads(5, 4)];
    let refusals = refused(&facts, &tenant);
    assert_eq!(only(&refusals).object, MATVIEW);
}

#[test]
fn a_materialized_view_declared_refreshed_passes_with_community_id_and_the_refreshers_owner() {
    let (facts, tenant) = daily_counts(true, declare("refreshed by the deletion"));
    let world = accepted(&facts, &tenant);
    assert_eq!(
        world.refreshed_views,
        vec![RefreshedView {
            relation: named(3, "reports", "daily_counts"),
            reads_views: Vec::new(),
        }]
    );
    assert_declared_only(&world, MATVIEW, "refreshed by the deletion");
}

fn assert_refresh_refused(facts: &CatalogFacts, tenant: &[TenantTable], because: &str) {
    let refusals = refused(facts, tenant);
    let refusal = only(&refusals);
    assert_eq!(refusal.object, MATVIEW);
    assert_eq!(
        refusal.problem,
        format!("is declared 'refreshed by the deletion' but {because}")
    );
    assert_eq!(
        refusal.remedy,
        "give it a community_id column, ALTER MATERIALIZED VIEW reports.daily_counts OWNER TO \
         the migrations' owner, and GRANT SELECT ON reports.daily_counts TO buzz_deletion_worker"
    );
}

#[test]
fn a_materialized_view_declared_refreshed_without_community_id_is_refused() {
    let (facts, tenant) = daily_counts(false, declare("refreshed by the deletion"));
    assert_refresh_refused(
        &facts,
        &tenant,
        "has no community_id column, so the refreshed view cannot be proven free of the community",
    );
}

#[test]
fn a_materialized_view_declared_refreshed_owned_by_another_role_is_refused() {
    let (mut facts, tenant) = daily_counts(true, declare("refreshed by the deletion"));
    facts.relations[2].owner = "analyst".into();
    assert_refresh_refused(
        &facts,
        &tenant,
        "is owned by analyst, but the deletion refreshes only views owned by buzz (the owner of \
         buzz.refresh_declared_view)",
    );
}

#[test]
fn a_materialized_view_declared_refreshed_before_the_refresher_exists_is_refused() {
    let (mut facts, tenant) = daily_counts(true, declare("refreshed by the deletion"));
    facts.refresher_owner = None;
    assert_refresh_refused(
        &facts,
        &tenant,
        "is owned by buzz, but the deletion refreshes only views owned by the migrations' owner \
         (the owner of buzz.refresh_declared_view)",
    );
}

#[test]
fn a_materialized_view_declared_refreshed_the_worker_cannot_read_is_refused() {
    let (mut facts, tenant) = daily_counts(true, declare("refreshed by the deletion"));
    facts.relations[2].can_select = false;
    assert_refresh_refused(&facts, &tenant, "cannot be read by the worker's role");
}

#[test]
fn a_materialized_view_declared_not_tenant_data_passes() {
    let (facts, tenant) = daily_counts(false, declare("not tenant data"));
    let world = accepted(&facts, &tenant);
    assert!(world.refreshed_views.is_empty());
    assert_declared_only(&world, MATVIEW, "not tenant data");
}

#[test]
fn a_materialized_view_declared_harmless_is_refused() {
    let (facts, tenant) = daily_counts(true, declare("harmless"));
    assert_only_refusal(
        &refused(&facts, &tenant),
        MATVIEW,
        "is declared 'harmless', which does not apply to a materialized view",
        "declare it 'buzz-deletion: refreshed by the deletion' or 'buzz-deletion: not tenant data'",
    );
}

#[test]
fn a_materialized_view_with_a_malformed_declaration_is_refused_naming_the_grammar() {
    let (facts, tenant) = daily_counts(true, Some("buzz-deletion: refreshed nightly".into()));
    let refusals = refused(&facts, &tenant);
    let refusal = refusal(&refusals, MATVIEW, "is not a declaration");
    assert!(refusal.problem.contains(GRAMMAR), "{refusal:?}");
    assert!(refusal.remedy.contains(GRAMMAR), "{refusal:?}");
    // Declaring nothing, it is also refused as an undeclared copy.
    refusal_fn(&refusals, MATVIEW, "reads tenant data");
    assert_eq!(refusals.len(), 2, "{refusals:#?}");
}

#[test]
fn a_materialized_view_reading_no_tenant_data_is_unrelated() {
    let (mut facts, tenant) = base();
    facts
        .relations
        .push(relation(3, "crm", "settings", "r", false));
    facts
        .relations
        .push(relation(4, "reports", "settings_copy", "m", true));
    facts
        .relations
        .push(relation(5, "reports", "event_view", "v", false));
    facts.reads = vec![reads(4, 3), reads(5, 2)];
    let world = accepted(&facts, &tenant);
    assert_eq!(
        world.unrelated,
        vec![
            "table crm.settings".to_owned(),
            "materialized view reports.settings_copy".to_owned(),
            "view reports.event_view".to_owned(),
        ]
    );
    assert!(world.refreshed_views.is_empty());
}

#[test]
fn refresh_order_puts_a_view_after_the_refreshed_views_it_reads() {
    let (mut facts, tenant) = base();
    let refreshed = |oid, name| RelationFact {
        comment: declare("refreshed by the deletion"),
        ..relation(oid, "reports", name, "m", true)
    };
    // Readers listed before what they read.
    facts.relations.push(refreshed(3, "weekly"));
    facts.relations.push(refreshed(6, "monthly"));
    facts.relations.push(refreshed(4, "daily"));
    facts
        .relations
        .push(relation(5, "reports", "daily_view", "v", false));
    facts.reads = vec![
        reads(3, 4), // weekly reads daily directly
        reads(6, 5), // monthly reads daily through a plain view
        reads(5, 4),
        reads(4, 2), // daily reads the tenant table
    ];
    let world = accepted(&facts, &tenant);
    assert_eq!(
        world.refreshed_views,
        vec![
            RefreshedView {
                relation: named(4, "reports", "daily"),
                reads_views: Vec::new(),
            },
            RefreshedView {
                relation: named(3, "reports", "weekly"),
                reads_views: vec![4],
            },
            RefreshedView {
                relation: named(6, "reports", "monthly"),
                reads_views: vec![4],
            },
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Foreign tables.

fn foreign(
    options: &[&str],
    community_id: bool,
    comment: Option<String>,
) -> Result<ClosedWorld, Vec<CatalogRefusal>> {
    let (mut facts, tenant) = base();
    facts.relations.push(RelationFact {
        foreign_options: options.iter().map(|o| (*o).to_owned()).collect(),
        comment,
        ..relation(3, "remote", "mirror", "f", community_id)
    });
    classify(&facts, &tenant)
}

fn assert_foreign_refused(outcome: Result<ClosedWorld, Vec<CatalogRefusal>>) {
    let refusals = outcome.err().unwrap_or_default();
    let refusal = only(&refusals);
    assert_eq!(refusal.object, "foreign table remote.mirror");
    assert!(
        refusal
            .problem
            .starts_with("is a foreign table with tenant rows"),
        "{refusal:?}"
    );
    assert_eq!(
        refusal.remedy,
        "drop it, or, if it holds no tenant's rows, declare it: COMMENT ON FOREIGN TABLE \
         remote.mirror IS 'buzz-deletion: not tenant data'"
    );
}

#[test]
fn a_foreign_table_with_community_id_is_refused() {
    assert_foreign_refused(foreign(&[], true, None));
}

#[test]
fn a_foreign_table_naming_a_tenant_table_is_refused() {
    assert_foreign_refused(foreign(
        &["schema_name=buzz", "table_name=events"],
        false,
        None,
    ));
    assert_foreign_refused(foreign(&["table_name=events"], false, None));
    assert_foreign_refused(foreign(&["table_name=communities"], false, None));
}

#[test]
fn a_foreign_table_declared_not_tenant_data_passes() {
    let world = foreign(&["table_name=events"], true, declare("not tenant data"))
        .unwrap_or_else(|r| panic!("{r:#?}"));
    assert_declared_only(&world, "foreign table remote.mirror", "not tenant data");
}

#[test]
fn a_foreign_table_declared_otherwise_is_refused() {
    assert_foreign_refused(foreign(&[], true, declare("harmless")));
}

#[test]
fn a_foreign_table_with_neither_is_unrelated() {
    for options in [
        &[][..],
        &["schema_name=other", "table_name=events"][..],
        &["table_name=weather"][..],
    ] {
        let world = foreign(options, false, None).unwrap_or_else(|r| panic!("{options:?}: {r:#?}"));
        assert_eq!(
            world.unrelated,
            vec!["foreign table remote.mirror".to_owned()],
            "{options:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Tables outside the purge set.

#[test]
fn a_table_with_community_id_outside_buzz_is_refused() {
    for relkind in ["r", "p"] {
        let (mut facts, tenant) = base();
        facts
            .relations
            .push(relation(3, "crm", "contacts", relkind, true));
        let refusals = refused(&facts, &tenant);
        let refusal = only(&refusals);
        assert_eq!(refusal.object, "table crm.contacts");
        assert_eq!(
            refusal.problem,
            "has a community_id column outside schema buzz: tenant rows there would be neither \
             inventoried nor purged"
        );
        assert!(
            refusal
                .remedy
                .contains("COMMENT ON TABLE crm.contacts IS 'buzz-deletion: not tenant data'"),
            "{refusal:?}"
        );
        assert!(
            refusal.remedy.contains("move it into schema buzz"),
            "{refusal:?}"
        );
    }
}

#[test]
fn a_table_with_community_id_declared_not_tenant_data_passes() {
    let (mut facts, tenant) = base();
    facts.relations.push(RelationFact {
        comment: declare("not tenant data"),
        ..relation(3, "crm", "contacts", "r", true)
    });
    let world = accepted(&facts, &tenant);
    assert_declared_only(&world, "table crm.contacts", "not tenant data");
    assert!(world.unrelated.is_empty());
}

#[test]
fn the_evidence_schema_is_ignored() {
    let (mut facts, tenant) = base();
    facts
        .relations
        .push(relation(3, "deletion", "evidence", "r", true));
    facts
        .relations
        .push(relation(4, "deletion", "snapshot", "m", true));
    facts.reads.push(reads(4, 2));
    let world = accepted(&facts, &tenant);
    assert_nothing_beyond_the_tenant_tables(&world);
}

#[test]
fn relations_without_community_id_or_keys_are_unrelated() {
    let (mut facts, tenant) = base();
    facts
        .relations
        .push(relation(3, "crm", "settings", "r", false));
    facts
        .relations
        .push(relation(4, "crm", "settings_by_year", "p", false));
    facts
        .relations
        .push(relation(5, "crm", "settings_view", "v", false));
    facts
        .relations
        .push(relation(6, "crm", "settings_id_seq", "S", false));
    let world = accepted(&facts, &tenant);
    assert_eq!(
        world.unrelated,
        vec![
            "table crm.settings".to_owned(),
            "table crm.settings_by_year".to_owned(),
            "view crm.settings_view".to_owned(),
            "sequence crm.settings_id_seq".to_owned(),
        ]
    );
}

#[test]
fn every_refusal_is_reported_at_once_sorted_by_object() {
    let (mut facts, tenant) = base();
    facts
        .relations
        .push(relation(3, "crm", "contacts", "r", true));
    facts.relations[1].large_object_columns = vec!["attachment".into()];
    facts.rules.push(rule(2, "log_deletes", "4", false));
    let refusals = refused(&facts, &tenant);
    assert_eq!(
        objects(&refusals),
        vec![
            "buzz.events.attachment",
            "rule log_deletes on buzz.events",
            "table crm.contacts",
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Scope predicates over the classified world.

fn plan(facts: &CatalogFacts, tenant: &[TenantTable]) -> ScopePlan {
    let world = accepted(facts, tenant);
    ScopePlan::new(tenant, &world, named(1, "buzz", "communities"))
}

#[test]
fn a_key_childs_predicate_nests_to_its_parents_community_predicate() {
    let (mut facts, tenant) = base();
    facts.relations.push(event_tags(3));
    facts
        .relations
        .push(relation(4, "buzz", "event_tag_votes", "r", false));
    facts.keys.push(event_tags_key(3));
    facts.keys.push(membership(
        "event_tag_votes_tag_fkey",
        4,
        3,
        &["tag_id"],
        &["id"],
    ));
    let plan = plan(&facts, &tenant);
    assert_eq!(
        plan.predicate(2, "e", Scope::Community, 0),
        "e.community_id = $1"
    );
    assert_eq!(plan.predicate(1, "c", Scope::Community, 0), "c.id = $1");
    assert_eq!(
        plan.predicate(3, "t", Scope::Community, 0),
        "(t.\"event_id\") IN (SELECT p0.\"id\" FROM \"buzz\".\"events\" p0 WHERE \
         p0.community_id = $1)"
    );
    assert_eq!(
        plan.predicate(4, "v", Scope::Community, 0),
        "(v.\"tag_id\") IN (SELECT p0.\"id\" FROM \"buzz\".\"event_tags\" p0 WHERE \
         (p0.\"event_id\") IN (SELECT p1.\"id\" FROM \"buzz\".\"events\" p1 WHERE \
         p1.community_id = $1))"
    );
    let users = BTreeMap::from([("buzz.events".to_owned(), Some("author".to_owned()))]);
    assert_eq!(
        plan.predicate(3, "t", Scope::User(&users), 0),
        "(t.\"event_id\") IN (SELECT p0.\"id\" FROM \"buzz\".\"events\" p0 WHERE \
         (p0.community_id = $1 AND p0.\"author\" = $2))"
    );
    assert_eq!(plan.predicate(1, "c", Scope::User(&users), 0), "false");
    assert_eq!(plan.predicate(99, "x", Scope::Community, 0), "false");
}

#[test]
fn community_scope_drops_keys_that_carry_community_id_and_keeps_the_rest() {
    let (mut facts, mut tenant) = base();
    facts
        .relations
        .push(relation(3, "buzz", "replies", "r", true));
    tenant.push(tenant_table(3, "replies"));
    facts.keys.push(key_on(
        "replies_community_id_fkey",
        3,
        1,
        &["community_id"],
        &["id"],
    ));
    facts.keys.push(key_on(
        "replies_event_id_fkey",
        3,
        2,
        &["event_id"],
        &["id"],
    ));
    facts.keys.push(key_on(
        "replies_event_fkey",
        3,
        2,
        &["community_id", "event_id"],
        &["community_id", "id"],
    ));
    let plan = plan(&facts, &tenant);
    let names = |keys: Vec<&CrossKey>| keys.iter().map(|k| k.name.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(plan.cross_keys(Scope::Community)),
        vec!["replies_event_id_fkey"]
    );
    let users = BTreeMap::new();
    assert_eq!(
        names(plan.cross_keys(Scope::User(&users))),
        vec![
            "replies_community_id_fkey",
            "replies_event_id_fkey",
            "replies_event_fkey"
        ]
    );
    let kept = plan.cross_keys(Scope::Community)[0];
    assert_eq!(
        plan.cross_reference_query(kept, Scope::Community),
        "SELECT count(*)::int8, COALESCE(array_agg(DISTINCT r.community_id::text) FILTER (WHERE \
         r.community_id::text IS NOT NULL), '{}') FROM \"buzz\".\"replies\" r WHERE \
         (r.community_id = $1) IS NOT TRUE AND (r.\"event_id\") IN (SELECT d.\"id\" FROM \
         \"buzz\".\"events\" d WHERE d.community_id = $1)"
    );
}

#[test]
fn a_foreign_table_at_the_root_of_the_serving_schema_is_refused_even_when_declared() {
    let (mut facts, tenant) = base();
    let mut foreign = relation(9, "buzz", "remote_events", "f", true);
    foreign.comment = Some("buzz-deletion: not tenant data".into());
    facts.relations.push(foreign);
    let refused = classify(&facts, &tenant).err().unwrap_or_default();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].object, "foreign table buzz.remote_events");
    assert!(
        refused[0].remedy.contains("cannot be declared"),
        "{refused:?}"
    );
}
