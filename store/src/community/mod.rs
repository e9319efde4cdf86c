//! The community deletion's proof in Postgres: the request row and its execution generations,
//! the frozen inventory and its approval, the fence and the serving-write leases, the destructive
//! manifest (with its late chunks and aborted uploads), the row purge, the stage checkpoints and
//! the append-only audit trail. Every module adds methods to [`Store`](crate::Store).

pub(super) mod advance;
pub(super) mod approvals;
pub(super) mod audit;
pub(super) mod evidence;
pub(super) mod fence;
pub(super) mod freeze_resume;
pub(super) mod inventory;
pub(super) mod irreversible;
pub(super) mod late;
pub(super) mod leases;
pub(super) mod manifest;
pub(super) mod purge;
pub(super) mod requests;
pub(super) mod scope_verification;
pub(super) mod signed;
pub(super) mod stage;
pub(super) mod token;
pub(super) mod uploads;
