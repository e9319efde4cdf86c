//! The predecessor's environment variables (reference 000's `buzz-admin deletions` engine and
//! reference 003's `user-deletions`) that this release does not read, each with what replaces
//! it. The worker warns at start-up, one line per variable it finds set, so that a deployment
//! carried over from the predecessor does not silently lose a setting. The full map, including
//! the settings kept under their old names, is `docs/upgrading-from-the-predecessor.md`.
//!
//! Values are never printed: `BUZZ_TEST_DATABASE_URL` holds a password.

/// The upgrade guide, named in every warning.
pub const GUIDE: &str = "docs/upgrading-from-the-predecessor.md";

/// A predecessor variable this release does not read, and what to do instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replaced {
    /// The predecessor's name.
    pub old: &'static str,
    /// What replaces it: the new variable (and where it is read), or why nothing does.
    pub instead: &'static str,
}

/// Every predecessor variable the worker warns about, in the guide's order.
pub const REPLACED: [Replaced; 15] = [
    Replaced {
        old: "BUZZ_DB_POOL_SIZE",
        instead: "set BUZZ_PG_POOL_SIZE (default: 2 x BUZZ_ACTIVITY_SLOTS + 2, that is 34; at \
                  least BUZZ_ACTIVITY_SLOTS, at most 1000)",
    },
    Replaced {
        old: "BUZZ_DB_LOCK_TIMEOUT_MS",
        instead: "set BUZZ_PG_LOCK_TIMEOUT_MS (unset: the server's lock_timeout; the fence \
                  sets its own 5 s)",
    },
    Replaced {
        old: "BUZZ_DB_IDLE_TXN_TIMEOUT_MS",
        instead: "set BUZZ_PG_IDLE_TXN_TIMEOUT_MS (default 60000; 0 is refused)",
    },
    Replaced {
        old: "BUZZ_DB_STATEMENT_TIMEOUT_MS",
        instead: "set BUZZ_PG_STATEMENT_TIMEOUT_MS (unset: the server's statement_timeout)",
    },
    Replaced {
        old: "BUZZ_DELETION_MANIFEST_CHUNK_KEYS",
        instead: "set BUZZ_MANIFEST_CHUNK_ENTRIES (versions per manifest chunk; default 1000, \
                  was 10000; at most 10000, was 100000)",
    },
    Replaced {
        old: "BUZZ_DELETION_SWEEP_MAX_OBJECTS",
        instead: "set BUZZ_SWEEP_MAX_OBJECTS where `buzz-deletion sweep run|schedule` runs, or \
                  pass --max-objects (default 10000000); the worker does not read it",
    },
    Replaced {
        old: "BUZZ_S3_ADDRESSING_STYLE",
        instead: "set BUZZ_S3_ADDRESSING (the same values: path, the default, or virtual)",
    },
    Replaced {
        old: "BUZZ_REDIS_POOL_SIZE",
        instead: "nothing replaces it: the worker multiplexes its Redis commands over one \
                  connection (one per node on a cluster) instead of pooling connections",
    },
    Replaced {
        old: "BUZZ_TEST_DATABASE_URL",
        instead: "tests read the local stack's DATABASE_URL (`source .state/env`)",
    },
    Replaced {
        old: "BUZZ_TEST_SCHEMA_MODE",
        instead: "tests always migrate (`buzz-deletion migrate`); there is no schema mode",
    },
    Replaced {
        old: "BUZZ_TEST_S3_ENDPOINT",
        instead: "tests read the local stack's BUZZ_S3_ENDPOINT (`source .state/env`)",
    },
    Replaced {
        old: "BUZZ_TEST_S3_BUCKET",
        instead: "tests read the local stack's BUZZ_S3_BUCKET (`source .state/env`)",
    },
    Replaced {
        old: "BUZZ_TEST_S3_REGION",
        instead: "tests read the local stack's BUZZ_S3_REGION (`source .state/env`)",
    },
    Replaced {
        old: "BUZZ_TEST_S3_ACCESS_KEY",
        instead: "tests read the local stack's BUZZ_S3_ACCESS_KEY (`source .state/env`)",
    },
    Replaced {
        old: "BUZZ_TEST_S3_SECRET_KEY",
        instead: "tests read the local stack's BUZZ_S3_SECRET_KEY (`source .state/env`)",
    },
];

/// One line per predecessor variable set (non-blank) in `lookup`, in [`REPLACED`]'s order.
pub fn warnings(lookup: impl Fn(&str) -> Option<String>) -> Vec<String> {
    REPLACED
        .iter()
        .filter(|r| lookup(r.old).is_some_and(|v| !v.trim().is_empty()))
        .map(|r| {
            format!(
                "{} is set but not read (a setting of the predecessor): {}; see {GUIDE}",
                r.old, r.instead
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::capacity::{
        ACTIVITY_SLOTS_ENV, DEFAULT_ACTIVITY_SLOTS, MAX_PG_POOL_SIZE, PG_IDLE_TXN_TIMEOUT_ENV,
        PG_LOCK_TIMEOUT_ENV, PG_POOL_SIZE_ENV, PG_STATEMENT_TIMEOUT_ENV, default_pool_size,
    };

    fn instead(old: &str) -> &'static str {
        REPLACED
            .iter()
            .find(|r| r.old == old)
            .map(|r| r.instead)
            .unwrap_or_else(|| panic!("{old} is not in the map"))
    }

    #[test]
    fn each_predecessor_variable_set_yields_one_line_naming_its_replacement() {
        let env: HashMap<&str, &str> = REPLACED.iter().map(|r| (r.old, "20")).collect();
        let lines = warnings(|name| env.get(name).map(|v| (*v).to_owned()));
        assert_eq!(lines.len(), REPLACED.len());
        for (line, replaced) in lines.iter().zip(REPLACED.iter()) {
            assert!(!line.contains('\n'), "one line: {line}");
            assert!(
                line.starts_with(&format!("{} is set but not read", replaced.old)),
                "{line}"
            );
            assert!(
                line.contains(replaced.instead) && line.contains(GUIDE),
                "{line}"
            );
        }
    }

    #[test]
    fn unset_or_blank_variables_and_the_kept_ones_yield_nothing() {
        let env: HashMap<&str, &str> = HashMap::from([
            ("BUZZ_DB_POOL_SIZE", "  "),
            ("DATABASE_URL", "postgres://x"),
            ("BUZZ_S3_ENDPOINT", "http://s3"),
            ("BUZZ_S3_ADDRESSING", "virtual"),
            ("RELAY_URL", "wss://relay.example"),
            ("HOSTNAME", "worker-0"),
            ("AWS_REGION", "eu-west-1"),
        ]);
        assert!(warnings(|name| env.get(name).map(|v| (*v).to_owned())).is_empty());
    }

    #[test]
    fn no_value_is_ever_printed() {
        let secret = "postgres://user:hunter2@db/buzz";
        let lines = warnings(|name| (name == "BUZZ_TEST_DATABASE_URL").then(|| secret.to_owned()));
        assert_eq!(lines.len(), 1);
        assert!(!lines[0].contains("hunter2"), "{}", lines[0]);
    }

    #[test]
    fn the_replacements_named_are_the_variables_the_worker_reads() {
        assert!(instead("BUZZ_DB_POOL_SIZE").contains(PG_POOL_SIZE_ENV));
        assert!(instead("BUZZ_DB_POOL_SIZE").contains(ACTIVITY_SLOTS_ENV));
        assert!(
            instead("BUZZ_DB_POOL_SIZE")
                .contains(&default_pool_size(DEFAULT_ACTIVITY_SLOTS).to_string())
        );
        assert!(instead("BUZZ_DB_POOL_SIZE").contains(&MAX_PG_POOL_SIZE.to_string()));
        assert!(instead("BUZZ_DB_LOCK_TIMEOUT_MS").contains(PG_LOCK_TIMEOUT_ENV));
        assert!(instead("BUZZ_DB_IDLE_TXN_TIMEOUT_MS").contains(PG_IDLE_TXN_TIMEOUT_ENV));
        assert!(instead("BUZZ_DB_STATEMENT_TIMEOUT_MS").contains(PG_STATEMENT_TIMEOUT_ENV));
        assert!(instead("BUZZ_S3_ADDRESSING_STYLE").contains(stack_config::env::S3_ADDRESSING));
    }

    /// The guide's settings map names every variable warned about and its replacement.
    #[test]
    fn the_upgrade_guide_maps_every_variable_warned_about() {
        let guide = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join(GUIDE),
        )
        .unwrap_or_else(|e| panic!("{GUIDE}: {e}"));
        for replaced in REPLACED {
            assert!(
                guide.contains(&format!("`{}`", replaced.old)),
                "{GUIDE} does not map {}",
                replaced.old
            );
        }
        for new in [
            PG_POOL_SIZE_ENV,
            ACTIVITY_SLOTS_ENV,
            PG_LOCK_TIMEOUT_ENV,
            PG_STATEMENT_TIMEOUT_ENV,
            PG_IDLE_TXN_TIMEOUT_ENV,
            "BUZZ_MANIFEST_CHUNK_ENTRIES",
            "BUZZ_SWEEP_MAX_OBJECTS",
            "BUZZ_S3_ADDRESSING",
        ] {
            assert!(
                guide.contains(&format!("`{new}`")),
                "{GUIDE} does not name {new}"
            );
        }
    }
}
