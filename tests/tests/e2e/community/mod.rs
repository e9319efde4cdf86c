//! End-to-end tests of whole-community deletion on the real local stack (Temporal dev server,
//! PostgreSQL, Redis, Ceph RGW), each test telling one operator story through the real
//! `buzz-deletion` CLI and real `buzz-deletion-worker` processes.
//!
//! Modules:
//! The harness (stack, worker processes, the CLI, seeding, snapshots) is the `testkit` crate.
//! - `happy_path`: a target and two neighbours; the target is gone, the neighbours untouched.
//! - `certificates`: a finished deletion's certificate verifies offline and no field of it can
//!   change unnoticed; a rewritten audit row or a receipt removed from the log is caught.
//! - `crash`: the worker is SIGKILLed mid-deletion; a new worker finishes without re-stamping.
//! - `freeze_resume`: a freeze blocked mid-listing continues after the chunks it stored (kept as
//!   written, audited as `freeze_resumed`) instead of listing from the start.
//! - `unknown_key`: an unknown key shape blocks; remediation + unblock completes.
//! - `cascading_key`: a cascading foreign key into tenant data blocks; drop + unblock completes.
//! - `closed_world`: every shape the deletion does not understand blocks before the irreversible
//!   marker naming it; declared or dropped, the deletion completes and nothing of the target is
//!   left anywhere in the database.
//! - `scope_shrank`: a relation moved to another schema, or a partition detached, while objects
//!   are deleted blocks the next destructive step naming it, and no receipt is issued.
//! - `audit_signatures`: a receipt, its log leaf and checkpoints rewritten consistently without
//!   the signing key fail `certificate audit` on their signatures.
//! - `permissions`: a worker without delete (or abort) permission blocks at preflight, before the
//!   irreversible marker, naming the permission; abort serves the community again.
//! - `late_versions`: a stalled writer's late put is waited for and frozen; a version planted
//!   after the freeze blocks verification, and unblock deletes it as a late manifest chunk.
//! - `evidence`: a tampered request row blocks naming the mismatch; abort decided by the marker.
//! - `refusals`: approval validation, abort, and every refused operator action.
//! - `serving_load`: the fence holds under live serving traffic, slow writes and dead leases.
//! - `uploads`: unfinished multipart uploads are inventoried, aborted and verified gone (a
//!   neighbour's stay); a per-key AccessDenied blocks naming the key until lifted.
//! - `malformed_signals`: malformed Web UI signals at every point are refused on record and
//!   never fail a workflow task (community and user workflows).
//! - `operator_identity`: signed actions; the two-person rule on key fingerprints; every bad
//!   signature refused with nothing changed (CLI and Web UI signal); an ssh-agent key signs; the
//!   stored signatures verify with ssh-keygen, and fail when a byte changes.

mod audit_signatures;
mod cascading_key;
mod certificates;
mod closed_world;
mod crash;
mod evidence;
mod freeze_resume;
mod happy_path;
mod late_versions;
mod malformed_signals;
mod operator_identity;
mod permissions;
mod refusals;
mod scope_shrank;
mod serving_load;
mod unknown_key;
mod uploads;
