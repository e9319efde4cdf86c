//! User deletion (reference 003 on Temporal): the `UserDeletion` workflow, its activity
//! contracts, the frozen demo inventory and the pure stage policy.
//!
//! A `demo:` target runs the orchestration on dummy handlers that change no tenant data; a
//! `user:<pubkey>` target erases one real user's footprint (see `docs/user-deletion.md`).

pub mod approved;
pub mod contracts;
pub mod early_start;
pub mod footprint;
pub mod inventory;
pub mod ledger;
pub mod messages;
pub mod policy;
pub mod resume;
pub mod signals;
pub mod stage;
pub mod stop;
pub mod target;
pub mod workflow;

pub use approved::{ApprovedInventory, StoredInventoryError};
pub use contracts::*;
pub use inventory::{UserInventory, validate_demo_target};
pub use messages::*;
pub use resume::{ResumeCause, ResumedRequest, StartMode, UserTuning};
pub use stage::{StageKind, StageStatus};
pub use stop::{HandlerAtStop, StopAnswer, StopRequest};
pub use target::{TargetError, UserTarget, parse_target, real_user_pubkey};
pub use workflow::UserDeletion;
