//! The schema: migrations embedded in the binary, applied by `buzz-deletion migrate`, and the
//! startup check that refuses to run against an older schema.

use std::sync::LazyLock;

use sqlx::migrate::Migrator;

use super::Store;
use super::error::{StoreError, StoreResult, sqlstate};

/// Where applied migrations are recorded, schema-qualified on purpose: the local role is named
/// `buzz` like the serving schema, so an unqualified name would resolve through `"$user"` into
/// schema `buzz` once it exists, and the migrator would lose track of what it applied.
pub const MIGRATIONS_TABLE: &str = "public._sqlx_migrations";

/// The migrations in `migrations/`, embedded at compile time, recorded in [`MIGRATIONS_TABLE`].
pub static MIGRATOR: LazyLock<Migrator> = LazyLock::new(|| {
    let mut migrator = sqlx::migrate!("../migrations");
    migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
    migrator
});

/// SQLSTATE of "relation does not exist": the migrations table is missing on a fresh database.
const UNDEFINED_TABLE: &str = "42P01";

impl Store {
    /// Applies every pending migration. Safe to call concurrently: sqlx serialises runs with a
    /// Postgres advisory lock.
    pub async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    /// Refuses ([`SchemaError::Outdated`]) a database whose applied migrations stop before
    /// the newest embedded one, and ([`SchemaError::Mismatch`]) one whose applied migration
    /// differs from the embedded text. Workers call this at startup.
    pub async fn check_schema_current(&self) -> StoreResult<()> {
        let expected = MIGRATOR.iter().map(|m| m.version).max().unwrap_or_default();
        let sql = format!(
            "SELECT version, checksum FROM {} WHERE success ORDER BY version",
            MIGRATOR.table_name
        );
        let applied: Vec<(i64, Vec<u8>)> = match sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await
        {
            Ok(rows) => rows,
            Err(error) if sqlstate(&error).as_deref() == Some(UNDEFINED_TABLE) => Vec::new(),
            Err(error) => return Err(error.into()),
        };
        for (version, checksum) in &applied {
            let embedded = MIGRATOR.iter().find(|m| m.version == *version);
            if embedded.is_some_and(|m| m.checksum.as_ref() != checksum.as_slice()) {
                return Err(StoreError::Schema(SchemaError::Mismatch {
                    version: *version,
                }));
            }
        }
        let newest_applied = applied.iter().map(|(version, _)| *version).max();
        if newest_applied.is_none_or(|version| version < expected) {
            return Err(StoreError::Schema(SchemaError::Outdated {
                applied: newest_applied,
                expected,
            }));
        }
        Ok(())
    }
}

/// Why a store call failed because the schema is not the one this binary embeds, or migrating it failed: one part of [`crate::StoreError`].
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// The database schema is older than the migrations this binary embeds.
    #[error(
        "database schema is at migration {applied:?} but this binary needs {expected}: run \
         `buzz-deletion migrate`"
    )]
    Outdated {
        /// Highest migration applied successfully (`None`: never migrated).
        applied: Option<i64>,
        /// Highest migration embedded in this binary.
        expected: i64,
    },
    /// An applied migration differs from the one embedded in this binary.
    #[error(
        "migration {version} applied to the database differs from the one embedded in this binary; \
         the schema was changed outside `buzz-deletion migrate`"
    )]
    Mismatch {
        /// The migration whose checksum differs.
        version: i64,
    },
    /// Running the migrations failed.
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

// Every one is permanent: retrying cannot change the answer.
crate::failure::permanent_failure!(SchemaError);
