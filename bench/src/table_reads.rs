//! Rows the server read, per table, from PostgreSQL's cumulative statistics
//! (`pg_stat_user_tables`: tuples returned by sequential scans plus tuples fetched through
//! indexes). A backend reports its counts when it goes idle (at most once a second) and when it
//! exits, so snapshots are taken after the measured processes' connections have closed.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use sqlx::{Connection, PgConnection};

/// Rows read from one table, cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableReads {
    /// Sequential scans started.
    pub seq_scans: i64,
    /// Tuples those scans returned.
    pub seq_rows: i64,
    /// Tuples fetched through an index.
    pub index_rows: i64,
}

impl TableReads {
    /// Every row read, however.
    pub fn rows(&self) -> i64 {
        self.seq_rows + self.index_rows
    }

    fn minus(&self, before: &TableReads) -> TableReads {
        TableReads {
            seq_scans: self.seq_scans - before.seq_scans,
            seq_rows: self.seq_rows - before.seq_rows,
            index_rows: self.index_rows - before.index_rows,
        }
    }
}

/// Cumulative reads of every user table of one database, by `schema.table`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadSnapshot(pub BTreeMap<String, TableReads>);

impl ReadSnapshot {
    /// Reads the counters of the database at `url` on a connection of its own, after asking the
    /// server to drop any cached snapshot of them.
    pub async fn take(url: &str) -> Result<ReadSnapshot> {
        let mut conn = PgConnection::connect(url)
            .await
            .context("connect to read table statistics")?;
        sqlx::query("SELECT pg_stat_clear_snapshot()")
            .execute(&mut conn)
            .await?;
        let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as(
            "SELECT schemaname || '.' || relname, COALESCE(seq_scan, 0), \
                    COALESCE(seq_tup_read, 0), COALESCE(idx_tup_fetch, 0) \
             FROM pg_stat_user_tables",
        )
        .fetch_all(&mut conn)
        .await?;
        conn.close().await?;
        Ok(ReadSnapshot(
            rows.into_iter()
                .map(|(table, seq_scans, seq_rows, index_rows)| {
                    (
                        table,
                        TableReads {
                            seq_scans,
                            seq_rows,
                            index_rows,
                        },
                    )
                })
                .collect(),
        ))
    }

    /// What was read between `before` and this snapshot, tables with no reads left out.
    pub fn since(&self, before: &ReadSnapshot) -> ReadSnapshot {
        ReadSnapshot(
            self.0
                .iter()
                .map(|(table, now)| {
                    let then = before.0.get(table).copied().unwrap_or_default();
                    (table.clone(), now.minus(&then))
                })
                .filter(|(_, reads)| *reads != TableReads::default())
                .collect(),
        )
    }

    /// Rows read from `tables` together.
    pub fn rows_of(&self, tables: &[&str]) -> i64 {
        tables
            .iter()
            .filter_map(|table| self.0.get(*table))
            .map(TableReads::rows)
            .sum()
    }

    /// Rows read from every table.
    pub fn total_rows(&self) -> i64 {
        self.0.values().map(TableReads::rows).sum()
    }

    /// The table read most, with its rows.
    pub fn most_read(&self) -> Option<(&str, i64)> {
        self.0
            .iter()
            .map(|(table, reads)| (table.as_str(), reads.rows()))
            .max_by_key(|(_, rows)| *rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads(seq_rows: i64, index_rows: i64) -> TableReads {
        TableReads {
            seq_scans: i64::from(seq_rows > 0),
            seq_rows,
            index_rows,
        }
    }

    #[test]
    fn the_difference_keeps_only_tables_read_in_between_and_sums_both_kinds_of_read() {
        let before = ReadSnapshot(BTreeMap::from([
            ("deletion.requests".to_owned(), reads(10, 5)),
            ("deletion.transparency_log".to_owned(), reads(0, 3)),
        ]));
        let after = ReadSnapshot(BTreeMap::from([
            ("deletion.requests".to_owned(), reads(10, 9)),
            ("deletion.transparency_log".to_owned(), reads(1_000, 3)),
            ("deletion.receipts".to_owned(), reads(0, 2)),
        ]));
        let delta = after.since(&before);
        assert_eq!(delta.0.len(), 3);
        assert_eq!(delta.rows_of(&["deletion.requests"]), 4);
        assert_eq!(delta.rows_of(&["deletion.transparency_log"]), 1_000);
        assert_eq!(delta.total_rows(), 1_006);
        assert_eq!(
            delta.most_read(),
            Some(("deletion.transparency_log", 1_000))
        );
        let unchanged = before.since(&before);
        assert!(unchanged.0.is_empty());
    }
}
