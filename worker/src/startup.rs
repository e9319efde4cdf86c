//! How the worker starts: connect every dependency (failing with a message that names it),
//! refuse an outdated schema, register workflows and activities, poll until told to stop.

use std::time::Duration;

use activities::certificates::ReceiptKey;
use activities::community::{CommunityActivities, Settings};
use activities::redis::{Cache, CacheError};
use activities::s3::{ObjectStore, ObjectStoreError};
use activities::stack_check::StackCheckActivities;
use activities::store::Store;
use activities::sweep::SweepActivities;
use activities::user::UserActivities;
use activities::user::erasure::Eraser;
use stack_config::temporal::TemporalConnectError;
use temporalio_client::Client;
use temporalio_sdk::runtime::worker_tuner::{FixedSizeSlotSupplier, TunerHolder, WorkerTuner};
use temporalio_sdk::{Runtime, Worker, WorkerOptions};
use workflows::community::CommunityDeletion;
use workflows::stack_check::StackCheck;
use workflows::sweep::TaxonomySweep;
use workflows::user::UserDeletion;

use crate::config::{ConfigError, WorkerConfig};
use crate::deployment::DeploymentConfig;
use stack_config::refusal::{Refusal, postgres_refusal, redis_refusal};

/// Stack of each of the worker's runtime threads, where activities and workflows are polled.
/// Tokio's default (2 MiB) is too tight for an unoptimised build: the delete loop's futures nest
/// the SDK's activity wrapper, the heartbeat, the claim, the pump and a store transaction, and a
/// debug build keeps a copy of each on the poll's stack. Running out aborts the whole process
/// (every activity and workflow task of the worker with it), so the margin is generous; only the
/// pages a thread touches are ever resident.
pub const RUNTIME_THREAD_STACK_BYTES: usize = 16 * 1024 * 1024;

const LOCAL_HINT: &str = "run `bash deploy/local/up && source .state/env` for the local stack";

/// Why the worker could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// Configuration is missing or malformed.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Temporal refused or did not answer; the message names the variable to fix.
    #[error(transparent)]
    Temporal(#[from] TemporalConnectError),
    /// A dependency did not answer.
    #[error("{service} is not reachable at {address}: {detail}\nhint: {LOCAL_HINT}")]
    Unreachable {
        /// Which dependency.
        service: &'static str,
        /// Where.
        address: String,
        /// The underlying error.
        detail: String,
    },
    /// A dependency refused this worker (an untrusted or expired certificate, a wrong password):
    /// one line naming the variable to fix.
    #[error("{service} at {address} refused the connection: {reason}: {fix}")]
    Refused {
        /// Which dependency.
        service: &'static str,
        /// Where (password redacted).
        address: String,
        /// What was refused.
        reason: String,
        /// What to change.
        fix: String,
    },
    /// A dependency is not the kind of server the configuration says (a Redis Cluster node
    /// under the single-node setting): one line naming the variable to fix.
    #[error("{service} at {address} is not what the configuration says: {reason}: {fix}")]
    Unsuitable {
        /// Which dependency.
        service: &'static str,
        /// The server that answered (password redacted).
        address: String,
        /// What it is and why that cannot be used.
        reason: String,
        /// What to change.
        fix: String,
    },
    /// The database schema is older than this binary.
    #[error(
        "{0}\nhint: run `buzz-deletion migrate` against this database, then start the worker again"
    )]
    Schema(activities::store::StoreError),
    /// `DATABASE_URL` connects as a superuser or the schema owner (see
    /// `activities::store::PrivilegedRole`).
    #[error("{0}")]
    PrivilegedRole(String),
    /// The receipt signing key cannot be read.
    #[error(
        "receipt signing key: {0}\nhint: `buzz-deletion keys generate --dir DIR` writes a key pair; see docs/certificates.md"
    )]
    ReceiptKey(String),
    /// The Temporal worker could not be built.
    #[error("could not build the Temporal worker: {0}")]
    Worker(String),
}

impl StartupError {
    fn refused(service: &'static str, address: &str, refusal: Refusal) -> Self {
        StartupError::Refused {
            service,
            address: address.to_owned(),
            reason: refusal.reason,
            fix: refusal.fix,
        }
    }
}

/// The connected dependencies a worker runs against.
#[derive(Clone)]
pub struct Dependencies {
    /// Postgres store.
    pub store: Store,
    /// S3 bucket.
    pub objects: ObjectStore,
    /// Redis.
    pub cache: Cache,
    /// Temporal client.
    pub client: Client,
    /// Signs receipts and log checkpoints.
    pub receipt_key: ReceiptKey,
    /// The object-lock bucket receipts are copied to, when configured.
    pub receipt_archive: Option<ObjectStore>,
    /// Rows a user deletion deletes per transaction (`BUZZ_USER_ROW_BATCH`).
    pub user_row_batch: u32,
}

/// Connects to Temporal with a bounded wait, over TLS, mutual TLS or with an API key as
/// configured.
pub async fn connect_temporal(config: &WorkerConfig) -> Result<Client, StartupError> {
    Ok(stack_config::temporal::connect(
        &config.temporal.address,
        &config.temporal.namespace,
        &config.temporal.access,
        format!("buzz-deletion-worker@{}", std::process::id()),
        Duration::from_secs(15),
    )
    .await?)
}

/// Connects Postgres (checking the schema), S3 (checking the bucket is versioned), Redis and
/// Temporal. Each failure names the dependency and its address.
pub async fn connect(config: &WorkerConfig) -> Result<Dependencies, StartupError> {
    let postgres_address = activities::store::redact_password(&config.database_url);
    let store = Store::connect_with(&config.database_url, &config.capacity.postgres)
        .await
        .map_err(|e| match e {
            activities::store::StoreError::Connect { source, .. } => {
                match postgres_refusal(&source, &config.database_url) {
                    Some(refusal) => {
                        StartupError::refused("PostgreSQL", &postgres_address, refusal)
                    }
                    // The store's own message repeats the address and the local-stack hint.
                    None => StartupError::Unreachable {
                        service: "PostgreSQL",
                        address: postgres_address.clone(),
                        detail: source.to_string(),
                    },
                }
            }
            other => StartupError::Unreachable {
                service: "PostgreSQL",
                address: postgres_address.clone(),
                detail: other.to_string(),
            },
        })?;
    store
        .check_schema_current()
        .await
        .map_err(StartupError::Schema)?;
    refuse_privileged_role(&store, config).await?;
    let s3_ca_file = config.s3.ca_file.as_deref();
    let s3_failure = |service: &'static str, address: String, e: &ObjectStoreError| match e {
        ObjectStoreError::Unreachable {
            certificate: Some(problem),
            ..
        } => StartupError::refused(
            service,
            &address,
            Refusal {
                reason: problem.reason().to_owned(),
                fix: problem.fix(stack_config::env::S3_CA_FILE, s3_ca_file),
            },
        ),
        other => StartupError::Unreachable {
            service,
            address,
            detail: other.to_string(),
        },
    };
    let objects = ObjectStore::connect(&config.s3)
        .await
        .map_err(|e| s3_failure("S3", config.s3.endpoint.clone(), &e))?;
    objects.check_bucket().await.map_err(|e| {
        s3_failure(
            "S3 bucket",
            format!("{}/{}", config.s3.endpoint, config.s3.bucket),
            &e,
        )
    })?;
    let cache = Cache::connect_with(&config.redis).await.map_err(|e| {
        let address = config.redis.redacted_url();
        if let CacheError::ModeMismatch { address, mismatch } = &e {
            return StartupError::Unsuitable {
                service: "Redis",
                address: address.clone(),
                reason: mismatch.reason(),
                fix: mismatch.fix(),
            };
        }
        // The client's own error, where the adapter keeps it (its other failures are no refusal).
        let refusal = match &e {
            CacheError::Denied { source, .. } | CacheError::Unavailable { source, .. } => {
                redis_refusal(source, config.redis.ca_file.as_deref())
            }
            _ => None,
        };
        match refusal {
            Some(refusal) => StartupError::refused("Redis", &address, refusal),
            None => StartupError::Unreachable {
                service: "Redis",
                address,
                detail: e.to_string(),
            },
        }
    })?;
    let receipt_key = activities::certificates::load_receipt_key(&config.receipt_key_file)
        .map_err(StartupError::ReceiptKey)?;
    let receipt_archive = match &config.receipt_archive_bucket {
        None => None,
        Some(bucket) => {
            let archive = objects.for_bucket(bucket);
            archive
                .check_compliance_lock()
                .await
                .map_err(|e| StartupError::Unreachable {
                    service: "S3 receipt archive bucket",
                    address: format!("{}/{}", config.s3.endpoint, bucket),
                    detail: e.to_string(),
                })?;
            Some(archive)
        }
    };
    let client = connect_temporal(config).await?;
    Ok(Dependencies {
        store: store.with_receipt_key(receipt_key.clone()),
        objects,
        cache,
        client,
        receipt_key,
        receipt_archive,
        user_row_batch: config.user_row_batch,
    })
}

/// Refuses a superuser or schema-owner `DATABASE_URL` unless the throwaway-stack flag is set
/// (then only warns): the worker needs the worker role's grants and nothing more.
async fn refuse_privileged_role(store: &Store, config: &WorkerConfig) -> Result<(), StartupError> {
    let privileged = store
        .privileged_role()
        .await
        .map_err(|e| StartupError::Unreachable {
            service: "PostgreSQL",
            address: activities::store::redact_password(&config.database_url),
            detail: format!("could not read the connected role: {e}"),
        })?;
    match privileged {
        None => Ok(()),
        Some(role) if config.allow_privileged_db_role => {
            tracing::warn!(
                role = role.role(),
                "running as a privileged database role because {}={} (throwaway local stack)",
                activities::store::ALLOW_PRIVILEGED_ROLE_ENV,
                activities::store::ALLOW_PRIVILEGED_ROLE_VALUE
            );
            Ok(())
        }
        Some(role) => Err(StartupError::PrivilegedRole(
            role.refusal("DATABASE_URL", activities::store::WORKER_GROUP),
        )),
    }
}

/// Slots of every task kind but activities: the SDK's own default (its
/// `DEFAULT_FIXED_SIZE_SLOTS`, private in 1.1.1).
const SDK_DEFAULT_SLOTS: usize = 100;

/// The SDK's default tuner with `activity_slots` activity slots instead of its 100.
fn tuner(activity_slots: usize) -> WorkerTuner {
    TunerHolder::builder()
        .workflow_task_slot_supplier(FixedSizeSlotSupplier::new(SDK_DEFAULT_SLOTS))
        .activity_task_slot_supplier(FixedSizeSlotSupplier::new(activity_slots.max(1)))
        .local_activity_task_slot_supplier(FixedSizeSlotSupplier::new(SDK_DEFAULT_SLOTS))
        .nexus_task_slot_supplier(FixedSizeSlotSupplier::new(SDK_DEFAULT_SLOTS))
        .build()
        .into()
}

/// Builds a worker on `task_queue` with every workflow and activity registered, under the SDK's
/// default deployment identity (no name, the executable's hash as build id) and with the
/// default activity slots ([`crate::capacity::DEFAULT_ACTIVITY_SLOTS`]).
pub fn build_worker(
    runtime: &Runtime,
    deps: &Dependencies,
    task_queue: &str,
    settings: Settings,
    shutdown_grace: Duration,
) -> Result<Worker, StartupError> {
    let deployment = DeploymentConfig::default();
    build_deployed_worker(
        runtime,
        deps,
        task_queue,
        settings,
        shutdown_grace,
        &deployment,
        crate::capacity::DEFAULT_ACTIVITY_SLOTS,
    )
}

/// As [`build_worker`], as build `deployment` of a Worker Deployment, running at most
/// `activity_slots` activities at once.
pub fn build_deployed_worker(
    runtime: &Runtime,
    deps: &Dependencies,
    task_queue: &str,
    settings: Settings,
    shutdown_grace: Duration,
    deployment: &DeploymentConfig,
    activity_slots: usize,
) -> Result<Worker, StartupError> {
    let worker_error = |e: &dyn std::fmt::Display| StartupError::Worker(e.to_string());
    let options = WorkerOptions::new(task_queue)
        .maybe_deployment_options(deployment.options())
        .tuner(tuner(activity_slots))
        .register_workflow::<StackCheck>()
        .map_err(|e| worker_error(&e))?
        .register_workflow::<CommunityDeletion>()
        .map_err(|e| worker_error(&e))?
        .register_workflow::<UserDeletion>()
        .map_err(|e| worker_error(&e))?
        .register_workflow::<TaxonomySweep>()
        .map_err(|e| worker_error(&e))?
        .register_activities(SweepActivities::new(
            deps.store.clone(),
            deps.objects.clone(),
        ))
        .register_activities(user_activities(deps))
        .register_activities(StackCheckActivities::new(
            deps.store.clone(),
            deps.objects.clone(),
            deps.cache.clone(),
        ))
        .register_activities(community_activities(deps, settings))
        .graceful_shutdown_period(shutdown_grace)
        .build();
    Worker::new(runtime, deps.client.clone(), options).map_err(|e| worker_error(&e))
}

/// The user-deletion activities: real handlers for `user:` targets, signing (and archiving)
/// receipts with the worker's key.
fn user_activities(deps: &Dependencies) -> UserActivities {
    let eraser = Eraser::new(deps.store.clone(), deps.objects.clone(), deps.cache.clone())
        .with_row_batch(deps.user_row_batch);
    let activities = UserActivities::new(deps.store.pool().clone())
        .with_receipt_key(deps.receipt_key.clone())
        .with_eraser(eraser);
    match &deps.receipt_archive {
        Some(archive) => activities.with_receipt_archive(archive.clone()),
        None => activities,
    }
}

/// The community-deletion activities, archiving receipts when an archive bucket is configured.
fn community_activities(deps: &Dependencies, settings: Settings) -> CommunityActivities {
    let activities = CommunityActivities::new(
        deps.store
            .clone()
            .with_receipt_key(deps.receipt_key.clone()),
        deps.objects.clone(),
        deps.cache.clone(),
        settings,
    );
    match &deps.receipt_archive {
        Some(archive) => activities.with_receipt_archive(archive.clone()),
        None => activities,
    }
}
