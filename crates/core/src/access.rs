//! The admin token's checks, shared by the API's bearer guard and the status page's sign-in:
//! a constant-time comparison and the digests the session store keeps instead of secrets.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Whether `given` is the admin token `expected`, compared in constant time over SHA-256
/// digests so that neither content nor length leaks. An empty `expected` admits nobody.
pub fn token_matches(given: &str, expected: &str) -> bool {
    if expected.is_empty() {
        return false;
    }
    let given = Sha256::digest(given.as_bytes());
    let expected = Sha256::digest(expected.as_bytes());
    given.ct_eq(&expected).into()
}

/// Hex SHA-256 of a status-page session id: what the store keeps (migration 0008).
pub fn session_id_hash(id: &str) -> String {
    hex::encode(Sha256::digest(id.as_bytes()))
}

/// Hex digest of the admin token a session was opened with (domain-separated from every
/// other hash of it): a changed token no longer matches, which ends the session.
pub fn session_token_digest(token: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"quota-patrol status page session\0");
    h.update(token.as_bytes());
    hex::encode(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_token_matches_and_an_empty_token_admits_nobody() {
        assert!(token_matches("s3cret-token", "s3cret-token"));
        assert!(!token_matches("s3cret-toke", "s3cret-token"));
        assert!(!token_matches("s3cret-token ", "s3cret-token"));
        assert!(!token_matches("", ""));
        assert!(!token_matches("x", ""));
    }

    #[test]
    fn digests_differ_per_input_and_never_contain_the_input() {
        let d = session_token_digest("s3cret-token");
        assert_eq!(d.len(), 64);
        assert_ne!(d, session_token_digest("s3cret-token2"));
        assert_ne!(d, session_id_hash("s3cret-token"), "domain-separated");
        assert!(!d.contains("s3cret"));
    }
}
