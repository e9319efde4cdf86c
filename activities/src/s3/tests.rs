use super::deletion::match_delete_acknowledgements;
use super::error::{StatusClass, status_class};
use super::listing::require_continuation_markers;
use super::*;
use crate::failure::{Classified, Severity};

fn vref(key: &str, version_id: &str) -> ObjectVersionRef {
    ObjectVersionRef {
        key: key.to_owned(),
        version_id: version_id.to_owned(),
    }
}

/// The listing error for the given markers must be transient and name `missing` as `text`.
fn assert_missing_marker(
    key_marker: Option<&str>,
    version_id_marker: Option<&str>,
    missing: MissingMarker,
    text: &str,
) {
    let error =
        require_continuation_markers("media/c/", key_marker, version_id_marker).unwrap_err();
    assert!(
        matches!(&error, ObjectStoreError::MissingListingMarker { missing: m, .. } if *m == missing),
        "{error:?}"
    );
    assert_eq!(error.severity(), Severity::Transient);
    assert!(error.to_string().contains(text), "{error}");
}

#[test]
fn truncated_listing_without_key_marker_is_transient_and_names_it() {
    assert_missing_marker(None, Some("v1"), MissingMarker::KeyMarker, "no key marker");
}

#[test]
fn truncated_listing_without_version_id_marker_is_transient_and_names_it() {
    assert_missing_marker(
        Some("k"),
        None,
        MissingMarker::VersionIdMarker,
        "no version id marker",
    );
}

#[test]
fn truncated_listing_without_either_marker_is_transient_and_names_both() {
    assert_missing_marker(
        None,
        None,
        MissingMarker::Both,
        "no key marker or version id marker",
    );
}

#[test]
fn truncated_listing_with_both_markers_continues_from_them() {
    assert_eq!(
        require_continuation_markers("p/", Some("k"), Some("v")).unwrap(),
        ("k".to_owned(), "v".to_owned())
    );
}

#[test]
fn full_acknowledgement_is_complete() {
    let requested = [vref("a", "1"), vref("b", "2")];
    let outcome =
        match_delete_acknowledgements(&requested, [("a", "1"), ("b", "2")].into_iter(), vec![]);
    assert_eq!(outcome.deleted, 2);
    assert!(outcome.is_complete());
}

#[test]
fn partial_acknowledgement_reports_the_missing_version() {
    let requested = [vref("a", "1"), vref("b", "2")];
    let outcome = match_delete_acknowledgements(&requested, [("a", "1")].into_iter(), vec![]);
    assert_eq!(outcome.deleted, 1);
    assert_eq!(outcome.unacknowledged, vec![vref("b", "2")]);
    assert!(!outcome.is_complete());
}

#[test]
fn acknowledgement_of_another_version_of_the_same_key_does_not_count() {
    let requested = [vref("a", "1")];
    let outcome =
        match_delete_acknowledgements(&requested, [("a", "new-marker")].into_iter(), vec![]);
    assert_eq!(outcome.deleted, 0);
    assert_eq!(outcome.unacknowledged, vec![vref("a", "1")]);
}

#[test]
fn refused_version_is_reported_as_failed_not_unacknowledged() {
    let requested = [vref("a", "1"), vref("b", "2")];
    let failure = DeleteFailure {
        key: "b".into(),
        version_id: "2".into(),
        code: "AccessDenied".into(),
        message: "no".into(),
    };
    let outcome =
        match_delete_acknowledgements(&requested, [("a", "1")].into_iter(), vec![failure.clone()]);
    assert_eq!(outcome.deleted, 1);
    assert_eq!(outcome.failed, vec![failure]);
    assert!(outcome.unacknowledged.is_empty());
    assert!(!outcome.is_complete());
}

#[test]
fn per_key_delete_errors_are_classified_by_code_only() {
    let failure = |code: &str, message: &str| DeleteFailure {
        key: "k".into(),
        version_id: "v".into(),
        code: code.into(),
        message: message.into(),
    };
    assert_eq!(
        failure("AccessDenied", "").kind(),
        DeleteFailureKind::AccessDenied
    );
    // The message never decides: a transient code saying "access denied" stays transient.
    assert_eq!(
        failure("InternalError", "AccessDenied").kind(),
        DeleteFailureKind::Other
    );
    assert_eq!(failure("SlowDown", "").kind(), DeleteFailureKind::Throttled);
    assert_eq!(
        failure("InternalError", "SlowDown").kind(),
        DeleteFailureKind::Other
    );
    assert_eq!(failure("", "").kind(), DeleteFailureKind::Other);
    // S3 codes are case-sensitive.
    assert_eq!(failure("accessdenied", "").kind(), DeleteFailureKind::Other);
}

#[test]
fn http_statuses_map_to_retry_decisions() {
    assert_eq!(status_class(403), StatusClass::Denied);
    assert_eq!(status_class(401), StatusClass::Denied);
    assert_eq!(status_class(404), StatusClass::NotFound);
    assert_eq!(status_class(503), StatusClass::Busy);
    assert_eq!(status_class(429), StatusClass::Busy);
    assert_eq!(status_class(409), StatusClass::Busy);
    assert_eq!(status_class(500), StatusClass::Server);
    assert_eq!(status_class(400), StatusClass::Rejected);
}

#[test]
fn a_missing_version_is_recognised_as_rgw_and_aws_each_answer_it() {
    use aws_sdk_s3::error::ErrorMetadata;
    use aws_sdk_s3::operation::get_object::GetObjectError;
    use aws_sdk_s3::types::error::NoSuchKey;
    let coded = |code: &str, message: &str| {
        GetObjectError::generic(ErrorMetadata::builder().code(code).message(message).build())
    };
    assert!(super::error::is_missing_version(
        &GetObjectError::NoSuchKey(NoSuchKey::builder().build())
    ));
    assert!(super::error::is_missing_version(&coded(
        "NoSuchVersion",
        "The specified version does not exist."
    )));
    assert!(!super::error::is_missing_version(&coded(
        "AccessDenied",
        "NoSuchVersion"
    )));
    assert!(!super::error::is_missing_version(&coded(
        "NoSuchBucket",
        ""
    )));
}

#[test]
fn only_503_and_429_are_throttles_whatever_the_code_says() {
    let busy = |status: u16, code: &str| ObjectStoreError::Busy {
        operation: S3Operation::DeleteObjects,
        status,
        code: Some(code.into()),
    };
    assert!(busy(503, "SlowDown").is_throttle());
    assert!(busy(429, "TooManyRequests").is_throttle());
    assert!(busy(503, "ServiceUnavailable").is_throttle());
    assert!(!busy(409, "SlowDown").is_throttle());
    assert!(!busy(408, "RequestTimeout").is_throttle());
    let server = ObjectStoreError::ServerError {
        operation: S3Operation::DeleteObjects,
        status: 500,
        code: Some("SlowDown".into()),
    };
    assert!(!server.is_throttle());
}

/// A configuration whose endpoint refuses connections: reaching the network is a different
/// error from the ones these tests expect, so a test passing proves no call was made.
fn unroutable_config() -> S3Config {
    S3Config {
        endpoint: "http://127.0.0.1:1".into(),
        bucket: "b".into(),
        region: Some("us-east-1".into()),
        credentials: S3Credentials::Static {
            access_key: "k".into(),
            secret_key: "s".into(),
        },
        addressing: S3Addressing::Path,
        ca_file: None,
    }
}

#[tokio::test]
async fn more_than_a_thousand_versions_are_refused_before_any_call() {
    let store = ObjectStore::connect(&unroutable_config()).await.unwrap();
    let versions: Vec<_> = (0..1001).map(|i| vref(&format!("k{i}"), "v")).collect();
    let error = store.delete_versions(&versions).await.unwrap_err();
    assert!(matches!(
        error,
        ObjectStoreError::TooManyVersions {
            requested: 1001,
            limit: 1000
        }
    ));
    assert_eq!(error.severity(), Severity::Permanent);
}

#[tokio::test]
async fn a_version_ref_without_version_id_is_refused_before_any_call() {
    let store = ObjectStore::connect(&unroutable_config()).await.unwrap();
    let error = store
        .delete_versions(&[vref("a", "1"), vref("k", "")])
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ObjectStoreError::MissingVersionId { key } if key == "k"),
        "{error:?}"
    );
    assert_eq!(error.severity(), Severity::Permanent);
}

#[tokio::test]
async fn unreachable_endpoint_is_transient() {
    let store = ObjectStore::connect(&unroutable_config()).await.unwrap();
    let error = store.preflight_list_versions("media/").await.unwrap_err();
    assert!(
        matches!(error, ObjectStoreError::Unreachable { .. }),
        "{error:?}"
    );
    assert_eq!(error.severity(), Severity::Transient);
}

#[tokio::test]
async fn empty_configuration_fields_are_rejected() {
    let blank_bucket = S3Config {
        bucket: " ".into(),
        ..unroutable_config()
    };
    let error = ObjectStore::connect(&blank_bucket).await.unwrap_err();
    assert!(matches!(error, ObjectStoreError::InvalidConfig { .. }));
    assert_eq!(error.severity(), Severity::Permanent);
}

#[test]
fn only_a_refusal_before_sending_or_a_whole_4xx_verdict_proves_a_call_changed_nothing() {
    let operation = S3Operation::DeleteObjects;
    let nothing_changed = [
        ObjectStoreError::AccessDenied {
            operation,
            bucket: "b".into(),
            status: 403,
            code: Some("AccessDenied".into()),
        },
        ObjectStoreError::Rejected {
            operation,
            status: 400,
            code: Some("MalformedXML".into()),
        },
        ObjectStoreError::NoSuchBucket {
            operation,
            bucket: "b".into(),
        },
        ObjectStoreError::TooManyVersions {
            requested: 1001,
            limit: 1000,
        },
        ObjectStoreError::MissingVersionId { key: "k".into() },
    ];
    for error in nothing_changed {
        assert!(error.changed_nothing(), "{error:?}");
    }
    let may_have_acted = [
        ObjectStoreError::ServerError {
            operation,
            status: 500,
            code: Some("InternalError".into()),
        },
        ObjectStoreError::Busy {
            operation,
            status: 503,
            code: Some("SlowDown".into()),
        },
        ObjectStoreError::Unreachable {
            operation,
            endpoint: "http://s3".into(),
            detail: "operation timed out".into(),
            certificate: None,
        },
        ObjectStoreError::IncompleteResponse {
            operation,
            field: "Deleted.Key",
        },
    ];
    for error in may_have_acted {
        assert!(!error.changed_nothing(), "{error:?}");
    }
}

/// A lookup of a fixed environment.
fn environment(
    variables: &'static [(&'static str, &'static str)],
) -> impl Fn(&str) -> Option<String> {
    |name| {
        variables
            .iter()
            .find(|(variable, _)| *variable == name)
            .map(|(_, value)| (*value).to_owned())
    }
}

#[test]
fn the_region_is_the_setting_else_aws_region_else_aws_default_region_blanks_ignored() {
    let both = environment(&[
        ("AWS_REGION", "eu-west-1"),
        ("AWS_DEFAULT_REGION", "ap-south-1"),
    ]);
    assert_eq!(
        region_from_environment(Some("eu-west-3"), &both).as_deref(),
        Some("eu-west-3"),
        "BUZZ_S3_REGION wins"
    );
    assert_eq!(
        region_from_environment(None, &both).as_deref(),
        Some("eu-west-1")
    );
    assert_eq!(
        region_from_environment(Some("  "), &both).as_deref(),
        Some("eu-west-1"),
        "a blank setting counts as unset"
    );
    let blank_aws_region =
        environment(&[("AWS_REGION", " "), ("AWS_DEFAULT_REGION", "ap-south-1")]);
    assert_eq!(
        region_from_environment(None, &blank_aws_region).as_deref(),
        Some("ap-south-1")
    );
    assert_eq!(
        region_from_environment(None, environment(&[("AWS_REGION", " eu-north-1 ")])).as_deref(),
        Some("eu-north-1"),
        "values are trimmed"
    );
    assert_eq!(region_from_environment(None, environment(&[])), None);
}

#[test]
fn without_a_region_from_anywhere_the_client_signs_for_us_east_1() {
    assert_eq!(signing_region(None).as_ref(), "us-east-1");
    assert_eq!(
        signing_region(Some(&Region::new("eu-west-1"))).as_ref(),
        "eu-west-1"
    );
}

#[tokio::test]
async fn the_configured_region_is_the_one_the_client_signs_for() {
    let config = S3Config {
        region: Some("eu-west-3".into()),
        ..unroutable_config()
    };
    let store = ObjectStore::connect(&config).await.unwrap();
    assert_eq!(
        store.client.config().region().map(|r| r.as_ref()),
        Some("eu-west-3")
    );
}
