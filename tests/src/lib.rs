//! End-to-end test crate; the tests live under tests/.
