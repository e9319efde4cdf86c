//! Which community host a command targets: `--host`, else the authority of RELAY_URL.

use crate::error::CliError;

/// Resolves the target host from `--host` or RELAY_URL, lower-cased and trimmed.
///
/// An explicit but blank `--host` is refused rather than silently falling back to RELAY_URL:
/// deleting the relay's own default community by accident would be irreversible.
pub fn resolve(flag: Option<&str>, relay_url: Option<&str>) -> Result<String, CliError> {
    if let Some(host) = flag {
        let host = host.trim();
        if host.is_empty() {
            return Err(CliError::Usage(
                "--host is empty: pass the community's host name, e.g. --host chat.example.org"
                    .to_owned(),
            ));
        }
        return validate(host);
    }
    let relay_url = relay_url
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| {
            CliError::Usage(
                "no community host: pass --host H, or set RELAY_URL to the relay's URL".to_owned(),
            )
        })?;
    let parsed = url::Url::parse(relay_url).map_err(|e| {
        CliError::Usage(format!(
            "RELAY_URL={relay_url:?} is not a URL ({e}): pass --host H or fix RELAY_URL"
        ))
    })?;
    let host = parsed.host_str().unwrap_or_default();
    if host.is_empty() {
        return Err(CliError::Usage(format!(
            "RELAY_URL={relay_url:?} has no host: pass --host H or fix RELAY_URL"
        )));
    }
    let authority = match parsed.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    };
    validate(&authority)
}

/// The one host rule (`workflows::host`), its refusal as a usage error.
fn validate(host: &str) -> Result<String, CliError> {
    workflows::host::normalize(host).map_err(|e| CliError::Usage(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_host_wins_over_relay_url_and_is_normalised() {
        let host = resolve(Some(" Chat.Example.ORG "), Some("wss://other.example"));
        assert_eq!(host.ok().as_deref(), Some("chat.example.org"));
    }

    #[test]
    fn relay_url_authority_keeps_a_non_default_port() {
        let host = resolve(None, Some("wss://relay.example:8443/path"));
        assert_eq!(host.ok().as_deref(), Some("relay.example:8443"));
    }

    #[test]
    fn blank_host_is_a_usage_error_not_a_fallback() {
        let error = resolve(Some("   "), Some("wss://relay.example"));
        assert!(matches!(error, Err(CliError::Usage(m)) if m.contains("--host is empty")));
    }

    #[test]
    fn missing_host_and_relay_url_says_what_to_pass() {
        for relay in [None, Some(""), Some("  ")] {
            let error = resolve(None, relay);
            assert!(matches!(error, Err(CliError::Usage(m)) if m.contains("pass --host")));
        }
    }

    #[test]
    fn the_cli_and_the_store_agree_on_a_trailing_dot() {
        assert_eq!(
            resolve(Some("Chat.Example.org."), None).ok().as_deref(),
            Some("chat.example.org")
        );
        assert_eq!(
            resolve(None, Some("wss://Chat.Example.org.:8443/"))
                .ok()
                .as_deref(),
            Some("chat.example.org:8443")
        );
    }

    #[test]
    fn garbage_is_refused() {
        assert!(resolve(None, Some("not a url")).is_err());
        assert!(resolve(Some("a b"), None).is_err());
        assert!(resolve(Some("x/../y"), None).is_err());
    }
}
