//! How long a lease lives, how often it is renewed, who holds it, and the protected-operation
//! bound every protected write runs under.

use std::time::Duration;

/// The longest one protected operation may run, from just before its lease is verified to its
/// last poll. `protect` enforces it; [`crate::ServingWriteGuard::protect_within`] may only
/// shorten it. The deletion's drain waits this long past the expiry of every lease left
/// unreleased at fence time before it lets the manifest be frozen, so changing it changes that
/// wait too.
pub const MAX_PROTECTED_OPERATION: Duration = Duration::from_secs(30);

/// Lease timing and identity of one serving process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServingLeaseConfig {
    /// How long a lease lives without renewal: the longest a crashed serving process can hold a
    /// deletion's fence back.
    pub ttl: Duration,
    /// How often the heartbeat renews (well under `ttl`).
    pub renew_every: Duration,
    /// Who holds the leases (recorded on each, and required to release it).
    pub owner: String,
}

impl Default for ServingLeaseConfig {
    fn default() -> Self {
        ServingLeaseConfig {
            ttl: Duration::from_secs(60),
            renew_every: Duration::from_secs(10),
            owner: default_owner(),
        }
    }
}

/// `serving:{HOSTNAME}:{pid}`: distinguishes serving processes in lease rows.
pub fn default_owner() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".to_owned());
    format!("serving:{host}:{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_default_lease_lives_sixty_seconds_and_is_renewed_every_ten() {
        let config = ServingLeaseConfig::default();
        assert_eq!(config.ttl, Duration::from_secs(60));
        assert_eq!(config.renew_every, Duration::from_secs(10));
        // The lease outlives the renewal interval several times over, so one late renewal does
        // not lose it, and a crashed process holds a fence back for at most one TTL.
        assert!(config.renew_every * 5 <= config.ttl);
        assert!(config.owner.starts_with("serving:"), "{}", config.owner);
        assert!(
            config.owner.ends_with(&format!(":{}", std::process::id())),
            "{}",
            config.owner
        );
    }
}
