//! Which build a worker is, as Temporal's Worker Deployments see it: a deployment name and a
//! build id (`BUZZ_WORKER_DEPLOYMENT`, `BUZZ_WORKER_BUILD_ID`), and whether the worker opts in
//! to Worker Versioning (`BUZZ_WORKER_VERSIONING`). See `docs/upgrades.md`.
//!
//! Without versioning (the default) the name and build id only identify the worker: the server
//! records them on the workflow tasks it completes, and any worker on the task queue may take any
//! task, so every build must replay every history still running. With versioning, the server
//! routes a workflow's tasks to the build it is pinned to (or to the current one for
//! auto-upgrade), which needs the deployment's current version set with the Temporal CLI.

use temporalio_common::worker::{
    VersioningBehavior, WorkerDeploymentOptions, WorkerDeploymentVersion, build_id_from_current_exe,
};

use crate::config::ConfigError;

/// Whether and how the worker takes part in Worker Versioning.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Versioning {
    /// Unversioned: any worker of the task queue takes any task (the default).
    #[default]
    Off,
    /// A workflow stays on the build that started it until it closes.
    Pinned,
    /// A workflow moves to the deployment's current build at its next workflow task.
    AutoUpgrade,
}

/// The worker's deployment identity and versioning choice.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeploymentConfig {
    /// `BUZZ_WORKER_DEPLOYMENT`: the deployment name (e.g. `buzz-deletion`), if any.
    pub name: Option<String>,
    /// `BUZZ_WORKER_BUILD_ID`: the build (e.g. the image tag); unset means the SDK's default, a
    /// hash of the worker executable.
    pub build_id: Option<String>,
    /// `BUZZ_WORKER_VERSIONING`: `off` (default), `pinned` or `auto-upgrade`.
    pub versioning: Versioning,
}

impl DeploymentConfig {
    /// Reads the three variables through `lookup`; versioning needs both a name and a build id.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let value = |name: &str| {
            lookup(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let versioning = match value("BUZZ_WORKER_VERSIONING").as_deref() {
            None | Some("off") => Versioning::Off,
            Some("pinned") => Versioning::Pinned,
            Some("auto-upgrade") => Versioning::AutoUpgrade,
            Some(other) => {
                return Err(ConfigError::Invalid {
                    name: "BUZZ_WORKER_VERSIONING",
                    value: other.to_owned(),
                    reason: "use off, pinned or auto-upgrade".to_owned(),
                });
            }
        };
        let config = Self {
            name: value("BUZZ_WORKER_DEPLOYMENT"),
            build_id: value("BUZZ_WORKER_BUILD_ID"),
            versioning,
        };
        if config.versioning != Versioning::Off {
            for (name, set) in [
                ("BUZZ_WORKER_DEPLOYMENT", config.name.is_some()),
                ("BUZZ_WORKER_BUILD_ID", config.build_id.is_some()),
            ] {
                if !set {
                    return Err(ConfigError::Missing {
                        name,
                        hint: "Worker Versioning (BUZZ_WORKER_VERSIONING) needs a deployment name \
                               and a build id",
                    });
                }
            }
        }
        Ok(config)
    }

    /// The SDK's deployment options, or `None` to keep the SDK's default (no deployment name,
    /// the executable's hash as build id).
    pub fn options(&self) -> Option<WorkerDeploymentOptions> {
        if self.name.is_none() && self.build_id.is_none() {
            return None;
        }
        let version = WorkerDeploymentVersion::builder()
            .deployment_name(self.name.clone().unwrap_or_default())
            .build_id(
                self.build_id
                    .clone()
                    .unwrap_or_else(|| build_id_from_current_exe().to_owned()),
            )
            .build();
        let behavior = match self.versioning {
            Versioning::Off => None,
            Versioning::Pinned => Some(VersioningBehavior::Pinned),
            Versioning::AutoUpgrade => Some(VersioningBehavior::AutoUpgrade),
        };
        Some(
            WorkerDeploymentOptions::new(version)
                .use_worker_versioning(self.versioning != Versioning::Off)
                .maybe_default_versioning_behavior(behavior)
                .build(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::lookup_in;

    fn read(pairs: &[(&str, &str)]) -> Result<DeploymentConfig, ConfigError> {
        DeploymentConfig::from_lookup(lookup_in(pairs))
    }

    #[test]
    fn nothing_set_keeps_the_sdk_default() {
        let config = read(&[]).expect("no variable is required");
        assert_eq!(config, DeploymentConfig::default());
        assert_eq!(config.options(), None);
    }

    #[test]
    fn name_and_build_id_identify_the_worker_without_opting_in_to_versioning() {
        let config = read(&[
            ("BUZZ_WORKER_DEPLOYMENT", "buzz-deletion"),
            ("BUZZ_WORKER_BUILD_ID", " 1.4.2 "),
        ])
        .expect("valid");
        let options = config.options().expect("deployment options");
        assert_eq!(options.version.deployment_name, "buzz-deletion");
        assert_eq!(options.version.build_id, "1.4.2");
        assert!(!options.use_worker_versioning);
        assert_eq!(options.default_versioning_behavior, None);
    }

    #[test]
    fn a_name_alone_takes_the_executables_hash_as_build_id() {
        let options = read(&[("BUZZ_WORKER_DEPLOYMENT", "buzz-deletion")])
            .expect("valid")
            .options()
            .expect("deployment options");
        assert_eq!(options.version.build_id, build_id_from_current_exe());
    }

    #[test]
    fn versioning_needs_name_and_build_id_and_sets_the_default_behaviour() {
        let missing = read(&[
            ("BUZZ_WORKER_VERSIONING", "pinned"),
            ("BUZZ_WORKER_DEPLOYMENT", "buzz-deletion"),
        ])
        .expect_err("no build id");
        assert!(
            missing.to_string().starts_with("BUZZ_WORKER_BUILD_ID"),
            "{missing}"
        );
        let options = read(&[
            ("BUZZ_WORKER_VERSIONING", "auto-upgrade"),
            ("BUZZ_WORKER_DEPLOYMENT", "buzz-deletion"),
            ("BUZZ_WORKER_BUILD_ID", "1.4.2"),
        ])
        .expect("valid")
        .options()
        .expect("deployment options");
        assert!(options.use_worker_versioning);
        assert_eq!(
            options.default_versioning_behavior,
            Some(VersioningBehavior::AutoUpgrade)
        );
        let wrong = read(&[("BUZZ_WORKER_VERSIONING", "yes")]).expect_err("unknown mode");
        assert!(wrong.to_string().contains("\"yes\""), "{wrong}");
    }
}
