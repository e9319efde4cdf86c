//! The handle a relay holds: a pool connected as the serving role.

use sqlx::PgPool;

use crate::error::ServingError;

/// PostgreSQL as the serving role, for lease calls. Cheap to clone: clones share one pool.
///
/// The serving role holds no privilege on the lease table itself; every call goes through a
/// SECURITY DEFINER function of the deletion schema, so a relay can only acquire, renew, verify
/// and release leases by its rules.
#[derive(Debug, Clone)]
pub struct ServingDb {
    pool: PgPool,
}

impl ServingDb {
    /// Wraps a pool the relay already has (connected as the serving role).
    pub fn new(pool: PgPool) -> ServingDb {
        ServingDb { pool }
    }

    /// Connects to `database_url` (the serving role's connection string) with sqlx's default
    /// pool settings.
    pub async fn connect(database_url: &str) -> Result<ServingDb, ServingError> {
        Ok(ServingDb::new(PgPool::connect(database_url).await?))
    }

    /// The underlying pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

impl From<PgPool> for ServingDb {
    fn from(pool: PgPool) -> Self {
        ServingDb::new(pool)
    }
}

impl From<&ServingDb> for ServingDb {
    fn from(db: &ServingDb) -> Self {
        db.clone()
    }
}
