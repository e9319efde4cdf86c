//! Connects a Temporal client as [`TemporalAccess`] says, and turns a refusal into one line that
//! names Temporal, the address, what went wrong and which variable fixes it.
//!
//! The cause is found by type, walking the error's source chain: a `rustls::Error` (bad or
//! expired server certificate, a TLS alert from a server that wants a client certificate) or the
//! gRPC status of the first call (`UNAUTHENTICATED` / `PERMISSION_DENIED`: a proxy or Temporal
//! Cloud refusing the API key or the client certificate). Never a match on message text.

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use rustls::AlertDescription;
use temporalio_client::errors::ClientConnectError;
use temporalio_client::{Client, ClientOptions, ClientTlsOptions, ConnectionOptions, TlsOptions};
use tonic::Code;

use super::material::{self, MaterialError, TlsMaterial};
use super::settings::{
    TEMPORAL_API_KEY, TEMPORAL_TLS_CLIENT_CERT_PATH, TEMPORAL_TLS_SERVER_CA_CERT_PATH,
    TEMPORAL_TLS_SERVER_NAME, TemporalAccess,
};
use crate::tls::{ServerCertificateProblem, find_tls_error, server_certificate_problem};

/// Why no Temporal client could be made.
#[derive(Debug, thiserror::Error)]
pub enum TemporalConnectError {
    /// `TEMPORAL_ADDRESS` does not parse, or contradicts the TLS settings.
    #[error("Temporal: TEMPORAL_ADDRESS={address:?} is invalid: {reason}")]
    Address {
        /// As configured.
        address: String,
        /// Why.
        reason: String,
    },
    /// A TLS file cannot serve.
    #[error("Temporal: {0}")]
    Material(#[from] MaterialError),
    /// The server (or a proxy before it) refused this client.
    #[error("Temporal at {address} refused the connection: {reason}: {fix}")]
    Refused {
        /// Where.
        address: String,
        /// What was refused, as established from the error's type.
        reason: String,
        /// What to change.
        fix: String,
    },
    /// Nothing usable answered.
    #[error("Temporal is not reachable at {address}: {detail}")]
    Unreachable {
        /// Where.
        address: String,
        /// The underlying error, on one line.
        detail: String,
    },
}

/// The URL the client is given: `https://` with TLS, `http://` without; a scheme written in the
/// address must agree.
pub fn target_url(address: &str, tls: bool) -> Result<url::Url, TemporalConnectError> {
    let invalid = |reason: String| TemporalConnectError::Address {
        address: address.to_owned(),
        reason,
    };
    let scheme = if tls { "https" } else { "http" };
    let with_scheme = match address.split_once("://") {
        None => format!("{scheme}://{address}"),
        Some((written, _)) if written == scheme => address.to_owned(),
        Some((written, _)) => {
            return Err(invalid(if tls {
                format!(
                    "{written}:// is plaintext but TLS is configured (TEMPORAL_TLS*, TEMPORAL_API_KEY): write host:port or https://"
                )
            } else {
                format!(
                    "{written}:// needs TLS: set TEMPORAL_TLS=true (and TEMPORAL_TLS_SERVER_CA_CERT_PATH for a private CA), or write host:port"
                )
            }));
        }
    };
    url::Url::parse(&with_scheme).map_err(|e| invalid(e.to_string()))
}

/// The SDK's connection options for `access`, its files already read by [`material::load`].
pub fn connection_options(
    url: url::Url,
    identity: String,
    access: &TemporalAccess,
    material: Option<&TlsMaterial>,
) -> ConnectionOptions {
    let tls_options = material.map(|material| {
        TlsOptions::builder()
            .maybe_server_root_ca_cert(material.ca_pem.clone())
            .maybe_domain(material.server_name.clone())
            .maybe_client_tls_options(material.client.as_ref().map(|(cert, key)| {
                ClientTlsOptions::builder()
                    .client_cert(cert.clone())
                    .client_private_key(key.clone())
                    .build()
            }))
            .build()
    });
    ConnectionOptions::new(url)
        .identity(identity)
        .maybe_tls_options(tls_options)
        .maybe_api_key(access.api_key.as_ref().map(|key| key.expose().to_owned()))
        .build()
}

/// The SDK's connection future, boxed.
pub type ClientConnecting =
    Pin<Box<dyn Future<Output = Result<Client, ClientConnectError>> + Send>>;

/// `Client::connect`, the one place the workspace compiles it: every Temporal client of the
/// worker, the CLI, bench, chaos and the tests is made through here.
///
/// The state machine of an async function is compiled into every crate that awaits it, and this
/// one (the gRPC channel, TLS and retry layers under it) is large: about 16 CPU-seconds of a
/// dev build in each crate and test target that awaited it directly. Behind a box, only this
/// crate compiles it; the others poll it through the box.
pub fn client_connect(connection: ConnectionOptions, client: ClientOptions) -> ClientConnecting {
    Box::pin(Client::connect(connection, client))
}

/// Connects within `timeout`: checks the TLS files, connects, and makes the SDK's first call.
pub async fn connect(
    address: &str,
    namespace: &str,
    access: &TemporalAccess,
    identity: String,
    timeout: Duration,
) -> Result<Client, TemporalConnectError> {
    let url = target_url(address, access.tls.is_some())?;
    let material = access
        .tls
        .as_ref()
        .map(|tls| material::load(tls, SystemTime::now()))
        .transpose()?;
    let options = connection_options(url, identity, access, material.as_ref());
    let client_options = ClientOptions::new(namespace.to_owned()).build();
    match tokio::time::timeout(timeout, client_connect(options, client_options)).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(error)) => Err(explain(address, access, &error)),
        Err(_) => Err(TemporalConnectError::Unreachable {
            address: address.to_owned(),
            detail: format!(
                "no answer within {} s{}",
                timeout.as_secs(),
                if access.tls.is_some() {
                    " (is it serving TLS on that port?)"
                } else {
                    ""
                }
            ),
        }),
    }
}

/// What a failed connection means, from the types in its source chain.
pub fn explain(
    address: &str,
    access: &TemporalAccess,
    error: &ClientConnectError,
) -> TemporalConnectError {
    let refused = |reason: &str, fix: String| TemporalConnectError::Refused {
        address: address.to_owned(),
        reason: reason.to_owned(),
        fix,
    };
    if let Some(tls) = find_tls_error(error) {
        return explain_tls(tls, access, refused);
    }
    if let ClientConnectError::SystemInfoCallError(status) = error {
        match status.code() {
            Code::Unauthenticated | Code::PermissionDenied => {
                let fix = if access.api_key.is_some() {
                    format!(
                        "check that {TEMPORAL_API_KEY} (or {TEMPORAL_API_KEY}_FILE) holds a valid, unexpired key for this namespace"
                    )
                } else if access.tls.as_ref().is_some_and(|tls| tls.client.is_some()) {
                    format!(
                        "check that {TEMPORAL_TLS_CLIENT_CERT_PATH} is a certificate the server's client CA trusts"
                    )
                } else {
                    format!(
                        "this endpoint wants credentials: set {TEMPORAL_TLS_CLIENT_CERT_PATH} and TEMPORAL_TLS_CLIENT_KEY_PATH (mutual TLS) or {TEMPORAL_API_KEY}_FILE"
                    )
                };
                let reason = format!(
                    "{} ({})",
                    match status.code() {
                        Code::Unauthenticated => "credentials refused",
                        _ => "permission denied",
                    },
                    one_line(status.message())
                );
                return refused(&reason, fix);
            }
            _ => {}
        }
    }
    let detail = match error {
        ClientConnectError::SystemInfoCallError(status) => {
            format!("{:?}: {}", status.code(), one_line(status.message()))
        }
        other => chain_line(other),
    };
    let hint = if access.tls.is_none() {
        " (if this endpoint serves TLS, set TEMPORAL_TLS=true, and TEMPORAL_TLS_SERVER_CA_CERT_PATH for a private CA)"
    } else {
        ""
    };
    TemporalConnectError::Unreachable {
        address: address.to_owned(),
        detail: format!("{detail}{hint}"),
    }
}

fn explain_tls(
    tls: &rustls::Error,
    access: &TemporalAccess,
    refused: impl Fn(&str, String) -> TemporalConnectError,
) -> TemporalConnectError {
    let ca_file = access.tls.as_ref().and_then(|t| t.ca_file.as_deref());
    if let Some(problem) = server_certificate_problem(tls) {
        let fix = match problem {
            ServerCertificateProblem::Expired => {
                "the Temporal frontend (or the proxy before it) must be given a renewed certificate"
                    .to_owned()
            }
            ServerCertificateProblem::WrongName => {
                format!("set {TEMPORAL_TLS_SERVER_NAME} to a name the certificate carries")
            }
            other => other.fix(TEMPORAL_TLS_SERVER_CA_CERT_PATH, ca_file),
        };
        return refused(problem.reason(), fix);
    }
    // The same wording every service uses for a CA that does not sign the server's certificate.
    let ca_fix =
        || ServerCertificateProblem::UntrustedIssuer.fix(TEMPORAL_TLS_SERVER_CA_CERT_PATH, ca_file);
    match tls {
        rustls::Error::AlertReceived(alert) => match alert {
            AlertDescription::CertificateRequired | AlertDescription::HandshakeFailure
                if access.tls.as_ref().is_some_and(|t| t.client.is_none()) =>
            {
                refused(
                    "the server requires a client certificate (mutual TLS)",
                    format!("set {TEMPORAL_TLS_CLIENT_CERT_PATH} and TEMPORAL_TLS_CLIENT_KEY_PATH"),
                )
            }
            AlertDescription::CertificateExpired => refused(
                "the server says the client certificate has expired",
                format!("renew the certificate in {TEMPORAL_TLS_CLIENT_CERT_PATH}"),
            ),
            other => refused(
                &format!("the server ended the TLS handshake ({other:?})"),
                format!("check that {TEMPORAL_TLS_CLIENT_CERT_PATH} is a certificate the server's client CA trusts"),
            ),
        },
        rustls::Error::InvalidMessage(_) => refused(
            "the server does not speak TLS",
            "this port is plaintext: unset TEMPORAL_TLS and the TEMPORAL_TLS_* settings, or use the TLS port".to_owned(),
        ),
        other => refused(
            &format!("TLS failed ({other})"),
            ca_fix(),
        ),
    }
}

/// The error and its sources on one line, deduplicated.
fn chain_line(error: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(error) = current {
        let text = one_line(&error.to_string());
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        current = error.source();
    }
    parts.join(": ")
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheme_follows_tls_and_a_contradicting_one_is_refused() {
        let url = |address: &str, tls: bool| target_url(address, tls).map(|u| u.to_string());
        assert_eq!(
            url("127.0.0.1:7233", false).ok().as_deref(),
            Some("http://127.0.0.1:7233/")
        );
        assert_eq!(
            url("ns.acct.tmprl.cloud:7233", true).ok().as_deref(),
            Some("https://ns.acct.tmprl.cloud:7233/")
        );
        assert_eq!(
            url("https://h:7233", true).ok().as_deref(),
            Some("https://h:7233/")
        );
        let plaintext_with_tls = url("http://h:7233", true).expect_err("contradiction");
        assert!(
            plaintext_with_tls.to_string().contains("TLS is configured"),
            "{plaintext_with_tls}"
        );
        let tls_without = url("https://h:7233", false).expect_err("contradiction");
        assert!(
            tls_without.to_string().contains("TEMPORAL_TLS=true"),
            "{tls_without}"
        );
    }
}
