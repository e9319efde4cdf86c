//! How the worker and the CLI reach Temporal, as the environment states it: plaintext, TLS with
//! the system roots or a CA file, mutual TLS with a client pair, an API key (Temporal Cloud
//! style), and the server name the certificate is checked against.
//!
//! The variable names are Temporal's own (`temporal` CLI and SDK environment configuration), so
//! an operator's existing settings work unchanged. The three `…_PATH` variables name files; the
//! API key may be `TEMPORAL_API_KEY` or, to keep it out of the process environment,
//! `TEMPORAL_API_KEY_FILE`. Pure: files are only named here, read by [`super::material`].

use crate::env::{StackEnv, StackEnvError};

/// `true` turns TLS on with the system roots; `false` refuses every other TLS setting.
pub const TEMPORAL_TLS: &str = "TEMPORAL_TLS";
/// PEM file of the CA certificates that sign the frontend's certificate.
pub const TEMPORAL_TLS_SERVER_CA_CERT_PATH: &str = "TEMPORAL_TLS_SERVER_CA_CERT_PATH";
/// Name the frontend's certificate is checked against, when it differs from the address's host.
pub const TEMPORAL_TLS_SERVER_NAME: &str = "TEMPORAL_TLS_SERVER_NAME";
/// PEM file of the client certificate (mutual TLS).
pub const TEMPORAL_TLS_CLIENT_CERT_PATH: &str = "TEMPORAL_TLS_CLIENT_CERT_PATH";
/// PEM file of the client certificate's private key (mutual TLS).
pub const TEMPORAL_TLS_CLIENT_KEY_PATH: &str = "TEMPORAL_TLS_CLIENT_KEY_PATH";
/// API key sent as `Authorization: Bearer …` (or `TEMPORAL_API_KEY_FILE`).
pub const TEMPORAL_API_KEY: &str = "TEMPORAL_API_KEY";

/// A secret value: never shown by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: String) -> Self {
        Secret(value)
    }

    /// The value, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// The client certificate and key files of mutual TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientPairFiles {
    /// `TEMPORAL_TLS_CLIENT_CERT_PATH`.
    pub cert_file: String,
    /// `TEMPORAL_TLS_CLIENT_KEY_PATH`.
    pub key_file: String,
}

/// TLS to the Temporal frontend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// CA file, else the system roots.
    pub ca_file: Option<String>,
    /// Server name override.
    pub server_name: Option<String>,
    /// Client pair, for mutual TLS.
    pub client: Option<ClientPairFiles>,
}

/// Everything but the address and namespace: how the connection is secured and authenticated.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TemporalAccess {
    /// `None`: plaintext.
    pub tls: Option<TlsSettings>,
    /// API key (implies TLS).
    pub api_key: Option<Secret>,
}

impl TemporalAccess {
    /// Plaintext, no credentials (the local dev server).
    pub fn plaintext() -> Self {
        Self::default()
    }

    /// One line for logs: which mode, which files — never the key.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        match &self.tls {
            None => parts.push("plaintext".to_owned()),
            Some(tls) => {
                parts.push(if tls.client.is_some() { "mTLS" } else { "TLS" }.to_owned());
                parts.push(match &tls.ca_file {
                    Some(file) => format!("CA {file}"),
                    None => "system roots".to_owned(),
                });
                if let Some(name) = &tls.server_name {
                    parts.push(format!("server name {name}"));
                }
            }
        }
        if self.api_key.is_some() {
            parts.push("API key".to_owned());
        }
        parts.join(", ")
    }
}

fn parse_switch(
    env: &StackEnv<impl Fn(&str) -> Option<String>>,
) -> Result<Option<bool>, StackEnvError> {
    match env
        .optional(TEMPORAL_TLS)
        .map(|v| v.to_ascii_lowercase())
        .as_deref()
    {
        None => Ok(None),
        Some("true" | "1" | "yes" | "on") => Ok(Some(true)),
        Some("false" | "0" | "no" | "off") => Ok(Some(false)),
        Some(other) => Err(StackEnvError::Invalid {
            name: TEMPORAL_TLS,
            value: other.to_owned(),
            expected: "true or false (any other TEMPORAL_TLS_* setting or an API key turns TLS on)",
        }),
    }
}

/// Reads the TLS and API-key settings. TLS is on when `TEMPORAL_TLS` is true or any TLS file,
/// the server name or an API key is set; `TEMPORAL_TLS=false` together with any of those is
/// refused, as is half a client pair.
pub fn read(
    env: &StackEnv<impl Fn(&str) -> Option<String>>,
) -> Result<TemporalAccess, StackEnvError> {
    let switch = parse_switch(env)?;
    let ca_file = env.optional(TEMPORAL_TLS_SERVER_CA_CERT_PATH);
    let server_name = env.optional(TEMPORAL_TLS_SERVER_NAME);
    let cert_file = env.optional(TEMPORAL_TLS_CLIENT_CERT_PATH);
    let key_file = env.optional(TEMPORAL_TLS_CLIENT_KEY_PATH);
    let api_key = env.optional_or_file(TEMPORAL_API_KEY)?.map(Secret::new);
    let client = match (cert_file, key_file) {
        (Some(cert_file), Some(key_file)) => Some(ClientPairFiles {
            cert_file,
            key_file,
        }),
        (None, None) => None,
        (Some(_), None) => {
            return Err(StackEnvError::Missing {
                name: TEMPORAL_TLS_CLIENT_KEY_PATH,
            });
        }
        (None, Some(_)) => {
            return Err(StackEnvError::Missing {
                name: TEMPORAL_TLS_CLIENT_CERT_PATH,
            });
        }
    };
    let wants_tls =
        ca_file.is_some() || server_name.is_some() || client.is_some() || api_key.is_some();
    if switch == Some(false) && wants_tls {
        return Err(StackEnvError::Invalid {
            name: TEMPORAL_TLS,
            value: "false".to_owned(),
            expected: "true, or unset: a TEMPORAL_TLS_* file, the server name or an API key is \
                       also set, and they need TLS (unset them for plaintext)",
        });
    }
    let tls = (switch == Some(true) || wants_tls).then_some(TlsSettings {
        ca_file,
        server_name,
        client,
    });
    Ok(TemporalAccess { tls, api_key })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn access(vars: &[(&str, &str)]) -> Result<TemporalAccess, StackEnvError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        read(&StackEnv::new(move |name: &str| map.get(name).cloned()))
    }

    #[test]
    fn nothing_set_is_plaintext() {
        assert_eq!(access(&[]), Ok(TemporalAccess::plaintext()));
        assert_eq!(
            access(&[(TEMPORAL_TLS, "false")]),
            Ok(TemporalAccess::plaintext())
        );
    }

    #[test]
    fn tls_alone_uses_the_system_roots() {
        let access = access(&[(TEMPORAL_TLS, "true")]).expect("valid");
        assert_eq!(
            access.tls,
            Some(TlsSettings {
                ca_file: None,
                server_name: None,
                client: None
            })
        );
        assert_eq!(access.describe(), "TLS, system roots");
    }

    #[test]
    fn any_tls_setting_or_an_api_key_turns_tls_on() {
        for (name, value) in [
            (TEMPORAL_TLS_SERVER_CA_CERT_PATH, "/ca.pem"),
            (TEMPORAL_TLS_SERVER_NAME, "ns.tmprl.cloud"),
            (TEMPORAL_API_KEY, "key"),
        ] {
            let read = access(&[(name, value)]).expect("valid");
            assert!(read.tls.is_some(), "{name}");
        }
    }

    #[test]
    fn mutual_tls_needs_both_halves_of_the_pair() {
        let full = access(&[
            (TEMPORAL_TLS_CLIENT_CERT_PATH, "/c.pem"),
            (TEMPORAL_TLS_CLIENT_KEY_PATH, "/c.key"),
        ])
        .expect("valid");
        assert_eq!(full.describe(), "mTLS, system roots");
        let error = access(&[(TEMPORAL_TLS_CLIENT_CERT_PATH, "/c.pem")]).expect_err("half");
        assert_eq!(error.name(), TEMPORAL_TLS_CLIENT_KEY_PATH);
        let error = access(&[(TEMPORAL_TLS_CLIENT_KEY_PATH, "/c.key")]).expect_err("half");
        assert_eq!(error.name(), TEMPORAL_TLS_CLIENT_CERT_PATH);
    }

    #[test]
    fn tls_off_with_tls_settings_is_a_contradiction() {
        let error = access(&[
            (TEMPORAL_TLS, "false"),
            (TEMPORAL_TLS_SERVER_CA_CERT_PATH, "/ca.pem"),
        ])
        .expect_err("contradiction");
        assert_eq!(error.name(), TEMPORAL_TLS);
        let error = access(&[(TEMPORAL_TLS, "maybe")]).expect_err("not a boolean");
        assert!(error.to_string().contains("true or false"), "{error}");
    }

    #[test]
    fn the_api_key_never_shows_and_may_come_from_a_file() {
        let read = access(&[(TEMPORAL_API_KEY, "sekret-key")]).expect("valid");
        assert!(!format!("{read:?}").contains("sekret-key"));
        assert!(!read.describe().contains("sekret-key"));
        let path = std::env::temp_dir().join(format!("buzz-api-key-{}", uuid::Uuid::new_v4()));
        std::fs::write(&path, "from-file\n").expect("write");
        let read = access(&[("TEMPORAL_API_KEY_FILE", path.to_str().expect("utf-8 path"))])
            .expect("valid");
        assert_eq!(read.api_key.as_ref().map(Secret::expose), Some("from-file"));
        let both = access(&[
            (TEMPORAL_API_KEY, "k"),
            ("TEMPORAL_API_KEY_FILE", path.to_str().expect("utf-8 path")),
        ]);
        assert_eq!(
            both,
            Err(StackEnvError::Ambiguous {
                name: TEMPORAL_API_KEY
            })
        );
        let _ = std::fs::remove_file(path);
    }
}
