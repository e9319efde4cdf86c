//! The connection configuration every buzz-deletion binary (worker, CLI, bench, chaos, the test
//! kit) reads once, at its edge, before anything connects — and the one-line refusals that
//! explain a connection its settings did not allow.
//!
//! - [`env`]: every variable of the stack read once by name, each required one also as
//!   `NAME_FILE` ([`env::StackEnv`], [`env::StackEnvError`], the defaults);
//! - [`temporal`]: how Temporal is reached — plaintext, TLS with the system roots or a CA file,
//!   mutual TLS, an API key, a server name — the files checked before connecting, the
//!   connection, and the explanation of a refusal;
//! - [`tls`]: the TLS cause of any client's error, found by type, so a wrong CA reads the same
//!   for Temporal, PostgreSQL, Redis and S3;
//! - [`refusal`]: the startup refusals of PostgreSQL and Redis (a wrong password, an untrusted
//!   server certificate) on one line naming the variable to fix.
//!
//! The settings that build the adapters' own types (`S3Config`, `RedisConfig`, the task queue's
//! default from `workflows`) are read through the same [`env::StackEnv`] by
//! `activities::stack_settings`, next to those types. This crate depends on neither `activities`
//! nor `workflows`; `workflows` (no I/O) and `serving` (what a relay links) never depend on it.
//!
//! # Temporal's own environment configuration
//!
//! `temporalio-common`'s `envconfig` (with `temporalio-client`'s `ClientOptions::load_from_config`)
//! reads the same variable names: `TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`,
//! `TEMPORAL_TLS`, `TEMPORAL_TLS_{CLIENT_CERT,CLIENT_KEY,SERVER_CA_CERT}_{PATH,DATA}`,
//! `TEMPORAL_TLS_SERVER_NAME`, `TEMPORAL_TLS_DISABLE_HOST_VERIFICATION`, `TEMPORAL_CODEC_*`,
//! `TEMPORAL_GRPC_META_*`, and profiles of a TOML file (`TEMPORAL_CONFIG_FILE`,
//! `TEMPORAL_PROFILE`, else `~/.config/temporalio/temporal.toml`). [`temporal`] keeps the same
//! names, so an operator's settings work unchanged, but does not call it, because its behaviour
//! and its messages differ from what the worker and the CLI promise (and the end-to-end tests
//! check):
//!
//! - no `TEMPORAL_API_KEY_FILE` (nor any `NAME_FILE`): the key would have to sit in the process
//!   environment;
//! - values are not trimmed and a blank one counts as set; `TEMPORAL_ADDRESS` falls back to
//!   `localhost:7233` instead of being refused as missing;
//! - `TEMPORAL_TLS=false` beside a CA file, a client pair or an API key silently turns TLS off,
//!   where ours refuses the contradiction; a `TEMPORAL_TLS` value other than `true`/`false`/
//!   `1`/`0` (our `yes`, `on`, a typo) is ignored and TLS turned on, where ours refuses it; half
//!   a client pair is refused only when the options are built, in its own words;
//! - the files are read as bytes with no check: no PEM kind, no validity dates (ours names an
//!   expired or not-yet-valid certificate and its date before connecting);
//! - a TOML profile from the home directory would change how the production worker connects
//!   without any variable saying so;
//! - its `ConfigError` texts ("Invalid configuration: …") name neither the variable nor the fix,
//!   where every refusal here is one line naming the variable to change.
//!
//! Nothing of it is used: what it covers that ours does not (`…_DATA` variables, codec, gRPC
//! metadata, host verification off, profiles) is not configuration this project accepts.
#![deny(unsafe_code)]

pub mod env;
pub mod refusal;
pub mod temporal;
pub mod tls;
