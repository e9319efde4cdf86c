//! A scan of every row of every table and materialized view in a database, for the proof that
//! nothing of a target is left anywhere (not only in the tables the deletion knows) and that
//! everything of everyone else is byte-identical. Run as the schema owner, with row-level
//! security off, over every schema but the system ones and the deletion's own evidence.

use std::collections::BTreeMap;

use activities::store::Store;
use uuid::Uuid;

/// Every row (`to_jsonb` text, sorted) per `schema.relation`.
pub type DatabaseRows = BTreeMap<String, Vec<String>>;

/// Reads every row of every ordinary table (each heap `ONLY`, so a row is read once) and
/// materialized view outside `pg_catalog`, `information_schema`, `pg_toast` and `deletion`.
pub async fn every_row(store: &Store) -> DatabaseRows {
    let relations: Vec<String> = sqlx::query_scalar(
        "SELECT format('%I.%I', n.nspname, c.relname) FROM pg_catalog.pg_class c \
         JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
         WHERE c.relkind IN ('r', 'm') \
           AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast', 'deletion') \
         ORDER BY 1",
    )
    .fetch_all(store.pool())
    .await
    .unwrap_or_else(|e| panic!("list relations: {e}"));
    let mut rows = DatabaseRows::new();
    for relation in relations {
        let found = relation_rows(store, &relation).await;
        rows.insert(relation, found);
    }
    rows
}

/// Every row of `relation` (its own heap `ONLY`: no child's), as `to_jsonb` text, sorted.
pub async fn relation_rows(store: &Store, relation: &str) -> Vec<String> {
    let sql = format!("SELECT to_jsonb(t)::text FROM ONLY {relation} t ORDER BY 1");
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .fetch_all(store.pool())
        .await
        .unwrap_or_else(|e| panic!("read {relation}: {e}"))
}

/// Who a row belongs to, told from its text: the target's when it names the target community,
/// or names one of the target's own ids (`target_ids`: event ids, row ids) and no other
/// community among `communities`.
pub struct Ownership<'a> {
    /// The target community.
    pub target: Uuid,
    /// Ids of the target's own rows (events, channels, …) that rows elsewhere may name.
    pub target_ids: &'a [String],
    /// Every other community of the database.
    pub others: &'a [Uuid],
}

impl Ownership<'_> {
    /// Whether `row` is the target's.
    pub fn is_targets(&self, row: &str) -> bool {
        if row.contains(&self.target.to_string()) {
            return true;
        }
        let names_other = self.others.iter().any(|o| row.contains(&o.to_string()));
        !names_other && self.target_ids.iter().any(|id| row.contains(id.as_str()))
    }

    /// The target's rows, per relation (relations without any left out).
    pub fn targets_rows(&self, rows: &DatabaseRows) -> DatabaseRows {
        self.filter(rows, true)
    }

    /// Everyone else's rows, per relation (every relation, empty ones included).
    pub fn others_rows(&self, rows: &DatabaseRows) -> DatabaseRows {
        self.filter(rows, false)
    }

    fn filter(&self, rows: &DatabaseRows, targets: bool) -> DatabaseRows {
        rows.iter()
            .map(|(relation, rows)| {
                let kept: Vec<String> = rows
                    .iter()
                    .filter(|r| self.is_targets(r) == targets)
                    .cloned()
                    .collect();
                (relation.clone(), kept)
            })
            .filter(|(_, kept)| !targets || !kept.is_empty())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_naming_another_community_is_theirs_even_when_it_names_a_target_id() {
        let target = Uuid::from_u128(1);
        let other = Uuid::from_u128(2);
        let ids = vec!["ev-target".to_owned()];
        let others = [other];
        let own = Ownership {
            target,
            target_ids: &ids,
            others: &others,
        };
        assert!(own.is_targets(&format!("{{\"community_id\": \"{target}\"}}")));
        assert!(own.is_targets("{\"event_id\": \"ev-target\", \"tag\": \"x\"}"));
        assert!(!own.is_targets(&format!(
            "{{\"community_id\": \"{other}\", \"event_id\": \"ev-target\"}}"
        )));
        assert!(!own.is_targets("{\"event_id\": \"ev-other\"}"));
    }
}
