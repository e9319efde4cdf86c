//! Statements the worker role ran in the deletion's database, from `pg_stat_statements` (the
//! local stack preloads it and creates its view in the `postgres` database only, so the tenant
//! database's catalogue holds nothing of it). With sqlx every top-level statement is one round
//! trip (BEGIN and COMMIT included), so a difference of two readings is the round trips made
//! between them.

use anyhow::{Context, Result};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::stack::env;

/// Reads the worker role's statement count.
#[derive(Debug, Clone)]
pub struct StatementCounter {
    pool: PgPool,
    role: String,
    database: String,
}

impl StatementCounter {
    /// Connects to the `postgres` database as the schema owner; the counted role and database
    /// are the worker's (DATABASE_URL). `None` when the server has no `pg_stat_statements`.
    pub async fn connect() -> Result<Option<StatementCounter>> {
        let worker: PgConnectOptions = env("DATABASE_URL")?
            .parse()
            .context("DATABASE_URL is not a PostgreSQL URL")?;
        let owner: PgConnectOptions = env("BUZZ_OWNER_DATABASE_URL")?
            .parse()
            .context("BUZZ_OWNER_DATABASE_URL is not a PostgreSQL URL")?;
        let role = worker.get_username().to_owned();
        let database = worker.get_database().unwrap_or("buzz").to_owned();
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect_with(owner.database("postgres"))
            .await
            .context("connecting to the postgres database as the owner")?;
        let loaded: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements')",
        )
        .fetch_one(&pool)
        .await?;
        Ok(loaded.then_some(StatementCounter {
            pool,
            role,
            database,
        }))
    }

    /// Top-level statements the worker role has run in the database so far.
    pub async fn total(&self) -> Result<u64> {
        let calls: i64 = sqlx::query_scalar(
            "SELECT coalesce(sum(s.calls), 0)::bigint FROM pg_stat_statements s \
             JOIN pg_roles r ON r.oid = s.userid JOIN pg_database d ON d.oid = s.dbid \
             WHERE r.rolname = $1 AND d.datname = $2",
        )
        .bind(&self.role)
        .bind(&self.database)
        .fetch_one(&self.pool)
        .await
        .context("reading pg_stat_statements")?;
        Ok(u64::try_from(calls).unwrap_or(0))
    }
}
