//! Deletion certificates (skeleton; filled in by issue 15).
#![deny(unsafe_code)]
