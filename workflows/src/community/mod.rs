//! Whole-community deletion: the activity contracts, the phase model and the workflow.

pub mod contracts;
pub mod phase;

pub use contracts::*;
pub use phase::Phase;
