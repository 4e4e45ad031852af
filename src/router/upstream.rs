//! One upstream attempt (docs/rules/router.md §3, §5): POST the client's body (model substituted) with the
//! account's `Authorization: Bearer` and the client's allow-listed headers ([`forwarded`]) to
//! its OpenAI-compatible API through the calling thread's pooled client ([`UpstreamClient`]: hyper-util
//! over rustls, keep-alive per host), within the leg's first-byte deadline, and say what came
//! back before anything was forwarded: a complete answer, an opened stream (its first events read), an early error
//! frame, or a transport failure (the `reply` types). Must not log or echo the key, or forward a byte itself.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, Method, Request, Uri, header};
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::time::{Instant, timeout_at};

use super::head::SESSION_HEADERS;
use super::reply::{Reply, UpstreamBody};
use super::stream;

/// Largest error body kept for classification and pass-through (docs/rules/router.md §3 reads a prefix).
pub(crate) const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// The client upstream calls go through, one per thread ([`client_of_this_thread`]): HTTP/1.1
/// keep-alive connections pooled per host (idle ones closed after 90 s), `TCP_NODELAY`, TLS by rustls with the webpki roots for
/// `https` bases. It does not follow redirects, retry on its own (the attempt loop decides,
/// docs/rules/router.md §3) or read `HTTP(S)_PROXY` (docs/router.md "What it serves": upstreams are
/// reached directly).
pub(crate) type UpstreamClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Builds the [`UpstreamClient`] (connect timeout 10 s; the leg's first-byte budget bounds the
/// rest of an attempt).
pub(crate) fn client() -> UpstreamClient {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(Duration::from_secs(10)));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_webpki_roots()
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .build(https)
}

thread_local! {
    /// This thread's [`UpstreamClient`]: each router listener thread keeps its own connection
    /// pool, so an upstream connection is used by the thread that opened it and a request never
    /// crosses threads (docs/decisions.md §19).
    static CLIENT: UpstreamClient = client();
}

/// A handle to the calling thread's [`UpstreamClient`] (a clone: a few reference counts).
pub(crate) fn client_of_this_thread() -> UpstreamClient {
    CLIENT.with(UpstreamClient::clone)
}

/// Whether a client request header (name lower-case, as `http` keeps it) is passed on to the
/// upstream (docs/router.md "Client headers passed to the upstream"): what identifies the client
/// and its conversation to the provider, as CLIProxyAPI's Codex executor passes them on
/// (internal/runtime/executor/codex_executor_request.go: `User-Agent`, `Originator`, `Version`,
/// `X-Codex-Beta-Features`, `X-Codex-Turn-Metadata`, `X-Client-Request-Id`, `Session_id`,
/// `Session-Id`, `Thread-Id`) —
/// `user-agent`, `accept`, `originator`, `version`, `openai-beta`, `x-client-request-id`, the
/// session headers the router reads ([`SESSION_HEADERS`]), `x-codex-*` and `x-stainless-*` (the
/// OpenAI SDKs'). Everything else stays behind, so never `authorization` (the account's key
/// replaces it), `cookie`, hop-by-hop headers, `host`, `content-length` (hyper sets both for the
/// upstream request), `content-type` (always `application/json`), `accept-encoding` (the router
/// reads the answer, so it must come uncompressed), `x-forwarded-*` / `forwarded`, or
/// `openai-organization` / `openai-project` (they belong to the client's key, not the account's).
/// A match on the name: no allocation.
pub(crate) fn forwarded(name: &str) -> bool {
    matches!(
        name,
        "user-agent" | "accept" | "originator" | "version" | "openai-beta" | "x-client-request-id"
    ) || name.starts_with("x-codex-")
        || name.starts_with("x-stainless-")
        || SESSION_HEADERS.contains(&name)
}

/// Copies the [`forwarded`] client headers into `to`, leaving out any the client's `Connection`
/// header names (hop-by-hop by declaration, RFC 9110 §7.6.1).
fn forward_client_headers(from: &HeaderMap, to: &mut HeaderMap) {
    let connection = from.get(header::CONNECTION).and_then(|v| v.to_str().ok());
    let declared_hop = |n: &str| {
        connection.is_some_and(|c| c.split(',').any(|t| t.trim().eq_ignore_ascii_case(n)))
    };
    for (name, value) in from {
        if forwarded(name.as_str()) && !declared_hop(name.as_str()) {
            to.append(name.clone(), value.clone());
        }
    }
}

/// Sends one attempt to `url` (pre-parsed by the lane with `lanes::endpoint`; `None` ⇒
/// [`Reply::Transport`]) with the [`forwarded`] headers of the `client_headers`, the account's
/// `authorization` and `content-type: application/json`, and reads its answer up to the
/// decision point, all before `deadline` (else [`Reply::Transport`]). A 2xx
/// `text/event-stream` is opened ([`stream::open`]); anything else is read whole (error bodies
/// cut at 64 KiB).
pub(crate) async fn call(
    client: &UpstreamClient,
    url: &Option<Uri>,
    authorization: Option<&HeaderValue>,
    client_headers: &HeaderMap,
    body: Bytes,
    deadline: Instant,
) -> Reply {
    let Some(url) = url else {
        return Reply::Transport;
    };
    let mut req = Request::new(Full::new(body));
    *req.method_mut() = Method::POST;
    *req.uri_mut() = url.clone();
    let headers = req.headers_mut();
    forward_client_headers(client_headers, headers);
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(auth) = authorization {
        headers.insert(header::AUTHORIZATION, auth.clone());
    }
    let resp = match timeout_at(deadline, client.request(req)).await {
        Ok(Ok(r)) => r,
        _ => return Reply::Transport,
    };
    let (parts, body) = resp.into_parts();
    let status = parts.status.as_u16();
    let headers = parts.headers;
    let sse = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("text/event-stream"));
    let mut body = UpstreamBody(body);
    if (200..300).contains(&status) && sse {
        return stream::open(status, headers, body, deadline).await;
    }
    let limit = if (200..300).contains(&status) {
        usize::MAX
    } else {
        ERROR_BODY_LIMIT
    };
    match timeout_at(deadline, read_body(&mut body, limit)).await {
        Ok(Some(body)) => Reply::Full {
            status,
            headers,
            body,
        },
        _ => Reply::Transport,
    }
}

/// Reads a body up to `limit` bytes (the rest is not read); `None` on a broken connection.
/// A body of one chunk (the usual small JSON answer) is passed on without a copy.
async fn read_body(body: &mut UpstreamBody, limit: usize) -> Option<Bytes> {
    let Some(first) = body.chunk().await.ok()? else {
        return Some(Bytes::new());
    };
    let mut out = match body.chunk().await.ok()? {
        None => return Some(first.slice(..first.len().min(limit))),
        Some(second) => [first, second].concat(),
    };
    while out.len() < limit {
        match body.chunk().await.ok()? {
            Some(chunk) => out.extend_from_slice(&chunk),
            None => break,
        }
    }
    out.truncate(limit);
    Some(out.into())
}

#[cfg(test)]
mod tests {
    use super::super::lanes::endpoint;
    use super::*;

    #[test]
    fn only_allow_listed_client_headers_are_forwarded() {
        for name in [
            "user-agent",
            "accept",
            "originator",
            "version",
            "openai-beta",
            "x-client-request-id",
            "x-codex-beta-features",
            "x-codex-turn-metadata",
            "x-stainless-os",
            "session_id",
            "session-id",
            "thread-id",
            "x-session-id",
            "conversation_id",
        ] {
            assert!(forwarded(name), "{name}");
        }
        for name in [
            "authorization",
            "cookie",
            "connection",
            "keep-alive",
            "te",
            "trailer",
            "transfer-encoding",
            "upgrade",
            "proxy-authorization",
            "proxy-connection",
            "host",
            "content-length",
            "content-type",
            "accept-encoding",
            "x-forwarded-for",
            "x-forwarded-proto",
            "forwarded",
            "openai-organization",
            "openai-project",
        ] {
            assert!(!forwarded(name), "{name}");
        }
    }

    #[test]
    fn headers_the_clients_connection_header_names_stay_behind() {
        let mut from = HeaderMap::new();
        from.insert(
            "connection",
            HeaderValue::from_static("keep-alive, X-Codex-Hop"),
        );
        from.insert("x-codex-hop", HeaderValue::from_static("1"));
        from.insert("x-codex-window-id", HeaderValue::from_static("w"));
        let mut to = HeaderMap::new();
        forward_client_headers(&from, &mut to);
        assert_eq!(to.len(), 1);
        assert_eq!(to["x-codex-window-id"], "w");
    }

    #[tokio::test]
    async fn an_https_client_builds_and_a_refused_port_is_a_transport_failure() {
        let client = client();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let url = endpoint(&format!("http://{addr}/v1/chat/completions"));
        let deadline = Instant::now() + Duration::from_secs(5);
        let reply = call(
            &client,
            &url,
            None,
            &HeaderMap::new(),
            Bytes::from_static(b"{}"),
            deadline,
        )
        .await;
        assert!(matches!(reply, Reply::Transport));
    }
}
