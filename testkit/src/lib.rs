//! The one test kit of buzz-deletion, shared by the end-to-end suite (`tests/tests/e2e/`), the
//! history recordings, the store and activity integration tests (`activities/tests/it/`), bench
//! and chaos: handles on the local stack built from its environment, the operator CLI as a
//! process, worker processes and in-process workers started by the worker's own startup code, the
//! operators' test keys, seeding, and the two assertions every deletion test makes (the target
//! gone, the neighbours byte-identical).
#![deny(unsafe_code)]

pub mod bucket_policy;
pub mod certificates;
pub mod cli;
pub mod db_scan;
pub mod env;
pub mod operators;
pub mod poll;
pub mod private_db;
pub mod process;
pub mod records;
pub mod redis_cluster;
pub mod refusal;
pub mod role_stores;
pub mod running_stack;
pub mod schema;
pub mod seed;
pub mod snapshot;
pub mod stack;
pub mod story;
pub mod temporal;
pub mod test_server;
pub mod user;
pub mod workers;

/// What a community test uses: `use testkit::prelude::*;`.
pub mod prelude {
    pub use crate::cli::{Cli, CliRun, audit_of, inventory_digest};
    pub use crate::env::{bin, repo_root};
    pub use crate::seed::{
        Tenant, plant_stray_key, remove_stray_key, seed, small_community, small_plan, unique_host,
    };
    pub use crate::snapshot::{
        Kept, Snapshot, assert_identical, assert_unchanged, object_versions, snapshot,
    };
    pub use crate::stack::{Stack, outage_lock, shared_stack, stack};
    pub use crate::story::{QueueWorker, with_policy_worker, with_target, with_worker};
    pub use crate::workers::{WorkerProcess, unique_queue};
}
