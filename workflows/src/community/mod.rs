//! Whole-community deletion: the activity contracts, the phase model and the workflow.

pub mod contracts;
pub mod decode;
pub mod input;
pub mod options;
pub mod phase;
pub mod rules;
pub mod status;
pub mod workflow;

pub use contracts::*;
pub use input::{CarriedState, CommunityDeletionInput, Tuning, workflow_id};
pub use phase::Phase;
pub use status::{BlockedInfo, DeletionStatus, Progress};
pub use workflow::{CANCEL_ACTOR, CommunityDeletion};
