//! Property test of the community deletion over generated catalogues, against a real PostgreSQL
//! (issue 28, must-show 4).
//!
//! Each case builds a random mix of tenant tables — plain tables, partitioned tables (list, hash
//! and range, one to three levels) and inheritance trees (children and grandchildren, some outside
//! schema `buzz`) — with keys between them (`NO ACTION`, `CASCADE`, `SET NULL`) whose rows may
//! point at another community's rows, and events in `buzz.events`; then, at random, on top:
//! - repost tables keyed into `buzz.events` (a neighbour reposting the target's event, or not);
//! - key-only child tables of `buzz.events` or of a generated table, their key declared `tenant
//!   data through this key` or not, with each delete action;
//! - `AFTER DELETE` archive triggers into a table of another schema holding archived rows
//!   already: declared `archives into` it, commented otherwise or not at all; the function
//!   `SECURITY DEFINER`, or running as the deleting role with or without INSERT on the archive;
//! - `BEFORE DELETE` triggers returning NULL (soft delete), undeclared or with a malformed or an
//!   ordinary comment; `AFTER DELETE` triggers doing nothing, declared harmless or not;
//! - delete rules: `DO ALSO NOTIFY` (declared harmless or not), `DO ALSO INSERT` into an archive
//!   (declared `archives into` it or not), `DO INSTEAD NOTHING` (declared or not);
//! - row-level security (enabled, with `FORCE`, with a policy);
//! - plain views; materialized views over a tenant table, directly or through a view,
//!   undeclared or declared `refreshed by the deletion`, readable by the worker or not;
//! - publications with and without deletes; keys from another schema into `buzz.communities`.
//!
//! Rows of two or three communities fill it, and the first is deleted through the store's request
//! calls: the DDL and rows as the schema owner, the inventory, preflight, fence and purge as the
//! worker role (the signed submission and approval as the owner).
//!
//! Invariant, the expected answer computed from the generated spec (never hard-coded):
//! - when the spec holds something the deletion must refuse, the request blocks at the
//!   inventory or the preflight — before anything irreversible — with the typed refusal the spec
//!   calls for (the legacy cascading-key rule, the closed-world check or the cross-tenant count,
//!   in the order the store checks them), naming exactly the objects of the case it must name
//!   (for two shapes, any of a few: see [`want_one_of`]), and not one row of any community
//!   changed anywhere in the database;
//! - otherwise the inventory counts the target's rows (tenant tables, key children, archives,
//!   refreshed views), the purge completes, and a scan of every row of every table and
//!   materialized view in the database (every schema but PostgreSQL's own and `deletion`) as the
//!   owner finds neither the target's id nor the id of any row the case gave the target, while
//!   every other row is byte-identical at the same ctid (a refreshed view: the same rows).
//!
//! The owner is no superuser: the scan sees a `FORCE ROW LEVEL SECURITY` table's rows by lifting
//! the `FORCE` inside a transaction it rolls back. Runs in a database of its own (committed tables
//! are seen by every catalog scan); every case drops what it made, before and after.

use crate::store_support;
use activities::store::CatalogError;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Instant;

use activities::store::{Community, FrozenInventory, Store, StoreError};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use store_support::community;
use store_support::private_db::{RoleStores, private_db_as_worker};
use store_support::request_flow::submit;
use testkit::schema::tenant_guards;
use uuid::Uuid;
use workflows::community::contracts::TableCount;

/// The group role of the worker's login.
const WORKER_ROLE: &str = "buzz_deletion_worker";

/// How one level of a partitioned table splits its rows.
#[derive(Debug, Clone, Copy)]
enum Split {
    /// By `community_id` at the top level (one partition per community and a default), by
    /// `seq` below.
    List,
    /// By `seq`, modulus 2.
    Hash,
    /// By `seq`, below 3 and from 3.
    Range,
}

#[derive(Debug, Clone)]
enum Layout {
    Plain,
    Partitioned(Vec<Split>),
    /// Children, each with or without a grandchild; the flag puts that child outside `buzz`.
    Inherited(Vec<(bool, bool)>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnDelete {
    NoAction,
    Cascade,
    SetNull,
}

impl OnDelete {
    fn sql(self) -> &'static str {
        match self {
            OnDelete::NoAction => "NO ACTION",
            OnDelete::Cascade => "CASCADE",
            OnDelete::SetNull => "SET NULL",
        }
    }
}

/// One row of a generated tenant table.
#[derive(Debug, Clone, Copy)]
struct RowSpec {
    community: usize,
    seq: i32,
    /// Which tree member receives it, which referenced row it points at.
    pick: usize,
    /// The community of the row it references (`None`: its own). A row in an inheritance child
    /// always references its own community's rows: the key is the root's only, and an
    /// unconstrained column is no reference the deletion could know of.
    refers_to: Option<usize>,
}

#[derive(Debug, Clone)]
struct TableSpec {
    layout: Layout,
    /// A foreign key to an earlier table (used only when that one is plain).
    references: Option<(usize, OnDelete)>,
    rows: Vec<RowSpec>,
}

/// What a trigger's or rule's comment says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Comment {
    None,
    /// An ordinary comment: declares nothing.
    Ordinary,
    /// Starts with `buzz-deletion:` but is no declaration.
    Malformed,
    /// The declaration that fits the object.
    Declared,
}

/// What a delete rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RuleAction {
    /// `DO ALSO NOTIFY` (harmless when declared).
    AlsoNotify,
    /// `DO ALSO INSERT` into an archive table of its own (declared `archives into` it).
    AlsoArchive,
    /// `DO INSTEAD NOTHING` (refused even when declared).
    InsteadNothing,
}

/// With whose rights an archive trigger's function writes the archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ArchiveRights {
    /// `SECURITY DEFINER`: the owner's.
    Definer,
    /// The deleting role's, which may INSERT into the archive.
    WorkerMayInsert,
    /// The deleting role's, which may only SELECT and DELETE there (the grants
    /// docs/data-model.md shows for an archive table).
    WorkerMayNotInsert,
}

fn archive_rights() -> impl Strategy<Value = ArchiveRights> {
    prop_oneof![
        Just(ArchiveRights::Definer),
        Just(ArchiveRights::WorkerMayInsert),
        Just(ArchiveRights::WorkerMayNotInsert),
    ]
}

/// What a key-only child's key references.
#[derive(Debug, Clone, Copy)]
enum Parent {
    Events,
    /// A generated table (when it is plain; else `buzz.events`).
    Table(usize),
}

/// One object added on top of the tenant tables; `host` picks a generated table.
#[derive(Debug, Clone)]
enum Extra {
    /// A tenant table keyed into `buzz.events`: rows (community, the event's community or its
    /// own, pick).
    Reposts {
        action: OnDelete,
        rows: Vec<(usize, Option<usize>, usize)>,
    },
    /// A table without `community_id` keyed into a tenant table: rows (owner, pick).
    KeyChild {
        parent: Parent,
        action: OnDelete,
        declared: bool,
        rows: Vec<(usize, usize)>,
    },
    /// `AFTER DELETE` copying deleted rows into an archive table holding `history` rows already.
    ArchiveTrigger {
        host: usize,
        comment: Comment,
        rights: ArchiveRights,
        history: Vec<usize>,
    },
    /// `BEFORE DELETE` returning NULL (never declared: that would be the owner's lie).
    SoftDelete {
        host: usize,
        comment: Comment,
    },
    /// `AFTER DELETE` doing nothing.
    HarmlessTrigger {
        host: usize,
        comment: Comment,
    },
    /// A delete rule.
    Rule {
        host: usize,
        action: RuleAction,
        comment: Comment,
    },
    RowSecurity {
        host: usize,
        force: bool,
        policy: bool,
    },
    View {
        host: usize,
    },
    Matview {
        host: usize,
        through_view: bool,
        declared: bool,
        granted: bool,
    },
    Publication {
        host: usize,
        deletes: bool,
    },
    /// A table in another schema keyed into `buzz.communities`: one row per listed community.
    CommunityKey {
        action: OnDelete,
        rows: Vec<usize>,
    },
}

#[derive(Debug, Clone)]
struct CatalogSpec {
    communities: usize,
    tables: Vec<TableSpec>,
    /// The community of each event in `buzz.events`.
    events: Vec<usize>,
    extras: Vec<Extra>,
    batch_rows: u32,
}

fn split() -> impl Strategy<Value = Split> {
    prop_oneof![Just(Split::List), Just(Split::Hash), Just(Split::Range)]
}

fn layout() -> impl Strategy<Value = Layout> {
    prop_oneof![
        2 => Just(Layout::Plain),
        1 => prop::collection::vec(split(), 1..=3).prop_map(Layout::Partitioned),
        1 => prop::collection::vec((any::<bool>(), any::<bool>()), 1..=2).prop_map(Layout::Inherited),
    ]
}

fn on_delete() -> impl Strategy<Value = OnDelete> {
    prop_oneof![
        Just(OnDelete::NoAction),
        Just(OnDelete::Cascade),
        Just(OnDelete::SetNull)
    ]
}

/// Mostly a row's own community, sometimes any.
fn refers_to(communities: usize) -> impl Strategy<Value = Option<usize>> {
    prop_oneof![2 => Just(None), 1 => (0..communities).prop_map(Some)]
}

fn comment() -> impl Strategy<Value = Comment> {
    prop_oneof![
        3 => Just(Comment::Declared),
        1 => Just(Comment::None),
        1 => Just(Comment::Ordinary),
        1 => Just(Comment::Malformed),
    ]
}

fn undeclared() -> impl Strategy<Value = Comment> {
    prop_oneof![
        Just(Comment::None),
        Just(Comment::Ordinary),
        Just(Comment::Malformed)
    ]
}

fn mostly(yes: bool) -> impl Strategy<Value = bool> {
    prop_oneof![3 => Just(yes), 1 => Just(!yes)]
}

fn extra(communities: usize) -> impl Strategy<Value = Extra> {
    let host = 0usize..4;
    prop_oneof![
        3 => (
            on_delete(),
            prop::collection::vec((0..communities, refers_to(communities), 0usize..3), 0..5),
        )
            .prop_map(|(action, rows)| Extra::Reposts { action, rows }),
        3 => (
            prop_oneof![Just(Parent::Events), (0usize..4).prop_map(Parent::Table)],
            prop_oneof![3 => Just(OnDelete::NoAction), 1 => on_delete()],
            mostly(true),
            prop::collection::vec((0..communities, 0usize..4), 0..5),
        )
            .prop_map(|(parent, action, declared, rows)| Extra::KeyChild {
                parent,
                action,
                declared,
                rows,
            }),
        3 => (
            host.clone(),
            comment(),
            archive_rights(),
            prop::collection::vec(0..communities, 0..4),
        )
            .prop_map(|(host, comment, rights, history)| Extra::ArchiveTrigger {
                host,
                comment,
                rights,
                history,
            }),
        1 => (host.clone(), undeclared())
            .prop_map(|(host, comment)| Extra::SoftDelete { host, comment }),
        2 => (host.clone(), comment())
            .prop_map(|(host, comment)| Extra::HarmlessTrigger { host, comment }),
        2 => (
            host.clone(),
            prop_oneof![
                2 => Just(RuleAction::AlsoNotify),
                2 => Just(RuleAction::AlsoArchive),
                1 => Just(RuleAction::InsteadNothing),
            ],
            comment(),
        )
            .prop_map(|(host, action, comment)| Extra::Rule {
                host,
                action,
                comment,
            }),
        1 => (host.clone(), any::<bool>(), any::<bool>())
            .prop_map(|(host, force, policy)| Extra::RowSecurity { host, force, policy }),
        1 => host.clone().prop_map(|host| Extra::View { host }),
        3 => (host.clone(), any::<bool>(), mostly(true), mostly(true)).prop_map(
            |(host, through_view, declared, granted)| Extra::Matview {
                host,
                through_view,
                declared,
                granted,
            }
        ),
        1 => (host, any::<bool>())
            .prop_map(|(host, deletes)| Extra::Publication { host, deletes }),
        1 => (on_delete(), prop::collection::vec(0..communities, 0..3))
            .prop_map(|(action, rows)| Extra::CommunityKey { action, rows }),
    ]
}

fn catalog(communities: usize) -> impl Strategy<Value = CatalogSpec> {
    let row = (0..communities, 0i32..6, 0usize..4, refers_to(communities)).prop_map(
        |(community, seq, pick, refers_to)| RowSpec {
            community,
            seq,
            pick,
            refers_to,
        },
    );
    let table = (
        layout(),
        prop::option::weighted(0.7, (0usize..4, on_delete())),
        prop::collection::vec(row, 0..8),
    )
        .prop_map(|(layout, references, rows)| TableSpec {
            layout,
            references,
            rows,
        });
    (
        prop::collection::vec(table, 1..=4),
        prop::collection::vec(0..communities, 0..6),
        prop::collection::vec(extra(communities), 0..=2),
        1u32..=3,
    )
        .prop_map(move |(tables, events, extras, batch_rows)| CatalogSpec {
            communities,
            tables,
            events,
            extras,
            batch_rows,
        })
}

fn any_catalog() -> impl Strategy<Value = CatalogSpec> {
    (2usize..=3).prop_flat_map(catalog)
}

/// A fresh row id (unique in the database, so a scan for it finds only its row and copies).
fn fresh_id() -> String {
    Uuid::new_v4().simple().to_string()
}

/// `text` as an SQL string literal.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// Names a block must name: each entry is a set of which it names at least one (one name, but
/// for a shape whose refusal may fairly name any of a few objects).
type Wanted = Vec<BTreeSet<String>>;

/// What the store must answer, in the order it checks.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Expected {
    /// Keys from a table that is not tenant data into a tenant relation with a changing action
    /// ([`CatalogError::CascadingReferences`], checked first).
    cascading: Wanted,
    /// Objects the closed-world check must refuse ([`CatalogError::Refused`]).
    refused: Wanted,
    /// Keys through which a row of another community references a target row
    /// ([`CatalogError::CrossTenantReferences`], counted once the catalogue passed).
    cross: Wanted,
}

/// `wanted` with the entry "names `name`".
fn want(wanted: &mut Wanted, name: String) {
    wanted.push(BTreeSet::from([name]));
}

/// `wanted` with the entry "names one of `names`".
fn want_one_of(wanted: &mut Wanted, names: impl IntoIterator<Item = String>) {
    wanted.push(names.into_iter().collect());
}

impl Expected {
    /// The first block the store must raise: its kind and the names it must name.
    fn first(&self) -> Option<(&'static str, &Wanted)> {
        if !self.cascading.is_empty() {
            Some(("cascading reference", &self.cascading))
        } else if !self.refused.is_empty() {
            Some(("catalogue refusal", &self.refused))
        } else if !self.cross.is_empty() {
            Some(("cross-tenant references", &self.cross))
        } else {
            None
        }
    }
}

/// `named` is exactly what `wanted` calls for: every name is a wanted one, every entry named.
fn names_match(named: &BTreeSet<String>, wanted: &Wanted) -> bool {
    named
        .iter()
        .all(|name| wanted.iter().any(|entry| entry.contains(name)))
        && wanted
            .iter()
            .all(|entry| entry.iter().any(|name| named.contains(name)))
}

/// One case as SQL, with what the store must answer and what the inventory must count.
#[derive(Debug, Default)]
struct Plan {
    /// Tables and keys; rows; triggers, rules, views, grants and declarations; row security
    /// last (a forced policy would hide the owner's own inserts).
    tables: Vec<String>,
    rows: Vec<String>,
    objects: Vec<String>,
    security: Vec<String>,
    /// Every name the case gave an object (relations qualified, constraints, triggers, rules,
    /// policies, publications).
    created: BTreeSet<String>,
    /// Ids of every row the case gave the target (its own rows, and key-only children's rows
    /// referencing them).
    target_ids: Vec<String>,
    expected: Expected,
    /// The target's rows the inventory must count: tenant tables, key children, archives,
    /// refreshed views.
    row_counts: BTreeMap<String, u64>,
    key_children: BTreeMap<String, u64>,
    archives: BTreeMap<String, u64>,
    refreshed_views: BTreeMap<String, u64>,
}

/// A generated tenant table.
struct Built {
    root: String,
    /// The relations rows can be inserted into (for an inheritance tree, every member;
    /// otherwise the root).
    members: Vec<String>,
    plain: bool,
    /// Every relation of it (root, partitions at any depth, inheritance children).
    tree: Vec<String>,
    /// Its rows' ids by community.
    ids: Vec<Vec<String>>,
}

/// `PARTITION BY …` for `split` at `level`, and the partition bounds it gets.
fn partitioning(split: Split, level: usize, communities: &[Uuid]) -> (String, Vec<String>) {
    match (split, level) {
        (Split::List, 0) => {
            let mut bounds: Vec<String> = communities
                .iter()
                .map(|c| format!("FOR VALUES IN ('{c}')"))
                .collect();
            bounds.push("DEFAULT".to_owned());
            ("PARTITION BY LIST (community_id)".to_owned(), bounds)
        }
        (Split::List, _) => (
            "PARTITION BY LIST (seq)".to_owned(),
            vec!["FOR VALUES IN (0, 1, 2)".to_owned(), "DEFAULT".to_owned()],
        ),
        (Split::Hash, _) => (
            "PARTITION BY HASH (seq)".to_owned(),
            (0..2)
                .map(|r| format!("FOR VALUES WITH (MODULUS 2, REMAINDER {r})"))
                .collect(),
        ),
        (Split::Range, _) => (
            "PARTITION BY RANGE (seq)".to_owned(),
            vec![
                "FOR VALUES FROM (MINVALUE) TO (3)".to_owned(),
                "FOR VALUES FROM (3) TO (MAXVALUE)".to_owned(),
            ],
        ),
    }
}

/// Creates the partitions of `parent` for `levels[level..]`.
fn partitions(
    parent: &str,
    levels: &[Split],
    level: usize,
    communities: &[Uuid],
    plan: &mut Plan,
    tree: &mut Vec<String>,
) {
    let Some(split) = levels.get(level) else {
        return;
    };
    let (_, bounds) = partitioning(*split, level, communities);
    for (k, bound) in bounds.iter().enumerate() {
        let child = format!("{parent}_{k}");
        let below = levels
            .get(level + 1)
            .map(|next| partitioning(*next, level + 1, communities).0)
            .unwrap_or_default();
        plan.tables.push(format!(
            "CREATE TABLE {child} PARTITION OF {parent} {bound} {below}"
        ));
        plan.created.insert(child.clone());
        tree.push(child.clone());
        partitions(&child, levels, level + 1, communities, plan, tree);
    }
}

/// The generated tenant table `name`, keyed to `references` (root, constraint, action).
fn build_table(
    name: &str,
    spec: &TableSpec,
    references: Option<(&str, &str, OnDelete)>,
    communities: &[Uuid],
    plan: &mut Plan,
) -> Built {
    let root = format!("buzz.{name}");
    let fk = references
        .map(|(target, constraint, action)| {
            format!(
                ", ref_id text CONSTRAINT {constraint} REFERENCES {target} (id) ON DELETE {}",
                action.sql()
            )
        })
        .unwrap_or_default();
    let columns = "community_id uuid NOT NULL, seq int NOT NULL, body text NOT NULL";
    let mut members = vec![root.clone()];
    let mut tree = vec![root.clone()];
    plan.created.insert(root.clone());
    match &spec.layout {
        Layout::Plain => {
            plan.tables.push(format!(
                "CREATE TABLE {root} (id text PRIMARY KEY, {columns}{fk})"
            ));
            plan.tables.extend(tenant_guards(&root, "none"));
        }
        Layout::Partitioned(levels) => {
            let (by, _) = partitioning(levels[0], 0, communities);
            plan.tables.push(format!(
                "CREATE TABLE {root} (id text NOT NULL, {columns}{fk}) {by}"
            ));
            plan.tables.extend(tenant_guards(&root, "none"));
            partitions(&root, levels, 0, communities, plan, &mut tree);
        }
        Layout::Inherited(children) => {
            plan.tables.push(format!(
                "CREATE TABLE {root} (id text NOT NULL, {columns}{fk})"
            ));
            plan.tables.extend(tenant_guards(&root, "none"));
            for (k, (grandchild, elsewhere)) in children.iter().enumerate() {
                let schema = if *elsewhere { "prop_ext" } else { "buzz" };
                let child = format!("{schema}.{name}_c{k}");
                plan.tables
                    .push(format!("CREATE TABLE {child} () INHERITS ({root})"));
                plan.tables.extend(tenant_guards(&child, "none"));
                members.push(child.clone());
                if *grandchild {
                    let grand = format!("{schema}.{name}_c{k}_g");
                    plan.tables.push(format!(
                        "CREATE TABLE {grand} (note text) INHERITS ({child})"
                    ));
                    plan.tables.extend(tenant_guards(&grand, "none"));
                    members.push(grand);
                }
            }
            for member in &members[1..] {
                plan.tables
                    .push(format!("GRANT SELECT, DELETE ON {member} TO {WORKER_ROLE}"));
            }
        }
    }
    plan.created.extend(members.iter().cloned());
    tree.extend(members.iter().skip(1).cloned());
    Built {
        root,
        members,
        tree,
        plain: matches!(spec.layout, Layout::Plain),
        ids: vec![Vec::new(); communities.len()],
    }
}

/// `COMMENT ON {what} IS …` for `comment` declaring `declaration`, if it says anything.
fn comment_sql(what: &str, comment: Comment, declaration: &str) -> Option<String> {
    let text = match comment {
        Comment::None => return None,
        Comment::Ordinary => "kept for support",
        Comment::Malformed => "buzz-deletion: keeps rows",
        Comment::Declared => declaration,
    };
    Some(format!("COMMENT ON {what} IS {}", literal(text)))
}

/// Everything case `n` creates, and what the store must answer, from `spec`; `communities[0]`
/// is the target.
fn plan(n: usize, spec: &CatalogSpec, communities: &[Uuid]) -> Plan {
    let mut plan = Plan::default();
    let schema = format!("prop{n}");
    plan.tables.push(format!("CREATE SCHEMA {schema}"));
    plan.tables
        .push(format!("GRANT USAGE ON SCHEMA {schema} TO {WORKER_ROLE}"));
    plan.created.insert(schema.clone());

    // Events of each community.
    let mut events: Vec<Vec<String>> = vec![Vec::new(); communities.len()];
    for &c in &spec.events {
        let id = format!("{}{}", fresh_id(), fresh_id());
        plan.rows.push(format!(
            "INSERT INTO buzz.events (id, community_id, pubkey, kind, content) \
             VALUES ('{id}', '{}', '{:064x}', 1, 'generated')",
            communities[c], 7
        ));
        if c == 0 {
            plan.target_ids.push(id.clone());
        }
        events[c].push(id);
    }
    plan.row_counts
        .insert("buzz.events".to_owned(), events[0].len() as u64);

    // The tenant tables, each keyed to an earlier plain one if the spec says so.
    let mut built: Vec<Built> = Vec::new();
    let mut target_rows: Vec<u64> = Vec::new();
    for (i, table) in spec.tables.iter().enumerate() {
        let name = format!("p{n}_{i}");
        let constraint = format!("{name}_ref");
        let references = table.references.and_then(|(j, action)| {
            let j = j % i.max(1);
            (j < i && built[j].plain).then_some((j, action))
        });
        let mut b = build_table(
            &name,
            table,
            references.map(|(j, action)| (built[j].root.as_str(), constraint.as_str(), action)),
            communities,
            &mut plan,
        );
        if references.is_some() {
            plan.created.insert(constraint.clone());
        }
        let mut counted = 0;
        for row in &table.rows {
            let member = row.pick % b.members.len();
            let into = b.members[member].clone();
            let c = row.community;
            let id = fresh_id();
            let (ref_col, ref_val) = match references {
                Some((j, _)) => {
                    let inherited_child =
                        matches!(table.layout, Layout::Inherited(_)) && member > 0;
                    let rc = if inherited_child {
                        c
                    } else {
                        row.refers_to.unwrap_or(c)
                    };
                    let candidates = &built[j].ids[rc];
                    match candidates.get(row.pick % candidates.len().max(1)) {
                        Some(referenced) => {
                            if c != 0 && rc == 0 {
                                want(&mut plan.expected.cross, constraint.clone());
                            }
                            (", ref_id", format!(", '{referenced}'"))
                        }
                        None => (", ref_id", ", NULL".to_owned()),
                    }
                }
                None => ("", String::new()),
            };
            plan.rows.push(format!(
                "INSERT INTO {into} (id, community_id, seq, body{ref_col}) \
                 VALUES ('{id}', '{}', {}, md5(random()::text){ref_val})",
                communities[c], row.seq
            ));
            if c == 0 {
                plan.target_ids.push(id.clone());
                counted += 1;
            }
            b.ids[c].push(id);
        }
        plan.row_counts.insert(b.root.clone(), counted);
        target_rows.push(counted);
        built.push(b);
    }

    let host = |h: usize| h % built.len();
    for (k, extra) in spec.extras.iter().enumerate() {
        match extra {
            Extra::Reposts { action, rows } => {
                let table = format!("buzz.p{n}_rp{k}");
                let key = format!("p{n}_rp{k}_fk");
                plan.tables.push(format!(
                    "CREATE TABLE {table} (id text PRIMARY KEY, community_id uuid NOT NULL, \
                     event_id text CONSTRAINT {key} REFERENCES buzz.events (id) ON DELETE {})",
                    action.sql()
                ));
                plan.tables.extend(tenant_guards(&table, "none"));
                plan.created.extend([table.clone(), key.clone()]);
                let mut counted = 0;
                for &(c, of, pick) in rows {
                    let ec = of.unwrap_or(c);
                    let Some(event) = events[ec].get(pick % events[ec].len().max(1)) else {
                        continue;
                    };
                    let id = fresh_id();
                    plan.rows.push(format!(
                        "INSERT INTO {table} (id, community_id, event_id) \
                         VALUES ('{id}', '{}', '{event}')",
                        communities[c]
                    ));
                    if c == 0 {
                        plan.target_ids.push(id);
                        counted += 1;
                    } else if ec == 0 {
                        want(&mut plan.expected.cross, key.clone());
                    }
                }
                plan.row_counts.insert(table, counted);
            }
            Extra::KeyChild {
                parent,
                action,
                declared,
                rows,
            } => {
                let table = format!("buzz.p{n}_kc{k}");
                let key = format!("p{n}_kc{k}_fk");
                let (parent_table, parent_ids) = match parent {
                    Parent::Table(i) if built[host(*i)].plain => {
                        (built[host(*i)].root.clone(), &built[host(*i)].ids)
                    }
                    _ => ("buzz.events".to_owned(), &events),
                };
                plan.tables.push(format!(
                    "CREATE TABLE {table} (id text NOT NULL, parent_id text CONSTRAINT {key} \
                     REFERENCES {parent_table} (id) ON DELETE {}, tag text NOT NULL)",
                    action.sql()
                ));
                plan.created.extend([table.clone(), key.clone()]);
                let mut counted = 0;
                for &(owner, pick) in rows {
                    let candidates = &parent_ids[owner];
                    let Some(parent_id) = candidates.get(pick % candidates.len().max(1)) else {
                        continue;
                    };
                    let id = fresh_id();
                    plan.rows.push(format!(
                        "INSERT INTO {table} (id, parent_id, tag) VALUES ('{id}', '{parent_id}', 'tag')"
                    ));
                    if owner == 0 {
                        plan.target_ids.push(id);
                        counted += 1;
                    }
                }
                if *declared {
                    plan.objects.push(format!(
                        "COMMENT ON CONSTRAINT {key} ON {table} IS \
                         'buzz-deletion: tenant data through this key'"
                    ));
                }
                if *action != OnDelete::NoAction {
                    // The key would change a table that is no tenant table (it has no
                    // community_id) when its parent rows are purged: the catalogue's older
                    // cascading-key rule refuses it first, declared or not (the purge deletes a
                    // declared child's rows before their parents, so the action would never fire;
                    // accepting a declared one would be a deliberate change of that rule).
                    want(&mut plan.expected.cascading, key.clone());
                }
                if *declared {
                    plan.key_children.insert(table, counted);
                } else {
                    want(
                        &mut plan.expected.refused,
                        format!("foreign key {key} on {table}"),
                    );
                }
            }
            Extra::ArchiveTrigger {
                host: h,
                comment,
                rights,
                history,
            } => {
                let on = built[host(*h)].root.clone();
                let archive = format!("{schema}.archive{k}");
                let function = format!("{schema}.archive{k}");
                let trigger = format!("p{n}_arch{k}");
                plan.tables.push(format!(
                    "CREATE TABLE {archive} (community_id uuid NOT NULL, id text NOT NULL, \
                     body text NOT NULL, archived_at timestamptz NOT NULL DEFAULT now())"
                ));
                plan.tables.push(format!(
                    "GRANT SELECT, DELETE ON {archive} TO {WORKER_ROLE}"
                ));
                plan.created.extend([archive.clone(), trigger.clone()]);
                let mut counted = 0;
                for &c in history {
                    let id = fresh_id();
                    plan.rows.push(format!(
                        "INSERT INTO {archive} (community_id, id, body) \
                         VALUES ('{}', '{id}', 'history')",
                        communities[c]
                    ));
                    if c == 0 {
                        plan.target_ids.push(id);
                        counted += 1;
                    }
                }
                if *rights == ArchiveRights::WorkerMayInsert {
                    plan.tables
                        .push(format!("GRANT INSERT ON {archive} TO {WORKER_ROLE}"));
                }
                let security = if *rights == ArchiveRights::Definer {
                    "SECURITY DEFINER"
                } else {
                    ""
                };
                plan.objects.push(format!(
                    "CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql {security} \
                     AS $$ BEGIN INSERT INTO {archive} (community_id, id, body) \
                     VALUES (OLD.community_id, OLD.id, OLD.body); RETURN OLD; END $$"
                ));
                plan.objects.push(format!(
                    "CREATE TRIGGER {trigger} AFTER DELETE ON {on} \
                     FOR EACH ROW EXECUTE FUNCTION {function}()"
                ));
                plan.objects.extend(comment_sql(
                    &format!("TRIGGER {trigger} ON {on}"),
                    *comment,
                    &format!("buzz-deletion: archives into {archive}"),
                ));
                if *comment == Comment::Declared && *rights == ArchiveRights::WorkerMayNotInsert {
                    // Declared, but its function writes the archive with the deleting role's
                    // rights, and that role may not INSERT there: the purge's first delete on
                    // the host would fail. The declaration is unsound, before anything is deleted.
                    want_one_of(
                        &mut plan.expected.refused,
                        [
                            format!("trigger {trigger} on {on}"),
                            format!("table {archive}"),
                        ],
                    );
                } else if *comment == Comment::Declared {
                    plan.archives.insert(archive, counted);
                } else {
                    want(
                        &mut plan.expected.refused,
                        format!("trigger {trigger} on {on}"),
                    );
                    // Not an archive: a table with community_id outside `buzz`.
                    want(&mut plan.expected.refused, format!("table {archive}"));
                }
            }
            Extra::SoftDelete { host: h, comment } => {
                let on = built[host(*h)].root.clone();
                let function = format!("{schema}.keep{k}");
                let trigger = format!("p{n}_soft{k}");
                plan.created.insert(trigger.clone());
                plan.objects.push(format!(
                    "CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql \
                     AS $$ BEGIN RETURN NULL; END $$"
                ));
                plan.objects.push(format!(
                    "CREATE TRIGGER {trigger} BEFORE DELETE ON {on} \
                     FOR EACH ROW EXECUTE FUNCTION {function}()"
                ));
                plan.objects.extend(comment_sql(
                    &format!("TRIGGER {trigger} ON {on}"),
                    *comment,
                    "buzz-deletion: harmless",
                ));
                want(
                    &mut plan.expected.refused,
                    format!("trigger {trigger} on {on}"),
                );
            }
            Extra::HarmlessTrigger { host: h, comment } => {
                let on = built[host(*h)].root.clone();
                let function = format!("{schema}.noop{k}");
                let trigger = format!("p{n}_noop{k}");
                plan.created.insert(trigger.clone());
                plan.objects.push(format!(
                    "CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql \
                     AS $$ BEGIN RETURN NULL; END $$"
                ));
                plan.objects.push(format!(
                    "CREATE TRIGGER {trigger} AFTER DELETE ON {on} \
                     FOR EACH ROW EXECUTE FUNCTION {function}()"
                ));
                plan.objects.extend(comment_sql(
                    &format!("TRIGGER {trigger} ON {on}"),
                    *comment,
                    "buzz-deletion: harmless",
                ));
                if *comment != Comment::Declared {
                    want(
                        &mut plan.expected.refused,
                        format!("trigger {trigger} on {on}"),
                    );
                }
            }
            Extra::Rule {
                host: h,
                action,
                comment,
            } => {
                let on = built[host(*h)].root.clone();
                let rule = format!("p{n}_rule{k}");
                let archive = format!("{schema}.rule_archive{k}");
                plan.created.insert(rule.clone());
                let (sql, declaration) = match action {
                    RuleAction::AlsoNotify => (
                        format!("DO ALSO NOTIFY p{n}_deleted"),
                        "buzz-deletion: harmless".to_owned(),
                    ),
                    RuleAction::AlsoArchive => {
                        // A rule's action runs with its table owner's rights: the worker needs
                        // no INSERT on the archive.
                        plan.tables.push(format!(
                            "CREATE TABLE {archive} (community_id uuid NOT NULL, id text NOT NULL, \
                             body text NOT NULL)"
                        ));
                        plan.tables.push(format!(
                            "GRANT SELECT, DELETE ON {archive} TO {WORKER_ROLE}"
                        ));
                        plan.created.insert(archive.clone());
                        (
                            format!(
                                "DO ALSO INSERT INTO {archive} (community_id, id, body) \
                                 VALUES (OLD.community_id, OLD.id, OLD.body)"
                            ),
                            format!("buzz-deletion: archives into {archive}"),
                        )
                    }
                    RuleAction::InsteadNothing => (
                        "DO INSTEAD NOTHING".to_owned(),
                        "buzz-deletion: harmless".to_owned(),
                    ),
                };
                plan.objects
                    .push(format!("CREATE RULE {rule} AS ON DELETE TO {on} {sql}"));
                plan.objects.extend(comment_sql(
                    &format!("RULE {rule} ON {on}"),
                    *comment,
                    &declaration,
                ));
                if *action == RuleAction::InsteadNothing || *comment != Comment::Declared {
                    want(&mut plan.expected.refused, format!("rule {rule} on {on}"));
                }
                if *action == RuleAction::AlsoArchive {
                    if *comment == Comment::Declared {
                        plan.archives.insert(archive, 0);
                    } else {
                        // Not an archive: a table with community_id outside `buzz`.
                        want(&mut plan.expected.refused, format!("table {archive}"));
                    }
                }
            }
            Extra::RowSecurity {
                host: h,
                force,
                policy,
            } => {
                let on = built[host(*h)].root.clone();
                plan.security
                    .push(format!("ALTER TABLE {on} ENABLE ROW LEVEL SECURITY"));
                if *force {
                    plan.security
                        .push(format!("ALTER TABLE {on} FORCE ROW LEVEL SECURITY"));
                }
                if *policy {
                    let name = format!("p{n}_pol{k}");
                    plan.security
                        .push(format!("CREATE POLICY {name} ON {on} USING (true)"));
                    plan.created.insert(name);
                }
                want(&mut plan.expected.refused, on);
            }
            Extra::View { host: h } => {
                let on = built[host(*h)].root.clone();
                let view = format!("{schema}.v{k}");
                plan.created.insert(view.clone());
                plan.objects.push(format!(
                    "CREATE VIEW {view} AS SELECT community_id, id FROM {on}"
                ));
            }
            Extra::Matview {
                host: h,
                through_view,
                declared,
                granted,
            } => {
                let on = built[host(*h)].root.clone();
                let matview = format!("{schema}.mv{k}");
                plan.created.insert(matview.clone());
                let source = if *through_view {
                    let view = format!("{schema}.mvv{k}");
                    plan.objects.push(format!(
                        "CREATE VIEW {view} AS SELECT community_id, id, body FROM {on}"
                    ));
                    plan.created.insert(view.clone());
                    view
                } else {
                    on
                };
                plan.objects.push(format!(
                    "CREATE MATERIALIZED VIEW {matview} AS \
                     SELECT community_id, id, body FROM {source}"
                ));
                if *declared {
                    plan.objects.push(format!(
                        "COMMENT ON MATERIALIZED VIEW {matview} IS \
                         'buzz-deletion: refreshed by the deletion'"
                    ));
                }
                if *granted {
                    plan.objects
                        .push(format!("GRANT SELECT ON {matview} TO {WORKER_ROLE}"));
                }
                if *declared && *granted {
                    plan.refreshed_views.insert(matview, target_rows[host(*h)]);
                } else {
                    want(
                        &mut plan.expected.refused,
                        format!("materialized view {matview}"),
                    );
                }
            }
            Extra::Publication { host: h, deletes } => {
                let on = built[host(*h)].root.clone();
                let publication = format!("p{n}_pub{k}");
                plan.created.insert(publication.clone());
                let publish = if *deletes {
                    "insert, update, delete"
                } else {
                    "insert, update"
                };
                plan.objects.push(format!(
                    "CREATE PUBLICATION {publication} FOR TABLE {on} WITH (publish = '{publish}')"
                ));
                if !deletes {
                    want(
                        &mut plan.expected.refused,
                        format!("publication {publication}"),
                    );
                } else if !built[host(*h)].plain {
                    // Publishing deletes of a relation without a replica identity (no primary
                    // key) makes every DELETE on it fail: the purge would stop at its first
                    // batch. Refused naming the publication or a relation of the tree.
                    want_one_of(
                        &mut plan.expected.refused,
                        std::iter::once(format!("publication {publication}"))
                            .chain(built[host(*h)].tree.iter().cloned()),
                    );
                }
            }
            Extra::CommunityKey { action, rows } => {
                let table = format!("{schema}.invoices{k}");
                let key = format!("p{n}_inv{k}_fk");
                plan.tables.push(format!(
                    "CREATE TABLE {table} (id text PRIMARY KEY, community uuid CONSTRAINT {key} \
                     REFERENCES buzz.communities (id) ON DELETE {}, amount int NOT NULL)",
                    action.sql()
                ));
                plan.created.extend([table.clone(), key.clone()]);
                for &c in rows {
                    let id = fresh_id();
                    plan.rows.push(format!(
                        "INSERT INTO {table} (id, community, amount) VALUES ('{id}', '{}', 100)",
                        communities[c]
                    ));
                    if c == 0 {
                        plan.target_ids.push(id);
                    }
                }
                want(
                    &mut plan.expected.refused,
                    format!("foreign key {key} on {table}"),
                );
            }
        }
    }
    plan
}

/// Drops everything a case made (also what a failed case left behind).
const CLEANUP: &str = "DO $$ DECLARE r record; BEGIN \
     FOR r IN SELECT pubname FROM pg_catalog.pg_publication WHERE pubname ~ '^p[0-9]+_' LOOP \
         EXECUTE format('DROP PUBLICATION %I', r.pubname); \
     END LOOP; \
     FOR r IN SELECT format('%I.%I', n.nspname, c.relname) AS name \
              FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
              WHERE n.nspname IN ('buzz', 'prop_ext') AND c.relkind IN ('r', 'p') \
                AND c.relname ~ '^p[0-9]+_' AND NOT c.relispartition \
                AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_inherits i WHERE i.inhrelid = c.oid) \
     LOOP \
         EXECUTE format('DROP TABLE IF EXISTS %s CASCADE', r.name); \
     END LOOP; \
     FOR r IN SELECT nspname FROM pg_catalog.pg_namespace WHERE nspname ~ '^prop[0-9]+$' LOOP \
         EXECUTE format('DROP SCHEMA %I CASCADE', r.nspname); \
     END LOOP; \
     END $$";

async fn exec(store: &Store, sql: &str) -> Result<(), TestCaseError> {
    sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(store.pool())
        .await
        .map(|_| ())
        .map_err(|e| TestCaseError::fail(format!("{sql}: {e}")))
}

/// Every row of every table and materialized view in the database (but PostgreSQL's own schemas
/// and `deletion`), read as the owner: relation → sorted rows, a heap's as `ctid row`, a
/// materialized view's as `row` (a refresh rewrites it).
type Snapshot = BTreeMap<String, Vec<String>>;

async fn snapshot(owner: &Store) -> Result<Snapshot, TestCaseError> {
    let fail = |what: &str, e: sqlx::Error| TestCaseError::fail(format!("snapshot, {what}: {e}"));
    let mut tx = owner.pool().begin().await.map_err(|e| fail("begin", e))?;
    let relations: Vec<(String, String, bool)> = sqlx::query_as(
        "SELECT format('%I.%I', n.nspname, c.relname), c.relkind::text, c.relforcerowsecurity \
         FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
         WHERE c.relkind IN ('r', 'm') \
           AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'deletion') \
           AND n.nspname NOT LIKE 'pg\\_%' \
         ORDER BY 1",
    )
    .fetch_all(&mut *tx)
    .await
    .map_err(|e| fail("relations", e))?;
    let mut out = Snapshot::new();
    for (name, relkind, forced) in relations {
        if forced {
            // The owner bypasses row-level security unless it is forced: lift it, then roll back.
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "ALTER TABLE {name} NO FORCE ROW LEVEL SECURITY"
            )))
            .execute(&mut *tx)
            .await
            .map_err(|e| fail(&name, e))?;
        }
        let sql = if relkind == "m" {
            format!("SELECT t::text FROM {name} t")
        } else {
            format!("SELECT format('%s %s', t.ctid, t::text) FROM ONLY {name} t")
        };
        let mut rows: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .fetch_all(&mut *tx)
            .await
            .map_err(|e| fail(&name, e))?;
        rows.sort();
        out.insert(name, rows);
    }
    tx.rollback().await.map_err(|e| fail("rollback", e))?;
    Ok(out)
}

/// The first difference between two snapshots, in words.
fn difference(before: &Snapshot, after: &Snapshot) -> Option<String> {
    let names: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    for name in names {
        let (b, a) = (before.get(name), after.get(name));
        if b != a {
            let b = b.cloned().unwrap_or_default();
            let a = a.cloned().unwrap_or_default();
            let gone: Vec<&String> = b.iter().filter(|r| !a.contains(r)).collect();
            let new: Vec<&String> = a.iter().filter(|r| !b.contains(r)).collect();
            return Some(format!("{name}: gone {gone:?}, new {new:?}"));
        }
    }
    None
}

/// Where the request flow stopped.
enum Outcome {
    /// At the inventory or the preflight, before anything irreversible.
    Blocked {
        step: &'static str,
        error: StoreError,
    },
    /// Past the preflight: the fence is up and the purge ran, to completion or to this error.
    Purged(Result<(), StoreError>),
}

/// The target's rows per table in `counts` (zeros included), by table.
fn counted(counts: &[TableCount]) -> BTreeMap<String, u64> {
    counts.iter().map(|c| (c.table.clone(), c.rows)).collect()
}

/// The inventory counted each of the target's rows once, where the plan put them.
fn check_inventory(inventory: &FrozenInventory, plan: &Plan) -> Result<(), TestCaseError> {
    let rows = counted(&inventory.catalog.row_counts);
    for (table, expected) in &plan.row_counts {
        prop_assert_eq!(
            rows.get(table),
            Some(expected),
            "inventory count of {}",
            table
        );
    }
    let Some(world) = &inventory.catalog.closed_world else {
        return Err(TestCaseError::fail(
            "the inventory recorded no closed world",
        ));
    };
    prop_assert_eq!(&counted(&world.key_children), &plan.key_children);
    prop_assert_eq!(&counted(&world.archives), &plan.archives);
    prop_assert_eq!(&counted(&world.refreshed_views), &plan.refreshed_views);
    Ok(())
}

/// Submit, inventory, approval, preflight, fence and drain, purge: the inventory, preflight and
/// everything after as the worker; the signed submission and approval as the owner (the test
/// keys are registered through `deletion.operators`, which the worker may not read).
async fn request_flow(
    db: &RoleStores,
    target: &Community,
    plan: &Plan,
    batch_rows: u32,
) -> Result<Outcome, TestCaseError> {
    let mut request = submit(&db.owner, target).await;
    request.store = db.worker.clone();
    let inventory = match request.take_inventory().await {
        Ok(inventory) => inventory,
        Err(error) => {
            return Ok(Outcome::Blocked {
                step: "inventory",
                error,
            });
        }
    };
    if plan.expected.first().is_none() {
        check_inventory(&inventory, plan)?;
    }
    request.store = db.owner.clone();
    request.approve(&inventory).await;
    request.store = db.worker.clone();
    if let Err(error) = request.preflight().await {
        return Ok(Outcome::Blocked {
            step: "preflight",
            error,
        });
    }
    request.fence_and_drain().await;
    Ok(Outcome::Purged(request.purge(batch_rows).await.map(|_| ())))
}

/// The block is the typed refusal the plan calls for, naming objects of this case only.
fn check_block(step: &str, error: &StoreError, plan: &Plan) -> Result<(), TestCaseError> {
    let (kind, named): (&str, BTreeSet<String>) = match error {
        StoreError::Catalog(CatalogError::CascadingReferences { references }) => (
            "cascading reference",
            references.iter().map(|r| r.constraint.clone()).collect(),
        ),
        StoreError::Catalog(CatalogError::Refused { refusals }) => {
            for refusal in refusals {
                prop_assert!(
                    !refusal.problem.is_empty() && !refusal.remedy.is_empty(),
                    "a refusal without problem or remedy: {:?}",
                    refusal
                );
            }
            (
                "catalogue refusal",
                refusals.iter().map(|r| r.object.clone()).collect(),
            )
        }
        StoreError::Catalog(CatalogError::CrossTenantReferences { references }) => {
            for reference in references {
                prop_assert!(reference.rows > 0, "{:?}", reference);
            }
            (
                "cross-tenant references",
                references.iter().map(|r| r.constraint.clone()).collect(),
            )
        }
        other => {
            return Err(TestCaseError::fail(format!(
                "blocked at {step} by an error that is no typed refusal of the catalogue: {other}"
            )));
        }
    };
    for name in &named {
        prop_assert!(
            plan.created
                .iter()
                .any(|object| name.split(' ').any(|word| word == object)),
            "the {} at {} names {:?}, which is no object of this case: {}",
            kind,
            step,
            name,
            error
        );
    }
    let expected = plan.expected.first();
    prop_assert!(
        expected
            .is_some_and(|(want_kind, wanted)| want_kind == kind && names_match(&named, wanted)),
        "blocked at {} by a {} naming {:?}, but the case calls for {:?}: {}",
        step,
        kind,
        named,
        expected,
        error
    );
    Ok(())
}

/// Outcomes by kind, for the summary line.
#[derive(Debug, Default)]
struct Tally {
    completed: usize,
    /// The extras of completed cases, by shape.
    completed_with: BTreeMap<&'static str, usize>,
    blocked: BTreeMap<String, usize>,
}

/// An extra's shape, for the tally.
fn shape(extra: &Extra) -> &'static str {
    match extra {
        Extra::Reposts { .. } => "reposts",
        Extra::KeyChild { .. } => "key-only child",
        Extra::ArchiveTrigger {
            rights: ArchiveRights::Definer,
            ..
        } => "archive trigger (security definer)",
        Extra::ArchiveTrigger { .. } => "archive trigger (invoker)",
        Extra::SoftDelete { .. } => "soft-delete trigger",
        Extra::HarmlessTrigger { .. } => "harmless trigger",
        Extra::Rule {
            action: RuleAction::AlsoNotify,
            ..
        } => "DO ALSO NOTIFY rule",
        Extra::Rule {
            action: RuleAction::AlsoArchive,
            ..
        } => "DO ALSO archive rule",
        Extra::Rule { .. } => "DO INSTEAD rule",
        Extra::RowSecurity { .. } => "row-level security",
        Extra::View { .. } => "view",
        Extra::Matview {
            through_view: true, ..
        } => "materialized view over a view",
        Extra::Matview { .. } => "materialized view",
        Extra::Publication { .. } => "publication",
        Extra::CommunityKey { .. } => "key into buzz.communities",
    }
}

async fn run_case(
    db: &RoleStores,
    n: usize,
    spec: &CatalogSpec,
    tally: &Mutex<Tally>,
) -> Result<(), TestCaseError> {
    let owner = &db.owner;
    exec(owner, CLEANUP).await?;
    let mut communities = Vec::new();
    for _ in 0..spec.communities {
        communities.push(community(owner).await);
    }
    let target = communities[0].clone();
    let ids: Vec<Uuid> = communities.iter().map(|c| c.id).collect();
    let plan = plan(n, spec, &ids);
    for sql in plan
        .tables
        .iter()
        .chain(&plan.rows)
        .chain(&plan.objects)
        .chain(&plan.security)
    {
        exec(owner, sql).await?;
    }

    let before = snapshot(owner).await?;
    let outcome = request_flow(db, &target, &plan, spec.batch_rows).await?;
    let after = snapshot(owner).await?;
    let marks: Vec<String> = std::iter::once(target.id.to_string())
        .chain(plan.target_ids.iter().cloned())
        .collect();
    let is_target = |row: &String| marks.iter().any(|m| row.contains(m.as_str()));

    match outcome {
        Outcome::Blocked { step, error } => {
            check_block(step, &error, &plan)?;
            if let Some(changed) = difference(&before, &after) {
                return Err(TestCaseError::fail(format!(
                    "blocked at {step} ({error}), but a row changed: {changed}"
                )));
            }
            if let Ok(mut tally) = tally.lock() {
                let kind = plan.expected.first().map(|(k, _)| k).unwrap_or("?");
                *tally.blocked.entry(format!("{step}: {kind}")).or_default() += 1;
            }
        }
        Outcome::Purged(purged) => {
            if let Some(expected) = plan.expected.first() {
                return Err(TestCaseError::fail(format!(
                    "the request passed the inventory and the preflight, but the case calls for \
                     a {expected:?} before anything irreversible; the purge then {}",
                    match &purged {
                        Ok(()) => "completed".to_owned(),
                        Err(e) => format!("failed: {e}"),
                    }
                )));
            }
            if let Err(e) = purged {
                return Err(TestCaseError::fail(format!(
                    "the purge failed after the irreversible point: {e}"
                )));
            }
            for (name, rows) in &after {
                let left: Vec<&String> = rows.iter().filter(|r| is_target(r)).collect();
                prop_assert!(
                    left.is_empty(),
                    "the target's rows left in {}: {:?}",
                    name,
                    left
                );
            }
            let others: Snapshot = before
                .iter()
                .map(|(name, rows)| {
                    let kept = rows.iter().filter(|r| !is_target(r)).cloned().collect();
                    (name.clone(), kept)
                })
                .collect();
            if let Some(changed) = difference(&others, &after) {
                return Err(TestCaseError::fail(format!(
                    "another community's row changed: {changed}"
                )));
            }
            let left = owner
                .count_community_rows(target.id)
                .await
                .map_err(|e| TestCaseError::fail(format!("count: {e}")))?;
            prop_assert!(left.iter().all(|c| c.rows == 0), "{:?}", left);
            if let Ok(mut tally) = tally.lock() {
                tally.completed += 1;
                for extra in &spec.extras {
                    *tally.completed_with.entry(shape(extra)).or_default() += 1;
                }
            }
        }
    }
    exec(owner, CLEANUP).await?;
    Ok(())
}

#[test]
fn deleting_one_community_of_any_generated_catalogue_blocks_early_or_leaves_only_others() {
    let started = Instant::now();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let db = runtime.block_on(private_db_as_worker("prop"));
    for sql in [
        "CREATE SCHEMA prop_ext".to_owned(),
        format!("GRANT USAGE ON SCHEMA prop_ext TO {WORKER_ROLE}"),
    ] {
        runtime
            .block_on(exec(&db.owner, &sql))
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let mut runner = TestRunner::new(Config {
        cases: 40,
        max_shrink_iters: 64,
        failure_persistence: None,
        ..Config::default()
    });
    let case = std::sync::atomic::AtomicUsize::new(0);
    let tally = Mutex::new(Tally::default());
    let result = runner.run(&any_catalog(), |spec| {
        let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        runtime.block_on(run_case(&db, n, &spec, &tally))
    });
    runtime.block_on(db.drop_database());
    eprintln!(
        "catalogue property: {} case(s) in {:.1?}: {:?}",
        case.load(std::sync::atomic::Ordering::Relaxed),
        started.elapsed(),
        tally.lock().map(|t| format!("{t:?}")).unwrap_or_default()
    );
    if let Err(error) = result {
        panic!("{error}");
    }
}
