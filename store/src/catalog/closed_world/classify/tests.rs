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

/// A catalogue: its facts and its tenant tables.
type Catalogue = (CatalogFacts, Vec<TenantTable>);

/// The base catalogue, changed by `change`.
fn with(change: impl FnOnce(&mut CatalogFacts, &mut Vec<TenantTable>)) -> Catalogue {
    let (mut facts, mut tenant) = base();
    change(&mut facts, &mut tenant);
    (facts, tenant)
}

/// The base catalogue with `relations` added.
fn with_relations(relations: impl IntoIterator<Item = RelationFact>) -> Catalogue {
    with(|facts, _| facts.relations.extend(relations))
}

/// The base with `buzz.replies` (3), a tenant table of its own.
fn with_replies() -> Catalogue {
    with(|facts, tenant| {
        facts
            .relations
            .push(relation(3, "buzz", "replies", "r", true));
        tenant.push(tenant_table(3, "replies"));
    })
}

/// The base with `buzz.event_tags` (3) and `buzz.event_tag_votes` (4), keys not yet declared.
fn with_tags_and_votes() -> Catalogue {
    with_relations([
        event_tags(3),
        relation(4, "buzz", "event_tag_votes", "r", false),
    ])
}

/// `event_tag_votes_tag_fkey` from `buzz.event_tag_votes` (4) into `buzz.event_tags` (3),
/// declared "tenant data through this key".
fn votes_key() -> KeyFact {
    membership("event_tag_votes_tag_fkey", 4, 3, &["tag_id"], &["id"])
}

/// A row trigger's type: before delete.
const BEFORE_DELETE: i32 = TRIGGER_ROW | TRIGGER_BEFORE | TRIGGER_DELETE;

/// A row trigger's type: after update or delete.
const AFTER_UPDATE_OR_DELETE: i32 = TRIGGER_ROW | TRIGGER_DELETE | TRIGGER_UPDATE;

/// The AFTER DELETE row trigger `log_delete` on `buzz.events`, undeclared.
fn log_delete() -> TriggerFact {
    trigger(
        2,
        "log_delete",
        TRIGGER_ROW | TRIGGER_DELETE,
        "public.log_delete",
    )
}

/// `trigger` with `comment`.
fn commented_trigger(comment: Option<String>, trigger: TriggerFact) -> TriggerFact {
    TriggerFact { comment, ..trigger }
}

/// `rule` with `comment`.
fn commented_rule(comment: Option<String>, rule: RuleFact) -> RuleFact {
    RuleFact { comment, ..rule }
}

/// The base catalogue with `trigger` added.
fn with_trigger(trigger: TriggerFact) -> Catalogue {
    with(|facts, _| facts.triggers.push(trigger))
}

/// The base catalogue with `rule` added.
fn with_rule(rule: RuleFact) -> Catalogue {
    with(|facts, _| facts.rules.push(rule))
}

/// A cross key `name` from `from` into `to` on `columns`, referencing `referenced`.
fn cross_key(
    name: &str,
    (from, to): (i64, i64),
    columns: &[&str],
    referenced: &[&str],
) -> CrossKey {
    CrossKey {
        name: name.into(),
        referencing_oid: from,
        referenced_oid: to,
        columns: columns.iter().map(|c| (*c).to_owned()).collect(),
        referenced_columns: referenced.iter().map(|c| (*c).to_owned()).collect(),
    }
}

/// The key child `relation`, a member through its key `key` on `column` into `id` of
/// `parent_oid`.
fn key_child(relation: NamedRelation, key: &str, column: &str, parent_oid: i64) -> KeyChild {
    KeyChild {
        relation,
        key: key.into(),
        columns: vec![column.into()],
        parent_oid,
        parent_columns: vec!["id".into()],
    }
}

/// The world archives into `archive.events_history` (3) alone, from `sources`, relying on one
/// declaration: `object`'s that it archives there.
fn assert_archived_only_by(world: &ClosedWorld, object: &str, sources: Vec<i64>) {
    let relation = named(3, "archive", "events_history");
    assert_eq!(world.archives, vec![ArchiveTable { relation, sources }]);
    assert_declared_only(world, object, "archives into archive.events_history");
}

/// The refusal of the archiving trigger of [`archiving_trigger`] whose problem contains
/// `problem`.
fn archiving_refusal<'a>(refusals: &'a [CatalogRefusal], problem: &str) -> &'a CatalogRefusal {
    refusal(refusals, "trigger archive_events on buzz.events", problem)
}

/// What a refusal's problem or remedy must be.
#[derive(Debug, Clone, Copy)]
enum Text {
    /// Exactly this.
    Is(&'static str),
    /// Beginning with this.
    StartsWith(&'static str),
    /// Holding this.
    Contains(&'static str),
    /// Anything: the case does not judge it.
    Any,
}

use Text::{Any, Contains, Is, StartsWith};

impl Text {
    /// Asserts that `actual` is as this says, naming `case`.
    fn check(self, actual: &str, case: &str) {
        match self {
            Is(expected) => assert_eq!(actual, expected, "{case}"),
            StartsWith(start) => assert!(actual.starts_with(start), "{case}: {actual:?}"),
            Contains(part) => assert!(actual.contains(part), "{case}: {actual:?}"),
            Any => {}
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Catalogues refused for exactly one fault.

/// Each catalogue is refused once: for its object, with its problem, and a remedy saying each of
/// the remedy texts.
#[test]
fn a_catalogue_with_one_fault_is_refused_once_naming_object_problem_and_remedy() {
    let cases: Vec<(&str, Catalogue, &str, Text, &[Text])> = vec![
        (
            "a missing communities table",
            with(|facts, _| {
                facts.relations.remove(0);
            }),
            "buzz.communities",
            Is("is missing or not an ordinary table"),
            &[Contains("buzz-deletion migrate")],
        ),
        (
            "a communities relation that is not an ordinary table",
            with(|facts, _| facts.relations[0].relkind = "p".into()),
            "buzz.communities",
            Is("is missing or not an ordinary table"),
            &[],
        ),
        (
            "a key from outside into a tenant table",
            with(|facts, _| {
                facts
                    .relations
                    .push(relation(3, "crm", "tickets", "r", false));
                facts.keys.push(key("tickets_event_id_fkey", 3, 2, "c"));
            }),
            "foreign key tickets_event_id_fkey on crm.tickets",
            StartsWith("references buzz.events (ON DELETE CASCADE) from crm.tickets"),
            &[],
        ),
        (
            "a key child declaring two membership keys",
            with(|facts, _| {
                facts.relations.push(event_tags(3));
                let community =
                    membership("event_tags_community_fkey", 3, 1, &["community"], &["id"]);
                facts.keys.extend([community, event_tags_key(3)]);
            }),
            "buzz.event_tags",
            Is("declares more than one key 'tenant data through this key'"),
            &[Is(
                "declare exactly one membership key per key-only child table",
            )],
        ),
        (
            "a project trigger name running another function",
            with(|facts, _| {
                let every_write =
                    TRIGGER_ROW | TRIGGER_BEFORE | TRIGGER_INSERT | TRIGGER_UPDATE | TRIGGER_DELETE;
                let function = "public.refuse_fenced_write";
                facts
                    .triggers
                    .push(trigger(2, "buzz_write_fence", every_write, function));
            }),
            "trigger buzz_write_fence on buzz.events",
            Is(
                "is a trigger the deletion does not understand (BEFORE INSERT OR UPDATE OR DELETE FOR \
                EACH ROW executing public.refuse_fenced_write()): it could copy, keep or re-route rows \
                of the community being deleted",
            ),
            &[],
        ),
        (
            "an undeclared after delete trigger",
            with_trigger(log_delete()),
            "trigger log_delete on buzz.events",
            Contains("(AFTER DELETE FOR EACH ROW executing public.log_delete())"),
            &[Is(
                "drop it, or declare what it does: COMMENT ON TRIGGER \"log_delete\" ON buzz.events \
                  IS 'buzz-deletion: harmless' or 'buzz-deletion: archives into <schema>.<table>'",
            )],
        ),
        (
            "an undeclared before delete trigger",
            with_trigger(trigger(
                2,
                "keep_deleted",
                BEFORE_DELETE,
                "public.keep_deleted",
            )),
            "trigger keep_deleted on buzz.events",
            Contains("(BEFORE DELETE FOR EACH ROW executing public.keep_deleted())"),
            &[],
        ),
        (
            "an undeclared security definer trigger",
            with_trigger(TriggerFact {
                security_definer: true,
                ..trigger(2, "notify_insert", TRIGGER_INSERT, "public.notify_insert")
            }),
            "trigger notify_insert on buzz.events",
            Contains(
                "(AFTER INSERT FOR EACH STATEMENT executing public.notify_insert(), SECURITY DEFINER)",
            ),
            &[],
        ),
        (
            "an undeclared trigger on communities",
            with_trigger(trigger(1, "audit", AFTER_UPDATE_OR_DELETE, "public.audit")),
            "trigger audit on buzz.communities",
            Contains("(AFTER UPDATE OR DELETE FOR EACH ROW executing public.audit())"),
            &[],
        ),
        (
            "a trigger archiving into a missing table",
            with_trigger(archiving_trigger("archive.events_history")),
            "trigger archive_events on buzz.events",
            Is("declares it archives into archive.events_history, which does not exist"),
            &[Is("correct the declaration to name the archive table")],
        ),
        (
            "a trigger archiving into a tenant table",
            with(|facts, tenant| {
                facts
                    .relations
                    .push(relation(3, "buzz", "events_history", "r", true));
                tenant.push(tenant_table(3, "events_history"));
                facts
                    .triggers
                    .push(archiving_trigger("buzz.events_history"));
            }),
            "trigger archive_events on buzz.events",
            StartsWith(
                "archives into buzz.events_history, which is a tenant table: its write fence",
            ),
            &[Is(ARCHIVE_REMEDY)],
        ),
        (
            "a trigger archiving into a key child",
            with(|facts, _| {
                facts.relations.push(event_tags(4));
                facts.keys.push(event_tags_key(4));
                facts.triggers.push(archiving_trigger("buzz.event_tags"));
            }),
            "trigger archive_events on buzz.events",
            Is("archives into buzz.event_tags, which is a key-only child table"),
            &[],
        ),
        (
            "a trigger archiving into a table without community_id",
            archiving_into(relation(3, "archive", "events_history", "r", false)),
            "trigger archive_events on buzz.events",
            Is(
                "archives into archive.events_history, which has no community_id column, so the \
                target's archived rows cannot be found",
            ),
            &[Is(ARCHIVE_REMEDY)],
        ),
        (
            "a trigger declared refreshed by the deletion",
            with_trigger(commented_trigger(
                declare("refreshed by the deletion"),
                log_delete(),
            )),
            "trigger log_delete on buzz.events",
            Is("is declared 'refreshed by the deletion', which does not apply to a trigger"),
            &[Is(
                "declare it 'harmless' or 'archives into <schema>.<table>'",
            )],
        ),
        (
            "a do instead nothing rule on delete, declared harmless",
            with_rule(commented_rule(
                declare("harmless"),
                rule(2, "never_delete", "4", true),
            )),
            "rule never_delete on buzz.events",
            StartsWith("is a DO INSTEAD rule ON DELETE"),
            &[Contains("cannot be declared")],
        ),
        (
            "an undeclared do also delete rule",
            with_rule(rule(2, "log_deletes", "4", false)),
            "rule log_deletes on buzz.events",
            Is("is a DO ALSO rule ON DELETE the deletion does not understand"),
            &[Is(
                "drop it, or declare it: COMMENT ON RULE \"log_deletes\" ON buzz.events IS \
                  'buzz-deletion: harmless' or 'buzz-deletion: archives into <schema>.<table>'",
            )],
        ),
        (
            "a rule declared not tenant data",
            with_rule(commented_rule(
                declare("not tenant data"),
                rule(2, "log_deletes", "4", false),
            )),
            "rule log_deletes on buzz.events",
            Is("is declared 'not tenant data', which does not apply to a rule"),
            &[],
        ),
        (
            "row security the worker does not bypass",
            with(|facts, _| {
                facts.relations[1].row_security = true;
                facts.relations[1].sees_every_row = false;
            }),
            "buzz.events",
            StartsWith("has row-level security the worker's role does not bypass"),
            &[Is(
                "ALTER TABLE buzz.events DISABLE ROW LEVEL SECURITY (and NO FORCE ROW LEVEL \
                  SECURITY), or run the worker as a role with BYPASSRLS",
            )],
        ),
        (
            "a key child without delete",
            with(|facts, _| {
                facts.relations.push(RelationFact {
                    can_delete: false,
                    ..event_tags(3)
                });
                facts.keys.push(event_tags_key(3));
            }),
            "buzz.event_tags",
            Is("cannot be read and purged by the worker's role"),
            &[],
        ),
        (
            "a materialized view reading a tenant table, undeclared",
            daily_counts(true, None),
            MATVIEW,
            Is("reads tenant data and keeps a copy of it that the purge does not reach"),
            &[Is(
                "drop it, or declare it: COMMENT ON MATERIALIZED VIEW reports.daily_counts IS \
                  'buzz-deletion: refreshed by the deletion' (it needs a community_id column)",
            )],
        ),
        (
            "a materialized view reading a tenant table through views, undeclared",
            with(|facts, _| {
                facts.relations.extend([
                    relation(3, "reports", "daily_counts", "m", true),
                    relation(4, "reports", "recent_events", "v", false),
                    relation(5, "reports", "recent_events_2", "v", false),
                ]);
                facts.reads = vec![reads(3, 5), reads(5, 4), reads(4, 2)];
            }),
            MATVIEW,
            StartsWith("reads tenant data"),
            &[],
        ),
        (
            // daily_counts reads tag_copy, which reads the key child.
            "a materialized view reading another copy of a key child, undeclared",
            with(|facts, _| {
                facts.relations.extend([
                    relation(3, "reports", "daily_counts", "m", true),
                    event_tags(4),
                    RelationFact {
                        comment: declare("not tenant data"),
                        ..relation(5, "reports", "tag_copy", "m", false)
                    },
                ]);
                facts.keys.push(event_tags_key(4));
                facts.reads = vec![reads(3, 5), reads(5, 4)];
            }),
            MATVIEW,
            Any,
            &[],
        ),
        (
            "a materialized view declared harmless",
            daily_counts(true, declare("harmless")),
            MATVIEW,
            Is("is declared 'harmless', which does not apply to a materialized view"),
            &[Is(
                "declare it 'buzz-deletion: refreshed by the deletion' or 'buzz-deletion: not \
                  tenant data'",
            )],
        ),
        (
            "a foreign table at the root of the serving schema, even declared",
            with_relations([RelationFact {
                comment: Some("buzz-deletion: not tenant data".into()),
                ..relation(9, "buzz", "remote_events", "f", true)
            }]),
            "foreign table buzz.remote_events",
            Any,
            &[Contains("cannot be declared")],
        ),
    ];
    for (case, (facts, tenant), object, problem, remedy) in cases {
        let refusals = refused(&facts, &tenant);
        let refusal = only(&refusals);
        assert_eq!(refusal.object, object, "{case}");
        problem.check(&refusal.problem, case);
        for text in remedy {
            text.check(&refusal.remedy, case);
        }
    }
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
        let (facts, tenant) = with(|facts, _| {
            facts
                .relations
                .push(relation(3, "crm", "accounts", "r", false));
            facts.keys.push(KeyFact {
                on_delete: action.into(),
                ..key_on("accounts_community_fkey", 3, 1, &["community"], &["id"])
            });
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
fn a_key_from_a_tenant_table_into_communities_on_community_id_is_fine() {
    let (facts, tenant) = with(|facts, _| {
        facts.keys.push(KeyFact {
            on_delete: "c".into(),
            ..key_on("events_community_id_fkey", 2, 1, &["community_id"], &["id"])
        });
    });
    let world = accepted(&facts, &tenant);
    assert!(world.key_children.is_empty());
    assert!(world.declared.is_empty());
    assert_eq!(
        world.cross_keys,
        vec![cross_key(
            "events_community_id_fkey",
            (2, 1),
            &["community_id"],
            &["id"]
        )]
    );
}

// ---------------------------------------------------------------------------------------------
// Key-only children.

#[test]
fn a_declared_key_child_chains_to_a_grandchild_declared_on_it() {
    let (mut facts, tenant) = with_tags_and_votes();
    // The grandchild's key first: it joins only once its parent has.
    facts.keys.extend([votes_key(), event_tags_key(3)]);
    let world = accepted(&facts, &tenant);
    assert_eq!(
        world.key_children,
        vec![
            key_child(
                named(3, "buzz", "event_tags"),
                "event_tags_event_id_fkey",
                "event_id",
                2
            ),
            key_child(
                named(4, "buzz", "event_tag_votes"),
                "event_tag_votes_tag_fkey",
                "tag_id",
                3
            ),
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
    let (mut facts, tenant) = with_relations([child]);
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

/// A declared key child of a shape a key-only child cannot have is refused, naming the shape
/// (and counted refusals: the declaration's and its key's from outside).
#[test]
fn a_key_child_of_the_wrong_shape_is_refused() {
    const NOT_ORDINARY: &str =
        "a key-only child must be an ordinary table (not partitioned, not foreign)";
    const NOT_ALONE: &str =
        "a key-only child must have no partitions, inheritance parents or children";
    let cases = [
        (
            "partitioned",
            relation(3, "buzz", "event_tags", "p", false),
            Vec::new(),
            ("buzz.event_tags", NOT_ORDINARY),
            Some(2),
        ),
        (
            "foreign",
            relation(3, "buzz", "event_tags", "f", false),
            Vec::new(),
            ("buzz.event_tags", NOT_ORDINARY),
            None,
        ),
        (
            "with an inheritance parent",
            RelationFact {
                parents: vec![5],
                ..event_tags(3)
            },
            vec![relation(5, "buzz", "all_tags", "r", false)],
            ("buzz.event_tags", NOT_ALONE),
            Some(2),
        ),
        (
            "with children",
            event_tags(3),
            vec![RelationFact {
                parents: vec![3],
                ..relation(5, "buzz", "event_tags_old", "r", false)
            }],
            ("buzz.event_tags", NOT_ALONE),
            Some(2),
        ),
        (
            "in the evidence schema",
            relation(3, "deletion", "event_marks", "r", false),
            Vec::new(),
            (
                "deletion.event_marks",
                "the deletion's evidence schema holds no tenant data",
            ),
            Some(2),
        ),
    ];
    for (case, child, extra, (on, because), count) in cases {
        let refusals = declared_child(child, extra);
        assert_declared_child_refused(&refusals, on, because);
        if let Some(count) = count {
            assert_eq!(refusals.len(), count, "{case}: {refusals:#?}");
        }
    }
}

#[test]
fn a_malformed_declaration_on_a_key_into_tenant_data_is_refused_naming_the_grammar() {
    let (mut facts, tenant) = with_relations([event_tags(3)]);
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
    let (mut facts, tenant) = with_replies();
    facts.relations.push(event_tags(4));
    facts.keys.push(key("replies_event_id_fkey", 3, 2, "c"));
    facts.keys.push(event_tags_key(4));
    let world = accepted(&facts, &tenant);
    assert_eq!(
        world.cross_keys,
        vec![cross_key(
            "replies_event_id_fkey",
            (3, 2),
            &["event_id"],
            &["id"]
        )]
    );
    assert_eq!(world.key_children.len(), 1);
    assert_eq!(world.key_children[0].key, "event_tags_event_id_fkey");
}

#[test]
fn a_key_from_a_tenant_table_into_a_key_child_is_a_cross_key() {
    let (mut facts, tenant) = with_replies();
    facts.relations.push(event_tags(4));
    let into_tags = key_on("replies_tag_fkey", 3, 4, &["tag_id"], &["id"]);
    facts.keys.extend([event_tags_key(4), into_tags]);
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
fn a_project_trigger_on_the_wrong_relation_is_refused() {
    // The communities' own trigger on a tenant table, and a tenant trigger on communities.
    let (facts, tenant) = with(|facts, _| {
        facts.triggers.extend([
            trigger(
                2,
                "communities_write_fence",
                27,
                "buzz.refuse_fenced_community_update",
            ),
            trigger(1, "buzz_write_fence", 31, "buzz.refuse_fenced_write"),
        ]);
    });
    let refusals = refused(&facts, &tenant);
    assert_eq!(
        objects(&refusals),
        vec![
            "trigger buzz_write_fence on buzz.communities",
            "trigger communities_write_fence on buzz.events",
        ]
    );
}

#[test]
fn a_trigger_declared_harmless_passes_and_is_listed() {
    let (facts, tenant) = with_trigger(commented_trigger(declare("harmless"), log_delete()));
    let world = accepted(&facts, &tenant);
    assert_declared_only(&world, "trigger log_delete on buzz.events", "harmless");
    assert!(world.archives.is_empty());
}

#[test]
fn a_trigger_declared_archiving_adds_its_archive_to_the_purge_set() {
    let (facts, tenant) = archiving_into(archive_table());
    let world = accepted(&facts, &tenant);
    assert_archived_only_by(&world, "trigger archive_events on buzz.events", vec![2]);
    // A member: neither unrelated nor a stray community_id table.
    assert!(world.unrelated.is_empty(), "{:?}", world.unrelated);
}

#[test]
fn a_trigger_and_a_rule_archiving_into_one_table_add_it_once() {
    let (mut facts, tenant) = archiving_into(archive_table());
    let archiving = declare("archives into archive.events_history");
    facts.rules.push(commented_rule(
        archiving,
        rule(2, "archive_deletes", "4", false),
    ));
    let world = accepted(&facts, &tenant);
    assert_eq!(world.archives.len(), 1, "{:?}", world.archives);
    assert_eq!(world.archives[0].sources, vec![2]);
    assert_eq!(world.declared.len(), 2, "{:?}", world.declared);
}

const ARCHIVE_REMEDY: &str = "archive into an ordinary table outside schema buzz with a \
     community_id column that the worker may SELECT and DELETE";

#[test]
fn a_trigger_archiving_into_communities_is_refused() {
    let (facts, tenant) = with(|facts, _| {
        facts.triggers.push(archiving_trigger("buzz.communities"));
    });
    let refusals = refused(&facts, &tenant);
    assert!(
        only(&refusals)
            .problem
            .starts_with("archives into buzz.communities, which is a tenant table"),
        "{refusals:?}"
    );
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
        assert_eq!(
            archiving_refusal(&refusals, "archives into").problem,
            "archives into archive.events_history, which cannot be read and purged by the worker \
             (GRANT SELECT, DELETE ON it TO buzz_deletion_worker)"
        );
        // Left outside the purge set, its community_id column is refused too.
        refusal(&refusals, "table archive.events_history", "community_id");
        assert_eq!(refusals.len(), 2, "{refusals:#?}");
    }
}

#[test]
fn an_archive_its_writer_may_not_insert_into_is_refused_naming_the_grant() {
    // A function running as the deleting role, which lacks INSERT on the archive.
    let no_insert = RelationFact {
        can_insert: false,
        ..archive_table()
    };
    let (facts, tenant) = archiving_into(no_insert);
    let refusals = refused(&facts, &tenant);
    let denied = archiving_refusal(&refusals, "runs as the deleting role, which may not INSERT");
    assert!(
        denied
            .remedy
            .starts_with("GRANT INSERT ON archive.events_history TO buzz_deletion_worker"),
        "{denied:?}"
    );

    // A SECURITY DEFINER function owned by a role that does not own the archive.
    let (mut facts, tenant) = with_relations([archive_table()]);
    facts.triggers.push(TriggerFact {
        security_definer: true,
        function_owner: "auditor".into(),
        ..archiving_trigger("archive.events_history")
    });
    archiving_refusal(&refused(&facts, &tenant), "with the rights of auditor");
}

#[test]
fn an_archive_its_writer_may_insert_into_is_accepted() {
    // The deleting role with INSERT; a SECURITY DEFINER function of the archive's owner (even
    // when the worker may not insert).
    for (can_insert, definer) in [(true, false), (false, true)] {
        let (mut facts, tenant) = with_relations([RelationFact {
            can_insert,
            ..archive_table()
        }]);
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
    archiving_refusal(
        &refused(&facts, &tenant),
        "archives into archive.events_history, which is not an ordinary table",
    );

    let inherited = RelationFact {
        parents: vec![4],
        ..archive_table()
    };
    let (mut facts, tenant) = archiving_into(inherited);
    facts
        .relations
        .push(relation(4, "archive", "history", "r", false));
    archiving_refusal(
        &refused(&facts, &tenant),
        "archives into archive.events_history, which has partitions, inheritance parents or \
         children",
    );
}

#[test]
fn a_trigger_with_a_malformed_declaration_is_refused_naming_the_grammar() {
    let comment = Some("buzz-deletion: keeps history".into());
    let (facts, tenant) = with_trigger(commented_trigger(comment, log_delete()));
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
    let comment = Some("keeps history for support".into());
    let (facts, tenant) = with_trigger(commented_trigger(comment, log_delete()));
    let refusals = refused(&facts, &tenant);
    let refusal = only(&refusals);
    assert!(
        refusal
            .problem
            .starts_with("is a trigger the deletion does not understand"),
        "{refusal:?}"
    );
}

#[test]
fn triggers_outside_the_purge_set_are_not_judged() {
    let (mut facts, tenant) = with_relations([relation(3, "crm", "settings", "r", false)]);
    facts.triggers.push(TriggerFact {
        relation_oid: 3,
        ..log_delete()
    });
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
            let (mut facts, tenant) = with_relations([archive_table()]);
            let instead = rule(2, "keep_events", event, true);
            facts.rules.push(commented_rule(comment.clone(), instead));
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
fn a_do_also_rule_declared_harmless_passes_and_is_listed() {
    let (facts, tenant) = with_rule(commented_rule(
        declare("harmless"),
        rule(2, "log_deletes", "4", false),
    ));
    let world = accepted(&facts, &tenant);
    assert_declared_only(&world, "rule log_deletes on buzz.events", "harmless");
}

#[test]
fn a_do_also_rule_declared_archiving_adds_its_archive() {
    let (mut facts, tenant) = with_relations([archive_table()]);
    let archiving = declare("archives into archive.events_history");
    facts.rules.push(commented_rule(
        archiving,
        rule(1, "archive_communities", "4", false),
    ));
    let world = accepted(&facts, &tenant);
    let by = "rule archive_communities on buzz.communities";
    assert_archived_only_by(&world, by, vec![1]);
}

// ---------------------------------------------------------------------------------------------
// Row-level security, grants, large objects.

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

/// `events_feed`, publishing `buzz.events` (2) explicitly, with deletes or not.
fn events_feed(publishes_deletes: bool) -> PublicationFact {
    PublicationFact {
        relation_oids: vec![2],
        ..publication("events_feed", publishes_deletes)
    }
}

/// Each publication without deletes is refused once per purge-set relation it publishes.
#[test]
fn a_publication_without_deletes_is_refused_for_each_purge_set_relation_it_publishes() {
    let both = &["buzz.communities", "buzz.events"][..];
    let cases = [
        (
            // Of all tables.
            with(|facts, _| {
                facts
                    .relations
                    .push(relation(3, "crm", "settings", "r", false));
                facts.publications.push(PublicationFact {
                    all_tables: true,
                    ..publication("everything", false)
                });
            }),
            "everything",
            both,
        ),
        (
            // Of the schema.
            with(|facts, _| {
                facts.publications.push(PublicationFact {
                    schemas: vec!["buzz".into()],
                    ..publication("serving", false)
                });
            }),
            "serving",
            both,
        ),
        (
            // Of a relation.
            with(|facts, _| facts.publications.push(events_feed(false))),
            "events_feed",
            &["buzz.events"][..],
        ),
        (
            // Of a partition's parent.
            {
                let (mut facts, tenant) = partitioned_events();
                facts.publications.push(events_feed(false));
                (facts, tenant)
            },
            "events_feed",
            &["buzz.events", "buzz.events_2024"][..],
        ),
    ];
    for ((facts, tenant), publication, names) in cases {
        assert_publishes(&refused(&facts, &tenant), publication, names);
    }
}

#[test]
fn a_publication_of_another_schema_is_not_judged() {
    let (facts, tenant) = with(|facts, _| {
        facts.publications.push(PublicationFact {
            schemas: vec!["crm".into()],
            ..publication("crm", false)
        });
    });
    accepted(&facts, &tenant);
}

#[test]
fn a_publication_of_deletes_from_a_table_without_replica_identity_is_refused() {
    let (mut facts, tenant) = partitioned_events();
    // The leaf partition has no replica identity (no primary key); the parent holds no rows.
    if let Some(leaf) = facts.relations.iter_mut().find(|r| r.oid == 3) {
        leaf.has_replica_identity = false;
    }
    facts.publications.push(events_feed(true));
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
    let (facts, tenant) = with(|facts, _| {
        facts.publications.push(PublicationFact {
            all_tables: true,
            schemas: vec!["buzz".into()],
            relation_oids: vec![1, 2],
            ..publication("everything", true)
        });
    });
    accepted(&facts, &tenant);
}

// ---------------------------------------------------------------------------------------------
// Materialized views.

const MATVIEW: &str = "materialized view reports.daily_counts";

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
    let (mut facts, tenant) = with_relations([
        relation(3, "crm", "settings", "r", false),
        relation(4, "reports", "settings_copy", "m", true),
        relation(5, "reports", "event_view", "v", false),
    ]);
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
    let refreshed = |oid, name| RelationFact {
        comment: declare("refreshed by the deletion"),
        ..relation(oid, "reports", name, "m", true)
    };
    // Readers listed before what they read.
    let (mut facts, tenant) = with_relations([
        refreshed(3, "weekly"),
        refreshed(6, "monthly"),
        refreshed(4, "daily"),
        relation(5, "reports", "daily_view", "v", false),
    ]);
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
    let (facts, tenant) = with_relations([RelationFact {
        foreign_options: options.iter().map(|o| (*o).to_owned()).collect(),
        comment,
        ..relation(3, "remote", "mirror", "f", community_id)
    }]);
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
        let (facts, tenant) = with_relations([relation(3, "crm", "contacts", relkind, true)]);
        let refusals = refused(&facts, &tenant);
        let refusal = only(&refusals);
        assert_eq!(refusal.object, "table crm.contacts");
        assert_eq!(
            refusal.problem,
            "has a community_id column outside schema buzz: tenant rows there would be neither \
             inventoried nor purged"
        );
        for part in [
            "COMMENT ON TABLE crm.contacts IS 'buzz-deletion: not tenant data'",
            "move it into schema buzz",
        ] {
            assert!(refusal.remedy.contains(part), "{refusal:?}");
        }
    }
}

#[test]
fn a_table_with_community_id_declared_not_tenant_data_passes() {
    let (facts, tenant) = with_relations([RelationFact {
        comment: declare("not tenant data"),
        ..relation(3, "crm", "contacts", "r", true)
    }]);
    let world = accepted(&facts, &tenant);
    assert_declared_only(&world, "table crm.contacts", "not tenant data");
    assert!(world.unrelated.is_empty());
}

#[test]
fn the_evidence_schema_is_ignored() {
    let (mut facts, tenant) = with_relations([
        relation(3, "deletion", "evidence", "r", true),
        relation(4, "deletion", "snapshot", "m", true),
    ]);
    facts.reads.push(reads(4, 2));
    let world = accepted(&facts, &tenant);
    assert_nothing_beyond_the_tenant_tables(&world);
}

#[test]
fn relations_without_community_id_or_keys_are_unrelated() {
    let (facts, tenant) = with_relations([
        relation(3, "crm", "settings", "r", false),
        relation(4, "crm", "settings_by_year", "p", false),
        relation(5, "crm", "settings_view", "v", false),
        relation(6, "crm", "settings_id_seq", "S", false),
    ]);
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
    let (mut facts, tenant) = with_relations([relation(3, "crm", "contacts", "r", true)]);
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
    let (mut facts, tenant) = with_tags_and_votes();
    facts.keys.extend([event_tags_key(3), votes_key()]);
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
    let (mut facts, tenant) = with_replies();
    facts.keys.extend([
        key_on(
            "replies_community_id_fkey",
            3,
            1,
            &["community_id"],
            &["id"],
        ),
        key_on("replies_event_id_fkey", 3, 2, &["event_id"], &["id"]),
        key_on(
            "replies_event_fkey",
            3,
            2,
            &["community_id", "event_id"],
            &["community_id", "id"],
        ),
    ]);
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
