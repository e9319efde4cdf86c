//! Every end-to-end test in one test binary (one link instead of three): the whole-community
//! deletion stories, the user deletion (reference 003) and the `#[ignore]`d recordings of the
//! replayed histories. Filter by module path, e.g. `cargo test -p e2e --test e2e
//! community::happy_path` or `-- user_deletion::`; the harness they share is the `testkit`
//! crate (`testkit/src/`).

mod community;
mod record_histories;
mod user_deletion;
mod user_erasure;
