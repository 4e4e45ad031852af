//! CPA (CLIProxyAPI) management client: one method per endpoint, typed errors, a per-site
//! concurrency limit and a timeout on every request. Wire DTOs (`wire.rs`) never leave this
//! module; callers get `core` types. Errors never contain the management key or tokens.
//! Protocol: docs/rules/cpa.md (CPA v7.1.19 … v7.2.140; a 404 from 8.x or a cluster node,
//! §11, is classified by `not_found.rs`).

mod not_found;
mod version;
mod wire;

pub use version::CpaVersion;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::{Method, StatusCode};
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;
use tokio::sync::Semaphore;

use crate::core::account::Account;
use crate::core::quota::normalize_plan;

/// Errors of CPA calls (docs/rules/cpa.md §1.3).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CpaError {
    /// 401/403 from the management API (wrong key, remote management disabled, IP banned).
    /// Never retried: CPA bans an IP after 5 bad keys.
    #[error("CPA refused the management key ({status}): {message}")]
    Auth { status: u16, message: String },
    /// 404 (unknown auth file, or the management API is disabled: empty 404).
    #[error("CPA answered 404: {0}")]
    NotFound(String),
    /// 400 and other client errors.
    #[error("CPA rejected the request ({status}): {message}")]
    BadRequest { status: u16, message: String },
    /// Transport failures: no connection, a connection reset, an answer cut off.
    #[error("CPA unavailable: {0}")]
    Transient(String),
    /// No answer within the request timeout. For a probe this is usually the upstream being
    /// slow (CPA's `api-call` waits on it), not CPA going away.
    #[error("CPA unavailable: request timed out")]
    Timeout,
    /// CPA answered 5xx (incl. 502 from api-call); retried like [`CpaError::Transient`].
    #[error("CPA unavailable: CPA answered {status}: {message}")]
    ServerError { status: u16, message: String },
    /// A 2xx whose body is not what the endpoint returns.
    #[error("unexpected answer from CPA: {0}")]
    Protocol(String),
    /// A CPA 8.x (by this answer's `X-CPA-VERSION`, else the version recorded for the site)
    /// answered a 404 that is not CPA's JSON error on `/v0/management`: this build no longer
    /// serves the v0 API (docs/rules/cpa.md §11). Not retried, not a key failure; `version` is
    /// the version as CPA reported it (`v8.0.3`, `8.0.3`).
    #[error("CPA {version} answered 404 on /v0/management: this build dropped the v0 API")]
    V0Dropped { version: String },
    /// The account listing, a route every CPA has, answered 404 with an empty body: the
    /// management API is off (no secret configured) or the node runs in cluster mode, managed
    /// by a control plane (docs/rules/cpa.md §1.1, §11). Not retried, not a key failure.
    #[error(
        "management API off, or the node is managed by a control plane (cluster mode); not supported"
    )]
    ManagementOff,
}

impl CpaError {
    /// Whether retrying may help.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            CpaError::Transient(_) | CpaError::Timeout | CpaError::ServerError { .. }
        )
    }

    /// HTTP status CPA answered with, when there was one.
    pub fn status(&self) -> Option<u16> {
        match self {
            CpaError::Auth { status, .. }
            | CpaError::BadRequest { status, .. }
            | CpaError::ServerError { status, .. } => Some(*status),
            CpaError::NotFound(_) | CpaError::V0Dropped { .. } | CpaError::ManagementOff => {
                Some(404)
            }
            _ => None,
        }
    }

    /// Whether the answer says this CPA's management API cannot be used by quota-patrol at
    /// all (an 8.x that dropped `/v0`, or management off / a cluster node; docs/rules/cpa.md
    /// §11): the site backs off like after other failures, nothing is acted on, and it is never
    /// a key failure.
    pub fn is_unsupported(&self) -> bool {
        matches!(self, CpaError::V0Dropped { .. } | CpaError::ManagementOff)
    }

    /// Short name of an unsupported kind (`v0Dropped`, `managementOff`) for metrics labels;
    /// `None` for every other error.
    pub fn unsupported_kind(&self) -> Option<&'static str> {
        match self {
            CpaError::V0Dropped { .. } => Some("v0Dropped"),
            CpaError::ManagementOff => Some("managementOff"),
            _ => None,
        }
    }
}

/// A body that could not be read to its end (cut off, or the read timed out).
fn read_failed(e: reqwest::Error) -> CpaError {
    if e.is_timeout() {
        CpaError::Timeout
    } else {
        CpaError::Transient("failed to read CPA answer".into())
    }
}

/// First `n` characters of a body, for error messages.
fn snippet(body: &str, n: usize) -> String {
    let t: String = body.trim().chars().take(n).collect();
    if t.is_empty() {
        "(empty body)".into()
    } else {
        t
    }
}

/// Connection data of one CPA.
#[derive(Clone)]
pub struct CpaConfig {
    /// CPA root, e.g. `http://127.0.0.1:8317`.
    pub base_url: String,
    pub management_key: SecretString,
    /// Timeout of every request.
    pub timeout: Duration,
}

/// The usage probe's upstream answer (from the `api-call` envelope).
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamAnswer {
    pub status: u16,
    pub body: String,
}

/// Result of listing auth files.
#[derive(Debug, Clone, PartialEq)]
pub struct Listing {
    /// Accounts of the requested provider, in CPA's order.
    pub accounts: Vec<Account>,
    /// Listed entries of other providers (ignored).
    pub other_providers: usize,
}

/// What CPA said of one site's management key in this process, shared by every client of the
/// site like the concurrency limit. Once CPA refused the key (401/403), the latch closes and no
/// client of the site sends another request with that key until the caller reopens it: CPA
/// bans a client IP after 5 refused keys (docs/rules/cpa.md §1.2), so requests already queued behind the
/// limit must not each count as one more failure.
#[derive(Debug, Default)]
pub struct KeyLatch {
    inner: Mutex<LatchState>,
}

#[derive(Debug, Default)]
struct LatchState {
    /// Fingerprint of the refused key and CPA's answer (status, error text) while closed.
    closed: Option<(String, u16, String)>,
    /// Refused answers since the last [`KeyLatch::take_report`].
    refused: u32,
    /// A management call answered 2xx since the last report.
    succeeded: bool,
}

/// What happened to the key since the last report (see [`KeyLatch::take_report`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyReport {
    /// Requests CPA refused (each one a failure CPA counted against this host).
    pub refused: u32,
    /// CPA's last refusal: HTTP status and error text.
    pub last_refusal: Option<(u16, String)>,
    /// At least one management call succeeded.
    pub succeeded: bool,
}

impl KeyLatch {
    /// Opens the latch (a new key, or one try of a refused one).
    pub fn open(&self) {
        if let Ok(mut g) = self.inner.lock() {
            g.closed = None;
        }
    }

    /// CPA's refusal while the latch is closed for the key with `fingerprint`.
    pub fn closed_for(&self, fingerprint: &str) -> Option<(u16, String)> {
        let g = self.inner.lock().ok()?;
        g.closed
            .as_ref()
            .filter(|(fp, _, _)| fp == fingerprint)
            .map(|(_, s, m)| (*s, m.clone()))
    }

    /// Counts since the last report, reset by this call (the latch stays as it is).
    pub fn take_report(&self) -> KeyReport {
        let Ok(mut g) = self.inner.lock() else {
            return KeyReport::default();
        };
        let report = KeyReport {
            refused: g.refused,
            last_refusal: g.closed.as_ref().map(|(_, s, m)| (*s, m.clone())),
            succeeded: g.succeeded,
        };
        g.refused = 0;
        g.succeeded = false;
        report
    }

    fn note(&self, fingerprint: &str, refused: Option<(u16, &str)>) {
        let Ok(mut g) = self.inner.lock() else { return };
        match refused {
            Some((status, message)) => {
                g.refused = g.refused.saturating_add(1);
                g.closed = Some((fingerprint.to_string(), status, message.to_string()));
            }
            None => g.succeeded = true,
        }
    }
}

/// The HTTP connection pool of one CPA: one `reqwest::Client`, shared by every call of the site
/// and rebuilt only when the request timeout changes, so calls reuse their keep-alive
/// connections instead of opening new ones (and a new pool) each time.
#[derive(Debug, Default)]
pub struct HttpPool {
    slot: Mutex<Option<(Duration, reqwest::Client)>>,
    builds: std::sync::atomic::AtomicUsize,
}

impl HttpPool {
    /// The pooled client for `timeout` (every request's timeout; connecting at most 10 s).
    pub fn client(&self, timeout: Duration) -> Result<reqwest::Client, CpaError> {
        let mut slot = self
            .slot
            .lock()
            .map_err(|_| CpaError::Transient("HTTP pool lock poisoned".into()))?;
        if let Some((t, c)) = slot.as_ref()
            && *t == timeout
        {
            return Ok(c.clone());
        }
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .pool_max_idle_per_host(64)
            .build()
            .map_err(|e| CpaError::Transient(format!("cannot build HTTP client: {e}")))?;
        self.builds
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        *slot = Some((timeout, http.clone()));
        Ok(http)
    }

    /// How many clients this pool built (one per timeout change).
    pub fn builds(&self) -> usize {
        self.builds.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Client of one CPA's management API.
#[derive(Clone)]
pub struct CpaClient {
    http: reqwest::Client,
    base: String,
    key: SecretString,
    /// `core::key_refusal::fingerprint` of `key`.
    key_fingerprint: String,
    limit: Arc<Semaphore>,
    latch: Arc<KeyLatch>,
    version: Arc<Mutex<Option<String>>>,
    /// The version stored for the site at its last contact; only read to classify a 404
    /// when the answer itself carries no `X-CPA-VERSION` (never for feature detection).
    recorded_version: Option<String>,
}

impl std::fmt::Debug for CpaClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpaClient")
            .field("base", &self.base)
            .field("key", &"[redacted]")
            .finish()
    }
}

impl CpaClient {
    /// A client on `pool`'s connections, limited by `limit` and stopped by `latch` (all three
    /// shared by everything that talks to this CPA).
    pub fn new(
        cfg: CpaConfig,
        pool: &HttpPool,
        limit: Arc<Semaphore>,
        latch: Arc<KeyLatch>,
    ) -> Result<Self, CpaError> {
        let http = pool.client(cfg.timeout)?;
        let base = format!("{}/v0/management", cfg.base_url.trim_end_matches('/'));
        let key_fingerprint =
            crate::core::key_refusal::fingerprint(cfg.management_key.expose_secret());
        Ok(Self {
            http,
            base,
            key: cfg.management_key,
            key_fingerprint,
            limit,
            latch,
            version: Arc::new(Mutex::new(None)),
            recorded_version: None,
        })
    }

    /// The same client knowing the version stored for the site at its last contact: a 404
    /// without a version of its own is then classified against it (docs/rules/cpa.md §11).
    /// Feature detection still waits for an answer's `X-CPA-VERSION`.
    pub fn with_recorded_version(mut self, version: Option<String>) -> Self {
        self.recorded_version = version;
        self
    }

    /// `core::key_refusal::fingerprint` of the client's management key.
    pub fn key_fingerprint(&self) -> &str {
        &self.key_fingerprint
    }

    /// The `X-CPA-VERSION` of the last answer, if any (docs/rules/cpa.md §1.2).
    pub fn version(&self) -> Option<String> {
        self.version.lock().ok().and_then(|v| v.clone())
    }

    /// Seeds the version with one learned earlier (e.g. stored at the last contact) while this
    /// client has seen no answer yet; the next answer's `X-CPA-VERSION` replaces it.
    pub fn assume_version(&self, version: Option<&str>) {
        if let (Some(v), Ok(mut slot)) = (version, self.version.lock())
            && slot.is_none()
        {
            *slot = Some(v.to_string());
        }
    }

    /// The parsed version of the last answer (401/403 answers included); `Unknown` before the
    /// first answer and for `dev` builds, which then get no optional feature (docs/rules/cpa.md §1.2).
    pub fn cpa_version(&self) -> CpaVersion {
        CpaVersion::from_header(self.version().as_deref())
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, bytes::Bytes), CpaError> {
        let (resp, _permit) = self.start(method, path, query, body).await?;
        let status = resp.status();
        let body = resp.bytes().await.map_err(read_failed)?;
        Ok((status, body))
    }

    /// Sends a request under the site's concurrency limit. A 2xx answer comes back unread, with
    /// the limit's permit (held until the caller has read the body); any other status is read
    /// whole (error bodies are small) and classified (docs/rules/cpa.md §1.3).
    async fn start(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Result<(reqwest::Response, tokio::sync::OwnedSemaphorePermit), CpaError> {
        let permit = self
            .limit
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| CpaError::Transient("client closed".into()))?;
        // Checked after waiting for the limit: a request queued behind one that CPA refused
        // is never sent.
        if let Some((status, message)) = self.latch.closed_for(&self.key_fingerprint) {
            return Err(CpaError::Auth {
                status,
                message: format!("not sent, the key was refused just before: {message}"),
            });
        }
        let method_is_listing = method == Method::GET;
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(self.key.expose_secret())
            .header("Accept", "application/json");
        if !query.is_empty() {
            req = req.query(query);
        }
        if let Some(b) = body {
            req = req.header("Content-Type", "application/json").body(b);
        }
        let resp = req.send().await.map_err(|e| {
            if e.is_timeout() {
                CpaError::Timeout
            } else if e.is_connect() {
                CpaError::Transient(format!("cannot connect to CPA at {}", self.base))
            } else {
                CpaError::Transient(format!("transport error: {}", e.without_url()))
            }
        })?;
        if let Some(v) = resp
            .headers()
            .get("x-cpa-version")
            .and_then(|v| v.to_str().ok())
            && let Ok(mut slot) = self.version.lock()
        {
            *slot = Some(v.to_string());
        }
        let status = resp.status();
        if status.is_success() {
            self.latch.note(&self.key_fingerprint, None);
            return Ok((resp, permit));
        }
        let body = resp.bytes().await.map_err(read_failed)?;
        let text = String::from_utf8_lossy(&body);
        let message = serde_json::from_str::<wire::ErrorBody>(&text)
            .ok()
            .and_then(|e| e.error)
            .unwrap_or_else(|| {
                // Not CPA's JSON error shape: a proxy page, another server, a disabled API.
                let hint = if status.as_u16() == 404 {
                    " (is the URL the CPA root, with the management API enabled?)"
                } else {
                    ""
                };
                format!(
                    "non-JSON answer from {}{hint}: {}",
                    self.base,
                    snippet(&text, 80)
                )
            });
        let code = status.as_u16();
        if code == 404 {
            let json_error = serde_json::from_str::<wire::ErrorBody>(&text)
                .ok()
                .and_then(|e| e.error);
            let version = self.version().or_else(|| self.recorded_version.clone());
            return Err(not_found::classify(&not_found::Answer404 {
                listing: method_is_listing && path == "/auth-files",
                body: &text,
                json_error,
                version,
                fallback: message,
            }));
        }
        if matches!(code, 401 | 403) {
            self.latch
                .note(&self.key_fingerprint, Some((code, &message)));
        }
        Err(match code {
            401 | 403 => CpaError::Auth {
                status: code,
                message,
            },
            c if c >= 500 => CpaError::ServerError {
                status: code,
                message,
            },
            _ => CpaError::BadRequest {
                status: code,
                message,
            },
        })
    }

    async fn json<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Result<T, CpaError> {
        let (_, bytes) = self.send(method, path, query, body).await?;
        serde_json::from_slice(&bytes).map_err(|e| {
            let text = String::from_utf8_lossy(&bytes);
            CpaError::Protocol(format!("{e}; body starts with: {}", snippet(&text, 200)))
        })
    }

    /// `GET /auth-files`, each entry turned by `keep` into what the caller keeps as it is parsed
    /// (see [`wire::FilesSeed`]). The body is streamed: chunks go from the connection straight
    /// into the parser (on a blocking thread), so a 10,000-account listing (~17 MB) is never
    /// held whole, only a 64 KiB read buffer and the entry being parsed
    /// (docs/benchmarks.md "round (`benches/round.rs`)").
    /// A body that is not a listing is [`CpaError::Protocol`] (with its first 200 characters); a
    /// body cut off is [`CpaError::Transient`], a read timeout [`CpaError::Timeout`].
    async fn listing<T, F>(&self, query: &[(&str, &str)], keep: F) -> Result<Vec<T>, CpaError>
    where
        T: Send + 'static,
        F: FnMut(wire::AuthFileEntry) -> Option<T> + Send + 'static,
    {
        let (resp, permit) = self.start(Method::GET, "/auth-files", query, None).await?;
        let chunks = futures_util::stream::unfold(resp, |mut resp| async move {
            match resp.chunk().await {
                Ok(Some(chunk)) => Some((Ok(chunk), resp)),
                Ok(None) => None,
                Err(e) => {
                    let kind = if e.is_timeout() {
                        std::io::ErrorKind::TimedOut
                    } else {
                        std::io::ErrorKind::UnexpectedEof
                    };
                    Some((
                        Err(std::io::Error::new(kind, "failed to read CPA answer")),
                        resp,
                    ))
                }
            }
        });
        let reader =
            tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(Box::pin(chunks)));
        let parsed = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let mut head = wire::Head::new(reader, 800);
            let result = {
                let mut de = serde_json::Deserializer::from_reader(
                    std::io::BufReader::with_capacity(64 * 1024, &mut head),
                );
                serde::de::DeserializeSeed::deserialize(wire::FilesSeed(keep), &mut de)
                    .and_then(|kept| de.end().map(|()| kept))
            };
            result.map_err(|e| match e.io_error_kind() {
                Some(std::io::ErrorKind::TimedOut) => CpaError::Timeout,
                Some(_) => CpaError::Transient("failed to read CPA answer".into()),
                None => {
                    let text = String::from_utf8_lossy(head.seen());
                    CpaError::Protocol(format!("{e}; body starts with: {}", snippet(&text, 200)))
                }
            })
        })
        .await;
        parsed.map_err(|_| CpaError::Transient("the listing's parser stopped".into()))?
    }

    /// Every listed auth file (all providers) as (name, CPA priority); for the priority sync,
    /// which must see duplicates across providers (CPA v7.1.19 `GET /auth-files`).
    pub async fn list_all_names(&self) -> Result<Vec<(String, i64)>, CpaError> {
        self.listing(&[], |e| {
            Some((
                e.name.or(e.id).filter(|n| !n.is_empty())?,
                e.priority.unwrap_or(0),
            ))
        })
        .await
    }

    /// Lists auth files and keeps the accounts of `provider` (CPA v7.1.19 `GET /auth-files`).
    pub async fn list_accounts(&self, provider: &str) -> Result<Listing, CpaError> {
        let other = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (counted, provider) = (other.clone(), provider.to_string());
        let accounts = self
            .listing(&[], move |e| match to_account(e, &provider) {
                Some(Ok(a)) => Some(a),
                Some(Err(())) => None,
                None => {
                    counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    None
                }
            })
            .await?;
        Ok(Listing {
            accounts,
            other_providers: other.load(std::sync::atomic::Ordering::Relaxed),
        })
    }

    /// Re-reads one account of `provider`. On CPA ≥ v7.2.94 (known from an earlier answer) it
    /// asks `GET /auth-files?name=` (docs/rules/cpa.md §2.1); older builds ignore the filter and list
    /// everything, so the answer is always searched for the exact name. `Ok(None)`: CPA does
    /// not list it. The second value says whether the filter was sent.
    pub async fn get_account(
        &self,
        provider: &str,
        name: &str,
    ) -> Result<(Option<Account>, bool), CpaError> {
        let filtered = self.cpa_version().has_list_filters();
        let query: &[(&str, &str)] = if filtered { &[("name", name)] } else { &[] };
        let (provider, wanted) = (provider.to_string(), name.to_string());
        let found = self
            .listing(query, move |e| {
                to_account(e, &provider)?.ok().filter(|a| a.name == wanted)
            })
            .await?
            .into_iter()
            .next();
        Ok((found, filtered))
    }

    /// Probes an account's Codex usage through `POST /api-call` (docs/rules/cpa.md §3, §4.1). Returns the
    /// upstream status and body; CPA-level failures (502 `request failed`, …) are errors.
    pub async fn probe_usage(
        &self,
        account: &Account,
        usage_url: &str,
        user_agent: &str,
    ) -> Result<UpstreamAnswer, CpaError> {
        self.api_call(account, "GET", usage_url, user_agent, "")
            .await
    }

    /// Any upstream call through `POST /api-call` with the account's token and the usage probe's
    /// headers (docs/rules/cpa.md §3, §10): `method` to `url`, `data` as the JSON body (sent with
    /// `Content-Type: application/json` when not empty). Returns the upstream status and body;
    /// CPA-level failures (502 `request failed`, a timeout) are errors: for a consume call they
    /// are ambiguous, the call may have reached the upstream.
    pub async fn api_call(
        &self,
        account: &Account,
        method: &str,
        url: &str,
        user_agent: &str,
        data: &str,
    ) -> Result<UpstreamAnswer, CpaError> {
        let auth_index = account
            .auth_index
            .as_deref()
            .ok_or_else(|| CpaError::BadRequest {
                status: 0,
                message: "account has no auth_index".into(),
            })?;
        let mut header = HashMap::new();
        header.insert("Authorization", "Bearer $TOKEN$".to_string());
        header.insert("User-Agent", user_agent.to_string());
        header.insert("Accept", "application/json".to_string());
        if !data.is_empty() {
            header.insert("Content-Type", "application/json".to_string());
        }
        if let Some(id) = &account.chatgpt_account_id {
            header.insert("ChatGPT-Account-Id", id.clone());
        }
        let req = wire::ApiCallRequest {
            auth_index,
            method,
            url,
            header,
            data,
        };
        let body = serde_json::to_vec(&req).map_err(|e| CpaError::Protocol(e.to_string()))?;
        let resp: wire::ApiCallResponse = self
            .json(Method::POST, "/api-call", &[], Some(body))
            .await?;
        let status = resp
            .status_code
            .and_then(|s| u16::try_from(s).ok())
            .ok_or_else(|| CpaError::Protocol("api-call answer without status_code".into()))?;
        Ok(UpstreamAnswer {
            status,
            body: resp.body.unwrap_or_default(),
        })
    }

    /// Enables or disables an auth file (CPA ≥ v6.7.18 `PATCH /auth-files/status`).
    pub async fn set_disabled(&self, name: &str, disabled: bool) -> Result<(), CpaError> {
        self.set_status(name, disabled, None).await
    }

    /// Like [`CpaClient::set_disabled`], sending `auth_index` too when CPA is v7.2.22+ and one is
    /// given: a guard that the file patched is the one probed (v7.2.140 answers 404 `auth file
    /// not found` when it does not match; v7.1.19 would ignore it, so it is not sent there).
    pub async fn set_status(
        &self,
        name: &str,
        disabled: bool,
        auth_index: Option<&str>,
    ) -> Result<(), CpaError> {
        let auth_index = auth_index
            .filter(|i| !i.is_empty())
            .filter(|_| self.cpa_version().has_status_auth_index());
        let body = serde_json::to_vec(&wire::StatusPatch {
            name,
            disabled,
            auth_index,
        })
        .map_err(|e| CpaError::Protocol(e.to_string()))?;
        self.send(Method::PATCH, "/auth-files/status", &[], Some(body))
            .await
            .map(|_| ())
    }

    /// Clears CPA's own cooldown/quota state of one credential so it is routable at once
    /// (CPA ≥ v7.2.22 `POST /reset-quota {"auth_index"}`, docs/rules/cpa.md §2.5). Does not touch the
    /// upstream quota. Callers check [`CpaVersion::has_reset_quota`] first (older builds: 404).
    pub async fn reset_quota(&self, auth_index: &str) -> Result<(), CpaError> {
        let body = serde_json::to_vec(&wire::ResetQuota { auth_index })
            .map_err(|e| CpaError::Protocol(e.to_string()))?;
        self.send(Method::POST, "/reset-quota", &[], Some(body))
            .await
            .map(|_| ())
    }

    /// Sets CPA's `priority` of an auth file, sending exactly `{name, priority}`
    /// (CPA ≥ v6.8.20 `PATCH /auth-files/fields`; docs/rules/patrol.md §6.5).
    pub async fn set_priority(&self, name: &str, priority: i64) -> Result<(), CpaError> {
        let body = serde_json::to_vec(&wire::PriorityPatch { name, priority })
            .map_err(|e| CpaError::Protocol(e.to_string()))?;
        self.send(Method::PATCH, "/auth-files/fields", &[], Some(body))
            .await
            .map(|_| ())
    }

    /// Deletes an auth file (`DELETE /auth-files?name=`).
    pub async fn delete(&self, name: &str) -> Result<(), CpaError> {
        self.send(Method::DELETE, "/auth-files", &[("name", name)], None)
            .await
            .map(|_| ())
    }

    /// Pops up to `count` usage-queue records and returns their `auth_index` values
    /// (CPA ≥ v6.10.8 `GET /usage-queue`; destructive).
    pub async fn pop_usage_queue(&self, count: u32) -> Result<Vec<String>, CpaError> {
        let count = count.max(1).to_string();
        let records: Vec<serde_json::Value> = self
            .json(Method::GET, "/usage-queue", &[("count", &count)], None)
            .await?;
        Ok(records
            .into_iter()
            .filter_map(|v| {
                // Elements may be JSON strings holding an object (seen in the CodexPatrol panel's data; docs/decisions.md §1).
                let v = match v {
                    serde_json::Value::String(s) => serde_json::from_str(&s).ok()?,
                    other => other,
                };
                serde_json::from_value::<wire::UsageRecord>(v)
                    .ok()?
                    .auth_index
            })
            .collect())
    }
}

/// A Go `time.Time` JSON string (RFC 3339 with any offset) as UTC; `None` when absent or junk.
fn go_time(raw: Option<&str>) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::parse_from_rfc3339(raw?.trim())
        .ok()
        .map(|t| t.with_timezone(&chrono::Utc))
}

/// One listing entry as an [`Account`]: `None` for another provider, `Some(Err)` for an entry
/// without a name (skipped).
fn to_account(e: wire::AuthFileEntry, provider: &str) -> Option<Result<Account, ()>> {
    let p = e.provider.clone().or(e.kind.clone()).unwrap_or_default();
    if !p.eq_ignore_ascii_case(provider) {
        return None;
    }
    let Some(name) = e.name.clone().or(e.id.clone()).filter(|n| !n.is_empty()) else {
        return Some(Err(()));
    };
    let claims = e.id_token.unwrap_or_default();
    let request_total = match (e.success, e.failed) {
        (None, None) => None,
        (s, f) => Some(s.unwrap_or(0).max(0) as u64 + f.unwrap_or(0).max(0) as u64),
    };
    Some(Ok(Account {
        name,
        auth_index: e.auth_index.filter(|s| !s.trim().is_empty()),
        email: e.email.or(e.account).filter(|s| !s.is_empty()),
        label: e.label.filter(|s| !s.is_empty()),
        plan_type: claims.plan_type.as_deref().map(normalize_plan),
        chatgpt_account_id: claims.chatgpt_account_id.filter(|s| !s.is_empty()),
        disabled: e.disabled,
        status: e.status.unwrap_or_default(),
        status_message: e.status_message.unwrap_or_default(),
        cpa_priority: e.priority.unwrap_or(0),
        request_total,
        recent_requests: e.recent_requests,
        unavailable: e.unavailable,
        next_retry_after: go_time(e.next_retry_after.as_deref()),
        last_refresh: go_time(e.last_refresh.as_deref()),
        passive: crate::core::passive::read(e.quota.as_ref()),
    }))
}
