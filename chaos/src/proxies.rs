//! The network between the workers and each dependency: one TCP proxy per dependency, built on
//! noxious (the Rust port of Toxiproxy). The workers are configured with the proxies' addresses,
//! so a network fault hits exactly their connections, never the serving traffic's or the
//! checker's.
//!
//! - latency: noxious' latency toxic, added to and removed from the live connections;
//! - dropped connections: the proxy is stopped (noxious closes every link) and started again on
//!   the same port when the fault ends; meanwhile connecting is refused;
//! - half-open connections: noxious' timeout toxic with timeout 0 in both directions (bytes are
//!   swallowed, nothing is closed); at the end the proxy is restarted, resetting them, as a peer
//!   that has forgotten a connection answers the next segment with a reset.

use std::net::TcpListener as StdListener;

use anyhow::{Context, Result, anyhow};
use bmrng::RequestSender;
use noxious::proxy::{ProxyConfig, ProxyRunner, Runner, Toxics};
use noxious::signal::{Close, Stop, Stopper};
use noxious::socket::TcpListener;
use noxious::toxic::{
    StreamDirection, Toxic, ToxicEvent, ToxicEventKind, ToxicEventResult, ToxicKind,
};
use tokio::task::JoinHandle;

use crate::schedule::Dependency;

/// Latency added by a latency fault, and its jitter, in milliseconds.
const LATENCY_MS: u64 = 300;
const JITTER_MS: u64 = 200;

/// A free loopback port (bound, read, released: the proxy binds it right after).
pub fn free_port() -> Result<u16> {
    let listener = StdListener::bind("127.0.0.1:0").context("no free loopback port")?;
    Ok(listener.local_addr()?.port())
}

/// A running proxy instance.
struct Running {
    events: RequestSender<ToxicEvent, ToxicEventResult>,
    stopper: Stopper,
    task: JoinHandle<()>,
}

/// One dependency's proxy.
pub struct NetProxy {
    dependency: Dependency,
    listen: String,
    upstream: String,
    running: Option<Running>,
}

impl NetProxy {
    /// Starts a proxy for `dependency` on a free loopback port in front of `upstream`
    /// (`host:port`).
    pub async fn start(dependency: Dependency, upstream: String) -> Result<NetProxy> {
        let listen = format!("127.0.0.1:{}", free_port()?);
        let mut proxy = NetProxy {
            dependency,
            listen,
            upstream,
            running: None,
        };
        proxy.open().await?;
        Ok(proxy)
    }

    /// The address workers connect to.
    pub fn listen(&self) -> &str {
        &self.listen
    }

    /// The port workers connect to.
    pub fn port(&self) -> Result<u16> {
        self.listen()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| anyhow!("proxy address {} has no port", self.listen))
    }

    async fn open(&mut self) -> Result<()> {
        let config = ProxyConfig {
            name: self.dependency.name().to_owned(),
            listen: self.listen.clone(),
            upstream: self.upstream.clone(),
            enabled: true,
            rand_seed: None,
        };
        // The port was just released by a stop: binding may need a moment.
        let mut attempt = 0;
        let (listener, info) = loop {
            match ProxyRunner::initialize_proxy::<TcpListener>(config.clone(), Toxics::empty())
                .await
            {
                Ok(ready) => break ready,
                Err(error) if attempt < 50 => {
                    attempt += 1;
                    tracing::debug!(%error, proxy = %self.listen, "binding the proxy again");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(error) => {
                    return Err(error).with_context(|| {
                        format!(
                            "{} proxy cannot bind {}",
                            self.dependency.name(),
                            self.listen
                        )
                    });
                }
            }
        };
        let (events, receiver) = bmrng::channel(4);
        let (stop, stopper) = Stop::new();
        let (_close, closer) = Close::new();
        let name = self.dependency.name();
        let task = tokio::spawn(async move {
            if let Err(error) = ProxyRunner::run_proxy(listener, info, receiver, stop, closer).await
            {
                tracing::warn!(%error, proxy = name, "proxy ended");
            }
        });
        self.running = Some(Running {
            events,
            stopper,
            task,
        });
        Ok(())
    }

    /// Stops the proxy: every connection through it is closed, new ones are refused.
    pub async fn close(&mut self) {
        if let Some(running) = self.running.take() {
            running.stopper.stop();
            let _ = running.task.await;
        }
    }

    async fn send(&mut self, kind: ToxicEventKind) -> Result<()> {
        let running = self
            .running
            .as_mut()
            .ok_or_else(|| anyhow!("the {} proxy is not running", self.dependency.name()))?;
        let event = ToxicEvent::new(self.dependency.name().to_owned(), kind);
        running
            .events
            .send_receive(event)
            .await
            .map_err(|e| {
                anyhow!(
                    "the {} proxy did not take a toxic: {e}",
                    self.dependency.name()
                )
            })?
            .map_err(|e| anyhow!("the {} proxy refused a toxic: {e}", self.dependency.name()))
    }

    /// Adds a toxic of `kind` to both directions, each named `{name}_{direction}`.
    async fn add_both_ways(&mut self, name: &str, kind: ToxicKind) -> Result<()> {
        for direction in [StreamDirection::Upstream, StreamDirection::Downstream] {
            let toxic = Toxic {
                kind,
                name: format!("{name}_{direction}"),
                toxicity: 1.0,
                direction,
            };
            self.send(ToxicEventKind::AddToxic(toxic)).await?;
        }
        Ok(())
    }

    /// Adds the latency toxic to both directions.
    pub async fn add_latency(&mut self) -> Result<()> {
        let latency = ToxicKind::Latency {
            latency: LATENCY_MS,
            jitter: JITTER_MS,
        };
        self.add_both_ways("latency", latency).await
    }

    /// Removes the latency toxic from the live connections. Each direction is removed by name:
    /// noxious 1.0.4's `RemoveAllToxics` clears only the upstream list and leaves the downstream
    /// latency in place (found by the chaos run: every activity slowed for good after a latency
    /// fault; the unit test below pins it).
    pub async fn remove_latency(&mut self) -> Result<()> {
        for direction in [StreamDirection::Upstream, StreamDirection::Downstream] {
            self.send(ToxicEventKind::RemoveToxic(format!("latency_{direction}")))
                .await?;
        }
        Ok(())
    }

    /// Makes every connection half-open: bytes are swallowed in both directions.
    pub async fn black_hole(&mut self) -> Result<()> {
        self.add_both_ways("half_open", ToxicKind::Timeout { timeout: 0 })
            .await
    }

    /// Drops every connection and accepts new ones again, with no toxic.
    pub async fn reset(&mut self) -> Result<()> {
        self.close().await;
        self.open().await
    }

    /// Starts the proxy again after [`NetProxy::close`].
    pub async fn reopen(&mut self) -> Result<()> {
        if self.running.is_none() {
            self.open().await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener as TokioListener, TcpStream};

    /// An echo server on loopback; returns its address.
    async fn echo_server() -> String {
        let listener = TokioListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let address = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buffer = [0u8; 1024];
                    while let Ok(n) = socket.read(&mut buffer).await {
                        if n == 0 || socket.write_all(&buffer[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        address.to_string()
    }

    async fn round_trip(stream: &mut TcpStream, timeout: Duration) -> Option<Duration> {
        let started = Instant::now();
        stream.write_all(b"ping").await.ok()?;
        let mut buffer = [0u8; 4];
        match tokio::time::timeout(timeout, stream.read_exact(&mut buffer)).await {
            Ok(Ok(_)) if &buffer == b"ping" => Some(started.elapsed()),
            _ => None,
        }
    }

    /// A new connection through the proxy.
    async fn connect(proxy: &NetProxy) -> TcpStream {
        TcpStream::connect(proxy.listen())
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Whether a new connection through the proxy answers a round trip within 2 s.
    async fn fresh_connection_answers(proxy: &NetProxy) -> bool {
        let mut fresh = connect(proxy).await;
        round_trip(&mut fresh, Duration::from_secs(2))
            .await
            .is_some()
    }

    #[tokio::test]
    async fn each_network_fault_does_what_it_says_and_heals() {
        let upstream = echo_server().await;
        let mut proxy = NetProxy::start(Dependency::Redis, upstream)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let mut client = connect(&proxy).await;
        let quick = round_trip(&mut client, Duration::from_secs(2)).await;
        assert!(
            quick.is_some_and(|d| d < Duration::from_millis(100)),
            "{quick:?}"
        );

        proxy.add_latency().await.unwrap_or_else(|e| panic!("{e}"));
        let slow = round_trip(&mut client, Duration::from_secs(5)).await;
        assert!(
            slow.is_some_and(|d| d >= Duration::from_millis(200)),
            "{slow:?}"
        );
        proxy
            .remove_latency()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        for _ in 0..3 {
            let healed = round_trip(&mut client, Duration::from_secs(2)).await;
            assert!(
                healed.is_some_and(|d| d < Duration::from_millis(100)),
                "{healed:?}"
            );
        }

        proxy.black_hole().await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            round_trip(&mut client, Duration::from_millis(800)).await,
            None
        );
        proxy.reset().await.unwrap_or_else(|e| panic!("{e}"));
        // The half-open connection was reset; a new one works.
        let mut buffer = [0u8; 8];
        let read = tokio::time::timeout(Duration::from_secs(2), client.read(&mut buffer)).await;
        assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
        assert!(fresh_connection_answers(&proxy).await);

        proxy.close().await;
        assert!(TcpStream::connect(proxy.listen()).await.is_err());
        proxy.reopen().await.unwrap_or_else(|e| panic!("{e}"));
        assert!(fresh_connection_answers(&proxy).await);
    }
}
