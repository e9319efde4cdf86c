//! The S3 operations, on top of [`crate::store`]: s3s parses requests, verifies SigV4 and
//! writes the XML; this file maps inputs to the store and the store's answers to S3's.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use hyper::HeaderMap;
use hyper::header::{HeaderName, HeaderValue};
use md5::{Digest, Md5};
use s3s::access::{S3Access, S3AccessContext};
use s3s::dto::{
    AbortMultipartUploadInput, AbortMultipartUploadOutput, Bucket as BucketEntry,
    BucketVersioningStatus, CompleteMultipartUploadInput, CompleteMultipartUploadOutput,
    CreateBucketInput, CreateBucketOutput, CreateMultipartUploadInput, CreateMultipartUploadOutput,
    DeleteMarkerEntry, DeleteObjectInput, DeleteObjectOutput, DeleteObjectsInput,
    DeleteObjectsOutput, DeletedObject, ETag, GetBucketVersioningInput, GetBucketVersioningOutput,
    GetObjectInput, GetObjectOutput, HeadBucketInput, HeadBucketOutput, HeadObjectInput,
    HeadObjectOutput, ListBucketsInput, ListBucketsOutput, ListMultipartUploadsInput,
    ListMultipartUploadsOutput, ListObjectVersionsInput, ListObjectVersionsOutput,
    ListObjectsV2Input, ListObjectsV2Output, ListPartsInput, ListPartsOutput, MultipartUpload,
    Object, ObjectStorageClass, ObjectVersion, ObjectVersionStorageClass, Part,
    PutBucketVersioningInput, PutBucketVersioningOutput, PutObjectInput, PutObjectOutput,
    StorageClass, StreamingBlob, Timestamp, UploadPartInput, UploadPartOutput,
};
use s3s::{S3, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};

use crate::state::{Bucket, OpClass, State, unix_now};
use crate::store::{
    Garbage, Kind, Lookup, Removed, StoredBody, UploadedPart, Version, VersionMarker, parse_id,
    render_id,
};

/// The most keys one DeleteObjects call may name, and the largest page of any listing.
const MAX_KEYS: usize = 1000;

/// Zero bytes served as the body of seeded versions, in chunks of this size.
static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];

/// The S3 service over the shared state.
#[derive(Debug, Clone)]
pub struct DoubleS3 {
    state: Arc<State>,
}

impl DoubleS3 {
    /// A service over `state`.
    pub fn new(state: Arc<State>) -> Self {
        Self { state }
    }

    fn bucket(&self, name: &str) -> S3Result<Arc<Bucket>> {
        self.state
            .bucket(name)
            .ok_or_else(|| s3_error!(NoSuchBucket, "The specified bucket does not exist"))
    }
}

/// Counts every authenticated call per operation and injects the configured latency; refuses
/// unsigned requests and requests signed for another region.
#[derive(Debug, Clone)]
pub struct DoubleAccess {
    state: Arc<State>,
}

impl DoubleAccess {
    /// An access check over `state`.
    pub fn new(state: Arc<State>) -> Self {
        Self { state }
    }
}

#[async_trait::async_trait]
impl S3Access for DoubleAccess {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        if cx.credentials().is_none() {
            return Err(s3_error!(AccessDenied, "Signature is required"));
        }
        if let Some(region) = signed_region(cx.headers())
            && region != self.state.region
        {
            return Err(s3_error!(
                AuthorizationHeaderMalformed,
                "The authorization header is malformed; the region '{region}' is wrong; \
                 expecting '{}'",
                self.state.region
            ));
        }
        let operation = cx.s3_op().name();
        self.state.stats.count_operation(operation);
        let delay = self.state.latency(OpClass::of(operation));
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        Ok(())
    }
}

/// The region of a header-signed SigV4 request (`Credential=AK/DATE/REGION/s3/aws4_request`).
fn signed_region(headers: &HeaderMap) -> Option<String> {
    let authorization = headers.get(hyper::header::AUTHORIZATION)?.to_str().ok()?;
    let credential = authorization.split("Credential=").nth(1)?;
    let scope = credential.split([',', ' ']).next()?;
    scope.split('/').nth(2).map(str::to_owned)
}

fn timestamp(secs: u32) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_secs(u64::from(secs)))
}

fn size(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

fn page_size(asked: Option<i32>, what: &str) -> S3Result<usize> {
    match asked {
        None => Ok(MAX_KEYS),
        Some(n) if n < 0 => Err(s3_error!(
            InvalidArgument,
            "{what} must be a non-negative integer"
        )),
        Some(n) => Ok(usize::try_from(n).unwrap_or(MAX_KEYS).min(MAX_KEYS)),
    }
}

fn no_delimiter(delimiter: Option<&String>) -> S3Result<()> {
    match delimiter {
        Some(_) => Err(s3_error!(
            NotImplemented,
            "The S3 double does not support delimiters"
        )),
        None => Ok(()),
    }
}

/// A version id query parameter: `None` when absent, the id, or an error S3 would answer.
fn asked_version(text: Option<&str>) -> S3Result<Option<u64>> {
    match text.filter(|t| !t.is_empty()) {
        None => Ok(None),
        Some(text) => match parse_id(text) {
            Some(id) => Ok(Some(id)),
            // The null version exists on every key as an address but never here.
            None if text == "null" => Err(s3_error!(
                NoSuchVersion,
                "The specified version does not exist."
            )),
            None => Err(s3_error!(InvalidArgument, "Invalid version id specified")),
        },
    }
}

fn slow_down() -> S3Error {
    S3Error::with_message(S3ErrorCode::SlowDown, "Please reduce your request rate.")
}

fn no_such_upload() -> S3Error {
    s3_error!(
        NoSuchUpload,
        "The specified upload does not exist. The upload ID may be invalid, or the upload may \
         have been aborted or completed."
    )
}

/// `NoSuchKey` (latest is a marker) or `MethodNotAllowed` (a marker asked by id), with S3's
/// `x-amz-delete-marker` and `x-amz-version-id` headers.
fn marker_error(mut error: S3Error, id: u64) -> S3Error {
    let mut headers = HeaderMap::new();
    headers.insert(
        HeaderName::from_static("x-amz-delete-marker"),
        HeaderValue::from_static("true"),
    );
    if let Ok(value) = HeaderValue::from_str(&render_id(id)) {
        headers.insert(HeaderName::from_static("x-amz-version-id"), value);
    }
    error.set_headers(headers);
    error
}

/// The version a read resolves to, its body and ETag, or S3's error.
fn resolve(lookup: Lookup, etag_of_seeded: impl Fn(&Version) -> String) -> S3Result<Resolved> {
    match lookup {
        Lookup::Found(version, body, etag) => {
            let etag = etag.unwrap_or_else(|| etag_of_seeded(&version));
            Ok(Resolved {
                version,
                body,
                etag,
            })
        }
        Lookup::NoSuchKey => Err(s3_error!(NoSuchKey, "The specified key does not exist.")),
        Lookup::LatestIsMarker(id) => Err(marker_error(
            s3_error!(NoSuchKey, "The specified key does not exist."),
            id,
        )),
        Lookup::NoSuchVersion => Err(s3_error!(
            NoSuchVersion,
            "The specified version does not exist."
        )),
        Lookup::VersionIsMarker(id) => Err(marker_error(
            s3_error!(
                MethodNotAllowed,
                "The specified method is not allowed against this resource."
            ),
            id,
        )),
    }
}

struct Resolved {
    version: Version,
    body: Option<Bytes>,
    etag: String,
}

/// Reads a request body whole.
async fn read_body(body: Option<StreamingBlob>) -> S3Result<Bytes> {
    let Some(mut blob) = body else {
        return Ok(Bytes::new());
    };
    let mut chunks: Vec<Bytes> = Vec::new();
    while let Some(chunk) = blob.next().await {
        chunks.push(chunk.map_err(|e| S3Error::with_source(S3ErrorCode::IncompleteBody, e))?);
    }
    if chunks.len() == 1 {
        return Ok(chunks.pop().unwrap_or_default());
    }
    let mut whole = BytesMut::with_capacity(chunks.iter().map(Bytes::len).sum());
    for chunk in chunks {
        whole.extend_from_slice(&chunk);
    }
    Ok(whole.freeze())
}

fn md5(bytes: &[u8]) -> [u8; 16] {
    let mut out = [0u8; 16];
    out.copy_from_slice(&Md5::digest(bytes));
    out
}

/// A body of `len` zero bytes, streamed from a static buffer.
fn zeros(len: u64) -> StreamingBlob {
    let chunk = ZEROS.len() as u64;
    let chunks = len.div_ceil(chunk);
    let stream = futures_util::stream::iter((0..chunks).map(move |index| {
        let remaining = len - index * chunk;
        let take = usize::try_from(remaining.min(chunk)).unwrap_or(ZEROS.len());
        Ok::<_, std::io::Error>(Bytes::from_static(&ZEROS[..take]))
    }));
    StreamingBlob::wrap(stream)
}

fn body_of(resolved: &Resolved) -> StreamingBlob {
    match &resolved.body {
        Some(bytes) => StreamingBlob::from(s3s::Body::from(bytes.clone())),
        None => zeros(resolved.version.size),
    }
}

fn strong(etag: String) -> Option<ETag> {
    Some(ETag::Strong(etag))
}

fn non_empty<T>(items: Vec<T>) -> Option<Vec<T>> {
    (!items.is_empty()).then_some(items)
}

#[async_trait::async_trait]
impl S3 for DoubleS3 {
    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let name = req.input.bucket;
        // Like us-east-1: creating a bucket you already own succeeds.
        self.state.create_bucket(&name);
        Ok(S3Response::new(CreateBucketOutput {
            location: Some(format!("/{name}")),
        }))
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.bucket(&req.input.bucket)?;
        Ok(S3Response::new(HeadBucketOutput {
            bucket_region: Some(self.state.region.clone()),
            ..Default::default()
        }))
    }

    async fn list_buckets(
        &self,
        _req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let buckets = self
            .state
            .buckets()
            .into_iter()
            .map(|(name, bucket)| BucketEntry {
                name: Some(name),
                creation_date: Some(Timestamp::from(bucket.created)),
                bucket_region: Some(self.state.region.clone()),
            })
            .collect();
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(buckets),
            ..Default::default()
        }))
    }

    async fn get_bucket_versioning(
        &self,
        req: S3Request<GetBucketVersioningInput>,
    ) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        self.bucket(&req.input.bucket)?;
        Ok(S3Response::new(GetBucketVersioningOutput {
            status: Some(BucketVersioningStatus::from_static(
                BucketVersioningStatus::ENABLED,
            )),
            ..Default::default()
        }))
    }

    async fn put_bucket_versioning(
        &self,
        req: S3Request<PutBucketVersioningInput>,
    ) -> S3Result<S3Response<PutBucketVersioningOutput>> {
        // Accepted and ignored: versioning is always Enabled here.
        self.bucket(&req.input.bucket)?;
        Ok(S3Response::new(PutBucketVersioningOutput {}))
    }

    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        let input = req.input;
        no_delimiter(input.delimiter.as_ref())?;
        let max = page_size(input.max_keys, "max-keys")?;
        let version_marker = match input.version_id_marker.as_deref().filter(|t| !t.is_empty()) {
            None => VersionMarker::None,
            Some(text) => VersionMarker::Id(
                parse_id(text)
                    .ok_or_else(|| s3_error!(InvalidArgument, "Invalid version id specified"))?,
            ),
        };
        let prefix = input.prefix.clone().unwrap_or_default();
        let bucket = self.bucket(&input.bucket)?;
        let mut versions = Vec::new();
        let mut markers = Vec::new();
        let next = {
            let objects = bucket.objects.read();
            let listing = objects
                .list_versions(&prefix, input.key_marker.as_deref(), version_marker, max)
                .map_err(|e| s3_error!(InvalidArgument, "{e}"))?;
            for entry in listing.entries {
                let version_id = Some(render_id(entry.version.id));
                let last_modified = Some(timestamp(entry.version.modified));
                if entry.version.is_marker() {
                    markers.push(DeleteMarkerEntry {
                        is_latest: Some(entry.is_latest),
                        key: Some(entry.key),
                        last_modified,
                        owner: None,
                        version_id,
                    });
                } else {
                    versions.push(ObjectVersion {
                        e_tag: strong(objects.etag(&entry.version)),
                        is_latest: Some(entry.is_latest),
                        key: Some(entry.key),
                        last_modified,
                        size: Some(size(entry.version.size)),
                        storage_class: Some(ObjectVersionStorageClass::from_static(
                            ObjectVersionStorageClass::STANDARD,
                        )),
                        version_id,
                        ..Default::default()
                    });
                }
            }
            listing.next
        };
        let (next_key_marker, next_version_id_marker) =
            next.map(|(key, id)| (key, render_id(id))).unzip();
        Ok(S3Response::new(ListObjectVersionsOutput {
            delete_markers: non_empty(markers),
            is_truncated: Some(next_key_marker.is_some()),
            key_marker: input.key_marker,
            max_keys: input.max_keys.or(Some(MAX_KEYS as i32)),
            name: Some(input.bucket),
            next_key_marker,
            next_version_id_marker,
            prefix: Some(prefix),
            version_id_marker: input.version_id_marker,
            versions: non_empty(versions),
            ..Default::default()
        }))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let input = req.input;
        no_delimiter(input.delimiter.as_ref())?;
        let max = page_size(input.max_keys, "max-keys")?;
        let after = match input.continuation_token.as_deref() {
            Some(token) => Some(
                hex::decode(token)
                    .ok()
                    .and_then(|raw| String::from_utf8(raw).ok())
                    .ok_or_else(|| {
                        s3_error!(
                            InvalidArgument,
                            "The continuation token provided is incorrect"
                        )
                    })?,
            ),
            None => input.start_after.clone(),
        };
        let prefix = input.prefix.clone().unwrap_or_default();
        let bucket = self.bucket(&input.bucket)?;
        let (contents, truncated) = {
            let objects = bucket.objects.read();
            let listing = objects.list_objects(&prefix, after.as_deref(), max);
            let contents: Vec<Object> = listing
                .objects
                .into_iter()
                .map(|(key, version)| Object {
                    e_tag: strong(objects.etag(&version)),
                    key: Some(key),
                    last_modified: Some(timestamp(version.modified)),
                    size: Some(size(version.size)),
                    storage_class: Some(ObjectStorageClass::from_static(
                        ObjectStorageClass::STANDARD,
                    )),
                    ..Default::default()
                })
                .collect();
            (contents, listing.truncated)
        };
        let next_continuation_token = if truncated {
            contents
                .last()
                .and_then(|object| object.key.as_ref())
                .map(hex::encode)
        } else {
            None
        };
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(input.bucket),
            prefix: Some(prefix),
            max_keys: input.max_keys.or(Some(MAX_KEYS as i32)),
            key_count: Some(i32::try_from(contents.len()).unwrap_or(i32::MAX)),
            continuation_token: input.continuation_token,
            is_truncated: Some(truncated),
            next_continuation_token,
            contents: non_empty(contents),
            start_after: input.start_after,
            ..Default::default()
        }))
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let input = req.input;
        let requested = input.delete.objects;
        if requested.is_empty() || requested.len() > MAX_KEYS {
            return Err(s3_error!(
                MalformedXML,
                "The XML you provided was not well-formed or did not validate against our \
                 published schema"
            ));
        }
        let quiet = input.delete.quiet.unwrap_or(false);
        let bucket = self.bucket(&input.bucket)?;
        self.state
            .charge_deletes(requested.iter().map(|o| o.key.as_str()))
            .map_err(|_| slow_down())?;

        // Everything but the map updates happens outside the lock.
        enum Plan {
            Remove(u64),
            Absent,
            Mark(u64),
        }
        let marks = requested
            .iter()
            .filter(|o| o.version_id.as_deref().is_none_or(str::is_empty))
            .count() as u64;
        let mut next_mark = if marks > 0 {
            self.state.reserve_ids(marks)
        } else {
            0
        };
        let plans: Vec<Plan> = requested
            .iter()
            .map(
                |o| match o.version_id.as_deref().filter(|t| !t.is_empty()) {
                    Some(text) => parse_id(text).map_or(Plan::Absent, Plan::Remove),
                    None => {
                        next_mark += 1;
                        Plan::Mark(next_mark - 1)
                    }
                },
            )
            .collect();
        let now = unix_now();
        let mut garbage = Garbage::default();
        let mut outcomes = Vec::with_capacity(plans.len());
        {
            let mut objects = bucket.objects.write();
            for (object, plan) in requested.iter().zip(&plans) {
                outcomes.push(match *plan {
                    Plan::Remove(id) => objects.remove_version(&object.key, id, &mut garbage),
                    Plan::Absent => Removed::Absent,
                    Plan::Mark(id) => {
                        objects.push(
                            &object.key,
                            Version {
                                id,
                                size: 0,
                                modified: now,
                                kind: Kind::Marker,
                            },
                            None,
                        );
                        Removed::Absent
                    }
                });
            }
        }
        drop(garbage);

        let removed = outcomes
            .iter()
            .filter(|o| matches!(o, Removed::Version { .. }))
            .count() as u64;
        self.state.stats.add_deleted(removed);
        self.state.stats.add_markers(marks);
        let deleted = if quiet {
            Vec::new()
        } else {
            requested
                .into_iter()
                .zip(plans.iter().zip(&outcomes))
                .map(|(object, (plan, outcome))| match (plan, outcome) {
                    (Plan::Mark(id), _) => DeletedObject {
                        key: Some(object.key),
                        delete_marker: Some(true),
                        delete_marker_version_id: Some(render_id(*id)),
                        version_id: None,
                    },
                    (_, Removed::Version { marker: true }) => DeletedObject {
                        delete_marker: Some(true),
                        delete_marker_version_id: object.version_id.clone(),
                        key: Some(object.key),
                        version_id: object.version_id,
                    },
                    _ => DeletedObject {
                        key: Some(object.key),
                        version_id: object.version_id,
                        ..Default::default()
                    },
                })
                .collect()
        };
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: Some(deleted),
            ..Default::default()
        }))
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let input = req.input;
        let bucket = self.bucket(&input.bucket)?;
        self.state
            .charge_deletes(std::iter::once(input.key.as_str()))
            .map_err(|_| slow_down())?;
        let asked = input.version_id.as_deref().filter(|t| !t.is_empty());
        let output = match asked {
            Some(text) => {
                let outcome = match parse_id(text) {
                    Some(id) => {
                        let mut garbage = Garbage::default();
                        let outcome =
                            bucket
                                .objects
                                .write()
                                .remove_version(&input.key, id, &mut garbage);
                        drop(garbage);
                        outcome
                    }
                    None => Removed::Absent,
                };
                let marker = outcome == Removed::Version { marker: true };
                if matches!(outcome, Removed::Version { .. }) {
                    self.state.stats.add_deleted(1);
                }
                DeleteObjectOutput {
                    delete_marker: marker.then_some(true),
                    version_id: Some(text.to_owned()),
                    ..Default::default()
                }
            }
            None => {
                let id = self.state.new_id();
                bucket.objects.write().push(
                    &input.key,
                    Version {
                        id,
                        size: 0,
                        modified: unix_now(),
                        kind: Kind::Marker,
                    },
                    None,
                );
                self.state.stats.add_markers(1);
                DeleteObjectOutput {
                    delete_marker: Some(true),
                    version_id: Some(render_id(id)),
                    ..Default::default()
                }
            }
        };
        Ok(S3Response::new(output))
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let input = req.input;
        let bucket = self.bucket(&input.bucket)?;
        let bytes = read_body(input.body).await?;
        let etag = hex::encode(md5(&bytes));
        let id = self.state.new_id();
        let version = Version {
            id,
            size: bytes.len() as u64,
            modified: unix_now(),
            kind: Kind::Stored,
        };
        bucket.objects.write().push(
            &input.key,
            version,
            Some(StoredBody {
                bytes,
                etag: etag.clone(),
            }),
        );
        Ok(S3Response::new(PutObjectOutput {
            e_tag: strong(etag),
            version_id: Some(render_id(id)),
            ..Default::default()
        }))
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let input = req.input;
        if input.range.is_some() || input.part_number.is_some() {
            return Err(s3_error!(
                NotImplemented,
                "The S3 double does not support ranged or part reads"
            ));
        }
        let asked = asked_version(input.version_id.as_deref())?;
        let bucket = self.bucket(&input.bucket)?;
        let resolved = {
            let objects = bucket.objects.read();
            resolve(objects.lookup(&input.key, asked), Version::synthetic_etag)?
        };
        Ok(S3Response::new(GetObjectOutput {
            body: Some(body_of(&resolved)),
            content_length: Some(size(resolved.version.size)),
            e_tag: strong(resolved.etag),
            last_modified: Some(timestamp(resolved.version.modified)),
            version_id: Some(render_id(resolved.version.id)),
            ..Default::default()
        }))
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let input = req.input;
        let asked = asked_version(input.version_id.as_deref())?;
        let bucket = self.bucket(&input.bucket)?;
        let resolved = {
            let objects = bucket.objects.read();
            resolve(objects.lookup(&input.key, asked), Version::synthetic_etag)?
        };
        Ok(S3Response::new(HeadObjectOutput {
            content_length: Some(size(resolved.version.size)),
            e_tag: strong(resolved.etag),
            last_modified: Some(timestamp(resolved.version.modified)),
            version_id: Some(render_id(resolved.version.id)),
            ..Default::default()
        }))
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let input = req.input;
        no_delimiter(input.delimiter.as_ref())?;
        let max = page_size(input.max_uploads, "max-uploads")?;
        let prefix = input.prefix.clone().unwrap_or_default();
        let bucket = self.bucket(&input.bucket)?;
        let listing = bucket.uploads.lock().list(
            &prefix,
            input.key_marker.as_deref(),
            input.upload_id_marker.as_deref(),
            max,
        );
        let uploads = listing
            .uploads
            .into_iter()
            .map(|(key, id, initiated)| MultipartUpload {
                key: Some(key),
                upload_id: Some(render_id(id)),
                initiated: Some(timestamp(initiated)),
                storage_class: Some(StorageClass::from_static(StorageClass::STANDARD)),
                ..Default::default()
            })
            .collect();
        let (next_key_marker, next_upload_id_marker) =
            listing.next.map(|(key, id)| (key, render_id(id))).unzip();
        Ok(S3Response::new(ListMultipartUploadsOutput {
            bucket: Some(input.bucket),
            is_truncated: Some(next_key_marker.is_some()),
            key_marker: input.key_marker,
            max_uploads: input.max_uploads.or(Some(MAX_KEYS as i32)),
            next_key_marker,
            next_upload_id_marker,
            prefix: Some(prefix),
            upload_id_marker: input.upload_id_marker,
            uploads: Some(uploads),
            ..Default::default()
        }))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let input = req.input;
        let bucket = self.bucket(&input.bucket)?;
        let id = self.state.new_id();
        bucket.uploads.lock().create(&input.key, id, unix_now());
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(render_id(id)),
            ..Default::default()
        }))
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let input = req.input;
        if !(1..=10_000).contains(&input.part_number) {
            return Err(s3_error!(
                InvalidArgument,
                "Part number must be an integer between 1 and 10000, inclusive"
            ));
        }
        let bucket = self.bucket(&input.bucket)?;
        let id = parse_id(&input.upload_id).ok_or_else(no_such_upload)?;
        if bucket.uploads.lock().get_mut(&input.key, id).is_none() {
            return Err(no_such_upload());
        }
        let bytes = read_body(input.body).await?;
        let digest = md5(&bytes);
        let mut uploads = bucket.uploads.lock();
        let upload = uploads.get_mut(&input.key, id).ok_or_else(no_such_upload)?;
        upload.parts.insert(
            input.part_number,
            UploadedPart {
                bytes,
                md5: digest,
                modified: unix_now(),
            },
        );
        Ok(S3Response::new(UploadPartOutput {
            e_tag: strong(hex::encode(digest)),
            ..Default::default()
        }))
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        let input = req.input;
        let max = page_size(input.max_parts, "max-parts")?;
        let after = input.part_number_marker.unwrap_or(0);
        let bucket = self.bucket(&input.bucket)?;
        let id = parse_id(&input.upload_id).ok_or_else(no_such_upload)?;
        let mut uploads = bucket.uploads.lock();
        let upload = uploads.get_mut(&input.key, id).ok_or_else(no_such_upload)?;
        let mut parts: Vec<Part> = upload
            .parts
            .range(after.saturating_add(1)..)
            .take(max + 1)
            .map(|(number, part)| Part {
                e_tag: strong(hex::encode(part.md5)),
                last_modified: Some(timestamp(part.modified)),
                part_number: Some(*number),
                size: Some(size(part.bytes.len() as u64)),
                ..Default::default()
            })
            .collect();
        drop(uploads);
        let truncated = parts.len() > max;
        parts.truncate(max);
        let next = parts
            .last()
            .and_then(|p| p.part_number)
            .filter(|_| truncated);
        Ok(S3Response::new(ListPartsOutput {
            bucket: Some(input.bucket),
            is_truncated: Some(truncated),
            key: Some(input.key),
            max_parts: Some(i32::try_from(max).unwrap_or(i32::MAX)),
            next_part_number_marker: next,
            part_number_marker: input.part_number_marker,
            parts: Some(parts),
            upload_id: Some(input.upload_id),
            ..Default::default()
        }))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let input = req.input;
        let bucket = self.bucket(&input.bucket)?;
        let upload_id = parse_id(&input.upload_id).ok_or_else(no_such_upload)?;
        let listed = input
            .multipart_upload
            .and_then(|m| m.parts)
            .unwrap_or_default();
        if listed.is_empty() {
            return Err(s3_error!(
                MalformedXML,
                "The XML you provided was not well-formed or did not validate against our \
                 published schema"
            ));
        }
        let chosen = {
            let mut uploads = bucket.uploads.lock();
            let upload = uploads
                .get_mut(&input.key, upload_id)
                .ok_or_else(no_such_upload)?;
            let mut chosen = Vec::with_capacity(listed.len());
            let mut previous = 0;
            for part in &listed {
                let number = part.part_number.unwrap_or(0);
                if number <= previous {
                    return Err(s3_error!(
                        InvalidPartOrder,
                        "The list of parts was not in ascending order."
                    ));
                }
                previous = number;
                let stored = upload.parts.get(&number).filter(|stored| {
                    part.e_tag
                        .as_ref()
                        .is_none_or(|e| e.value().trim_matches('"') == hex::encode(stored.md5))
                });
                match stored {
                    Some(stored) => chosen.push(stored.clone()),
                    None => {
                        return Err(s3_error!(
                            InvalidPart,
                            "One or more of the specified parts could not be found."
                        ));
                    }
                }
            }
            uploads.remove(&input.key, upload_id);
            chosen
        };
        let mut whole = BytesMut::with_capacity(chosen.iter().map(|p| p.bytes.len()).sum());
        let mut digests = Vec::with_capacity(chosen.len() * 16);
        for part in &chosen {
            whole.extend_from_slice(&part.bytes);
            digests.extend_from_slice(&part.md5);
        }
        let etag = format!("{}-{}", hex::encode(md5(&digests)), chosen.len());
        let id = self.state.new_id();
        let bytes = whole.freeze();
        bucket.objects.write().push(
            &input.key,
            Version {
                id,
                size: bytes.len() as u64,
                modified: unix_now(),
                kind: Kind::Stored,
            },
            Some(StoredBody {
                bytes,
                etag: etag.clone(),
            }),
        );
        Ok(S3Response::new(CompleteMultipartUploadOutput {
            bucket: Some(input.bucket.clone()),
            e_tag: strong(etag),
            key: Some(input.key.clone()),
            location: Some(format!("/{}/{}", input.bucket, input.key)),
            version_id: Some(render_id(id)),
            ..Default::default()
        }))
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let input = req.input;
        let bucket = self.bucket(&input.bucket)?;
        let id = parse_id(&input.upload_id).ok_or_else(no_such_upload)?;
        let removed = bucket.uploads.lock().remove(&input.key, id);
        match removed {
            Some(upload) => {
                drop(upload);
                Ok(S3Response::new(AbortMultipartUploadOutput::default()))
            }
            None => Err(no_such_upload()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signed_region_is_read_from_the_credential_scope() {
        let mut headers = HeaderMap::new();
        headers.insert(
            hyper::header::AUTHORIZATION,
            HeaderValue::from_static(
                "AWS4-HMAC-SHA256 Credential=AK/20250101/eu-west-1/s3/aws4_request, \
                 SignedHeaders=host, Signature=abc",
            ),
        );
        assert_eq!(signed_region(&headers).as_deref(), Some("eu-west-1"));
        assert_eq!(signed_region(&HeaderMap::new()), None);
    }

    #[test]
    fn slow_down_is_a_503_with_s3s_code() {
        let error = slow_down();
        assert_eq!(error.code().as_str(), "SlowDown");
        assert_eq!(
            error.code().status_code().map(|s| s.as_u16()),
            Some(503),
            "s3s maps SlowDown to 503"
        );
    }

    #[test]
    fn asked_versions_parse_or_answer_like_s3() {
        assert_eq!(asked_version(None).ok(), Some(None));
        assert_eq!(asked_version(Some(&render_id(7))).ok(), Some(Some(7)));
        assert_eq!(
            asked_version(Some("null")).err().map(|e| e.code().clone()),
            Some(S3ErrorCode::NoSuchVersion)
        );
        assert_eq!(
            asked_version(Some("garbage"))
                .err()
                .map(|e| e.code().clone()),
            Some(S3ErrorCode::InvalidArgument)
        );
    }
}
