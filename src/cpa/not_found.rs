//! What a 404 from CPA's management API means (docs/rules/cpa.md §1.1, §1.3, §11). Four cases,
//! checked in this order:
//!
//! 1. CPA's JSON error (`{"error": "auth file not found"}`): the thing asked for does not
//!    exist; an ordinary [`CpaError::NotFound`] whatever the version.
//! 2. Any other 404 from a CPA 8.x (the answer's `X-CPA-VERSION`, else the one recorded for the
//!    site): the build dropped `/v0/management` ([`CpaError::V0Dropped`]).
//! 3. An empty 404 on the account listing, a route every CPA since v6 has: the management API
//!    is off, or the node is managed by a control plane in cluster mode
//!    ([`CpaError::ManagementOff`]). Both answer every management route this way.
//! 4. Anything else (an empty 404 on another route, gin's text page, a proxy's page): a plain
//!    [`CpaError::NotFound`] with what CPA said.
//!
//! Pure: no I/O; the client hands in what it read.

use super::{CpaError, CpaVersion};

/// The parts of a 404 answer the classification reads.
#[derive(Debug, Clone)]
pub(super) struct Answer404<'a> {
    /// The request was `GET /auth-files` (the listing).
    pub listing: bool,
    /// The body as text (lossy UTF-8).
    pub body: &'a str,
    /// The `error` of CPA's JSON error shape, when the body has it.
    pub json_error: Option<String>,
    /// The answer's `X-CPA-VERSION`, else the version recorded for the site, as reported.
    pub version: Option<String>,
    /// The message of case 4 (with a hint on the URL when the body is not CPA's JSON).
    pub fallback: String,
}

/// The error a 404 answer stands for (see the module docs for the order of the cases).
pub(super) fn classify(a: &Answer404<'_>) -> CpaError {
    if let Some(message) = &a.json_error {
        return CpaError::NotFound(message.clone());
    }
    if let Some(v) = &a.version
        && CpaVersion::parse(v).has_v8_management()
    {
        return CpaError::V0Dropped {
            version: v.trim().to_string(),
        };
    }
    let empty = a.body.trim().is_empty();
    match (a.listing, empty) {
        (true, true) => CpaError::ManagementOff,
        (false, true) => {
            CpaError::NotFound("management API disabled or unknown path (empty 404)".into())
        }
        _ => CpaError::NotFound(a.fallback.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(listing: bool, body: &str, json: Option<&str>, version: &str) -> Answer404<'static> {
        Answer404 {
            listing,
            body: Box::leak(body.to_string().into_boxed_str()),
            json_error: json.map(str::to_string),
            version: Some(version.to_string()).filter(|v| !v.is_empty()),
            fallback: format!("non-JSON answer: {body}"),
        }
    }

    #[test]
    fn an_8x_cpa_answering_404_on_v0_dropped_the_v0_api() {
        for (listing, body) in [(true, ""), (false, ""), (true, "404 page not found")] {
            let e = classify(&answer(listing, body, None, "8.0.3"));
            assert_eq!(
                e,
                CpaError::V0Dropped {
                    version: "8.0.3".into()
                },
                "{listing} {body:?}"
            );
            assert!(e.is_unsupported());
            assert_eq!(
                e.to_string(),
                "CPA 8.0.3 answered 404 on /v0/management: this build dropped the v0 API"
            );
        }
        assert_eq!(
            classify(&answer(true, "", None, "v8.1.0-rc1")).to_string(),
            "CPA v8.1.0-rc1 answered 404 on /v0/management: this build dropped the v0 API",
            "the version as CPA reported it"
        );
        assert!(classify(&answer(true, "", None, "v9.1.0")).is_unsupported());
    }

    #[test]
    fn cpas_json_error_is_an_ordinary_not_found_on_every_version() {
        for v in ["v7.1.19", "v7.2.140", "8.0.3", "dev"] {
            let e = classify(&answer(
                false,
                r#"{"error":"auth file not found"}"#,
                Some("auth file not found"),
                v,
            ));
            assert_eq!(e, CpaError::NotFound("auth file not found".into()), "{v}");
            assert!(!e.is_unsupported());
        }
    }

    #[test]
    fn an_empty_404_on_the_listing_is_management_off_or_a_cluster_node() {
        for v in ["v7.2.140", "v7.1.19", "dev", ""] {
            let e = classify(&answer(true, "", None, v));
            assert_eq!(e, CpaError::ManagementOff, "{v:?}");
            assert!(e.is_unsupported() && !e.is_transient());
            assert_eq!(e.status(), Some(404));
            assert!(e.to_string().contains("managed by a control plane"));
        }
        assert_eq!(
            classify(&answer(true, " \n", None, "")),
            CpaError::ManagementOff,
            "whitespace is empty"
        );
    }

    #[test]
    fn other_404s_of_7x_stay_plain_not_found() {
        // An empty 404 elsewhere is an unknown path on v7.2 (key checked first): e.g.
        // `/reset-quota` on a build without it.
        let e = classify(&answer(false, "", None, "v7.2.140"));
        assert!(matches!(e, CpaError::NotFound(_)) && !e.is_unsupported());
        // gin's text page or a proxy's page on the listing: maybe the URL is not CPA's root.
        let e = classify(&answer(true, "404 page not found", None, "v7.1.19"));
        assert_eq!(
            e,
            CpaError::NotFound("non-JSON answer: 404 page not found".into())
        );
    }
}
