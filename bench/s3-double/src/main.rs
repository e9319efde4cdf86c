//! `buzz-s3-double`: the in-memory versioned S3 server for throughput benchmarks.

#![deny(unsafe_code)]

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use s3_double::state::{State, Tuning};
use s3_double::{Keys, serve};
use tokio::net::TcpListener;

/// In-memory, versioned S3 server for throughput benchmarks only (never for correctness
/// tests: those always use the real Ceph RGW).
#[derive(Debug, Parser)]
#[command(name = "buzz-s3-double", version)]
struct Args {
    /// Address to listen on, e.g. 127.0.0.1:9000 (port 0 picks a free one; the address is
    /// printed on the first line of stdout).
    #[arg(long)]
    listen: SocketAddr,
    /// Access key id requests must be signed with (SigV4).
    #[arg(long, default_value = "buzz-double")]
    access_key: String,
    /// Secret access key.
    #[arg(long, default_value = "buzz-double-secret")]
    secret_key: String,
    /// Bucket created at start, versioning Enabled (repeatable).
    #[arg(long = "bucket")]
    buckets: Vec<String>,
    /// The region requests must be signed for.
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// Milliseconds slept before answering DeleteObjects, DeleteObject, AbortMultipartUpload.
    #[arg(long, default_value_t = 0)]
    latency_ms_delete: u64,
    /// Milliseconds slept before answering a listing.
    #[arg(long, default_value_t = 0)]
    latency_ms_list: u64,
    /// Milliseconds slept before answering any other call.
    #[arg(long, default_value_t = 0)]
    latency_ms_other: u64,
    /// Deleted keys per second per partition (token bucket, one second of burst); 0 = unlimited.
    #[arg(long, default_value_t = 0.0)]
    delete_rate_per_partition: f64,
    /// A key's partition ends at its D-th '/' (2: `media/<uuid>/`).
    #[arg(long, default_value_t = 2)]
    partition_depth: usize,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                // s3s logs every 5xx (each SlowDown) at error level: off unless asked for.
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,s3s=off")),
        )
        .with_writer(std::io::stderr)
        .init();
    anyhow::ensure!(
        args.delete_rate_per_partition.is_finite() && args.delete_rate_per_partition >= 0.0,
        "--delete-rate-per-partition must be a finite number >= 0"
    );
    let tuning = Tuning {
        latency_ms_delete: args.latency_ms_delete,
        latency_ms_list: args.latency_ms_list,
        latency_ms_other: args.latency_ms_other,
        delete_rate_per_partition: args.delete_rate_per_partition,
        partition_depth: args.partition_depth,
    };
    let state = Arc::new(State::new(args.region.clone(), tuning));
    for bucket in &args.buckets {
        state.create_bucket(bucket);
    }
    let keys = Keys {
        access_key: args.access_key,
        secret_key: args.secret_key,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    runtime.block_on(async move {
        let listener = TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let local = listener.local_addr().context("no local address")?;
        let mut stdout = std::io::stdout();
        writeln!(stdout, "buzz-s3-double listening on http://{local}")?;
        stdout.flush()?;
        tracing::info!(%local, region = %args.region, buckets = ?args.buckets, "serving");
        tokio::select! {
            () = serve(listener, state, keys) => Ok(()),
            signal = tokio::signal::ctrl_c() => signal.context("cannot wait for Ctrl-C"),
        }
    })
}
