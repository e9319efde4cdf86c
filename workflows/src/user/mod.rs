//! User deletion (reference 003 on Temporal): the `UserDeletion` workflow, its activity
//! contracts, the frozen demo inventory and the pure stage policy.
//!
//! Handlers are dummies that change no tenant data and only `demo:` targets are accepted; the
//! orchestration, the durable stage history and every recovery path are real.

pub mod approved;
pub mod contracts;
pub mod early_start;
pub mod inventory;
pub mod ledger;
pub mod messages;
pub mod policy;
pub mod resume;
pub mod stage;
pub mod stop;
pub mod workflow;

pub use approved::{ApprovedInventory, StoredInventoryError};
pub use contracts::*;
pub use inventory::{UserInventory, validate_demo_target};
pub use messages::*;
pub use resume::{ResumeCause, ResumeRequest, ResumedRequest, StartMode, UserTuning};
pub use stage::{StageKind, StageStatus};
pub use stop::{HandlerAtStop, StopAnswer, StopRequest};
pub use workflow::UserDeletion;
