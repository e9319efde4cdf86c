//! The store's side of the `serving` crate: the retry decision of its error ([`Classified`]) and
//! a serving handle on any [`Store`]'s pool.

use serving::{ServingDb, ServingError};

use crate::failure::{Classified, Severity};
use crate::{Store, sqlx_error_severity};

/// Refusals, lost leases, bad input and unexpected answers are permanent; a database error is
/// transient or permanent by its SQLSTATE or driver error kind, as the store's are.
impl Classified for ServingError {
    fn severity(&self) -> Severity {
        match self {
            ServingError::Database(error) => sqlx_error_severity(error),
            ServingError::Quiescing { .. }
            | ServingError::Fenced { .. }
            | ServingError::UserQuiescing { .. }
            | ServingError::UserFenced { .. }
            | ServingError::UnknownCommunity { .. }
            | ServingError::LeaseLost { .. }
            | ServingError::OperationTooLong { .. }
            | ServingError::InvalidInput { .. }
            | ServingError::Corrupt { .. } => Severity::Permanent,
        }
    }
}

/// The serving calls on a store's pool, as whatever role the store is connected as.
impl From<&Store> for ServingDb {
    fn from(store: &Store) -> Self {
        store.serving()
    }
}

impl Store {
    /// A serving handle on this store's pool (shared, not a new connection).
    pub fn serving(&self) -> ServingDb {
        ServingDb::new(self.pool().clone())
    }
}
