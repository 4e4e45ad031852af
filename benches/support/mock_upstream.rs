//! A minimal OpenAI-compatible upstream for `router_external`, written against hyper 1 alone (no
//! axum, no `crates/sim`), so the figures measured against it owe nothing to the router's own
//! code. It runs in a child process: the bench binary again, with `QP_BENCH_ROLE=mock-upstream`,
//! on a current-thread Tokio runtime. It prints its address (`127.0.0.1:<port>`) as its first
//! line, the parent's readiness signal, and exits when its stdin closes.
//!
//! Answers (any other request: 404):
//! - `POST /v1/chat/completions` and `POST /chat/completions` (the router calls
//!   `{base_url}/chat/completions`): the body is read whole; with `"stream": true` in it, a
//!   `text/event-stream` of 3 `chat.completion.chunk` events (role and content, content, finish
//!   with usage) and `data: [DONE]`, each its own body frame (chunked); otherwise one fixed
//!   `chat.completion` JSON with usage (`content-length`);
//! - `GET /v1/models` and `GET /models`: one model, `gpt-5`.
//!
//! Nothing depends on the request beyond its method, path and the stream flag.

use std::convert::Infallible;
use std::io::Read;

use bytes::Bytes;
use http_body_util::{BodyExt, Either, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

/// The child's role value of `QP_BENCH_ROLE`.
pub const ROLE: &str = "mock-upstream";

const CHAT_JSON: &str = r#"{"id":"chatcmpl-mock","object":"chat.completion","created":1767225600,"model":"gpt-5","choices":[{"index":0,"message":{"role":"assistant","content":"Hello."},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":2,"total_tokens":14}}"#;
const SSE_EVENTS: [&str; 4] = [
    "data: {\"id\":\"chatcmpl-mock\",\"object\":\"chat.completion.chunk\",\"created\":1767225600,\"model\":\"gpt-5\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"chatcmpl-mock\",\"object\":\"chat.completion.chunk\",\"created\":1767225600,\"model\":\"gpt-5\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo.\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"chatcmpl-mock\",\"object\":\"chat.completion.chunk\",\"created\":1767225600,\"model\":\"gpt-5\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":2,\"total_tokens\":14}}\n\n",
    "data: [DONE]\n\n",
];
const MODELS_JSON: &str = r#"{"object":"list","data":[{"id":"gpt-5","object":"model","created":1767225600,"owned_by":"mock"}]}"#;

type SseStream = futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>;
type Body = Either<Full<Bytes>, StreamBody<SseStream>>;

/// Whether this process is the mock upstream child.
pub fn is_child() -> bool {
    std::env::var("QP_BENCH_ROLE").as_deref() == Ok(ROLE)
}

/// Whether a JSON request body asks for a stream: `"stream"`, optional blanks, `:`, optional
/// blanks, `true` (enough for the bench's fixed bodies; not a JSON parser).
fn wants_stream(body: &[u8]) -> bool {
    let key = b"\"stream\"";
    let Some(at) = body.windows(key.len()).position(|w| w == key) else {
        return false;
    };
    let rest = &body[at + key.len()..];
    let rest = rest.trim_ascii_start();
    let Some(rest) = rest.strip_prefix(b":") else {
        return false;
    };
    rest.trim_ascii_start().starts_with(b"true")
}

fn respond(status: StatusCode, content_type: &'static str, body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

fn full(text: &'static str) -> Body {
    Either::Left(Full::new(Bytes::from_static(text.as_bytes())))
}

async fn handle(req: Request<Incoming>) -> Result<Response<Body>, hyper::Error> {
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    match (method, path.as_str()) {
        (Method::POST, "/v1/chat/completions" | "/chat/completions") => {
            let body = req.into_body().collect().await?.to_bytes();
            if wants_stream(&body) {
                let frames: Vec<Result<Frame<Bytes>, Infallible>> = SSE_EVENTS
                    .iter()
                    .map(|e| Ok(Frame::data(Bytes::from_static(e.as_bytes()))))
                    .collect();
                let stream = StreamBody::new(futures_util::stream::iter(frames));
                Ok(respond(
                    StatusCode::OK,
                    "text/event-stream",
                    Either::Right(stream),
                ))
            } else {
                Ok(respond(StatusCode::OK, "application/json", full(CHAT_JSON)))
            }
        }
        (Method::GET, "/v1/models" | "/models") => Ok(respond(
            StatusCode::OK,
            "application/json",
            full(MODELS_JSON),
        )),
        _ => Ok(respond(
            StatusCode::NOT_FOUND,
            "application/json",
            full(r#"{"error":{"message":"not found","type":"invalid_request_error"}}"#),
        )),
    }
}

/// Child role: serve on a free 127.0.0.1 port on a current-thread runtime, print the address,
/// exit when stdin closes (the parent dropped its handle or died).
pub fn serve() -> anyhow::Result<()> {
    std::thread::spawn(|| {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
        std::process::exit(0);
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        println!("{}", listener.local_addr()?);
        loop {
            let (stream, _) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), hyper::service::service_fn(handle))
                    .await;
            });
        }
    })
}

/// The parent's handle on the child: its address; dropping it kills the child (by its pid).
pub struct MockUpstream {
    child: std::process::Child,
    pub addr: std::net::SocketAddr,
}

impl MockUpstream {
    /// Starts this binary with `QP_BENCH_ROLE=mock-upstream` and reads its address line.
    pub fn start() -> anyhow::Result<MockUpstream> {
        use anyhow::Context;
        use std::io::BufRead;
        let mut child = std::process::Command::new(std::env::current_exe()?)
            .env("QP_BENCH_ROLE", ROLE)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .context("spawn the mock upstream")?;
        let stdout = child.stdout.take().context("no child stdout")?;
        let mut line = String::new();
        std::io::BufReader::new(stdout).read_line(&mut line)?;
        let addr = match line.trim().parse() {
            Ok(a) => a,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                anyhow::bail!("the mock upstream printed {line:?}, not an address");
            }
        };
        Ok(MockUpstream { child, addr })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for MockUpstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
