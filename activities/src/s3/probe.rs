//! Permission probes: prove, per tenant prefix and without deleting anything, that these
//! credentials hold every S3 permission a community deletion's destructive phase needs, so a
//! missing one blocks at preflight, before the fence and long before the irreversible marker.
//!
//! The two listing permissions are proven by listing (one entry). The two destructive ones are
//! proven by the destructive call itself, addressed to something that cannot exist, so that an
//! `AccessDenied` is told apart from "no such version/upload":
//!
//! - `s3:DeleteObjectVersion`: DeleteObjects (the very call `delete_chunks` makes) of version
//!   `null` of the reserved key `{prefix}.buzz-deletion-permission-probe`.
//! - `s3:AbortMultipartUpload`: AbortMultipartUpload of upload id
//!   `buzz-deletion-permission-probe` of the same key.
//!
//! Why these forms. The reserved key is no writer's shape (it starts with a dot), so no tenant
//! object can have it, and one that somehow did would have blocked the inventory as an unknown
//! key shape. `null` is the one version id S3 defines for every key (the version written while
//! versioning was off): AWS documents that deleting it removes the null version "if there is
//! one" and answers success otherwise, and the local Ceph RGW answers the same (`Deleted`, no
//! delete marker, the listing unchanged). A made-up version id is not answered alike: RGW
//! acknowledges any id as deleted, while AWS answers `NoSuchVersion` in a DeleteObjects (and
//! `InvalidArgument` in a DeleteObject) for an id it cannot decode. An upload id that was never
//! issued is answered `NoSuchUpload` (HTTP 404) by both. Both check the permission before they
//! look the version or upload up, so a denial answers `AccessDenied` (per key in DeleteObjects,
//! HTTP 403 for the abort). Observed on the local RGW with a bucket-policy Deny on exactly one of
//! the two actions: the other probe still passes. `docs/operations.md` ("S3 permissions") keeps
//! the table of observed answers.

use std::fmt;

use super::ObjectStore;
use super::deletion::{AbortOutcome, BulkDeleteOutcome, DeleteFailureKind};
use super::error::ObjectStoreError;
use crate::store::object_addresses::{MultipartUpload, ObjectVersionRef};

/// The reserved name, under a tenant prefix, the destructive probes address.
pub const PROBE_KEY_NAME: &str = ".buzz-deletion-permission-probe";
/// The version id the delete probe addresses: S3's null version, defined for every key.
pub const PROBE_VERSION_ID: &str = "null";
/// The upload id the abort probe addresses: never issued by any server.
pub const PROBE_UPLOAD_ID: &str = "buzz-deletion-permission-probe";

/// The per-key code S3 answers for a version that does not exist (AWS, for an id it cannot
/// decode): the permission was checked first, so it counts as granted.
const NO_SUCH_VERSION: &str = "NoSuchVersion";

/// An S3 permission the destructive phase needs under a tenant prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum S3Permission {
    /// ListObjectVersions under the prefix (inventory, freeze, verification).
    ListBucketVersions,
    /// ListMultipartUploads under the prefix (the uploads aborted first thing past the marker).
    ListBucketMultipartUploads,
    /// DeleteObjects with explicit version ids (every frozen version).
    DeleteObjectVersion,
    /// AbortMultipartUpload (every upload in progress).
    AbortMultipartUpload,
}

impl S3Permission {
    /// Every permission, in the order preflight proves them.
    pub const ALL: [S3Permission; 4] = [
        S3Permission::ListBucketVersions,
        S3Permission::ListBucketMultipartUploads,
        S3Permission::DeleteObjectVersion,
        S3Permission::AbortMultipartUpload,
    ];

    /// The IAM action, e.g. `s3:DeleteObjectVersion`.
    pub fn action(self) -> &'static str {
        match self {
            S3Permission::ListBucketVersions => "s3:ListBucketVersions",
            S3Permission::ListBucketMultipartUploads => "s3:ListBucketMultipartUploads",
            S3Permission::DeleteObjectVersion => "s3:DeleteObjectVersion",
            S3Permission::AbortMultipartUpload => "s3:AbortMultipartUpload",
        }
    }

    /// The IAM statement granting this permission on `prefix` of `bucket`, as one line of JSON:
    /// listing versions on the bucket for keys under the prefix (`s3:prefix`), listing uploads on
    /// the bucket (the local RGW ignores an `s3:prefix` condition on that action, observed), and
    /// the object actions on the prefix's objects.
    pub fn statement(self, bucket: &str, prefix: &str) -> String {
        let statement = match self {
            S3Permission::ListBucketVersions => serde_json::json!({
                "Effect": "Allow",
                "Action": self.action(),
                "Resource": format!("arn:aws:s3:::{bucket}"),
                "Condition": {"StringLike": {"s3:prefix": format!("{prefix}*")}},
            }),
            S3Permission::ListBucketMultipartUploads => serde_json::json!({
                "Effect": "Allow",
                "Action": self.action(),
                "Resource": format!("arn:aws:s3:::{bucket}"),
            }),
            S3Permission::DeleteObjectVersion | S3Permission::AbortMultipartUpload => {
                serde_json::json!({
                    "Effect": "Allow",
                    "Action": self.action(),
                    "Resource": format!("arn:aws:s3:::{bucket}/{prefix}*"),
                })
            }
        };
        statement.to_string()
    }
}

impl fmt::Display for S3Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.action())
    }
}

/// A permission a probe found missing: which one, where, what the server answered, and the
/// statement that grants it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingPermission {
    /// The permission.
    pub permission: S3Permission,
    /// The bucket.
    pub bucket: String,
    /// The tenant prefix probed.
    pub prefix: String,
    /// The probe and the server's answer, e.g. `DeleteObjects of version null of KEY answered
    /// AccessDenied`.
    pub answer: String,
}

impl MissingPermission {
    /// The IAM statement that grants the permission on the prefix.
    pub fn statement(&self) -> String {
        self.permission.statement(&self.bucket, &self.prefix)
    }
}

impl fmt::Display for MissingPermission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "S3 permission {} is missing on prefix {} of bucket {} ({}); add to the worker's IAM \
             policy {} and remove any bucket-policy Deny of {} there",
            self.permission,
            self.prefix,
            self.bucket,
            self.answer,
            self.statement(),
            self.permission
        )
    }
}

/// The reserved probe key under `prefix`.
pub fn probe_key(prefix: &str) -> String {
    format!("{prefix}{PROBE_KEY_NAME}")
}

impl ObjectStore {
    /// Proves `permission` under `prefix` without deleting anything (see the module docs for the
    /// probe forms). A denial is [`ObjectStoreError::PermissionMissing`] naming the permission,
    /// the prefix and the statement to add; any other failure is returned as it came.
    pub async fn prove_permission(
        &self,
        permission: S3Permission,
        prefix: &str,
    ) -> Result<(), ObjectStoreError> {
        let missing = |answer: String| MissingPermission {
            permission,
            bucket: self.bucket.to_string(),
            prefix: prefix.to_owned(),
            answer,
        };
        match permission {
            S3Permission::ListBucketVersions => {
                let listed = self.list_versions_page(prefix, None, 1).await.map(|_| ());
                judge_listing(listed, "ListObjectVersions", missing)
            }
            S3Permission::ListBucketMultipartUploads => {
                let listed = self.list_uploads_page(prefix, None, 1).await.map(|_| ());
                judge_listing(listed, "ListMultipartUploads", missing)
            }
            S3Permission::DeleteObjectVersion => {
                let probe = ObjectVersionRef {
                    key: probe_key(prefix),
                    version_id: PROBE_VERSION_ID.to_owned(),
                };
                let answer = self.delete_versions(std::slice::from_ref(&probe)).await;
                judge_version_delete(&probe, answer, missing)
            }
            S3Permission::AbortMultipartUpload => {
                let probe = MultipartUpload {
                    key: probe_key(prefix),
                    upload_id: PROBE_UPLOAD_ID.to_owned(),
                };
                let answer = self.abort_upload(&probe).await;
                judge_upload_abort(&probe, answer, missing)
            }
        }
    }
}

/// A listing probe: any answer but a denial proves the permission.
pub(super) fn judge_listing(
    answer: Result<(), ObjectStoreError>,
    call: &str,
    missing: impl FnOnce(String) -> MissingPermission,
) -> Result<(), ObjectStoreError> {
    match answer {
        Err(ObjectStoreError::AccessDenied { status, code, .. }) => Err(
            ObjectStoreError::PermissionMissing(Box::new(missing(format!(
                "{call} answered HTTP {status} {}",
                code_or_none(code.as_deref())
            )))),
        ),
        other => other,
    }
}

/// The version-delete probe: acknowledged as deleted, or `NoSuchVersion`, proves the permission;
/// a per-key `AccessDenied` or an HTTP 401/403 is the permission missing; any other per-key
/// answer (or none) proves nothing and is worth retrying.
pub(super) fn judge_version_delete(
    probe: &ObjectVersionRef,
    answer: Result<BulkDeleteOutcome, ObjectStoreError>,
    missing: impl FnOnce(String) -> MissingPermission,
) -> Result<(), ObjectStoreError> {
    let call = format!(
        "DeleteObjects of version {} of {}",
        probe.version_id, probe.key
    );
    let outcome = match answer {
        Ok(outcome) => outcome,
        Err(ObjectStoreError::AccessDenied { status, code, .. }) => {
            return Err(ObjectStoreError::PermissionMissing(Box::new(missing(
                format!(
                    "{call} answered HTTP {status} {}",
                    code_or_none(code.as_deref())
                ),
            ))));
        }
        Err(other) => return Err(other),
    };
    if outcome.deleted > 0 {
        return Ok(());
    }
    match outcome.failed.first() {
        Some(failure) if failure.kind() == DeleteFailureKind::AccessDenied => {
            Err(ObjectStoreError::PermissionMissing(Box::new(missing(
                format!("{call} answered {} for the key", failure.code),
            ))))
        }
        Some(failure) if failure.code == NO_SUCH_VERSION => Ok(()),
        Some(failure) => Err(ObjectStoreError::ProbeInconclusive {
            call,
            answer: format!("per-key error {} ({})", failure.code, failure.message),
        }),
        None => Err(ObjectStoreError::ProbeInconclusive {
            call,
            answer: "neither acknowledged nor refused".to_owned(),
        }),
    }
}

/// The upload-abort probe: `NoSuchUpload` (or, impossibly, an abort) proves the permission; an
/// HTTP 401/403 is the permission missing; anything else is returned as it came.
pub(super) fn judge_upload_abort(
    probe: &MultipartUpload,
    answer: Result<AbortOutcome, ObjectStoreError>,
    missing: impl FnOnce(String) -> MissingPermission,
) -> Result<(), ObjectStoreError> {
    match answer {
        Ok(AbortOutcome::AlreadyGone | AbortOutcome::Aborted) => Ok(()),
        Err(ObjectStoreError::AccessDenied { status, code, .. }) => Err(
            ObjectStoreError::PermissionMissing(Box::new(missing(format!(
                "AbortMultipartUpload of upload {} of {} answered HTTP {status} {}",
                probe.upload_id,
                probe.key,
                code_or_none(code.as_deref())
            )))),
        ),
        Err(other) => Err(other),
    }
}

fn code_or_none(code: Option<&str>) -> &str {
    code.unwrap_or("(no error code)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::{Classified, Severity};
    use crate::s3::DeleteFailure;
    use crate::s3::S3Operation;

    const PREFIX: &str = "media/0b7e4b6c-3c1e-4c55-9d6b-6f1f5a1c2d3e/";

    fn missing(permission: S3Permission) -> impl FnOnce(String) -> MissingPermission {
        move |answer| MissingPermission {
            permission,
            bucket: "buzz-media".to_owned(),
            prefix: PREFIX.to_owned(),
            answer,
        }
    }

    fn version_probe() -> ObjectVersionRef {
        ObjectVersionRef {
            key: probe_key(PREFIX),
            version_id: PROBE_VERSION_ID.to_owned(),
        }
    }

    fn upload_probe() -> MultipartUpload {
        MultipartUpload {
            key: probe_key(PREFIX),
            upload_id: PROBE_UPLOAD_ID.to_owned(),
        }
    }

    /// A DeleteObjects answer of the version probe: acknowledged, or refused with `code`.
    fn answered(code: Option<&str>, message: &str) -> BulkDeleteOutcome {
        let probe = version_probe();
        match code {
            None => BulkDeleteOutcome {
                requested: 1,
                deleted: 1,
                ..BulkDeleteOutcome::default()
            },
            Some(code) => BulkDeleteOutcome {
                requested: 1,
                deleted: 0,
                failed: vec![DeleteFailure {
                    key: probe.key,
                    version_id: probe.version_id,
                    code: code.to_owned(),
                    message: message.to_owned(),
                }],
                unacknowledged: vec![],
            },
        }
    }

    fn denied(operation: S3Operation) -> ObjectStoreError {
        ObjectStoreError::AccessDenied {
            operation,
            bucket: "buzz-media".into(),
            status: 403,
            code: Some("AccessDenied".into()),
        }
    }

    /// The refusal must be a permanent `PermissionMissing` of `permission` whose message names
    /// the action, the prefix and the statement to add.
    /// The version-delete probe's verdict on `answer`.
    fn judge_version(
        answer: Result<BulkDeleteOutcome, ObjectStoreError>,
    ) -> Result<(), ObjectStoreError> {
        judge_version_delete(
            &version_probe(),
            answer,
            missing(S3Permission::DeleteObjectVersion),
        )
    }

    /// The upload-abort probe's verdict on `answer`.
    fn judge_abort(answer: Result<AbortOutcome, ObjectStoreError>) -> Result<(), ObjectStoreError> {
        judge_upload_abort(
            &upload_probe(),
            answer,
            missing(S3Permission::AbortMultipartUpload),
        )
    }

    fn assert_missing(result: Result<(), ObjectStoreError>, permission: S3Permission) {
        let error = result.expect_err("a denial must refuse");
        assert!(
            matches!(&error, ObjectStoreError::PermissionMissing(m) if m.permission == permission),
            "{error:?}"
        );
        assert_eq!(error.severity(), Severity::Permanent);
        let text = error.to_string();
        assert!(text.contains(permission.action()), "{text}");
        assert!(text.contains(PREFIX), "{text}");
        assert!(
            text.contains(&permission.statement("buzz-media", PREFIX)),
            "{text}"
        );
    }

    #[test]
    fn the_version_probe_acknowledged_or_no_such_version_proves_the_delete_permission() {
        for answer in [answered(None, ""), answered(Some("NoSuchVersion"), "")] {
            let judged = judge_version(Ok(answer));
            assert!(judged.is_ok(), "{judged:?}");
        }
    }

    #[test]
    fn a_denied_version_probe_names_the_delete_permission_per_key_or_whole() {
        assert_missing(
            judge_version(Ok(answered(Some("AccessDenied"), "AccessDenied"))),
            S3Permission::DeleteObjectVersion,
        );
        assert_missing(
            judge_version(Err(denied(S3Operation::DeleteObjects))),
            S3Permission::DeleteObjectVersion,
        );
    }

    #[test]
    fn another_per_key_answer_is_inconclusive_and_transient_whatever_its_message() {
        let outcomes = [
            answered(Some("InternalError"), "AccessDenied"),
            answered(Some("accessdenied"), ""),
            BulkDeleteOutcome {
                requested: 1,
                unacknowledged: vec![version_probe()],
                ..BulkDeleteOutcome::default()
            },
        ];
        for outcome in outcomes {
            let error = judge_version(Ok(outcome)).expect_err("inconclusive");
            assert!(
                matches!(error, ObjectStoreError::ProbeInconclusive { .. }),
                "{error:?}"
            );
            assert_eq!(error.severity(), Severity::Transient);
        }
    }

    #[test]
    fn a_failure_that_is_no_denial_passes_through_unchanged() {
        let busy = ObjectStoreError::Busy {
            operation: S3Operation::DeleteObjects,
            status: 503,
            code: Some("SlowDown".into()),
        };
        let judged = judge_version(Err(busy));
        assert!(
            matches!(judged, Err(ObjectStoreError::Busy { status: 503, .. })),
            "{judged:?}"
        );
        let judged = judge_abort(Err(ObjectStoreError::NoSuchBucket {
            operation: S3Operation::AbortMultipartUpload,
            bucket: "b".into(),
        }));
        assert!(
            matches!(judged, Err(ObjectStoreError::NoSuchBucket { .. })),
            "{judged:?}"
        );
    }

    #[test]
    fn the_abort_probe_no_such_upload_proves_the_abort_permission_and_403_names_it() {
        for outcome in [AbortOutcome::AlreadyGone, AbortOutcome::Aborted] {
            let judged = judge_abort(Ok(outcome));
            assert!(judged.is_ok(), "{judged:?}");
        }
        assert_missing(
            judge_abort(Err(denied(S3Operation::AbortMultipartUpload))),
            S3Permission::AbortMultipartUpload,
        );
    }

    #[test]
    fn a_denied_listing_names_the_list_permission() {
        assert_missing(
            judge_listing(
                Err(denied(S3Operation::ListObjectVersions)),
                "ListObjectVersions",
                missing(S3Permission::ListBucketVersions),
            ),
            S3Permission::ListBucketVersions,
        );
        assert!(
            judge_listing(
                Ok(()),
                "ListMultipartUploads",
                missing(S3Permission::ListBucketMultipartUploads)
            )
            .is_ok()
        );
    }

    #[test]
    fn statements_grant_object_actions_on_the_prefix_and_list_actions_under_it() {
        let object: serde_json::Value =
            serde_json::from_str(&S3Permission::AbortMultipartUpload.statement("b", "thumbs/c/"))
                .unwrap_or_default();
        assert_eq!(object["Action"], "s3:AbortMultipartUpload");
        assert_eq!(object["Resource"], "arn:aws:s3:::b/thumbs/c/*");
        let list: serde_json::Value =
            serde_json::from_str(&S3Permission::ListBucketVersions.statement("b", "thumbs/c/"))
                .unwrap_or_default();
        assert_eq!(list["Resource"], "arn:aws:s3:::b");
        assert_eq!(list["Condition"]["StringLike"]["s3:prefix"], "thumbs/c/*");
        let uploads: serde_json::Value = serde_json::from_str(
            &S3Permission::ListBucketMultipartUploads.statement("b", "thumbs/c/"),
        )
        .unwrap_or_default();
        assert_eq!(uploads["Resource"], "arn:aws:s3:::b");
        assert!(uploads["Condition"].is_null(), "{uploads}");
    }

    #[test]
    fn the_probe_key_is_under_the_prefix_and_no_writer_shape() {
        let community = uuid::Uuid::new_v4();
        for prefix in crate::taxonomy::tenant_prefixes(community) {
            let key = probe_key(&prefix);
            assert!(key.starts_with(&prefix), "{key}");
            assert!(
                !crate::taxonomy::is_tenant_owned_key(community, &key),
                "{key}"
            );
        }
    }
}
