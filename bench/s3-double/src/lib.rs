//! `buzz-s3-double`: a fast, in-memory, versioned S3 server for throughput benchmarks only
//! (correctness tests always run against the real Ceph RGW). See README.md.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod control;
pub mod limiter;
pub mod s3;
pub mod state;
pub mod store;

use std::sync::Arc;
use std::time::Duration;

use hyper::Request;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use s3s::auth::SimpleAuth;
use s3s::service::{S3Service, S3ServiceBuilder};
use s3s::{HttpError, HttpResponse};
use tokio::net::TcpListener;

use crate::s3::{DoubleAccess, DoubleS3};
use crate::state::State;

/// The access key pair requests must be signed with.
#[derive(Debug, Clone)]
pub struct Keys {
    /// Access key id.
    pub access_key: String,
    /// Secret access key.
    pub secret_key: String,
}

/// The s3s service: SigV4 checked against `keys`, every call counted and delayed by
/// [`DoubleAccess`], operations answered by [`DoubleS3`].
pub fn s3_service(state: &Arc<State>, keys: &Keys) -> S3Service {
    let mut builder = S3ServiceBuilder::new(DoubleS3::new(Arc::clone(state)));
    builder.set_auth(SimpleAuth::from_single(
        keys.access_key.clone(),
        keys.secret_key.clone(),
    ));
    builder.set_access(DoubleAccess::new(Arc::clone(state)));
    builder.build()
}

/// Answers one HTTP request: `/_double/…` goes to the control endpoints, the rest to S3.
async fn route(
    state: Arc<State>,
    s3: S3Service,
    req: Request<Incoming>,
) -> Result<HttpResponse, HttpError> {
    if req.uri().path().starts_with(control::PREFIX) {
        return Ok(control::handle(state, req).await);
    }
    s3.call(req.map(s3s::Body::from)).await
}

/// Serves HTTP/1.1 (keep-alive) on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, state: Arc<State>, keys: Keys) {
    let s3 = s3_service(&state, &keys);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of file descriptors and the like: wait rather than spin.
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY");
        }
        let state = Arc::clone(&state);
        let s3 = s3.clone();
        tokio::spawn(async move {
            let service =
                hyper::service::service_fn(move |req| route(Arc::clone(&state), s3.clone(), req));
            if let Err(error) = http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%error, "connection ended with an error");
            }
        });
    }
}
