//! One module per command family.

pub mod community;
pub mod demo;
pub mod migrate;
pub mod stack_check;
