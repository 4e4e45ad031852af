//! Sign-in sessions of the status page (docs/rules/api.md §7): the form exchanges the admin token
//! for a random session id in a cookie (`HttpOnly`, `SameSite=Strict`, `Path=/`, `Max-Age`,
//! `Secure` behind a TLS proxy), so the token never sits in a URL. The store keeps the id's
//! hash and a digest of the token (migration 0008): sign-out, expiry and a changed token all
//! end a session, and a restart keeps it.

use axum::http::HeaderMap;
use axum::http::header::FORWARDED;
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use chrono::{DateTime, Duration, Utc};
use secrecy::ExposeSecret;

use super::WebState;
use crate::core::access::{session_id_hash, session_token_digest, token_matches};
use crate::jobs::{self, JobError};

/// Name of the session cookie.
pub const COOKIE: &str = "qp_session";

/// Whether the request reached us through TLS, as a reverse proxy reports it
/// (`X-Forwarded-Proto: https` or `Forwarded: ...proto=https`): the listener itself speaks plain
/// HTTP. A forged header only adds `Secure`, which makes the forger's own cookie unusable over
/// plain HTTP.
pub fn via_tls(headers: &HeaderMap) -> bool {
    let forwarded_proto = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case("https")
        });
    let forwarded = headers
        .get(FORWARDED)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split([';', ',']).any(|part| {
                part.trim().split_once('=').is_some_and(|(k, val)| {
                    k.trim().eq_ignore_ascii_case("proto")
                        && val.trim().trim_matches('"').eq_ignore_ascii_case("https")
                })
            })
        });
    forwarded_proto || forwarded
}

/// The session cookie carrying `value` for `max_age` (zero: the deletion).
fn cookie(value: String, max_age: Duration, secure: bool) -> Cookie<'static> {
    Cookie::build((COOKIE, value))
        .http_only(true)
        .same_site(SameSite::Strict)
        .path("/")
        .secure(secure)
        .max_age(cookie::time::Duration::seconds(max_age.num_seconds()))
        .build()
}

/// Whether the request's session cookie names a live session opened with the current admin
/// token. A store failure counts as signed out (logged).
pub async fn signed_in(st: &WebState, jar: &CookieJar) -> bool {
    let Some(id) = jar.get(COOKIE).map(|c| c.value().to_string()) else {
        return false;
    };
    let digest = session_token_digest(st.admin_token.expose_secret());
    let now = st.patrol.now();
    let hash = session_id_hash(&id);
    match jobs::status_page::session_valid_until(&st.patrol, hash, digest, now).await {
        Ok(until) => until.is_some(),
        Err(e) => {
            tracing::warn!(error = %e, "status page session not checked: store failed");
            false
        }
    }
}

/// Why a sign-in did not open a session.
#[derive(Debug, thiserror::Error)]
pub enum SignInError {
    #[error("wrong admin token")]
    WrongToken,
    #[error("the session could not be stored: {0}")]
    Store(#[from] JobError),
}

/// Checks `token` against the admin token and opens a session: returns the jar with the new
/// cookie. Errors: a wrong (or empty) token, a store failure.
pub async fn sign_in(
    st: &WebState,
    jar: CookieJar,
    token: &str,
    secure: bool,
) -> Result<CookieJar, SignInError> {
    if !token_matches(token.trim(), st.admin_token.expose_secret()) {
        return Err(SignInError::WrongToken);
    }
    let id = hex::encode(crate::random::secret_bytes::<32>());
    let hash = session_id_hash(&id);
    let digest = session_token_digest(st.admin_token.expose_secret());
    let now: DateTime<Utc> = st.patrol.now();
    let expires_at = now + st.session;
    jobs::status_page::open_session(&st.patrol, hash, digest, now, expires_at).await?;
    Ok(jar.add(cookie(id, st.session, secure)))
}

/// Ends the request's session (if any) and returns the jar clearing the cookie. A store
/// failure is logged; the cookie is cleared anyway.
pub async fn sign_out(st: &WebState, jar: CookieJar, secure: bool) -> CookieJar {
    if let Some(id) = jar.get(COOKIE).map(|c| c.value().to_string()) {
        let hash = session_id_hash(&id);
        if let Err(e) = jobs::status_page::close_session(&st.patrol, hash).await {
            tracing::warn!(error = %e, "status page session not deleted: store failed");
        }
    }
    jar.add(cookie(String::new(), Duration::zero(), secure))
}

/// `next` of the sign-in form when it is a path of this site (`/…`, not `//host` or
/// `/\host`); `/` otherwise, so a crafted link cannot send a person elsewhere.
pub fn local_path(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.starts_with('/')
                && !n.starts_with("//")
                && !n.contains('\\')
                && !n.chars().any(char::is_control) =>
        {
            n.to_string()
        }
        _ => "/".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn only_local_paths_are_followed_after_sign_in() {
        assert_eq!(local_path(Some("/sites/test")), "/sites/test");
        assert_eq!(local_path(Some("//evil.example/x")), "/");
        assert_eq!(local_path(Some("/\\evil.example")), "/");
        assert_eq!(local_path(Some("https://evil.example")), "/");
        assert_eq!(local_path(Some("/a\r\nSet-Cookie: x")), "/");
        assert_eq!(local_path(None), "/");
    }

    #[test]
    fn tls_is_read_from_the_proxy_headers() {
        let mut h = HeaderMap::new();
        assert!(!via_tls(&h));
        h.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        assert!(via_tls(&h));
        h.insert("x-forwarded-proto", HeaderValue::from_static("http"));
        assert!(!via_tls(&h));
        h.insert(
            FORWARDED,
            HeaderValue::from_static("for=192.0.2.1;proto=https;by=x"),
        );
        assert!(via_tls(&h));
    }

    #[test]
    fn the_cookie_has_the_flags_the_issue_names() {
        let c = cookie("abc".into(), Duration::hours(2), true).to_string();
        for part in [
            "qp_session=abc",
            "HttpOnly",
            "SameSite=Strict",
            "Path=/",
            "Max-Age=7200",
            "Secure",
        ] {
            assert!(c.contains(part), "{c} lacks {part}");
        }
        let plain = cookie("abc".into(), Duration::hours(2), false).to_string();
        assert!(!plain.contains("Secure"));
    }
}
