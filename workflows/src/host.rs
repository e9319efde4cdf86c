//! The one rule for a community's host name, which the CLI (what an operator typed), the store
//! (what is registered and matched) and the signatures (what an operator signed) all apply, so
//! that the three never disagree about which community a name means.
//!
//! Normal form: surrounding white space and the name's trailing dots (the DNS root) removed,
//! lower case, an optional `:port` kept. Accepted: at most 253 characters, a name of ASCII
//! letters, digits, `.`, `-` and `_`, a port of 1 to 65535. Anything else is refused, naming the
//! value, rather than matched loosely.

/// The longest host name accepted (DNS's limit on a name's text form).
pub const MAX_HOST_LEN: usize = 253;

/// Why a host name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// Nothing left once white space and trailing dots are removed.
    #[error("the host name is empty: pass the community's host, e.g. chat.example.org")]
    Empty,
    /// Longer than [`MAX_HOST_LEN`].
    #[error("{0:?} is longer than {MAX_HOST_LEN} characters: it is not a host name")]
    TooLong(String),
    /// A character outside the accepted set.
    #[error("{0:?} is not a host name: use letters, digits, '.', '-', '_' and an optional :port")]
    NotAHostName(String),
}

/// `host` in normal form, or why it is not a host name.
pub fn normalize(host: &str) -> Result<String, HostError> {
    let lowered = host.trim().to_lowercase();
    let (name, port) = match lowered.rsplit_once(':') {
        Some((name, port)) => (name, Some(port)),
        None => (lowered.as_str(), None),
    };
    let name = name.trim_end_matches('.');
    if name.is_empty() {
        return Err(HostError::Empty);
    }
    let normal = match port {
        Some(port) => format!("{name}:{port}"),
        None => name.to_owned(),
    };
    if normal.len() > MAX_HOST_LEN {
        return Err(HostError::TooLong(normal));
    }
    let name_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
    let port_ok = port.is_none_or(|p| {
        (1..=5).contains(&p.len())
            && p.chars().all(|c| c.is_ascii_digit())
            && p.parse::<u32>().is_ok_and(|n| (1..=65535).contains(&n))
    });
    if !name.chars().all(name_char) || !port_ok {
        return Err(HostError::NotAHostName(normal));
    }
    Ok(normal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_of_one_host_have_one_normal_form() {
        for spelling in [
            "chat.example.org",
            " Chat.Example.ORG ",
            "chat.example.org.",
            "CHAT.EXAMPLE.ORG..",
        ] {
            assert_eq!(
                normalize(spelling).as_deref(),
                Ok("chat.example.org"),
                "{spelling:?}"
            );
        }
        assert_eq!(
            normalize("Relay.Example:8443").as_deref(),
            Ok("relay.example:8443")
        );
        assert_eq!(
            normalize("relay.example.:8443").as_deref(),
            Ok("relay.example:8443")
        );
    }

    #[test]
    fn what_is_not_a_host_name_is_refused_naming_it() {
        assert_eq!(normalize("  "), Err(HostError::Empty));
        assert_eq!(normalize("..."), Err(HostError::Empty));
        assert_eq!(normalize(".:8443"), Err(HostError::Empty));
        for bad in [
            "chat example.org",
            "chat.example.org/path",
            "alice@chat.example.org",
            "wss://chat.example.org",
            "chät.example.org",
            "chat\texample.org",
            "chat.example.org:",
            "chat.example.org:0",
            "chat.example.org:65536",
            "chat.example.org:http",
            "a:b:8443",
        ] {
            let refused = normalize(bad);
            assert!(
                matches!(&refused, Err(HostError::NotAHostName(_))),
                "{bad:?}: {refused:?}"
            );
        }
        let long = format!("{}.example", "a".repeat(250));
        assert!(matches!(normalize(&long), Err(HostError::TooLong(_))));
        assert!(normalize(&"a".repeat(MAX_HOST_LEN)).is_ok());
    }
}
