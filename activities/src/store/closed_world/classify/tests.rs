//! The closed-world rules, one catalogue shape at a time, without a server.

use super::*;
use crate::store::closed_world::facts::{KeyFact, RelationFact};
use crate::store::tenant_tree::{RelationKind, TenantRelation};

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
    facts
        .relations
        .push(relation(3, "buzz", "event_tags", "r", false));
    facts.keys.push(key("event_tags_event_id_fkey", 3, 2, "a"));
    let refused = classify(&facts, &tenant).err().unwrap_or_default();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].object, "foreign key event_tags_event_id_fkey on buzz.event_tags");
    assert!(refused[0].remedy.contains("tenant data through this key"), "{refused:?}");

    facts.keys[0].comment = Some("buzz-deletion: tenant data through this key".into());
    let world = classify(&facts, &tenant).unwrap_or_default();
    assert_eq!(world.key_children.len(), 1);
    assert_eq!(world.key_children[0].relation.qualified(), "buzz.event_tags");
    assert_eq!(world.key_children[0].parent_oid, 2);
}
