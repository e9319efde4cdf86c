//! What a failed TLS connection means, found by type in an error's source chain: the
//! `rustls::Error` a client library wrapped (directly, or inside an `io::Error`). Shared by every
//! startup check (Temporal, PostgreSQL, Redis, S3), so a wrong CA reads the same everywhere.

use std::error::Error as StdError;
use std::sync::Arc;

use rustls::CertificateError;

/// The first `rustls::Error` in the source chain of `error`, also inside an `io::Error` (whose
/// `source()` skips the error it wraps) or an `Arc<dyn Error>` (as the Redis client keeps it).
pub fn find_tls_error<'a>(error: &'a (dyn StdError + 'static)) -> Option<&'a rustls::Error> {
    let mut current: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(error) = current {
        if let Some(tls) = error.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
            && let Some(tls) = find_tls_error(inner)
        {
            return Some(tls);
        }
        if let Some(shared) = error.downcast_ref::<Arc<dyn StdError + Send + Sync>>()
            && let Some(tls) = find_tls_error(shared.as_ref())
        {
            return Some(tls);
        }
        current = error.source();
    }
    None
}

/// What is wrong with the server's certificate, when that is what `tls` says.
pub fn server_certificate_problem(tls: &rustls::Error) -> Option<ServerCertificateProblem> {
    match tls {
        rustls::Error::InvalidCertificate(cert) => Some(match cert {
            CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                ServerCertificateProblem::UntrustedIssuer
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                ServerCertificateProblem::Expired
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                ServerCertificateProblem::WrongName
            }
            _ => ServerCertificateProblem::Rejected,
        }),
        _ => None,
    }
}

/// Why the server's certificate was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerCertificateProblem {
    /// Not signed by a CA this client trusts (a wrong or missing CA file).
    UntrustedIssuer,
    /// Past its end date.
    Expired,
    /// Not issued for the name connected to.
    WrongName,
    /// Any other rejection.
    Rejected,
}

impl ServerCertificateProblem {
    /// One phrase for a message.
    pub fn reason(self) -> &'static str {
        match self {
            ServerCertificateProblem::UntrustedIssuer => {
                "the server's certificate is not signed by a trusted CA"
            }
            ServerCertificateProblem::Expired => "the server's certificate has expired",
            ServerCertificateProblem::WrongName => {
                "the server's certificate is not valid for the name connected to"
            }
            ServerCertificateProblem::Rejected => "the server's certificate was rejected",
        }
    }

    /// What to change, given the variable naming the CA file and its value.
    pub fn fix(self, ca_variable: &str, ca_file: Option<&str>) -> String {
        match self {
            ServerCertificateProblem::Expired => {
                "the server must be given a renewed certificate".to_owned()
            }
            ServerCertificateProblem::WrongName => {
                "connect by a name the server's certificate carries".to_owned()
            }
            ServerCertificateProblem::UntrustedIssuer | ServerCertificateProblem::Rejected => {
                match ca_file {
                    Some(file) => format!(
                        "{ca_variable}={file} is not the CA that signed the server's certificate: point it at the right CA file"
                    ),
                    None => format!(
                        "set {ca_variable} to the CA file that signed the server's certificate (the system roots do not know it)"
                    ),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unknown_issuer() -> rustls::Error {
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)
    }

    #[test]
    fn found_directly_inside_io_and_inside_a_shared_io_error() {
        let direct = unknown_issuer();
        assert_eq!(find_tls_error(&direct), Some(&unknown_issuer()));
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, unknown_issuer());
        assert_eq!(find_tls_error(&io), Some(&unknown_issuer()));
        let shared: Arc<dyn StdError + Send + Sync> = Arc::new(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            unknown_issuer(),
        ));
        assert_eq!(find_tls_error(&shared), Some(&unknown_issuer()));
        let plain = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert_eq!(find_tls_error(&plain), None);
    }

    #[test]
    fn each_certificate_error_has_its_reason_and_fix() {
        let problem = server_certificate_problem(&unknown_issuer());
        assert_eq!(problem, Some(ServerCertificateProblem::UntrustedIssuer));
        let fix =
            ServerCertificateProblem::UntrustedIssuer.fix("BUZZ_REDIS_CA_FILE", Some("/ca.pem"));
        assert!(
            fix.starts_with("BUZZ_REDIS_CA_FILE=/ca.pem is not the CA"),
            "{fix}"
        );
        let expired = rustls::Error::InvalidCertificate(CertificateError::Expired);
        assert_eq!(
            server_certificate_problem(&expired),
            Some(ServerCertificateProblem::Expired)
        );
        assert_eq!(
            server_certificate_problem(&rustls::Error::DecryptError),
            None
        );
    }
}
