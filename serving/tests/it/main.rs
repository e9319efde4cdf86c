//! Every integration test of the serving crate in one test binary, against the real PostgreSQL
//! of the local stack (`bash deploy/local/up && source .state/env`): a test that cannot reach it
//! fails, naming the server and how to start it.

mod calls;
mod guard;
mod support;
