//! What an upstream attempt hands back before the first byte went to the client (docs/rules/router.md §3,
//! §5): the reply ([`Reply`]: a complete answer, an opened stream, an early error frame or a
//! transport failure), the upstream body read a chunk at a time ([`UpstreamBody`]), the opened
//! stream ([`Opened`]) and the header view `core::failure` classifies over ([`HeaderView`]).
//! Shared by `upstream` (which makes them), `stream` (which opens and pumps them) and `attempt`
//! (which decides on them); a leaf that imports nothing of the router.

use axum::http::HeaderMap;
use bytes::Bytes;
use http_body_util::BodyExt;

use crate::core::failure::{Headers, Outcome};

/// The body of an upstream response, read a chunk at a time (trailers are skipped). Dropping
/// it closes (cancels) the upstream request.
pub(crate) struct UpstreamBody(pub(super) hyper::body::Incoming);

impl UpstreamBody {
    /// The next data chunk; `Ok(None)` at the end, `Err` when the connection broke.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, hyper::Error> {
        loop {
            match self.0.frame().await {
                None => return Ok(None),
                Some(Err(e)) => return Err(e),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        return Ok(Some(data));
                    }
                }
            }
        }
    }
}

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

/// A 2xx stream opened up to its first content event.
pub(crate) struct Opened {
    pub status: u16,
    pub headers: HeaderMap,
    /// Everything read so far (passed on first, unchanged).
    pub prefix: Bytes,
    /// The rest of the upstream body; `None` when it already ended.
    pub rest: Option<UpstreamBody>,
}
