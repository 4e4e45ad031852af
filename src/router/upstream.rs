//! One upstream attempt (router.md §3, §5): POST the client's body (model substituted) with the
//! account's `Authorization: Bearer` to its OpenAI-compatible API through the shared reqwest
//! client, within the leg's first-byte deadline, and say what came back before anything was
//! forwarded: a complete answer, an opened stream (its first events read), an early error
//! frame, or a transport failure. Must not log or echo the key, or forward a byte itself.

use axum::http::{HeaderMap, HeaderValue, header};
use bytes::Bytes;
use tokio::time::{Instant, timeout_at};

use super::stream::{self, Opened};
use crate::core::failure::{Headers, Outcome};

/// Largest error body kept for classification and pass-through (router.md §3 reads a prefix).
pub(crate) const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// What one attempt produced, before the first byte went to the client.
pub(crate) enum Reply {
    /// A complete non-streaming answer (any status; an error body is cut at 64 KiB).
    Full {
        status: u16,
        headers: HeaderMap,
        body: Bytes,
    },
    /// A 2xx stream whose first decisive event is content (or that ended).
    Stream(Opened),
    /// A 2xx stream whose first event, before any content, is an error (its `data:` JSON).
    EarlyError { headers: HeaderMap, frame: Bytes },
    /// Connection refused/reset, TLS, timeout, first-byte deadline passed.
    Transport,
}

impl Reply {
    /// The outcome for `failure::classify` (a 2xx `Full` or a `Stream` is a success: `None`).
    pub fn outcome<'a>(&'a self, headers: &'a HeaderView<'a>) -> Option<Outcome<'a>> {
        match self {
            Reply::Full { status, body, .. } => Some(Outcome::Status {
                status: *status,
                headers,
                body,
                html: headers
                    .get("content-type")
                    .is_some_and(|c| c.starts_with("text/html")),
            }),
            Reply::EarlyError { frame, .. } => Some(Outcome::EarlyErrorFrame { headers, frame }),
            Reply::Transport => Some(Outcome::Transport),
            Reply::Stream(_) => None,
        }
    }

    /// The reply's response headers (empty for a transport failure).
    pub fn headers(&self) -> Option<&HeaderMap> {
        match self {
            Reply::Full { headers, .. } | Reply::EarlyError { headers, .. } => Some(headers),
            Reply::Stream(o) => Some(&o.headers),
            Reply::Transport => None,
        }
    }

    /// A 2xx: served.
    pub fn is_success(&self) -> bool {
        match self {
            Reply::Full { status, .. } => (200..300).contains(status),
            Reply::Stream(_) => true,
            _ => false,
        }
    }
}

/// `core::failure::Headers` over an HTTP header map (names lower-case).
pub(crate) struct HeaderView<'a>(pub Option<&'a HeaderMap>);

impl Headers for HeaderView<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        self.0?.get(name)?.to_str().ok()
    }

    fn names(&self) -> Vec<&str> {
        self.0
            .map(|h| h.keys().map(|k| k.as_str()).collect())
            .unwrap_or_default()
    }
}

/// Sends one attempt to `url` (pre-parsed by the lane; `None` = unparsable base URL ⇒
/// [`Reply::Transport`]) and reads its answer up to the decision point, all before `deadline`
/// (else [`Reply::Transport`]). A 2xx `text/event-stream` is opened ([`stream::open`]);
/// anything else is read whole (error bodies cut at 64 KiB).
pub(crate) async fn call(
    client: &reqwest::Client,
    url: &Option<reqwest::Url>,
    authorization: Option<&HeaderValue>,
    body: Bytes,
    deadline: Instant,
) -> Reply {
    let Some(url) = url else {
        return Reply::Transport;
    };
    let mut req = client
        .post(url.clone())
        .header(header::CONTENT_TYPE, "application/json")
        .body(body);
    if let Some(auth) = authorization {
        req = req.header(header::AUTHORIZATION, auth.clone());
    }
    let resp = match timeout_at(deadline, req.send()).await {
        Ok(Ok(r)) => r,
        _ => return Reply::Transport,
    };
    let status = resp.status().as_u16();
    let sse = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("text/event-stream"));
    if (200..300).contains(&status) && sse {
        return stream::open(resp, deadline).await;
    }
    let headers = resp.headers().clone();
    let limit = if (200..300).contains(&status) {
        usize::MAX
    } else {
        ERROR_BODY_LIMIT
    };
    match timeout_at(deadline, read_body(resp, limit)).await {
        Ok(Some(body)) => Reply::Full {
            status,
            headers,
            body,
        },
        _ => Reply::Transport,
    }
}

/// Reads a body up to `limit` bytes (the rest is dropped); `None` on a broken connection.
async fn read_body(mut resp: reqwest::Response, limit: usize) -> Option<Bytes> {
    if limit == usize::MAX {
        return resp.bytes().await.ok();
    }
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await.ok()? {
        let room = limit - out.len();
        out.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if out.len() >= limit {
            break;
        }
    }
    Some(out.into())
}
