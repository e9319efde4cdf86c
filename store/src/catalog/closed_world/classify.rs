//! The closed-world judgement: every object that can hold, reach, copy or hide a tenant's rows is
//! either understood (and then purged, refreshed or shown as harmless) or refused, naming it and
//! the remedy. Pure: it reads [`CatalogFacts`] and the tenant tables, and does no I/O, so every
//! rule is unit-tested without a server.
//!
//! The *purge set* is every relation whose rows the deletion removes: the tenant tables' trees,
//! `buzz.communities`, key-only child tables declared "tenant data through this key", and archive
//! tables named by a declared trigger or rule. Around it:
//! - a foreign key from outside the purge set into it is refused whatever its action (cascade or
//!   set null would change rows nobody inventoried, no action would wedge the purge);
//! - a foreign key between two purge-set relations is kept as a *cross key*: the inventory and
//!   every purge batch count the rows of other owners it would touch, and refuse any;
//! - a trigger or rule on a purge-set relation is refused unless it is the project's own or
//!   declared (an INSTEAD rule cannot be declared: the purge must really delete);
//! - row-level security the worker does not bypass, a publication that does not publish deletes,
//!   a large-object column, a missing SELECT/DELETE grant: refused;
//! - outside the purge set, a materialized view reading purge-set data (through views too) must
//!   be declared refreshed (or not tenant data), and a table or foreign table with a
//!   `community_id` column, or a foreign table naming a tenant relation, must be declared not
//!   tenant data.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::declaration::{Declaration, GRAMMAR, PREFIX, parse};
use super::facts::{CatalogFacts, KeyFact, RelationFact, TriggerFact};
use crate::catalog::tenant_tree::{TENANT_SCHEMA, TenantTable};
use crate::error::CatalogRefusal;

/// The schema of the deletion's own evidence: never tenant data, never judged.
pub(crate) const EVIDENCE_SCHEMA: &str = "deletion";

/// The community row's table.
const COMMUNITIES: (&str, &str) = ("buzz", "communities");

/// The project's own triggers: (relation name or `*` for any tenant relation, trigger, function).
const PROJECT_TRIGGERS: &[(&str, &str, &str)] = &[
    ("*", "buzz_write_fence", "buzz.refuse_fenced_write"),
    ("*", "buzz_user_data", "buzz.user_data"),
    (
        "communities",
        "communities_fence_row",
        "buzz.create_serving_fence_row",
    ),
    (
        "communities",
        "communities_write_fence",
        "buzz.refuse_fenced_community_update",
    ),
];

/// Trigger type bits (`pg_trigger.h`).
const TRIGGER_ROW: i32 = 1;
const TRIGGER_BEFORE: i32 = 2;
const TRIGGER_INSERT: i32 = 4;
const TRIGGER_DELETE: i32 = 8;
const TRIGGER_UPDATE: i32 = 16;
const TRIGGER_TRUNCATE: i32 = 32;
const TRIGGER_INSTEAD: i32 = 64;

/// A relation the deletion names in SQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NamedRelation {
    pub oid: i64,
    pub schema: String,
    pub name: String,
}

impl NamedRelation {
    fn of(fact: &RelationFact) -> NamedRelation {
        NamedRelation {
            oid: fact.oid,
            schema: fact.schema.clone(),
            name: fact.name.clone(),
        }
    }

    /// `schema.name`.
    pub fn qualified(&self) -> String {
        format!("{}.{}", self.schema, self.name)
    }

    /// `"schema"."name"`, for SQL.
    pub fn sql_name(&self) -> String {
        format!(
            "{}.{}",
            crate::quote_ident(&self.schema),
            crate::quote_ident(&self.name)
        )
    }
}

/// A table whose rows belong to whoever owns the row they reference through `key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyChild {
    pub relation: NamedRelation,
    /// The declared key's name.
    pub key: String,
    /// Its columns in the child, in key order.
    pub columns: Vec<String>,
    /// The referenced (parent) relation's oid: a tenant relation, `buzz.communities`, an archive
    /// table or another key child.
    pub parent_oid: i64,
    /// The referenced columns, in key order.
    pub parent_columns: Vec<String>,
}

/// A table a declared trigger or rule copies tenant rows into (purged after its sources).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ArchiveTable {
    pub relation: NamedRelation,
    /// The relations whose declared triggers or rules write into it.
    pub sources: Vec<i64>,
}

/// A materialized view the deletion refreshes after the purge and then proves free of the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RefreshedView {
    pub relation: NamedRelation,
    /// Other refreshed views it reads (refreshed first).
    pub reads_views: Vec<i64>,
}

/// A foreign key between two purge-set relations that is not a key child's membership key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CrossKey {
    pub name: String,
    pub referencing_oid: i64,
    pub referenced_oid: i64,
    pub columns: Vec<String>,
    pub referenced_columns: Vec<String>,
}

/// One declaration the classification relied on, as the inventory shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeclaredObject {
    /// What it is and where: `trigger archive_events on buzz.events`.
    pub object: String,
    /// The declaration, after [`PREFIX`] (`archives into archive.events_history`).
    pub declaration: String,
}

/// What the classification found: the purge set beyond the tenant tables, and what it relied on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ClosedWorld {
    pub communities_oid: i64,
    pub key_children: Vec<KeyChild>,
    pub archives: Vec<ArchiveTable>,
    pub refreshed_views: Vec<RefreshedView>,
    pub cross_keys: Vec<CrossKey>,
    pub declared: Vec<DeclaredObject>,
    /// Relations judged to hold no tenant data, `kind schema.name` (views, sequences, tables with
    /// neither a `community_id` column nor a key into tenant data).
    pub unrelated: Vec<String>,
}

/// What one purge-set relation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Member {
    Tenant,
    Communities,
    KeyChild,
    Archive,
}

/// Collects refusals and the classification under way.
struct Judge<'a> {
    facts: &'a CatalogFacts,
    by_oid: BTreeMap<i64, &'a RelationFact>,
    children: BTreeMap<i64, Vec<i64>>,
    members: BTreeMap<i64, Member>,
    world: ClosedWorld,
    refusals: Vec<CatalogRefusal>,
}

impl<'a> Judge<'a> {
    fn name(&self, oid: i64) -> String {
        self.by_oid
            .get(&oid)
            .map(|r| r.qualified())
            .unwrap_or_else(|| format!("relation oid {oid}"))
    }

    fn refuse(&mut self, object: String, problem: String, remedy: String) {
        self.refusals.push(CatalogRefusal {
            object,
            problem,
            remedy,
        });
    }

    fn declared(&mut self, object: String, declaration: &Declaration) {
        self.world.declared.push(DeclaredObject {
            object,
            declaration: declaration.text(),
        });
    }

    /// Records `object` as declared when `comment` declares it not tenant data; refuses it with
    /// `problem` and `remedy` otherwise (a malformed comment is refused for itself as well).
    fn refuse_unless_not_tenant_data(
        &mut self,
        object: String,
        comment: Option<&str>,
        problem: String,
        remedy: String,
    ) {
        match self.declaration_of(&object, comment) {
            Some(Declaration::NotTenantData) => self.declared(object, &Declaration::NotTenantData),
            _ => self.refuse(object, problem, remedy),
        }
    }

    /// The declaration in `comment`, refusing `object` when the comment is malformed.
    fn declaration_of(&mut self, object: &str, comment: Option<&str>) -> Option<Declaration> {
        match parse(comment) {
            Ok(declaration) => declaration,
            Err(malformed) => {
                self.refuse(
                    object.to_owned(),
                    malformed.to_string(),
                    format!("correct or remove the comment: it must be one of {GRAMMAR}"),
                );
                None
            }
        }
    }
}

/// Classifies the whole catalogue. `Err` lists every refusal, each naming the object and remedy.
pub(crate) fn classify(
    facts: &CatalogFacts,
    tenant: &[TenantTable],
) -> Result<ClosedWorld, Vec<CatalogRefusal>> {
    let by_oid: BTreeMap<i64, &RelationFact> = facts.relations.iter().map(|r| (r.oid, r)).collect();
    let mut children: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for relation in &facts.relations {
        for parent in &relation.parents {
            children.entry(*parent).or_default().push(relation.oid);
        }
    }
    let mut judge = Judge {
        facts,
        by_oid,
        children,
        members: BTreeMap::new(),
        world: ClosedWorld::default(),
        refusals: Vec::new(),
    };
    for table in tenant {
        for relation in &table.relations {
            judge.members.insert(relation.oid, Member::Tenant);
        }
    }
    let communities = facts
        .relations
        .iter()
        .find(|r| r.schema == COMMUNITIES.0 && r.name == COMMUNITIES.1 && r.relkind == "r");
    match communities {
        Some(row) => {
            judge.world.communities_oid = row.oid;
            judge.members.insert(row.oid, Member::Communities);
        }
        None => judge.refuse(
            "buzz.communities".to_owned(),
            "is missing or not an ordinary table".to_owned(),
            "run `buzz-deletion migrate` against this database".to_owned(),
        ),
    }

    grow_purge_set(&mut judge);
    refuse_keys_from_outside(&mut judge);
    judge_purge_set_members(&mut judge);
    judge_outside_relations(&mut judge);
    collect_cross_keys(&mut judge);

    if judge.refusals.is_empty() {
        let mut world = judge.world;
        world.declared.sort_by(|a, b| a.object.cmp(&b.object));
        world.declared.dedup();
        Ok(world)
    } else {
        let mut refusals = judge.refusals;
        refusals.sort_by(|a, b| (&a.object, &a.problem).cmp(&(&b.object, &b.problem)));
        refusals.dedup();
        Err(refusals)
    }
}

/// Adds declared key children and archive tables until nothing more joins (chains of either).
fn grow_purge_set(judge: &mut Judge<'_>) {
    loop {
        let before = judge.members.len();
        add_key_children(judge);
        add_archives(judge);
        if judge.members.len() == before {
            return;
        }
    }
}

fn add_key_children(judge: &mut Judge<'_>) {
    let facts = judge.facts;
    for key in &facts.keys {
        // A table already in the purge set joins again only by a second declared key (which is
        // then refused below); a key already recorded is not recorded twice.
        let member = judge.members.get(&key.referencing_oid).copied();
        let recorded = judge
            .world
            .key_children
            .iter()
            .any(|c| c.relation.oid == key.referencing_oid && c.key == key.name);
        if matches!(member, Some(m) if m != Member::KeyChild)
            || recorded
            || !judge.members.contains_key(&key.referenced_oid)
        {
            continue;
        }
        let object = format!(
            "foreign key {} on {}",
            key.name,
            judge.name(key.referencing_oid)
        );
        if judge.declaration_of(&object, key.comment.as_deref())
            != Some(Declaration::TenantDataThroughKey)
        {
            continue;
        }
        let Some(child) = judge.by_oid.get(&key.referencing_oid).copied() else {
            continue;
        };
        let problem = if child.relkind != "r" {
            Some("a key-only child must be an ordinary table (not partitioned, not foreign)")
        } else if !child.parents.is_empty() || judge.children.contains_key(&child.oid) {
            Some("a key-only child must have no partitions, inheritance parents or children")
        } else if child.has_community_id {
            Some("it has a community_id column: it is tenant data by its own column, not by a key")
        } else if child.schema == EVIDENCE_SCHEMA {
            Some("the deletion's evidence schema holds no tenant data")
        } else {
            None
        };
        if let Some(problem) = problem {
            judge.refuse(
                object,
                format!("is declared 'tenant data through this key' but {problem}"),
                "remove the declaration (COMMENT ON CONSTRAINT … IS NULL) and reshape the table"
                    .to_owned(),
            );
            continue;
        }
        let declaration = Declaration::TenantDataThroughKey;
        judge.declared(object, &declaration);
        judge.members.insert(child.oid, Member::KeyChild);
        judge.world.key_children.push(KeyChild {
            relation: NamedRelation::of(child),
            key: key.name.clone(),
            columns: key.columns.clone(),
            parent_oid: key.referenced_oid,
            parent_columns: key.referenced_columns.clone(),
        });
    }
    // A table with two membership keys would belong to two owners at once.
    let mut seen: BTreeMap<i64, usize> = BTreeMap::new();
    for child in &judge.world.key_children {
        *seen.entry(child.relation.oid).or_default() += 1;
    }
    let doubled: Vec<String> = judge
        .world
        .key_children
        .iter()
        .filter(|c| seen.get(&c.relation.oid).copied().unwrap_or(0) > 1)
        .map(|c| c.relation.qualified())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    for table in doubled {
        judge.refuse(
            table,
            "declares more than one key 'tenant data through this key'".to_owned(),
            "declare exactly one membership key per key-only child table".to_owned(),
        );
    }
}

/// Whose rights the rows a declared trigger or rule archives are inserted with.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ArchiveWriter {
    /// A trigger function that is not SECURITY DEFINER: the deleting role, the worker's.
    DeletingRole,
    /// A SECURITY DEFINER function's owner, or a rule's (its table's) owner.
    Role(String),
}

impl ArchiveWriter {
    fn of_trigger(trigger: &TriggerFact) -> Self {
        if trigger.security_definer {
            ArchiveWriter::Role(trigger.function_owner.clone())
        } else {
            ArchiveWriter::DeletingRole
        }
    }

    /// Why `writer` could not insert the archived rows into `target`, with the remedy, if so.
    /// A role is trusted to insert into a table it owns; any other role is refused (deny by
    /// default: a grant to it cannot be read for another role from here).
    fn problem(&self, target: &RelationFact) -> Option<(String, String)> {
        let qualified = target.qualified();
        match self {
            ArchiveWriter::DeletingRole if !target.can_insert => Some((
                "is written by a trigger function that runs as the deleting role, which may not \
                 INSERT into it: the purge would fail after objects were deleted"
                    .to_owned(),
                format!(
                    "GRANT INSERT ON {qualified} TO buzz_deletion_worker, or make the trigger's \
                 function SECURITY DEFINER owned by {}",
                    target.owner
                ),
            )),
            ArchiveWriter::Role(role) if *role != target.owner => Some((
                format!(
                    "is written with the rights of {role} (the SECURITY DEFINER function's or \
                 the rule's owner), which does not own it (owner: {})",
                    target.owner
                ),
                format!(
                    "ALTER TABLE {qualified} OWNER TO {role}, or have the function owned by {}",
                    target.owner
                ),
            )),
            _ => None,
        }
    }
}

/// Whether the archive a declared trigger or rule names is sound (joining the purge set), and
/// `writer` may insert the archived rows into it; refusals recorded.
fn archive_target(
    judge: &mut Judge<'_>,
    object: &str,
    schema: &str,
    table: &str,
    writer: &ArchiveWriter,
) -> bool {
    let Some(target) = judge
        .facts
        .relations
        .iter()
        .find(|r| r.schema == schema && r.name == table)
    else {
        judge.refuse(
            object.to_owned(),
            format!("declares it archives into {schema}.{table}, which does not exist"),
            "correct the declaration to name the archive table".to_owned(),
        );
        return false;
    };
    let problem = match judge.members.get(&target.oid) {
        Some(Member::Tenant | Member::Communities) => Some(
            "is a tenant table: its write fence refuses the archived rows of a fenced community; \
             archive into a table outside the serving schema",
        ),
        Some(Member::KeyChild) => Some("is a key-only child table"),
        _ if target.relkind != "r" => Some("is not an ordinary table"),
        _ if !target.parents.is_empty() || judge.children.contains_key(&target.oid) => {
            Some("has partitions, inheritance parents or children")
        }
        _ if !target.has_community_id => {
            Some("has no community_id column, so the target's archived rows cannot be found")
        }
        _ if !(target.can_select && target.can_delete) => Some(
            "cannot be read and purged by the worker (GRANT SELECT, DELETE ON it TO \
             buzz_deletion_worker)",
        ),
        _ => None,
    };
    let qualified = target.qualified();
    let oid = target.oid;
    if let Some(problem) = problem {
        judge.refuse(
            object.to_owned(),
            format!("archives into {qualified}, which {problem}"),
            "archive into an ordinary table outside schema buzz with a community_id column \
             that the worker may SELECT and DELETE"
                .to_owned(),
        );
        return false;
    }
    if let Some((problem, remedy)) = writer.problem(target) {
        judge.refuse(
            object.to_owned(),
            format!("archives into {qualified}, which {problem}"),
            remedy,
        );
        return false;
    }
    if let std::collections::btree_map::Entry::Vacant(entry) = judge.members.entry(oid) {
        entry.insert(Member::Archive);
        let relation = judge
            .by_oid
            .get(&oid)
            .map(|r| NamedRelation::of(r))
            .unwrap_or(NamedRelation {
                oid,
                schema: schema.to_owned(),
                name: table.to_owned(),
            });
        judge.world.archives.push(ArchiveTable {
            relation,
            sources: Vec::new(),
        });
    }
    true
}

fn add_archives(judge: &mut Judge<'_>) {
    let facts = judge.facts;
    let mut found: Vec<(i64, String, String, String, ArchiveWriter)> = Vec::new();
    for trigger in &facts.triggers {
        if judge.members.contains_key(&trigger.relation_oid) && !is_project_trigger(judge, trigger)
        {
            let object = trigger_object(judge, trigger);
            if let Ok(Some(Declaration::ArchivesInto { schema, table })) =
                parse(trigger.comment.as_deref())
            {
                let writer = ArchiveWriter::of_trigger(trigger);
                found.push((trigger.relation_oid, object, schema, table, writer));
            }
        }
    }
    for rule in &facts.rules {
        if judge.members.contains_key(&rule.relation_oid) && !rule.is_instead {
            let object = format!("rule {} on {}", rule.name, judge.name(rule.relation_oid));
            if let Ok(Some(Declaration::ArchivesInto { schema, table })) =
                parse(rule.comment.as_deref())
            {
                // A rule's actions run with its table's owner's rights.
                let owner = judge
                    .by_oid
                    .get(&rule.relation_oid)
                    .map(|r| r.owner.clone())
                    .unwrap_or_default();
                let writer = ArchiveWriter::Role(owner);
                found.push((rule.relation_oid, object, schema, table, writer));
            }
        }
    }
    for (source, object, schema, table, writer) in found {
        let already = judge.world.archives.iter().any(|a| {
            a.relation.schema == schema && a.relation.name == table && a.sources.contains(&source)
        });
        if already {
            continue;
        }
        if archive_target(judge, &object, &schema, &table, &writer)
            && let Some(archive) = judge
                .world
                .archives
                .iter_mut()
                .find(|a| a.relation.schema == schema && a.relation.name == table)
        {
            archive.sources.push(source);
        }
    }
}

fn trigger_object(judge: &Judge<'_>, trigger: &TriggerFact) -> String {
    format!(
        "trigger {} on {}",
        trigger.name,
        judge.name(trigger.relation_oid)
    )
}

fn is_project_trigger(judge: &Judge<'_>, trigger: &TriggerFact) -> bool {
    let member = judge.members.get(&trigger.relation_oid).copied();
    let relation = judge
        .by_oid
        .get(&trigger.relation_oid)
        .map(|r| r.name.as_str())
        .unwrap_or_default();
    PROJECT_TRIGGERS.iter().any(|(on, name, function)| {
        let relation_matches = match *on {
            "*" => member == Some(Member::Tenant),
            table => member == Some(Member::Communities) && relation == table,
        };
        relation_matches && trigger.name == *name && trigger.function == *function
    })
}

/// What a trigger fires on, in words.
fn trigger_shape(trigger: &TriggerFact) -> String {
    let bits = trigger.tgtype;
    let timing = if bits & TRIGGER_INSTEAD != 0 {
        "INSTEAD OF"
    } else if bits & TRIGGER_BEFORE != 0 {
        "BEFORE"
    } else {
        "AFTER"
    };
    let mut events = Vec::new();
    for (bit, word) in [
        (TRIGGER_INSERT, "INSERT"),
        (TRIGGER_UPDATE, "UPDATE"),
        (TRIGGER_DELETE, "DELETE"),
        (TRIGGER_TRUNCATE, "TRUNCATE"),
    ] {
        if bits & bit != 0 {
            events.push(word);
        }
    }
    let level = if bits & TRIGGER_ROW != 0 {
        "ROW"
    } else {
        "STATEMENT"
    };
    let definer = if trigger.security_definer {
        ", SECURITY DEFINER"
    } else {
        ""
    };
    format!(
        "{timing} {} FOR EACH {level} executing {}(){definer}",
        events.join(" OR "),
        trigger.function
    )
}

/// Keys from outside the purge set into it: refused whatever the action.
fn refuse_keys_from_outside(judge: &mut Judge<'_>) {
    let facts = judge.facts;
    for key in &facts.keys {
        if judge.members.contains_key(&key.referencing_oid)
            || !judge.members.contains_key(&key.referenced_oid)
        {
            continue;
        }
        let referencing = judge.name(key.referencing_oid);
        let referenced = judge.name(key.referenced_oid);
        let object = format!("foreign key {} on {referencing}", key.name);
        let consequence = match key.on_delete.as_str() {
            "c" => "the purge would delete its rows, which no inventory lists",
            "n" | "d" => "the purge would change its rows, which no inventory lists",
            _ => "the purge would fail on it after objects were already deleted",
        };
        judge.refuse(
            object,
            format!(
                "references {referenced} ({}) from {referencing}, which is not tenant data: \
                 {consequence}",
                key.action()
            ),
            format!(
                "drop the key, or give {referencing} a community_id column in schema {TENANT_SCHEMA}, \
                 or declare it: COMMENT ON CONSTRAINT {} ON {referencing} IS '{PREFIX} tenant data \
                 through this key'",
                crate::quote_ident(&key.name)
            ),
        );
    }
}

/// Triggers, rules, row security, grants, large objects and publications of every member.
fn judge_purge_set_members(judge: &mut Judge<'_>) {
    let facts = judge.facts;
    let members: Vec<(i64, Member)> = judge.members.iter().map(|(o, m)| (*o, *m)).collect();
    for trigger in &facts.triggers {
        if !judge.members.contains_key(&trigger.relation_oid) || is_project_trigger(judge, trigger)
        {
            continue;
        }
        let object = trigger_object(judge, trigger);
        let undeclared = format!(
            "is a trigger the deletion does not understand ({}): it could copy, keep or \
             re-route rows of the community being deleted",
            trigger_shape(trigger)
        );
        let remedy = format!(
            "drop it, or declare what it does: COMMENT ON TRIGGER {} ON {} IS '{PREFIX} \
             harmless' or '{PREFIX} archives into <schema>.<table>'",
            crate::quote_ident(&trigger.name),
            judge.name(trigger.relation_oid)
        );
        judge_copy_declaration(
            judge,
            object,
            trigger.comment.as_deref(),
            "trigger",
            undeclared,
            remedy,
        );
    }
    for rule in &facts.rules {
        if !judge.members.contains_key(&rule.relation_oid) {
            continue;
        }
        let on = judge.name(rule.relation_oid);
        let object = format!("rule {} on {on}", rule.name);
        let event = match rule.event.as_str() {
            "1" => "SELECT",
            "2" => "UPDATE",
            "3" => "INSERT",
            _ => "DELETE",
        };
        if rule.is_instead {
            judge.refuse(
                object,
                format!(
                    "is a DO INSTEAD rule ON {event}: the rows the deletion reads, deletes or \
                     proves gone would not be the rows stored"
                ),
                format!(
                    "drop it (DROP RULE {} ON {on}); an INSTEAD rule cannot be declared",
                    crate::quote_ident(&rule.name)
                ),
            );
            continue;
        }
        let remedy = format!(
            "drop it, or declare it: COMMENT ON RULE {} ON {on} IS '{PREFIX} harmless' or \
             '{PREFIX} archives into <schema>.<table>'",
            crate::quote_ident(&rule.name)
        );
        judge_copy_declaration(
            judge,
            object,
            rule.comment.as_deref(),
            "rule",
            format!("is a DO ALSO rule ON {event} the deletion does not understand"),
            remedy,
        );
    }
    for (oid, member) in members {
        let Some(relation) = judge.by_oid.get(&oid).copied() else {
            continue;
        };
        let name = relation.qualified();
        if !relation.sees_every_row {
            judge.refuse(
                name.clone(),
                "has row-level security the worker's role does not bypass: counting, purging and \
                 verifying could miss rows it cannot see"
                    .to_owned(),
                format!(
                    "ALTER TABLE {name} DISABLE ROW LEVEL SECURITY (and NO FORCE ROW LEVEL \
                     SECURITY), or run the worker as a role with BYPASSRLS"
                ),
            );
        }
        let needs_delete = member != Member::Tenant || relation.relkind == "r";
        if !relation.can_select || (needs_delete && !relation.can_delete) {
            judge.refuse(
                name.clone(),
                "cannot be read and purged by the worker's role".to_owned(),
                format!("GRANT SELECT, DELETE ON {name} TO buzz_deletion_worker"),
            );
        }
        for column in &relation.large_object_columns {
            judge.refuse(
                format!("{name}.{column}"),
                "references large objects (type oid or lo), which deleting the row leaves behind"
                    .to_owned(),
                "store the bytes in the row (bytea) or in the tenant's object prefix, and drop \
                 the column"
                    .to_owned(),
            );
        }
        for publication in &facts.publications {
            let published = publication.all_tables
                || publication.schemas.contains(&relation.schema)
                || publication.relation_oids.contains(&oid)
                || ancestors(judge, oid)
                    .iter()
                    .any(|a| publication.relation_oids.contains(a));
            if published && publication.publishes_deletes && !relation.has_replica_identity {
                judge.refuse(
                    format!("publication {}", publication.name),
                    format!(
                        "publishes deletes of {name}, which has no replica identity (no primary \
                         key, REPLICA IDENTITY NOTHING, or an index identity without its index): \
                         PostgreSQL refuses every DELETE from it (SQLSTATE 55000), so the purge \
                         would fail after objects were deleted"
                    ),
                    format!(
                        "ALTER TABLE {name} REPLICA IDENTITY FULL (or give it a primary key), or \
                         drop {name} from publication {}",
                        crate::quote_ident(&publication.name)
                    ),
                );
                continue;
            }
            if publication.publishes_deletes {
                continue;
            }
            if published {
                judge.refuse(
                    format!("publication {}", publication.name),
                    format!(
                        "publishes {name} without deletes: the purged rows would survive on every \
                         subscriber"
                    ),
                    format!(
                        "ALTER PUBLICATION {} SET (publish = 'insert, update, delete, truncate'), \
                         or drop {name} from it",
                        crate::quote_ident(&publication.name)
                    ),
                );
            }
        }
    }
}

/// Accepts a trigger's or rule's `harmless` / `archives into` declaration (the archive itself is
/// judged by [`archive_target`]); refuses any other declaration, or none (`undeclared`, `remedy`).
fn judge_copy_declaration(
    judge: &mut Judge<'_>,
    object: String,
    comment: Option<&str>,
    kind: &str,
    undeclared: String,
    remedy: String,
) {
    match judge.declaration_of(&object, comment) {
        Some(declaration @ (Declaration::Harmless | Declaration::ArchivesInto { .. })) => {
            judge.declared(object, &declaration);
        }
        Some(other) => judge.refuse(
            object,
            format!(
                "is declared '{}', which does not apply to a {kind}",
                other.text()
            ),
            "declare it 'harmless' or 'archives into <schema>.<table>'".to_owned(),
        ),
        None => judge.refuse(object, undeclared, remedy),
    }
}

/// Every ancestor (partition parent, inheritance parent) of `oid`.
fn ancestors(judge: &Judge<'_>, oid: i64) -> Vec<i64> {
    let mut out = Vec::new();
    let mut todo = vec![oid];
    while let Some(next) = todo.pop() {
        if let Some(relation) = judge.by_oid.get(&next) {
            for parent in &relation.parents {
                if !out.contains(parent) {
                    out.push(*parent);
                    todo.push(*parent);
                }
            }
        }
    }
    out
}

/// Relations outside the purge set: materialized views, foreign tables, stray tenant columns.
fn judge_outside_relations(judge: &mut Judge<'_>) {
    let facts = judge.facts;
    let reads_purge_set = reads_purge_set(judge);
    let tenant_names: BTreeSet<(String, String)> = judge
        .members
        .keys()
        .filter_map(|oid| judge.by_oid.get(oid))
        .map(|r| (r.schema.clone(), r.name.clone()))
        .collect();
    let mut refreshed: Vec<i64> = Vec::new();
    for relation in &facts.relations {
        if judge.members.contains_key(&relation.oid) || relation.schema == EVIDENCE_SCHEMA {
            continue;
        }
        let name = relation.qualified();
        match relation.relkind.as_str() {
            "m" => {
                let object = format!("materialized view {name}");
                if !reads_purge_set.contains(&relation.oid) {
                    judge.world.unrelated.push(object);
                    continue;
                }
                match judge.declaration_of(&object, relation.comment.as_deref()) {
                    Some(Declaration::RefreshedByDeletion) => {
                        let problem = if !relation.has_community_id {
                            Some("has no community_id column, so the refreshed view cannot be proven free of the community".to_owned())
                        } else if facts.refresher_owner.as_deref() != Some(relation.owner.as_str()) {
                            Some(format!(
                                "is owned by {}, but the deletion refreshes only views owned by {} (the owner of buzz.refresh_declared_view)",
                                relation.owner,
                                facts.refresher_owner.as_deref().unwrap_or("the migrations' owner")
                            ))
                        } else if !relation.can_select {
                            Some("cannot be read by the worker's role".to_owned())
                        } else {
                            None
                        };
                        match problem {
                            Some(problem) => judge.refuse(
                                object,
                                format!("is declared 'refreshed by the deletion' but {problem}"),
                                format!(
                                    "give it a community_id column, ALTER MATERIALIZED VIEW {name} OWNER TO the migrations' owner, and GRANT SELECT ON {name} TO buzz_deletion_worker"
                                ),
                            ),
                            None => {
                                judge.declared(object, &Declaration::RefreshedByDeletion);
                                refreshed.push(relation.oid);
                            }
                        }
                    }
                    Some(Declaration::NotTenantData) => {
                        judge.declared(object, &Declaration::NotTenantData);
                    }
                    Some(other) => judge.refuse(
                        object,
                        format!("is declared '{}', which does not apply to a materialized view", other.text()),
                        format!("declare it '{PREFIX} refreshed by the deletion' or '{PREFIX} not tenant data'"),
                    ),
                    None => judge.refuse(
                        object,
                        "reads tenant data and keeps a copy of it that the purge does not reach".to_owned(),
                        format!(
                            "drop it, or declare it: COMMENT ON MATERIALIZED VIEW {name} IS '{PREFIX} refreshed by the deletion' (it needs a community_id column)"
                        ),
                    ),
                }
            }
            "f" => {
                let names_tenant = foreign_names_tenant(relation, &tenant_names);
                let object = format!("foreign table {name}");
                if relation.schema == TENANT_SCHEMA && relation.has_community_id {
                    judge.refuse(
                        object,
                        format!(
                            "is a foreign table with a community_id column in schema \
                             {TENANT_SCHEMA}: a tenant table whose rows live outside this \
                             database cannot be fenced, purged or proven gone"
                        ),
                        "replace it with an ordinary table, or move it out of the serving \
                         schema and drop its community_id column; this cannot be declared"
                            .to_owned(),
                    );
                    continue;
                }
                if !relation.has_community_id && !names_tenant {
                    judge.world.unrelated.push(object);
                    continue;
                }
                judge.refuse_unless_not_tenant_data(
                    object,
                    relation.comment.as_deref(),
                    "is a foreign table with tenant rows (a community_id column, or options naming a tenant relation): they live outside this database and cannot be purged or proven gone".to_owned(),
                    format!(
                        "drop it, or, if it holds no tenant's rows, declare it: COMMENT ON FOREIGN TABLE {name} IS '{PREFIX} not tenant data'"
                    ),
                );
            }
            "r" | "p" => {
                let object = format!("table {name}");
                if !relation.has_community_id {
                    judge.world.unrelated.push(object);
                    continue;
                }
                judge.refuse_unless_not_tenant_data(
                    object,
                    relation.comment.as_deref(),
                    format!(
                        "has a community_id column outside schema {TENANT_SCHEMA}: tenant rows there would be neither inventoried nor purged"
                    ),
                    format!(
                        "move it into schema {TENANT_SCHEMA} (with the write fence and a user-data declaration), drop it, or, if it holds no tenant's rows, declare it: COMMENT ON TABLE {name} IS '{PREFIX} not tenant data'"
                    ),
                );
            }
            "v" => judge.world.unrelated.push(format!("view {name}")),
            _ => judge.world.unrelated.push(format!("sequence {name}")),
        }
    }
    // Refresh order: a view after every refreshed view it reads.
    for oid in refreshed {
        let reads_views = views_read_by(judge, oid)
            .into_iter()
            .filter(|o| *o != oid)
            .collect();
        if let Some(relation) = judge.by_oid.get(&oid) {
            let relation = NamedRelation::of(relation);
            judge.world.refreshed_views.push(RefreshedView {
                relation,
                reads_views,
            });
        }
    }
    let order = refresh_order(&judge.world.refreshed_views);
    judge.world.refreshed_views = order;
}

/// Views and materialized views that read a purge-set relation, directly or through others.
fn reads_purge_set(judge: &Judge<'_>) -> BTreeSet<i64> {
    let mut reading: BTreeSet<i64> = BTreeSet::new();
    loop {
        let before = reading.len();
        for read in &judge.facts.reads {
            if judge.members.contains_key(&read.source_oid) || reading.contains(&read.source_oid) {
                reading.insert(read.view_oid);
            }
        }
        if reading.len() == before {
            return reading;
        }
    }
}

/// Materialized views `oid` reads, directly or through plain views.
fn views_read_by(judge: &Judge<'_>, oid: i64) -> Vec<i64> {
    let mut out = Vec::new();
    let mut todo = vec![oid];
    let mut seen = BTreeSet::new();
    while let Some(next) = todo.pop() {
        if !seen.insert(next) {
            continue;
        }
        for read in judge.facts.reads.iter().filter(|r| r.view_oid == next) {
            match judge
                .by_oid
                .get(&read.source_oid)
                .map(|r| r.relkind.as_str())
            {
                Some("m") => out.push(read.source_oid),
                Some("v") => todo.push(read.source_oid),
                _ => {}
            }
        }
    }
    out
}

/// Refreshed views ordered so each comes after the refreshed views it reads.
fn refresh_order(views: &[RefreshedView]) -> Vec<RefreshedView> {
    super::after_dependencies(
        views.to_vec(),
        |v| v.relation.oid,
        |v| v.reads_views.clone(),
    )
}

/// Whether a foreign table's options name a tenant relation (`table_name`, with `schema_name`
/// if given).
fn foreign_names_tenant(relation: &RelationFact, tenant: &BTreeSet<(String, String)>) -> bool {
    let option = |key: &str| {
        relation
            .foreign_options
            .iter()
            .find_map(|o| o.strip_prefix(&format!("{key}=")).map(str::to_owned))
    };
    let Some(table) = option("table_name") else {
        return false;
    };
    match option("schema_name") {
        Some(schema) => tenant.contains(&(schema, table)),
        None => tenant.iter().any(|(_, name)| *name == table),
    }
}

/// Keys between two purge-set relations other than a key child's membership key.
fn collect_cross_keys(judge: &mut Judge<'_>) {
    let facts = judge.facts;
    let membership: BTreeSet<(i64, String)> = judge
        .world
        .key_children
        .iter()
        .map(|c| (c.relation.oid, c.key.clone()))
        .collect();
    let keys: Vec<&KeyFact> = facts
        .keys
        .iter()
        .filter(|k| {
            judge.members.contains_key(&k.referencing_oid)
                && judge.members.contains_key(&k.referenced_oid)
                && !membership.contains(&(k.referencing_oid, k.name.clone()))
        })
        .collect();
    for key in keys {
        judge.world.cross_keys.push(CrossKey {
            name: key.name.clone(),
            referencing_oid: key.referencing_oid,
            referenced_oid: key.referenced_oid,
            columns: key.columns.clone(),
            referenced_columns: key.referenced_columns.clone(),
        });
    }
}

#[cfg(test)]
mod tests;
