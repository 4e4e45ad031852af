//! TEMPORARY stand-ins for `core::affinity` (part A) and `core::failure` (part B), written to
//! their contract signatures (issue 9 contract.md) so the adapter compiles before they land.
//! Deliberately minimal (no affinity, a coarse classification); deleted at the merge, when the
//! adapter switches its `use` lines to `crate::core::{affinity, failure}`.
#![allow(dead_code, missing_docs)]

pub mod affinity {
    use chrono::{DateTime, Utc};
    use serde::Serialize;

    use crate::core::router::Api;
    use crate::core::selection::{CandidateSet, EngineState, Ranking, rank};

    #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
    pub struct SessionKey {
        pub hash: u64,
        pub origin: KeyOrigin,
    }
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize)]
    pub enum KeyOrigin {
        Header,
        PromptCacheKey,
        PreviousResponse,
        Fingerprint,
    }
    pub struct KeyInput<'a> {
        pub header: Option<&'a str>,
        pub body: &'a serde_json::Value,
        pub api: Api,
        pub previous_response: Option<SessionKey>,
    }
    pub fn session_key(input: &KeyInput) -> Option<SessionKey> {
        use std::hash::{Hash, Hasher};
        let h = input.header?;
        let mut s = std::collections::hash_map::DefaultHasher::new();
        h.hash(&mut s);
        Some(SessionKey {
            hash: s.finish(),
            origin: KeyOrigin::Header,
        })
    }
    #[derive(Clone, Copy, Debug)]
    pub struct AffinityConfig {
        pub capacity: usize,
        pub idle_ttl: chrono::Duration,
        pub short_exclusion: chrono::Duration,
        pub block_min: u32,
        pub block_max: u32,
        pub min_hit_ratio: f64,
        pub demotion: chrono::Duration,
    }
    impl Default for AffinityConfig {
        fn default() -> Self {
            Self {
                capacity: 10_000,
                idle_ttl: chrono::Duration::minutes(60),
                short_exclusion: chrono::Duration::seconds(60),
                block_min: 16,
                block_max: 48,
                min_hit_ratio: 0.85,
                demotion: chrono::Duration::minutes(10),
            }
        }
    }
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
    pub enum AffinityChoice {
        Bound,
        KeptBriefExclusion,
        Rebound,
        Fresh,
        Shared,
        Block,
        NoCandidate,
    }
    pub struct LaneAffinity;
    impl LaneAffinity {
        pub fn new(_config: AffinityConfig, _candidates: usize) -> Self {
            Self
        }
        pub fn rank(
            &mut self,
            set: &CandidateSet,
            state: &EngineState,
            _key: Option<SessionKey>,
            now: DateTime<Utc>,
            out: &mut Ranking,
        ) -> AffinityChoice {
            rank(set, state, now, 0, out);
            if out.first().is_some() {
                AffinityChoice::Block
            } else {
                AffinityChoice::NoCandidate
            }
        }
        pub fn record_success(
            &mut self,
            _key: Option<SessionKey>,
            _index: usize,
            _hit: bool,
            _now: DateTime<Utc>,
        ) {
        }
        pub fn record_failure(
            &mut self,
            _key: Option<SessionKey>,
            _index: usize,
            _now: DateTime<Utc>,
        ) {
        }
        pub fn bindings(&mut self, _now: DateTime<Utc>) -> usize {
            0
        }
        pub fn is_demoted(&self, _index: usize, _now: DateTime<Utc>) -> bool {
            false
        }
        pub fn bound(&self, _key: SessionKey, _now: DateTime<Utc>) -> Option<usize> {
            None
        }
    }
    pub struct ResponseLinks;
    impl ResponseLinks {
        pub fn new(_capacity: usize) -> Self {
            Self
        }
        pub fn link(&mut self, _response_id: &str, _key: SessionKey) {}
        pub fn get(&mut self, _response_id: &str) -> Option<SessionKey> {
            None
        }
    }
}

pub mod failure {
    use chrono::{DateTime, Utc};
    use serde::Serialize;

    use crate::core::selection::EngineState;

    pub trait Headers {
        fn get(&self, name: &str) -> Option<&str>;
    }
    pub enum Outcome<'a> {
        Status {
            status: u16,
            headers: &'a dyn Headers,
            body: &'a [u8],
            html: bool,
        },
        EarlyErrorFrame {
            headers: &'a dyn Headers,
            frame: &'a [u8],
        },
        Transport,
    }
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "camelCase")]
    pub enum FailureClass {
        Quota,
        RateLimit,
        SessionDead,
        Transient,
        RequestError,
    }
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "camelCase")]
    pub enum Scope {
        Account,
        Model,
    }
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct Verdict {
        pub class: FailureClass,
        pub scope: Scope,
        pub reset_at: Option<DateTime<Utc>>,
        pub retry_after: Option<chrono::Duration>,
    }
    pub fn classify(outcome: &Outcome, _now: DateTime<Utc>) -> Option<Verdict> {
        let class = match outcome {
            Outcome::Status { status, .. } if (200..300).contains(status) => return None,
            Outcome::Status { status: 429, .. } => FailureClass::RateLimit,
            Outcome::Status {
                status: 401 | 403, ..
            } => FailureClass::SessionDead,
            Outcome::Status { status, .. } if *status >= 500 => FailureClass::Transient,
            Outcome::Status { .. } => FailureClass::RequestError,
            Outcome::EarlyErrorFrame { .. } => FailureClass::Quota,
            Outcome::Transport => FailureClass::Transient,
        };
        Some(Verdict {
            class,
            scope: Scope::Account,
            reset_at: None,
            retry_after: None,
        })
    }
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum FrameKind {
        Content,
        Error,
        RateLimitInfo,
        Other,
    }
    pub fn frame_kind(data: &[u8]) -> FrameKind {
        let text = String::from_utf8_lossy(data);
        if text.contains("\"error\"") {
            FrameKind::Error
        } else if text.contains("rate_limits") {
            FrameKind::RateLimitInfo
        } else {
            FrameKind::Content
        }
    }
    pub enum Next {
        RetrySameAfter(std::time::Duration),
        NextAccount,
        ReturnToClient,
    }
    pub fn next_step(verdict: &Verdict, retries_done: u32, max_retries: u32, _jitter: f64) -> Next {
        match verdict.class {
            FailureClass::Transient if retries_done < max_retries => {
                Next::RetrySameAfter(std::time::Duration::from_millis(500))
            }
            FailureClass::RequestError => Next::ReturnToClient,
            _ => Next::NextAccount,
        }
    }
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "camelCase")]
    pub enum CooldownKind {
        Quota,
        RateLimit,
        SessionDead,
        Transient,
        PoolThrottle,
    }
    pub struct Observations {
        kinds: Vec<Option<(CooldownKind, DateTime<Utc>)>>,
    }
    impl Observations {
        pub fn new(candidates: usize) -> Self {
            Self {
                kinds: vec![None; candidates],
            }
        }
        pub fn observe(
            &mut self,
            index: usize,
            verdict: &Verdict,
            now: DateTime<Utc>,
            _jitter: f64,
            state: &mut EngineState,
        ) -> Option<DateTime<Utc>> {
            let (kind, until) = match verdict.class {
                FailureClass::RequestError => return None,
                FailureClass::Quota => (
                    CooldownKind::Quota,
                    verdict
                        .reset_at
                        .unwrap_or(now + chrono::Duration::minutes(10)),
                ),
                FailureClass::RateLimit => (
                    CooldownKind::RateLimit,
                    now + verdict.retry_after.unwrap_or(chrono::Duration::seconds(2)),
                ),
                FailureClass::SessionDead => (
                    CooldownKind::SessionDead,
                    now + chrono::Duration::minutes(30),
                ),
                FailureClass::Transient => {
                    (CooldownKind::Transient, now + chrono::Duration::seconds(30))
                }
            };
            self.cool(index, kind, until, state);
            Some(until)
        }
        pub fn success(&mut self, _index: usize) {}
        pub fn cool(
            &mut self,
            index: usize,
            kind: CooldownKind,
            until: DateTime<Utc>,
            state: &mut EngineState,
        ) {
            self.kinds[index] = Some((kind, until));
            state.cooldowns.set(index, until);
        }
        pub fn clear_quota(&mut self, index: usize, state: &mut EngineState) {
            if matches!(self.kinds[index], Some((CooldownKind::Quota, _))) {
                self.kinds[index] = None;
                state.cooldowns.clear(index);
            }
        }
        pub fn kind(&self, index: usize, now: DateTime<Utc>) -> Option<CooldownKind> {
            self.kinds[index]
                .filter(|(_, until)| *until > now)
                .map(|(k, _)| k)
        }
    }
    pub struct ThrottleDetector;
    impl ThrottleDetector {
        pub fn new(_accounts: usize) -> Self {
            Self
        }
        pub fn rate_limited(
            &mut self,
            _index: usize,
            _retry_after: Option<chrono::Duration>,
            _now: DateTime<Utc>,
        ) -> Option<chrono::Duration> {
            None
        }
        pub fn success(&mut self, _index: usize) {}
    }
    #[derive(Clone, Copy, Debug)]
    pub struct ExcludedEnd {
        pub quota: bool,
        pub until: Option<DateTime<Utc>>,
    }
    #[derive(Clone, Debug, PartialEq, Serialize)]
    pub struct NoAccount {
        pub status: u16,
        pub code: &'static str,
        pub kind: &'static str,
        pub message: String,
        pub retry_after_seconds: Option<i64>,
        pub resets_at: Option<i64>,
        pub resets_in_seconds: Option<i64>,
    }
    pub fn no_account(exclusions: &[ExcludedEnd], now: DateTime<Utc>) -> NoAccount {
        let earliest = exclusions.iter().filter_map(|e| e.until).min();
        let quota = !exclusions.is_empty() && exclusions.iter().all(|e| e.quota);
        let secs = earliest.map(|t| (t - now).num_seconds().max(1));
        match (quota, earliest) {
            (_, None) => NoAccount {
                status: 503,
                code: "no_healthy_account",
                kind: "server_error",
                message: "no account can serve this model".into(),
                retry_after_seconds: None,
                resets_at: None,
                resets_in_seconds: None,
            },
            (true, Some(t)) => NoAccount {
                status: 429,
                code: "all_accounts_exhausted",
                kind: "usage_limit_reached",
                message: "every account is out of quota".into(),
                retry_after_seconds: secs,
                resets_at: Some(t.timestamp()),
                resets_in_seconds: secs,
            },
            (false, Some(_)) => NoAccount {
                status: 429,
                code: "no_healthy_account",
                kind: "rate_limit_exceeded",
                message: "every account is cooling down".into(),
                retry_after_seconds: secs,
                resets_at: None,
                resets_in_seconds: None,
            },
        }
    }
    impl NoAccount {
        pub fn body(&self) -> serde_json::Value {
            let mut e =
                serde_json::json!({"message": self.message, "type": self.kind, "code": self.code});
            if let Some(r) = self.resets_at {
                e["resets_at"] = r.into();
            }
            if let Some(r) = self.resets_in_seconds {
                e["resets_in_seconds"] = r.into();
            }
            serde_json::json!({ "error": e })
        }
    }
}
