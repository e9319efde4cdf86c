//! How a relay wraps its external serving writes in serving-write leases.
//!
//! The three external calls (an S3 PutObject, a Redis write, a push) are stand-ins here, plain
//! async functions, so the example needs no AWS or Redis crate; in a relay they are the real
//! client calls, unchanged. Run against the local stack:
//!
//! ```text
//! source .state/env
//! cargo run -p serving --example relay_put -- <community-uuid> [<user-pubkey>]
//! ```
//!
//! It connects with `BUZZ_SERVING_DATABASE_URL` (the serving role), admits one write per
//! external call, and prints what a relay would answer its client.

use std::time::Duration;

use serving::{
    ServingDb, ServingError, ServingLeaseConfig, acquire_serving_write_with,
    acquire_user_serving_write_with,
};
use uuid::Uuid;

/// Stand-in for `s3.put_object().bucket(..).key(..).body(..).send()`: returns an ETag.
async fn put_object(key: &str, body: &[u8]) -> Result<String, std::io::Error> {
    tokio::time::sleep(Duration::from_millis(20)).await;
    Ok(format!("\"etag-of-{key}-{}-bytes\"", body.len()))
}

/// Stand-in for `redis::cmd("SET").arg(key).arg(value).query_async(..)`.
async fn redis_set(key: &str, value: &str) -> Result<(), std::io::Error> {
    tokio::time::sleep(Duration::from_millis(5)).await;
    let _ = (key, value);
    Ok(())
}

/// Stand-in for a push to a subscriber's device.
async fn push(to: &str, message: &str) -> Result<(), std::io::Error> {
    tokio::time::sleep(Duration::from_millis(10)).await;
    let _ = (to, message);
    Ok(())
}

/// What the relay answers its client for one write.
#[derive(Debug)]
enum Answer {
    /// The write is done.
    Stored(String),
    /// The community or user is being deleted: answer "gone"/"unavailable", do not retry.
    Unavailable(String),
    /// The write was abandoned under a lost lease or past its bound; it may or may not have
    /// landed. The deletion will erase it either way; report failure to the client.
    Abandoned(String),
    /// Anything else (database unreachable, bad input): an ordinary server error, retryable by
    /// the client if the database error is.
    Failed(String),
}

impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Answer::Stored(what) => write!(f, "201 stored {what}"),
            Answer::Unavailable(why) => write!(f, "410 unavailable: {why}"),
            Answer::Abandoned(why) => write!(f, "500 abandoned: {why}"),
            Answer::Failed(why) => write!(f, "500 failed: {why}"),
        }
    }
}

impl From<ServingError> for Answer {
    fn from(error: ServingError) -> Self {
        match error {
            refused if refused.is_refused_because_fenced() => {
                Answer::Unavailable(refused.to_string())
            }
            ServingError::UnknownCommunity { .. } => Answer::Unavailable(error.to_string()),
            lost @ (ServingError::LeaseLost { .. } | ServingError::OperationTooLong { .. }) => {
                Answer::Abandoned(lost.to_string())
            }
            other => Answer::Failed(other.to_string()),
        }
    }
}

/// One community write: an S3 object under a lease, released when done.
async fn store_media(db: &ServingDb, community: Uuid, config: &ServingLeaseConfig) -> Answer {
    let guard = match acquire_serving_write_with(db, community, "s3_put", config).await {
        Ok(guard) => guard,
        Err(refused) => return refused.into(),
    };
    let key = format!("communities/{community}/media/{}", Uuid::new_v4());
    let etag = match guard.protect(put_object(&key, b"hello")).await {
        Ok(Ok(etag)) => etag,
        // The S3 call itself failed: the lease is still released by `finish` below.
        Ok(Err(io)) => {
            let _ = guard.finish().await;
            return Answer::Failed(io.to_string());
        }
        Err(lost) => return lost.into(),
    };
    match guard.finish().await {
        Ok(()) => Answer::Stored(etag),
        Err(lost) => lost.into(),
    }
}

/// One write made for a user: a Redis key and a push, both under one user lease.
async fn cache_and_notify(
    db: &ServingDb,
    community: Uuid,
    pubkey: &str,
    config: &ServingLeaseConfig,
) -> Answer {
    let guard =
        match acquire_user_serving_write_with(db, community, pubkey, "redis_set", config).await {
            Ok(guard) => guard,
            Err(refused) => return refused.into(),
        };
    let key = format!("community:{community}:user:{pubkey}:last_seen");
    let written = guard
        .protect(async {
            redis_set(&key, "now").await?;
            push(pubkey, "you have a new message").await
        })
        .await;
    match (written, guard.finish().await) {
        (Ok(Ok(())), Ok(())) => Answer::Stored(key),
        (Ok(Err(io)), _) => Answer::Failed(io.to_string()),
        (Err(lost), _) | (Ok(Ok(())), Err(lost)) => lost.into(),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let community: Uuid = args
        .next()
        .ok_or("usage: relay_put <community-uuid> [<user-pubkey>]")?
        .parse()?;
    let pubkey = args.next();
    let url = std::env::var("BUZZ_SERVING_DATABASE_URL")
        .map_err(|_| "set BUZZ_SERVING_DATABASE_URL to the serving role's connection string")?;
    // One handle per process, shared by every request handler (it is a pool).
    let db = ServingDb::connect(&url).await?;
    let config = ServingLeaseConfig::default();

    println!("s3 put: {}", store_media(&db, community, &config).await);
    if let Some(pubkey) = pubkey {
        println!(
            "redis write + push for {pubkey}: {}",
            cache_and_notify(&db, community, &pubkey, &config).await
        );
    }
    Ok(())
}
