//! Bearer tokens: the admin's (from the server's configuration) and each tenant's (random, shown
//! once; only its SHA-256 is stored).
//!
//! A tenant token reads `weir_<tenant>_<43 base64url characters>`: 256 random bits from the
//! operating system, after the tenant's name so that the server finds the one hash to compare
//! with. Comparisons are of SHA-256 digests, in constant time (`subtle`), so neither the time
//! of a refusal nor a stored hash reveals a token.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Random bytes in a tenant token.
const TOKEN_BYTES: usize = 32;

/// A new tenant token for `tenant`, and the hex SHA-256 to store.
///
/// # Errors
/// When the operating system's random source fails.
pub fn new_token(tenant: &str) -> std::io::Result<(String, String)> {
    let mut secret = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut secret).map_err(std::io::Error::other)?;
    let token = format!("weir_{tenant}_{}", URL_SAFE_NO_PAD.encode(secret));
    let hash = hash(&token);
    Ok((token, hash))
}

/// The hex SHA-256 of `token`.
pub fn hash(token: &str) -> String {
    hash_bytes(token.as_bytes())
}

/// The hex SHA-256 of `bytes`.
pub fn hash_bytes(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `token` hashes to `stored` (hex SHA-256), in constant time.
pub fn matches(token: &str, stored: &str) -> bool {
    hash(token).as_bytes().ct_eq(stored.as_bytes()).into()
}

/// The tenant a token claims to belong to: the name between `weir_` and the next `_` (tenant
/// names have none; the random part may).
pub fn claimed_tenant(token: &str) -> Option<&str> {
    token.strip_prefix("weir_")?.split_once('_').map(|(tenant, _)| tenant)
}

/// The bearer token of an `Authorization` header value.
pub fn bearer(header: &str) -> Option<&str> {
    let (scheme, token) = header.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim()).filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_named_and_checked_by_hash() {
        let (token, stored) = new_token("acme-1").unwrap();
        assert_eq!(claimed_tenant("weir_acme-1_a_b-c"), Some("acme-1"), "the random part may hold `_`");
        let (other, _) = new_token("acme-1").unwrap();
        assert_ne!(token, other);
        assert_eq!(claimed_tenant(&token), Some("acme-1"));
        assert_eq!(token.len(), "weir_acme-1_".len() + 43);
        assert!(matches(&token, &stored));
        assert!(!matches(&other, &stored));
        assert!(!stored.contains(&token[12..]));
    }

    #[test]
    fn bearer_headers() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer "), None);
    }
}
