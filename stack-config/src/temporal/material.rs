//! The files named by [`super::settings`], read and checked before any connection: each must
//! hold PEM of the right kind, and a certificate outside its validity dates is refused with the
//! date, so an expired client certificate is named by the worker itself rather than guessed from
//! a server's refusal. Errors name the variable and the file, never their content.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use x509_cert::der::Decode;

use super::settings::{
    TEMPORAL_TLS_CLIENT_CERT_PATH, TEMPORAL_TLS_CLIENT_KEY_PATH, TEMPORAL_TLS_SERVER_CA_CERT_PATH,
    TlsSettings,
};

/// A TLS file that cannot serve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MaterialError {
    /// Unreadable, empty, or not the PEM expected.
    #[error("{variable}={path}: {reason}")]
    Unusable {
        /// The variable naming the file.
        variable: &'static str,
        /// The file.
        path: String,
        /// What is wrong with it (never its content).
        reason: String,
    },
    /// A certificate in the file is past its end date.
    #[error(
        "{variable}={path}: the certificate {subject} expired on {not_after}: renew it and point {variable} at the new file"
    )]
    Expired {
        /// The variable naming the file.
        variable: &'static str,
        /// The file.
        path: String,
        /// Its subject.
        subject: String,
        /// Its end date.
        not_after: String,
    },
    /// A certificate in the file is not valid yet (or the clock is wrong).
    #[error(
        "{variable}={path}: the certificate {subject} is not valid before {not_before}: check the clock of this host, or the certificate's dates"
    )]
    NotYetValid {
        /// The variable naming the file.
        variable: &'static str,
        /// The file.
        path: String,
        /// Its subject.
        subject: String,
        /// Its start date.
        not_before: String,
    },
}

/// The bytes the client is given: PEM as read, after the checks.
#[derive(Clone, PartialEq, Eq)]
pub struct TlsMaterial {
    /// CA certificates (PEM), else the system roots.
    pub ca_pem: Option<Vec<u8>>,
    /// Server name override.
    pub server_name: Option<String>,
    /// Client certificate and key (PEM).
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("ca_pem", &self.ca_pem.as_ref().map(Vec::len))
            .field("server_name", &self.server_name)
            .field(
                "client",
                &self.client.as_ref().map(|_| "(certificate, key)"),
            )
            .finish()
    }
}

fn read_file(variable: &'static str, path: &str) -> Result<Vec<u8>, MaterialError> {
    let unusable = |reason: String| MaterialError::Unusable {
        variable,
        path: path.to_owned(),
        reason,
    };
    let bytes = std::fs::read(path).map_err(|e| unusable(format!("cannot read the file ({e})")))?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(unusable("the file is empty".to_owned()));
    }
    Ok(bytes)
}

/// Checks every certificate in `pem` (at least one) is within its dates at `now`.
pub fn check_certificates(
    variable: &'static str,
    path: &str,
    pem: &[u8],
    now: SystemTime,
) -> Result<(), MaterialError> {
    let unusable = |reason: String| MaterialError::Unusable {
        variable,
        path: path.to_owned(),
        reason,
    };
    let ders = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| unusable(format!("not PEM certificates ({e})")))?;
    if ders.is_empty() {
        return Err(unusable(
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".to_owned(),
        ));
    }
    let now = now.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    for der in ders {
        let cert = x509_cert::Certificate::from_der(der.as_ref())
            .map_err(|e| unusable(format!("holds a certificate that does not parse ({e})")))?;
        let tbs = &cert.tbs_certificate;
        let subject = tbs.subject.to_string();
        let validity = &tbs.validity;
        if validity.not_after.to_unix_duration() < now {
            return Err(MaterialError::Expired {
                variable,
                path: path.to_owned(),
                subject,
                not_after: validity.not_after.to_string(),
            });
        }
        if validity.not_before.to_unix_duration() > now {
            return Err(MaterialError::NotYetValid {
                variable,
                path: path.to_owned(),
                subject,
                not_before: validity.not_before.to_string(),
            });
        }
    }
    Ok(())
}

fn check_private_key(variable: &'static str, path: &str, pem: &[u8]) -> Result<(), MaterialError> {
    PrivateKeyDer::from_pem_slice(pem)
        .map(drop)
        .map_err(|_| MaterialError::Unusable {
            variable,
            path: path.to_owned(),
            reason: "holds no PEM private key (PKCS#8, PKCS#1 or SEC1)".to_owned(),
        })
}

/// Reads and checks the files of `settings` at `now`.
pub fn load(settings: &TlsSettings, now: SystemTime) -> Result<TlsMaterial, MaterialError> {
    let ca_pem = match &settings.ca_file {
        Some(path) => {
            let pem = read_file(TEMPORAL_TLS_SERVER_CA_CERT_PATH, path)?;
            check_certificates(TEMPORAL_TLS_SERVER_CA_CERT_PATH, path, &pem, now)?;
            Some(pem)
        }
        None => None,
    };
    let client = match &settings.client {
        Some(files) => {
            let cert = read_file(TEMPORAL_TLS_CLIENT_CERT_PATH, &files.cert_file)?;
            check_certificates(TEMPORAL_TLS_CLIENT_CERT_PATH, &files.cert_file, &cert, now)?;
            let key = read_file(TEMPORAL_TLS_CLIENT_KEY_PATH, &files.key_file)?;
            check_private_key(TEMPORAL_TLS_CLIENT_KEY_PATH, &files.key_file, &key)?;
            Some((cert, key))
        }
        None => None,
    };
    Ok(TlsMaterial {
        ca_pem,
        server_name: settings.server_name.clone(),
        client,
    })
}

#[cfg(test)]
mod tests {
    //! Fixtures in `testdata/`: a throwaway CA and one client key, certified three times by
    //! `openssl ca` with fixed dates (valid 2025–2125, expired in 2020, valid only from 2099).
    use super::*;
    use crate::temporal::settings::ClientPairFiles;

    const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/temporal/testdata");

    fn path(name: &str) -> String {
        format!("{DIR}/{name}")
    }

    fn settings(cert: &str) -> TlsSettings {
        TlsSettings {
            ca_file: Some(path("ca.pem")),
            server_name: Some("temporal.internal".to_owned()),
            client: Some(ClientPairFiles {
                cert_file: path(cert),
                key_file: path("client.key"),
            }),
        }
    }

    #[test]
    fn a_valid_pair_and_ca_load_as_read() {
        let material = load(&settings("valid.pem"), SystemTime::now()).expect("valid files");
        assert_eq!(material.ca_pem, std::fs::read(path("ca.pem")).ok());
        assert_eq!(material.server_name.as_deref(), Some("temporal.internal"));
        let (cert, key) = material.client.clone().expect("client pair");
        assert_eq!(Some(cert), std::fs::read(path("valid.pem")).ok());
        assert_eq!(Some(key), std::fs::read(path("client.key")).ok());
        // The key never reaches a Debug rendering.
        assert!(!format!("{material:?}").contains("PRIVATE KEY"));
    }

    #[test]
    fn an_expired_client_certificate_is_named_with_its_date() {
        let error = load(&settings("expired.pem"), SystemTime::now()).expect_err("expired");
        let message = error.to_string();
        assert!(
            matches!(
                error,
                MaterialError::Expired {
                    variable: TEMPORAL_TLS_CLIENT_CERT_PATH,
                    ..
                }
            ),
            "{message}"
        );
        assert!(message.contains("expired on 2020-02-01"), "{message}");
        assert!(message.contains("CN=fixture client"), "{message}");
        assert!(!message.contains('\n'), "{message}");
    }

    #[test]
    fn a_certificate_not_yet_valid_points_at_the_clock() {
        let error = load(&settings("future.pem"), SystemTime::now()).expect_err("future");
        assert!(
            matches!(error, MaterialError::NotYetValid { .. }),
            "{error}"
        );
        assert!(error.to_string().contains("clock"), "{error}");
    }

    #[test]
    fn a_key_in_the_certificate_slot_and_a_certificate_in_the_key_slot_are_refused() {
        let mut swapped = settings("valid.pem");
        swapped.client = Some(ClientPairFiles {
            cert_file: path("client.key"),
            key_file: path("valid.pem"),
        });
        let error = load(&swapped, SystemTime::now()).expect_err("swapped");
        assert!(error.to_string().contains("no PEM certificate"), "{error}");
        let mut key_is_cert = settings("valid.pem");
        key_is_cert.client = Some(ClientPairFiles {
            cert_file: path("valid.pem"),
            key_file: path("valid.pem"),
        });
        let error = load(&key_is_cert, SystemTime::now()).expect_err("no key");
        assert!(
            error.to_string().starts_with(TEMPORAL_TLS_CLIENT_KEY_PATH),
            "{error}"
        );
        // A key file's content never appears in the message.
        let key = std::fs::read_to_string(path("client.key")).expect("fixture");
        let body = key.lines().nth(1).unwrap_or_default();
        assert!(!error.to_string().contains(body));
    }

    #[test]
    fn a_missing_or_empty_ca_file_is_named() {
        let mut missing = settings("valid.pem");
        missing.ca_file = Some("/nonexistent/ca.pem".to_owned());
        let error = load(&missing, SystemTime::now()).expect_err("missing");
        assert!(
            error
                .to_string()
                .starts_with("TEMPORAL_TLS_SERVER_CA_CERT_PATH=/nonexistent/ca.pem: cannot read"),
            "{error}"
        );
    }
}
