//! Session affinity of the request router (docs/rules/router.md §2, §1 "a binding first"): session
//! keys (explicit ids, prefix fingerprints), per-lane bindings (bounded LRU, idle expiry), the
//! spread of fresh sessions over free accounts, the sticky block of key-less requests, cache
//! samples and demotion. Pure: no I/O, no clock reads (`now` is an argument), no randomness.
//! It never judges eligibility (that is `core::selection`: affinity only reorders the eligible
//! candidates of a ranking) and never rates failures (`core::failure`); the adapter owns one
//! [`LaneAffinity`] per (pool, model) and reports each request's outcome back.

use std::cell::Cell;
use std::hash::Hasher;
use std::num::NonZeroUsize;

use chrono::{DateTime, Utc};
use lru::LruCache;
use serde::Serialize;
use serde_json::Value;
use siphasher::sip::SipHasher13;

use super::router::Api;
use super::selection::{
    Affinity, Candidate, CandidateSet, EngineState, Exclusion, ExclusionReason, Ranking, rank_with,
};

/// A session key: 64-bit hash of the explicit id or fingerprint, plus where it came from
/// (docs/rules/router.md §2.1). Explicit ids (header, `prompt_cache_key`) share one hash space, so the
/// same id sent either way is the same session; fingerprints have their own.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct SessionKey {
    pub hash: u64,
    pub origin: KeyOrigin,
}

/// Where a [`SessionKey`] came from, in precedence order (docs/rules/router.md §2.1).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum KeyOrigin {
    /// A session header (`x-session-id`, `session_id`, `x-dsh-router-session`, ...).
    Header,
    /// The body field `prompt_cache_key`.
    PromptCacheKey,
    /// The session of the response a Responses request continues (`previous_response_id`).
    PreviousResponse,
    /// The hash of the first two messages (or `instructions` + the first input item).
    Fingerprint,
}

/// Inputs for the key: the first present session header value (the adapter reads, in order,
/// `x-session-id`, `session_id`, `session-id`, `x-dsh-router-session`,
/// `x-claude-code-session-id`, `conversation_id`, `thread-id`), the parsed JSON body, which
/// API, and the session key already linked to `previous_response_id` (if any; `None` when not
/// known, see [`ResponseLinks`]).
pub struct KeyInput<'a> {
    pub header: Option<&'a str>,
    pub body: &'a Value,
    pub api: Api,
    pub previous_response: Option<SessionKey>,
}

/// Characters of a message's text that go into the fingerprint (docs/rules/router.md §2.1).
const FINGERPRINT_CHARS: usize = 512;
/// Messages that go into the fingerprint: system + first user message never change.
const FINGERPRINT_MESSAGES: usize = 2;
/// Fixed SipHash key: keys must be equal across requests (and happen to be across restarts).
const SIP_KEY: (u64, u64) = (0x7175_6f74_612d_7061, 0x7472_6f6c_2d61_6666);

fn hasher(domain: &[u8]) -> SipHasher13 {
    let mut h = SipHasher13::new_with_keys(SIP_KEY.0, SIP_KEY.1);
    h.write(domain);
    h
}

/// The session key of a request (docs/rules/router.md §2.1), first found of: the session header, the body's
/// `prompt_cache_key` (the header wins when both are present), the key linked to
/// `previous_response_id`, the prefix fingerprint — for chat completions role + first 512
/// characters of the text of `messages[0..2]`, for the Responses API `instructions` (as a
/// system message) + the first `input` item (a string input is one user message). Text is a
/// string content or the concatenated `text` of content parts; images and other parts are
/// ignored. Empty or whitespace-only ids count as absent. `None` = no key (no messages, or
/// messages without any role or text): the request takes the sticky block (§2.4).
pub fn session_key(input: &KeyInput) -> Option<SessionKey> {
    let explicit = |id: &str, origin| SessionKey {
        hash: {
            let mut h = hasher(b"sid\0");
            h.write(id.as_bytes());
            h.finish()
        },
        origin,
    };
    if let Some(h) = input.header.map(str::trim).filter(|h| !h.is_empty()) {
        return Some(explicit(h, KeyOrigin::Header));
    }
    let cache_key = input.body.get("prompt_cache_key").and_then(Value::as_str);
    if let Some(k) = cache_key.map(str::trim).filter(|k| !k.is_empty()) {
        return Some(explicit(k, KeyOrigin::PromptCacheKey));
    }
    if let Some(k) = input.previous_response {
        return Some(SessionKey {
            hash: k.hash,
            origin: KeyOrigin::PreviousResponse,
        });
    }
    let mut fp = Fingerprint::new();
    match input.api {
        Api::ChatCompletions => {
            let messages = input.body.get("messages").and_then(Value::as_array);
            for m in messages.into_iter().flatten().take(FINGERPRINT_MESSAGES) {
                if m.is_object() {
                    fp.message(m.get("role").and_then(Value::as_str), m.get("content"));
                }
            }
        }
        Api::Responses | Api::ResponsesCompact => {
            if let Some(i) = input.body.get("instructions").filter(|i| i.is_string()) {
                fp.message(Some("system"), Some(i));
            }
            match input.body.get("input") {
                Some(s @ Value::String(_)) => fp.message(Some("user"), Some(s)),
                Some(Value::Array(items)) => match items.first() {
                    Some(s @ Value::String(_)) => fp.message(Some("user"), Some(s)),
                    Some(item) if item.is_object() => fp.message(
                        item.get("role").and_then(Value::as_str),
                        item.get("content"),
                    ),
                    _ => {}
                },
                _ => {}
            }
        }
    }
    fp.finish().map(|hash| SessionKey {
        hash,
        origin: KeyOrigin::Fingerprint,
    })
}

/// The prefix fingerprint being hashed: per message `role ␀ text-prefix ␁`.
struct Fingerprint {
    h: SipHasher13,
    any: bool,
}

impl Fingerprint {
    fn new() -> Self {
        Self {
            h: hasher(b"fp\0"),
            any: false,
        }
    }

    /// Adds one message; skipped when it has neither a role nor any text.
    fn message(&mut self, role: Option<&str>, content: Option<&Value>) {
        let has_text = text_parts(content).any(|t| !t.is_empty());
        if role.is_none() && !has_text {
            return;
        }
        self.any = true;
        self.h.write(role.unwrap_or("").as_bytes());
        self.h.write(&[0]);
        let mut left = FINGERPRINT_CHARS;
        for part in text_parts(content) {
            if left == 0 {
                break;
            }
            let cut = part
                .char_indices()
                .nth(left)
                .map_or(part.len(), |(at, _)| at);
            let taken = &part[..cut];
            left -= taken.chars().count();
            self.h.write(taken.as_bytes());
        }
        self.h.write(&[1]);
    }

    fn finish(&self) -> Option<u64> {
        self.any.then(|| self.h.finish())
    }
}

/// The text of a message content: a string, or the string parts and parts' `text` of an array.
fn text_parts(content: Option<&Value>) -> impl Iterator<Item = &str> {
    let (single, parts) = match content {
        Some(Value::String(s)) => (Some(s.as_str()), None),
        Some(Value::Array(parts)) => (None, Some(parts)),
        _ => (None, None),
    };
    single.into_iter().chain(
        parts
            .into_iter()
            .flatten()
            .filter_map(|p| p.as_str().or_else(|| p.get("text").and_then(Value::as_str))),
    )
}

/// Affinity settings of a lane (docs/rules/router.md §2; defaults: capacity 10,000 bindings, idle TTL
/// 60 min, short exclusion 60 s, block 16..48 requests, hit ratio 0.85, demotion 10 min).
#[derive(Clone, Copy, Debug)]
pub struct AffinityConfig {
    /// Bindings kept per lane (LRU beyond); 0 is taken as 1.
    pub capacity: usize,
    /// A binding not hit for this long is dropped (§2.2).
    pub idle_ttl: chrono::Duration,
    /// A bound account cooling down for at most this long keeps its binding (§2.2).
    pub short_exclusion: chrono::Duration,
    /// Sticky block: requests a resident serves at least (`N`, §2.4).
    pub block_min: u32,
    /// Sticky block: requests a resident serves at most (`N_max`); also the samples after which
    /// a low hit ratio demotes (§2.3).
    pub block_max: u32,
    /// Hit ratio `M` below which a block stays and `block_max` samples demote (§2.3, §2.4).
    pub min_hit_ratio: f64,
    /// How long a demotion lasts (§2.3).
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

/// What [`LaneAffinity::rank`] did, for headers, logs and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum AffinityChoice {
    /// The bound account goes first (§2.2).
    Bound,
    /// The bound account is briefly excluded: served elsewhere, binding kept (§2.2).
    KeptBriefExclusion,
    /// The bound account is excluded for longer or demoted for this session: re-bound.
    Rebound,
    /// A new session bound to a free account of the best tier.
    Fresh,
    /// A new session bound to an account already bound to others (no free one in the tier).
    Shared,
    /// No key: the sticky block's resident (§2.4).
    Block,
    /// Nothing eligible: the ranking is empty.
    NoCandidate,
}

/// How long a failure during a request leaves the failed account excluded, as far as the
/// session bound to it is concerned (docs/rules/router.md §2.2); [`LaneAffinity::failure_exclusion`] makes
/// it from the cooldown's kind and end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureExclusion {
    /// Not excluded, or a rate_limit / transient / pool-throttle cooldown ending within
    /// `short_exclusion` (60 s): the binding is kept and the conversation returns to it.
    Brief,
    /// Longer, or a quota (also a 402 payment answer) or session_dead (401/403: invalid)
    /// cooldown of any length: the binding goes for good to the account that serves the request.
    Long,
}

/// Cache-quality sample counts (docs/rules/router.md §2.3).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Sample {
    served: u32,
    hits: u32,
}

impl Sample {
    /// Adds one successful response; `true` when the samples now demote (`block_max` samples
    /// with a hit ratio under `min_hit_ratio`), which also restarts the observation.
    fn record(&mut self, hit: bool, config: &AffinityConfig) -> bool {
        self.served += 1;
        self.hits += u32::from(hit);
        let demote = self.served >= config.block_max
            && f64::from(self.hits) < config.min_hit_ratio * f64::from(self.served);
        if demote {
            *self = Sample::default();
        }
        demote
    }
}

/// One session's binding.
#[derive(Clone, Copy, Debug)]
struct Binding {
    /// The bound candidate.
    index: usize,
    /// Last hit, unix microseconds (idle expiry).
    seen_us: i64,
    /// The session's samples on its bound account.
    sample: Sample,
    /// The account this session is demoted on, and until when (unix µs).
    demoted: Option<(usize, i64)>,
    /// Kept although this request may be served elsewhere (a brief exclusion at ranking, or
    /// the bound account failed briefly during it, [`FailureExclusion::Brief`]): a success
    /// elsewhere does not re-bind. Cleared by a ranking that finds the bound account eligible,
    /// and by a failure of the bound account that excludes it for longer
    /// ([`FailureExclusion::Long`]), so the account that serves the request takes the binding.
    held: bool,
}

/// All affinity state of one lane = one (pool, model) (docs/rules/router.md §2): bindings (bounded LRU,
/// idle TTL refreshed on hit), the live-binding count per candidate, the spread cursor for fresh
/// sessions, the sticky block (resident, its cursor), per-account samples and demotions of the
/// key-less path. Candidates are the lane's [`CandidateSet`] indexes (0..n); a lane whose
/// candidate set changes shape is rebuilt by its owner.
pub struct LaneAffinity {
    config: AffinityConfig,
    idle_us: i64,
    short_us: i64,
    bindings: LruCache<u64, Binding>,
    /// Per candidate: live bindings (exact after every expiry sweep).
    live: Vec<u32>,
    spread_cursor: usize,
    block_cursor: usize,
    /// The sticky block's resident and whether its block ended (a failure).
    resident: Option<usize>,
    block_ended: bool,
    /// Per candidate: key-less samples (the resident's are its block counters).
    samples: Vec<Sample>,
    /// Key-less demotions: (candidate, until unix µs); few at a time.
    demoted: Vec<(usize, i64)>,
}

impl LaneAffinity {
    /// An empty lane for `candidates` candidates.
    pub fn new(config: AffinityConfig, candidates: usize) -> Self {
        let capacity = NonZeroUsize::new(config.capacity).unwrap_or(NonZeroUsize::MIN);
        Self {
            config,
            idle_us: micros(config.idle_ttl),
            short_us: micros(config.short_exclusion),
            bindings: LruCache::new(capacity),
            live: vec![0; candidates],
            spread_cursor: 0,
            block_cursor: 0,
            resident: None,
            block_ended: false,
            samples: vec![Sample::default(); candidates],
            demoted: Vec::new(),
        }
    }

    /// Ranks one request into `out` (docs/rules/router.md §1, §2) with one `selection::rank_with` call:
    ///  - bound key, bound account eligible ⇒ it is first (whatever its tier);
    ///  - bound account excluded briefly (`CoolingDown` until ≤ now + `short_exclusion`) ⇒
    ///    served elsewhere (a free account of the best tier preferred), binding kept;
    ///  - bound account excluded otherwise or demoted for this session, or no live binding, with
    ///    a key ⇒ the first free eligible account of the best tier from the spread cursor goes
    ///    first, else the least-bound one of that tier (shared); the key is bound to it at once,
    ///    so concurrent fresh sessions see it taken;
    ///  - no key ⇒ sticky block: the resident stays first while it is eligible in the best tier,
    ///    its block has not ended by a failure, and `served < block_min || hit ratio <
    ///    min_hit_ratio` and `served < block_max`; else the next eligible account of the best
    ///    tier from the block cursor becomes resident (its samples restart);
    ///  - demoted accounts (key-less: per account; keyed: this session's) go to the end, unless
    ///    every eligible one is demoted (demotion never removes a candidate).
    ///
    /// Every cooldown counts as brief-able here (its kind unknown): callers that know the kinds
    /// (the router: `failure::Observations::kind`) use [`LaneAffinity::rank_judged`].
    pub fn rank(
        &mut self,
        set: &CandidateSet,
        state: &EngineState,
        key: Option<SessionKey>,
        now: DateTime<Utc>,
        out: &mut Ranking,
    ) -> AffinityChoice {
        self.rank_judged(set, state, key, now, &|_| true, out)
    }

    /// [`LaneAffinity::rank`] with the kind of a bound account's cooldown judged:
    /// `brief_kind(index)` says whether the cooldown running on candidate `index` is of a kind
    /// that may be brief (docs/rules/router.md §2.2: rate_limit / transient). A bound account cooling down
    /// for another kind (a router-observed quota, session_dead) is re-bound even when that
    /// cooldown ends within `short_exclusion`. Called only for an excluded bound account (at
    /// most once per ranking); allocates nothing.
    pub fn rank_judged(
        &mut self,
        set: &CandidateSet,
        state: &EngineState,
        key: Option<SessionKey>,
        now: DateTime<Utc>,
        brief_kind: &dyn Fn(usize) -> bool,
        out: &mut Ranking,
    ) -> AffinityChoice {
        let now_us = now.timestamp_micros();
        self.grow(set.len());
        self.expire(now_us);
        let binding = key.and_then(|k| self.bindings.peek(&k.hash));
        let apply = Apply {
            lane: self,
            set,
            state,
            now,
            keyed: key.is_some(),
            bound: binding.map(|b| b.index),
            session_demoted: binding
                .and_then(|b| b.demoted)
                .filter(|&(_, until)| until > now_us)
                .map(|(i, _)| i),
            now_us,
            brief_kind,
            decision: Cell::new(Decision::NONE),
        };
        let cursor = if key.is_some() {
            self.spread_cursor
        } else {
            self.block_cursor
        };
        rank_with(set, state, now, cursor, &apply, out);
        let decision = apply.decision.get();
        self.commit(key, decision, now_us);
        decision.choice
    }

    /// Applies a ranking's decision to the lane state.
    fn commit(&mut self, key: Option<SessionKey>, d: Decision, now_us: i64) {
        let advance = |cursor: usize| cursor.wrapping_add(d.position + 1);
        match (key, d.choice, d.chosen) {
            (Some(k), AffinityChoice::Bound, _) => {
                if let Some(b) = self.bindings.get_mut(&k.hash) {
                    b.seen_us = now_us;
                    b.held = false;
                }
            }
            (Some(k), AffinityChoice::KeptBriefExclusion, _) => {
                self.spread_cursor = advance(self.spread_cursor);
                if let Some(b) = self.bindings.get_mut(&k.hash) {
                    b.seen_us = now_us;
                    b.held = true;
                }
            }
            (
                Some(k),
                AffinityChoice::Fresh | AffinityChoice::Shared | AffinityChoice::Rebound,
                Some(index),
            ) => {
                self.spread_cursor = advance(self.spread_cursor);
                self.bind(k.hash, index, now_us);
            }
            (None, AffinityChoice::Block, Some(index)) if d.new_residency => {
                self.block_cursor = advance(self.block_cursor);
                self.resident = Some(index);
                self.block_ended = false;
                self.samples[index] = Sample::default();
            }
            _ => {}
        }
    }

    /// The request was served by `index` (after fail-over it may differ from the first ranked):
    /// keyed ⇒ (re)binds the key to `index` unless its binding is held (kept through a brief
    /// exclusion at ranking, or its account failed briefly during this request, see
    /// [`LaneAffinity::record_failure`]), and samples the cache `hit` for the session on its
    /// bound account; key-less ⇒ samples `index` (the resident's samples are its block
    /// counters). `block_max` samples with a hit ratio under `min_hit_ratio` demote for
    /// `demotion` (docs/rules/router.md §2.3).
    pub fn record_success(
        &mut self,
        key: Option<SessionKey>,
        index: usize,
        hit: bool,
        now: DateTime<Utc>,
    ) {
        let now_us = now.timestamp_micros();
        self.grow(index + 1);
        self.expire(now_us);
        let demote_until = now_us.saturating_add(micros(self.config.demotion));
        let Some(k) = key else {
            if self.samples[index].record(hit, &self.config) {
                self.demoted.retain(|&(i, _)| i != index);
                self.demoted.push((index, demote_until));
            }
            return;
        };
        let config = self.config;
        match self.bindings.get_mut(&k.hash) {
            Some(b) if b.index != index && b.held => b.seen_us = now_us,
            Some(b) if b.index == index => {
                b.seen_us = now_us;
                if b.sample.record(hit, &config) {
                    b.demoted = Some((index, demote_until));
                }
            }
            _ => {
                self.bind(k.hash, index, now_us);
                if let Some(b) = self.bindings.peek_mut(&k.hash) {
                    b.sample.record(hit, &config);
                }
            }
        }
    }

    /// A failed attempt on `index` (never sampled), with the exclusion it leaves `index` in
    /// (docs/rules/router.md §2.2, [`LaneAffinity::failure_exclusion`]): key-less, the sticky block of a
    /// resident `index` ends (the next key-less request moves on); keyed, a binding to `index`
    /// is held through a [`FailureExclusion::Brief`] one (the fail-over account's success does
    /// not re-bind: the conversation returns once the cooldown ends) and released by a
    /// [`FailureExclusion::Long`] one (the account that serves this request takes the binding
    /// for good, so a later request neither returns to `index` after its exclusion nor spreads
    /// to a third account during it).
    pub fn record_failure(
        &mut self,
        key: Option<SessionKey>,
        index: usize,
        exclusion: FailureExclusion,
        now: DateTime<Utc>,
    ) {
        self.expire(now.timestamp_micros());
        match key {
            None => {
                if self.resident == Some(index) {
                    self.block_ended = true;
                }
            }
            Some(k) => {
                if let Some(b) = self.bindings.peek_mut(&k.hash)
                    && b.index == index
                {
                    b.held = exclusion == FailureExclusion::Brief;
                }
            }
        }
    }

    /// The [`FailureExclusion`] of an account a failure left excluded until `until` (`None`: not
    /// excluded) by a cooldown of a brief-able kind or not (`brief_kind`: rate_limit, transient,
    /// pool throttle; not quota, session_dead): brief iff not excluded, or brief-able and ending
    /// within `short_exclusion` of `now` — the rule a ranking applies to a bound account's
    /// cooldown (docs/rules/router.md §2.2).
    pub fn failure_exclusion(
        &self,
        brief_kind: bool,
        until: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> FailureExclusion {
        let limit = now.timestamp_micros().saturating_add(self.short_us);
        match until {
            Some(t) if !brief_kind || t.timestamp_micros() > limit => FailureExclusion::Long,
            _ => FailureExclusion::Brief,
        }
    }

    /// Live bindings (after dropping idle-expired ones at `now`), for status and metrics.
    pub fn bindings(&mut self, now: DateTime<Utc>) -> usize {
        self.expire(now.timestamp_micros());
        self.bindings.len()
    }

    /// Whether `index` is demoted for key-less requests at `now` (preview reason "demoted").
    pub fn is_demoted(&self, index: usize, now: DateTime<Utc>) -> bool {
        let now_us = now.timestamp_micros();
        self.demoted.iter().any(|&(i, u)| i == index && u > now_us)
    }

    /// The account bound to `key` at `now` (no LRU refresh), for preview.
    pub fn bound(&self, key: SessionKey, now: DateTime<Utc>) -> Option<usize> {
        let now_us = now.timestamp_micros();
        self.bindings
            .peek(&key.hash)
            .filter(|b| self.alive(b, now_us))
            .map(|b| b.index)
    }

    fn alive(&self, b: &Binding, now_us: i64) -> bool {
        b.seen_us.saturating_add(self.idle_us) > now_us
    }

    /// Makes room for `n` candidates (a lane built smaller than its set).
    fn grow(&mut self, n: usize) {
        if self.live.len() < n {
            self.live.resize(n, 0);
            self.samples.resize(n, Sample::default());
        }
    }

    /// Drops the idle-expired bindings (the LRU tail: least recently hit first) and the ended
    /// key-less demotions.
    fn expire(&mut self, now_us: i64) {
        while let Some((_, b)) = self.bindings.peek_lru() {
            if self.alive(b, now_us) {
                break;
            }
            if let Some((_, b)) = self.bindings.pop_lru() {
                self.live[b.index] -= 1;
            }
        }
        if !self.demoted.is_empty() {
            self.demoted.retain(|&(_, until)| until > now_us);
        }
    }

    /// Binds `key` to `index` (refreshing it; a new account restarts its samples), evicting the
    /// least recently used binding when full; keeps the live counts exact.
    fn bind(&mut self, key: u64, index: usize, now_us: i64) {
        self.grow(index + 1);
        let live = &mut self.live;
        if let Some(b) = self.bindings.get_mut(&key) {
            if b.index != index {
                live[b.index] -= 1;
                live[index] += 1;
                b.index = index;
                b.sample = Sample::default();
            }
            b.seen_us = now_us;
            b.held = false;
            return;
        }
        let fresh = Binding {
            index,
            seen_us: now_us,
            sample: Sample::default(),
            demoted: None,
            held: false,
        };
        if let Some((_, evicted)) = self.bindings.push(key, fresh) {
            live[evicted.index] -= 1;
        }
        live[index] += 1;
    }
}

/// Microseconds of a duration (saturating).
fn micros(d: chrono::Duration) -> i64 {
    d.num_microseconds().unwrap_or(i64::MAX)
}

/// What the affinity of one request decided inside the ranking.
#[derive(Clone, Copy, Debug)]
struct Decision {
    choice: AffinityChoice,
    chosen: Option<usize>,
    /// Position (in the cursor-rotated ranking) the chosen account was taken from: the cursor
    /// moves past it.
    position: usize,
    /// Key-less: the chosen account starts a new residency.
    new_residency: bool,
}

impl Decision {
    const NONE: Decision = Decision {
        choice: AffinityChoice::NoCandidate,
        chosen: None,
        position: 0,
        new_residency: false,
    };
}

/// The affinity of one request, borrowing its lane (the `selection::Affinity` seam): reorders
/// the finished ranking and notes its decision for [`LaneAffinity::commit`].
struct Apply<'a> {
    lane: &'a LaneAffinity,
    set: &'a CandidateSet,
    state: &'a EngineState,
    now: DateTime<Utc>,
    now_us: i64,
    keyed: bool,
    bound: Option<usize>,
    session_demoted: Option<usize>,
    /// Whether candidate `i`'s running cooldown is of a kind that may be brief (§2.2).
    brief_kind: &'a dyn Fn(usize) -> bool,
    decision: Cell<Decision>,
}

impl Affinity for Apply<'_> {
    fn apply(&self, _candidates: &[Candidate], ranking: &mut Ranking) {
        if ranking.order().is_empty() {
            return;
        }
        let usable = self.demote(ranking);
        let decision = if self.keyed {
            self.keyed(ranking, usable)
        } else {
            self.block(ranking, usable)
        };
        self.decision.set(decision);
    }
}

impl Apply<'_> {
    /// Moves the demoted eligible candidates to the end unless all eligible are demoted;
    /// returns how many lead the ranking undemoted.
    fn demote(&self, ranking: &mut Ranking) -> usize {
        let ranked = ranking.order().len();
        let is_ranked = |r: &Ranking, i: usize| r.order().contains(&i);
        let count = if self.keyed {
            self.session_demoted
                .map_or(0, |i| usize::from(is_ranked(ranking, i)))
        } else {
            let now = self.now_us;
            (self.lane.demoted.iter())
                .filter(|&&(i, until)| until > now && is_ranked(ranking, i))
                .count()
        };
        if count == 0 || count == ranked {
            return ranked;
        }
        if self.keyed {
            self.session_demoted.map(|i| ranking.demote(i));
        } else {
            for &(i, until) in &self.lane.demoted {
                if until > self.now_us {
                    ranking.demote(i);
                }
            }
        }
        ranked - count
    }

    /// A keyed request: its binding first, kept through a brief exclusion, else spread.
    fn keyed(&self, ranking: &mut Ranking, usable: usize) -> Decision {
        let Some(b) = self.bound else {
            return self.spread(ranking, usable, AffinityChoice::Fresh);
        };
        match ranking.position(b) {
            Some(at) if at < usable => {
                ranking.promote_at(at);
                Decision {
                    choice: AffinityChoice::Bound,
                    chosen: Some(b),
                    ..Decision::NONE
                }
            }
            Some(_) => self.spread(ranking, usable, AffinityChoice::Rebound),
            None if self.briefly_excluded(b, ranking) => {
                self.spread(ranking, usable, AffinityChoice::KeptBriefExclusion)
            }
            None => self.spread(ranking, usable, AffinityChoice::Rebound),
        }
    }

    /// Whether the excluded `index` is only cooling down, for a brief-able kind (`brief_kind`:
    /// rate_limit / transient), ending within `short_exclusion` (docs/rules/router.md §2.2); its own state
    /// (quota, invalid, disabled...) and a quota or session_dead cooldown never are brief.
    fn briefly_excluded(&self, index: usize, ranking: &Ranking) -> bool {
        let limit = self.now_us.saturating_add(self.lane.short_us);
        // The cheap test first: most exclusions are not a short cooldown.
        let short = self
            .state
            .cooldowns
            .until(index, self.now)
            .is_some_and(|t| t.timestamp_micros() <= limit);
        short
            && (self.brief_kind)(index)
            && matches!(
                ranking.exclusion_of(index, self.set, self.state),
                Some(Exclusion {
                    reason: ExclusionReason::CoolingDown,
                    until: Some(t),
                }) if t.timestamp_micros() <= limit
            )
    }

    /// Puts first the first free (no live binding) account of the best undemoted tier from
    /// the cursor (the ranking's rotation), else that tier's least-bound one.
    fn spread(&self, ranking: &mut Ranking, usable: usize, choice: AffinityChoice) -> Decision {
        let order = ranking.order();
        let tier_len = self.set.tier_run(&order[..usable]);
        let live = &self.lane.live;
        let mut best = (u32::MAX, 0usize);
        for (at, &i) in order[..tier_len].iter().enumerate() {
            let n = live.get(i).copied().unwrap_or(0);
            if n < best.0 {
                best = (n, at);
                if n == 0 {
                    break;
                }
            }
        }
        let (bound_elsewhere, at) = best;
        let index = order[at];
        ranking.promote_at(at);
        let choice = match choice {
            AffinityChoice::Fresh if bound_elsewhere > 0 => AffinityChoice::Shared,
            c => c,
        };
        Decision {
            choice,
            chosen: Some(index),
            position: at,
            new_residency: false,
        }
    }

    /// A key-less request: the sticky block (docs/rules/router.md §2.4).
    fn block(&self, ranking: &mut Ranking, usable: usize) -> Decision {
        let lane = self.lane;
        let order = ranking.order();
        let best_len = self.set.tier_run(&order[..usable]);
        if let Some(r) = lane.resident
            && !lane.block_ended
            && lane.keeps(r)
            && let Some(at) = order[..best_len].iter().position(|&i| i == r)
        {
            ranking.promote_at(at);
            return Decision {
                choice: AffinityChoice::Block,
                chosen: Some(r),
                ..Decision::NONE
            };
        }
        // A new residency: the next account from the block cursor, never the old resident
        // while another is eligible in the tier.
        let at = order[..best_len]
            .iter()
            .position(|&i| Some(i) != lane.resident)
            .unwrap_or(0);
        let index = order[at];
        ranking.promote_at(at);
        Decision {
            choice: AffinityChoice::Block,
            chosen: Some(index),
            position: at,
            new_residency: true,
        }
    }
}

impl LaneAffinity {
    /// Whether the resident `index` keeps its block (docs/rules/router.md §2.4): below `block_max`, and
    /// young (`served < block_min`) or still cold (hit ratio under `min_hit_ratio`).
    fn keeps(&self, index: usize) -> bool {
        let s = self.samples.get(index).copied().unwrap_or_default();
        let c = &self.config;
        s.served < c.block_max
            && (s.served < c.block_min || f64::from(s.hits) < c.min_hit_ratio * f64::from(s.served))
    }
}

/// Links Responses API response ids to session keys (bounded LRU), so that a request with
/// `previous_response_id` continues the session of the response it names (docs/rules/router.md §2.1).
/// Ids are kept as 64-bit hashes, not strings.
pub struct ResponseLinks {
    links: LruCache<u64, SessionKey>,
}

impl ResponseLinks {
    /// Up to `capacity` links (0 is taken as 1), least recently used dropped first.
    pub fn new(capacity: usize) -> Self {
        let capacity = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
        Self {
            links: LruCache::new(capacity),
        }
    }

    /// Links `response_id` (a served response's `id`) to the session `key`.
    pub fn link(&mut self, response_id: &str, key: SessionKey) {
        self.links.push(response_hash(response_id), key);
    }

    /// The session linked to `response_id`, if still kept.
    pub fn get(&mut self, response_id: &str) -> Option<SessionKey> {
        self.links.get(&response_hash(response_id)).copied()
    }
}

fn response_hash(id: &str) -> u64 {
    let mut h = hasher(b"resp\0");
    h.write(id.as_bytes());
    h.finish()
}

#[cfg(test)]
mod tests {
    // Unit and property tests of `core::affinity`: the acceptance cases of
    // docs/decisions.md §12 (the public router designs) that concern affinity, blocks and demotion (numbers in the
    // test docs), in this crate's names, and the invariants of docs/rules/router.md §1–§2.

    use super::*;
    use crate::availability::Availability;
    use crate::selection::{Admin, rank};
    use chrono::{Duration, TimeZone};
    use proptest::prelude::*;
    use serde_json::json;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap()
    }

    fn cand(tier: u32) -> Candidate {
        Candidate {
            tier,
            weight: None,
            admin: Admin::Enabled,
            availability: Availability::Usable,
            hold: None,
        }
    }

    const A: usize = 0;
    const B: usize = 1;
    const C: usize = 2;

    /// One lane with its candidates, cooldowns (and whether each is of a brief-able kind, as
    /// the router's `failure::Observations::kind` says) and a clock the test moves.
    struct Lane {
        aff: LaneAffinity,
        set: CandidateSet,
        state: EngineState,
        brief_kinds: Vec<bool>,
        out: Ranking,
        now: DateTime<Utc>,
        last: AffinityChoice,
    }

    impl Lane {
        fn new(tiers: &[u32]) -> Self {
            Self::with(
                AffinityConfig::default(),
                tiers.iter().map(|&t| cand(t)).collect(),
            )
        }

        fn flat(n: usize) -> Self {
            Self::new(&vec![1; n])
        }

        fn with(config: AffinityConfig, cs: Vec<Candidate>) -> Self {
            let n = cs.len();
            Self {
                aff: LaneAffinity::new(config, n),
                set: CandidateSet::new(cs),
                state: EngineState::default(),
                brief_kinds: vec![true; n],
                out: Ranking::default(),
                now: t0(),
                last: AffinityChoice::NoCandidate,
            }
        }

        /// Ranks one request, the cooldowns' kinds judged; the preferred account.
        fn pick(&mut self, key: Option<SessionKey>) -> Option<usize> {
            let kinds = &self.brief_kinds;
            let brief_kind = |i: usize| kinds[i];
            self.last = self.aff.rank_judged(
                &self.set,
                &self.state,
                key,
                self.now,
                &brief_kind,
                &mut self.out,
            );
            self.out.first()
        }

        /// Ranks and serves one request successfully on the preferred account.
        fn serve(&mut self, key: Option<SessionKey>, hit: bool) -> Option<usize> {
            let first = self.pick(key)?;
            self.aff.record_success(key, first, hit, self.now);
            Some(first)
        }

        fn serve_n(&mut self, key: Option<SessionKey>, n: usize, hit: bool) -> Vec<usize> {
            (0..n).filter_map(|_| self.serve(key, hit)).collect()
        }

        /// A rate-limit cooldown (a brief-able kind) of `index` for `d`.
        fn cool(&mut self, index: usize, d: Duration) {
            self.cool_kind(index, d, true);
        }

        /// A cooldown of `index` for `d`, of a brief-able kind (rate_limit, transient, pool
        /// throttle) or not (quota, session_dead).
        fn cool_kind(&mut self, index: usize, d: Duration, brief_kind: bool) {
            self.state.cooldowns.set(index, self.now + d);
            self.brief_kinds[index] = brief_kind;
        }

        /// An attempt on `index` failing: cools it for `d` (kind as in [`Lane::cool_kind`]) and
        /// tells the affinity, as the router does; the exclusion it made of that.
        fn fail(
            &mut self,
            key: Option<SessionKey>,
            index: usize,
            d: Duration,
            brief_kind: bool,
        ) -> FailureExclusion {
            self.cool_kind(index, d, brief_kind);
            let until = self.state.cooldowns.until(index, self.now);
            let exclusion = self.aff.failure_exclusion(brief_kind, until, self.now);
            self.aff.record_failure(key, index, exclusion, self.now);
            exclusion
        }

        /// The outcome of a request served by `index`, as the property tests draw it: a success
        /// (a cache hit or not), or a failure with a 30 min non-brief cooldown (`long`) or a
        /// 30 s brief one.
        fn outcome(
            &mut self,
            key: Option<SessionKey>,
            index: usize,
            ok: bool,
            hit: bool,
            long: bool,
        ) {
            if ok {
                self.aff.record_success(key, index, hit, self.now);
            } else if long {
                self.fail(key, index, Duration::minutes(30), false);
            } else {
                self.fail(key, index, Duration::seconds(30), true);
            }
        }

        /// One request whose first ranked account fails (as [`Lane::fail`]) and is served by
        /// the next ranked one (fail-over); (failed, served).
        fn fail_over(
            &mut self,
            key: Option<SessionKey>,
            d: Duration,
            brief_kind: bool,
        ) -> (usize, usize) {
            let first = self.pick(key).expect("an eligible account");
            let next = *self.out.order().get(1).expect("a fail-over account");
            self.fail(key, first, d, brief_kind);
            self.aff.record_success(key, next, true, self.now);
            (first, next)
        }

        /// Live-binding counts agree with the bindings (the spread's "free" is exact).
        fn assert_counts_exact(&self) {
            let mut want = vec![0u32; self.aff.live.len()];
            for (_, b) in self.aff.bindings.iter() {
                want[b.index] += 1;
            }
            assert_eq!(self.aff.live, want);
        }
    }

    fn body_key(api: Api, header: Option<&str>, body: Value) -> Option<SessionKey> {
        session_key(&KeyInput {
            header,
            body: &body,
            api,
            previous_response: None,
        })
    }

    fn sid(id: &str) -> Option<SessionKey> {
        body_key(Api::ChatCompletions, Some(id), json!({}))
    }

    fn chat(messages: Value) -> Option<SessionKey> {
        body_key(Api::ChatCompletions, None, json!({ "messages": messages }))
    }

    fn convo(system: &str, user: &str, turns: usize) -> Option<SessionKey> {
        let mut m = vec![
            json!({"role": "system", "content": system}),
            json!({"role": "user", "content": user}),
        ];
        for i in 0..turns {
            m.push(json!({"role": "assistant", "content": format!("answer {i}")}));
            m.push(json!({"role": "user", "content": format!("more {i}")}));
        }
        chat(Value::Array(m))
    }

    // ---- session keys (docs/rules/router.md §2.1) ----

    #[test]
    fn a_session_header_wins_over_prompt_cache_key_and_both_share_one_id_space() {
        let body =
            json!({"prompt_cache_key": "pck", "messages": [{"role": "user", "content": "x"}]});
        let k = body_key(Api::ChatCompletions, Some("hdr"), body.clone()).unwrap();
        assert_eq!(k.origin, KeyOrigin::Header);
        assert_eq!(k.hash, sid("hdr").unwrap().hash);
        let p = body_key(Api::ChatCompletions, None, body).unwrap();
        assert_eq!(p.origin, KeyOrigin::PromptCacheKey);
        assert_ne!(p.hash, k.hash);
        let same = body_key(Api::Responses, None, json!({"prompt_cache_key": "hdr"})).unwrap();
        assert_eq!(
            same.hash, k.hash,
            "the same id sent either way is one session"
        );
        assert_eq!(
            body_key(Api::ChatCompletions, Some("  "), json!({})),
            None,
            "a blank header is no key"
        );
    }

    /// §7.1 case 22 (keys): no messages ⇒ no key.
    #[test]
    fn no_messages_or_messages_without_role_or_text_give_no_key() {
        assert_eq!(chat(json!([])), None);
        assert_eq!(chat(json!([{"nope": 1}])), None);
        assert_eq!(chat(json!("not an array")), None);
        assert_eq!(body_key(Api::ChatCompletions, None, json!({})), None);
        assert_eq!(body_key(Api::Responses, None, json!({})), None);
    }

    /// §7.1 cases 14, 19: the fingerprint covers the first two messages only.
    #[test]
    fn a_growing_conversation_keeps_its_fingerprint() {
        let k = convo("sys", "hello", 0).unwrap();
        assert_eq!(k.origin, KeyOrigin::Fingerprint);
        for turns in 1..30 {
            assert_eq!(convo("sys", "hello", turns), Some(k));
        }
        assert_ne!(convo("sys", "hello!", 0), Some(k));
        assert_ne!(convo("other", "hello", 0), Some(k));
    }

    #[test]
    fn only_the_first_512_characters_of_a_message_count() {
        let long = "é".repeat(512);
        let a = convo("sys", &format!("{long}tail one"), 0);
        let b = convo("sys", &format!("{long}tail two"), 0);
        assert_eq!(a, b);
        assert_ne!(a, convo("sys", &"é".repeat(511), 0));
    }

    /// §7.1 case 25: multimodal content — text parts count, images never do.
    #[test]
    fn text_parts_count_and_images_are_ignored() {
        let msg = |text: &str, image: &str| {
            chat(json!([{"role": "user", "content": [
                {"type": "text", "text": text},
                {"type": "image_url", "image_url": {"url": image}},
            ]}]))
        };
        assert_eq!(msg("look", "data:1"), msg("look", "data:1"));
        assert_eq!(msg("look", "data:1"), msg("look", "data:2"));
        assert_ne!(msg("look", "data:1"), msg("see", "data:1"));
        // Parts concatenate: a string content equals the same text in parts.
        assert_eq!(
            chat(json!([{"role": "user", "content": "ab"}])),
            chat(json!([{"role": "user", "content": [{"type": "text", "text": "a"}, "b"]}]))
        );
    }

    #[test]
    fn responses_requests_use_previous_response_then_instructions_and_the_first_input() {
        let key = |body: Value, previous: Option<SessionKey>| {
            session_key(&KeyInput {
                header: None,
                body: &body,
                api: Api::Responses,
                previous_response: previous,
            })
        };
        let s = key(json!({"instructions": "be brief", "input": "hi"}), None).unwrap();
        assert_eq!(s.origin, KeyOrigin::Fingerprint);
        let items = json!({"instructions": "be brief", "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "message", "role": "user", "content": "later"},
        ]});
        assert_eq!(
            key(items, None),
            Some(s),
            "a string input is one user message"
        );
        assert_ne!(
            key(json!({"instructions": "be long", "input": "hi"}), None),
            Some(s)
        );
        let linked = sid("conversation-1").unwrap();
        let cont = key(json!({"input": "next"}), Some(linked)).unwrap();
        assert_eq!(
            (cont.hash, cont.origin),
            (linked.hash, KeyOrigin::PreviousResponse)
        );
        let with_header = session_key(&KeyInput {
            header: Some("h"),
            body: &json!({"input": "x"}),
            api: Api::Responses,
            previous_response: Some(linked),
        });
        assert_eq!(with_header.map(|k| k.origin), Some(KeyOrigin::Header));
    }

    #[test]
    fn response_links_map_ids_to_sessions_within_their_bound() {
        let mut links = ResponseLinks::new(2);
        let (k1, k2, k3) = (sid("1").unwrap(), sid("2").unwrap(), sid("3").unwrap());
        links.link("resp_1", k1);
        links.link("resp_2", k2);
        assert_eq!(links.get("resp_1"), Some(k1));
        links.link("resp_3", k3);
        assert_eq!(links.get("resp_2"), None, "least recently used dropped");
        assert_eq!(links.get("resp_1"), Some(k1));
        assert_eq!(links.get("resp_3"), Some(k3));
        assert_eq!(links.get("unknown"), None);
    }

    // ---- sticky block (docs/rules/router.md §2.4) ----

    /// §7.1 cases 3, 4: a young block stays.
    #[test]
    fn a_key_less_block_stays_on_its_resident_below_block_min() {
        let mut lane = Lane::flat(3);
        assert_eq!(lane.serve_n(None, 3, true), vec![A, A, A]);
        assert_eq!(lane.last, AffinityChoice::Block);
        assert_eq!(lane.serve_n(None, 12, true), vec![A; 12]);
        assert_eq!(lane.pick(None), Some(A), "15 served: still young");
    }

    /// §7.1 case 5: a warm block hands over at block_min.
    #[test]
    fn a_warm_block_moves_on_at_block_min() {
        let mut lane = Lane::flat(3);
        lane.serve_n(None, 16, true);
        assert_eq!(lane.pick(None), Some(B));
    }

    /// §7.1 case 6: a cold block stays (a low hit ratio is a reason to stay).
    #[test]
    fn a_cold_block_stays_past_block_min() {
        let mut lane = Lane::flat(3);
        lane.serve_n(None, 20, false);
        assert_eq!(lane.pick(None), Some(A));
    }

    /// §7.1 cases 7, 8: 48 misses demote; a demoted account is skipped by the next blocks.
    #[test]
    fn forty_eight_misses_demote_and_the_block_skips_the_demoted_account() {
        let mut lane = Lane::flat(3);
        assert_eq!(lane.serve_n(None, 48, false), vec![A; 48]);
        assert!(lane.aff.is_demoted(A, lane.now));
        assert_eq!(lane.serve(None, true), Some(B));
        lane.serve_n(None, 15, true);
        assert_eq!(
            lane.pick(None),
            Some(C),
            "b warm after 16: next, skipping demoted a"
        );
        assert_eq!(lane.out.order().last(), Some(&A), "demoted goes last");
        // Demotion lasts 10 minutes, then the account is back in turn.
        lane.now += Duration::minutes(10);
        assert!(!lane.aff.is_demoted(A, lane.now));
    }

    /// §7.1 case 9: demotion never empties a non-empty eligible set.
    #[test]
    fn when_every_eligible_account_is_demoted_one_is_still_served() {
        let mut lane = Lane::flat(2);
        lane.serve_n(None, 48, false);
        lane.serve_n(None, 48, false);
        assert!(lane.aff.is_demoted(A, lane.now) && lane.aff.is_demoted(B, lane.now));
        assert!(lane.pick(None).is_some());
        assert_eq!(lane.out.order().len(), 2);
    }

    /// §7.1 case 10: a failure ends the block.
    #[test]
    fn a_failure_on_the_resident_ends_its_block() {
        let mut lane = Lane::flat(3);
        lane.serve_n(None, 3, true);
        lane.aff
            .record_failure(None, A, FailureExclusion::Brief, lane.now);
        assert_eq!(lane.pick(None), Some(B));
        assert_eq!(lane.serve_n(None, 3, true), vec![B, B, B]);
    }

    /// §7.1 case 11: failures are never sampled.
    #[test]
    fn failures_are_not_sampled_and_a_non_resident_failure_leaves_the_block() {
        let mut lane = Lane::flat(3);
        lane.serve_n(None, 15, true);
        lane.aff
            .record_failure(None, C, FailureExclusion::Long, lane.now);
        assert_eq!(lane.serve(None, true), Some(A), "the 16th is still a's");
        assert_eq!(lane.pick(None), Some(B));
    }

    /// §7.1 cases 12, 23: lanes are independent (a lane = one (pool, model)).
    #[test]
    fn blocks_and_cursors_are_per_lane() {
        let (mut m1, mut m2) = (Lane::flat(3), Lane::flat(3));
        m1.serve_n(None, 16, true);
        assert_eq!(m1.pick(None), Some(B));
        assert_eq!(m2.pick(None), Some(A));
        let k = convo("sys", "same", 0);
        assert_eq!(m1.serve(k, true), Some(A));
        assert_eq!(
            m2.serve(k, true),
            Some(A),
            "each lane spreads its own sessions"
        );
        m1.cool(A, Duration::minutes(10));
        assert_ne!(m1.serve(k, true), Some(A));
        assert_eq!(m1.last, AffinityChoice::Rebound);
        assert_eq!(
            m2.serve(k, true),
            Some(A),
            "the other lane keeps its binding"
        );
    }

    /// §7.1 case 13: blocks rotate evenly.
    #[test]
    fn warm_blocks_rotate_evenly_over_the_tier() {
        let mut lane = Lane::flat(3);
        let mut served = [0usize; 3];
        for _ in 0..12 {
            let block = lane.serve_n(None, 16, true);
            assert!(
                block.windows(2).all(|w| w[0] == w[1]),
                "one resident per block"
            );
            served[block[0]] += 1;
        }
        assert_eq!(served, [4, 4, 4]);
    }

    #[test]
    fn the_block_lives_in_the_best_tier_and_moves_off_an_excluded_resident() {
        let mut lane = Lane::new(&[1, 1, 2]);
        lane.cool(A, Duration::minutes(5));
        lane.cool(B, Duration::minutes(5));
        assert_eq!(lane.serve(None, true), Some(C));
        lane.now += Duration::minutes(5);
        let resident = lane.serve(None, true).unwrap();
        assert!(
            resident == A || resident == B,
            "the better tier is back: the block follows it"
        );
        assert_eq!(lane.serve(None, true), Some(resident));
        lane.cool(resident, Duration::seconds(30));
        assert_eq!(
            lane.pick(None),
            Some(A + B - resident),
            "off an excluded resident"
        );
    }

    // ---- bindings (docs/rules/router.md §2.2) ----

    /// §7.1 case 15.
    #[test]
    fn two_fingerprints_on_two_accounts_get_distinct_accounts_and_stick() {
        let mut lane = Lane::flat(2);
        let (k1, k2) = (convo("s", "one", 0), convo("s", "two", 0));
        let (a1, a2) = (lane.serve(k1, true), lane.serve(k2, true));
        assert_ne!(a1, a2);
        assert_eq!(lane.last, AffinityChoice::Fresh);
        for turn in 1..5 {
            assert_eq!(lane.serve(convo("s", "one", turn), true), a1);
            assert_eq!(lane.last, AffinityChoice::Bound);
            assert_eq!(lane.serve(convo("s", "two", turn), true), a2);
        }
    }

    /// §7.1 case 16: the session id beats the content.
    #[test]
    fn a_session_id_keeps_its_account_whatever_the_messages() {
        let mut lane = Lane::flat(3);
        let first = lane.serve(sid("s"), true);
        for i in 0..10 {
            let k = body_key(
                Api::ChatCompletions,
                Some("s"),
                json!({"messages": [{"role": "user", "content": format!("q{i}")}]}),
            );
            assert_eq!(lane.serve(k, true), first);
        }
    }

    /// §7.1 case 17: identical content, three session ids ⇒ three accounts.
    #[test]
    fn three_sessions_with_identical_content_get_three_accounts() {
        let mut lane = Lane::flat(3);
        let mut got: Vec<usize> = ["lead", "surveyor", "gitwatch"]
            .iter()
            .filter_map(|s| lane.serve(sid(s), true))
            .collect();
        got.sort_unstable();
        assert_eq!(got, vec![A, B, C]);
    }

    /// §7.1 case 18: interleaved fresh sessions, reserved at once (before any success).
    #[test]
    fn interleaved_fresh_sessions_are_spread_before_either_is_served() {
        let mut lane = Lane::flat(2);
        let (lead, beta) = (sid("lead"), sid("beta"));
        let (l, b) = (lane.pick(lead), lane.pick(beta));
        assert_ne!(l, b, "bound at ranking time");
        lane.aff.record_success(beta, b.unwrap(), true, lane.now);
        lane.aff.record_success(lead, l.unwrap(), true, lane.now);
        for _ in 0..4 {
            assert_eq!(lane.serve(beta, true), b);
            assert_eq!(lane.serve(lead, true), l);
        }
        lane.assert_counts_exact();
    }

    #[test]
    fn a_fresh_session_skips_accounts_taken_whatever_the_cursor_says() {
        let mut lane = Lane::flat(3);
        let s1 = sid("s1");
        assert_eq!(lane.pick(s1), Some(A));
        // A fails over to B, which serves: s1 is re-bound there, the cursor now points at B.
        lane.aff.record_success(s1, B, true, lane.now);
        assert_eq!(lane.pick(sid("s2")), Some(C), "B is taken, C is free");
        assert_eq!(lane.last, AffinityChoice::Fresh);
        assert_eq!(lane.pick(sid("s3")), Some(A));
        assert!(lane.pick(sid("s4")).is_some());
        assert_eq!(lane.last, AffinityChoice::Shared);
        lane.assert_counts_exact();
    }

    #[test]
    fn fresh_sessions_share_the_best_tier_rather_than_move_down() {
        let mut lane = Lane::new(&[1, 1, 2]);
        let got: Vec<_> = (0..5)
            .map(|i| lane.serve(sid(&i.to_string()), true))
            .collect();
        assert_eq!(lane.last, AffinityChoice::Shared);
        assert!(got.iter().all(|&a| a == Some(A) || a == Some(B)), "{got:?}");
        let on_a = got.iter().filter(|&&a| a == Some(A)).count();
        assert!((2..=3).contains(&on_a), "shared evenly: {got:?}");
    }

    /// §1 "a binding first": a recovered better tier never steals a warm conversation.
    #[test]
    fn a_binding_survives_a_better_tier_recovering() {
        let mut lane = Lane::new(&[1, 2]);
        lane.cool(A, Duration::minutes(5));
        let k = sid("warm");
        assert_eq!(lane.serve(k, true), Some(B));
        lane.now += Duration::minutes(6);
        assert_eq!(lane.serve(k, true), Some(B));
        assert_eq!(lane.last, AffinityChoice::Bound);
        assert_eq!(lane.out.order(), &[B, A], "fail-over order keeps the tiers");
        assert_eq!(
            lane.serve(sid("new"), true),
            Some(A),
            "new sessions take the best tier"
        );
    }

    /// §7.1 case 20, as docs/rules/router.md §2.2 says it: a brief cooldown keeps the binding, a longer one
    /// re-binds and the conversation stays on its new account.
    #[test]
    fn a_brief_cooldown_keeps_the_binding_and_a_longer_one_re_binds() {
        let mut lane = Lane::flat(3);
        let k = sid("s");
        assert_eq!(lane.serve(k, true), Some(A));
        lane.cool(A, Duration::seconds(60));
        let elsewhere = lane.serve(k, true);
        assert_ne!(elsewhere, Some(A));
        assert_eq!(lane.last, AffinityChoice::KeptBriefExclusion);
        assert_eq!(lane.aff.bound(k.unwrap(), lane.now), Some(A));
        lane.now += Duration::seconds(61);
        assert_eq!(lane.serve(k, true), Some(A), "back on its warm account");

        lane.cool(A, Duration::seconds(61));
        let moved = lane.serve(k, true);
        assert_eq!(lane.last, AffinityChoice::Rebound);
        assert_ne!(moved, Some(A));
        lane.now += Duration::minutes(2);
        for _ in 0..3 {
            assert_eq!(lane.serve(k, true), moved, "stays on the new account");
        }
    }

    #[test]
    fn a_short_quota_reset_is_not_a_brief_exclusion() {
        let mut cs = vec![cand(1), cand(1)];
        let mut lane = Lane::with(AffinityConfig::default(), cs.clone());
        let k = sid("s");
        assert_eq!(lane.serve(k, true), Some(A));
        cs[A].availability = Availability::Exhausted {
            until: Some(lane.now + Duration::seconds(30)),
        };
        lane.set = CandidateSet::new(cs);
        assert_eq!(lane.serve(k, true), Some(B));
        assert_eq!(lane.last, AffinityChoice::Rebound);
    }

    /// docs/rules/router.md §2.2: only rate_limit / transient cooldowns can be brief; a router-observed
    /// quota (or session_dead) cooldown ending within 60 s re-binds all the same.
    #[test]
    fn a_short_cooldown_of_a_quota_kind_re_binds_and_one_of_a_brief_kind_keeps_the_binding() {
        for (brief_kind, want) in [
            (false, AffinityChoice::Rebound),
            (true, AffinityChoice::KeptBriefExclusion),
        ] {
            let mut lane = Lane::flat(2);
            let k = sid("s");
            assert_eq!(lane.serve(k, true), Some(A));
            lane.cool(A, Duration::seconds(30));
            let judged = |i: usize| i != A || brief_kind;
            lane.last =
                lane.aff
                    .rank_judged(&lane.set, &lane.state, k, lane.now, &judged, &mut lane.out);
            assert_eq!(lane.out.first(), Some(B));
            assert_eq!(lane.last, want, "brief kind: {brief_kind}");
            let bound = if brief_kind { A } else { B };
            assert_eq!(lane.aff.bound(k.unwrap(), lane.now), Some(bound));
        }
    }

    #[test]
    fn a_bound_account_failing_briefly_during_a_request_keeps_the_binding_until_the_next_ranking() {
        let mut lane = Lane::flat(3);
        let k = sid("s");
        assert_eq!(lane.serve(k, true), Some(A));
        // A's attempt fails (a 429 cooling it 5 s); the fail-over account serves.
        assert_eq!(lane.pick(k), Some(A));
        let exclusion = lane.fail(k, A, Duration::seconds(5), true);
        assert_eq!(exclusion, FailureExclusion::Brief);
        lane.aff.record_success(k, B, true, lane.now);
        assert_eq!(lane.aff.bound(k.unwrap(), lane.now), Some(A));
        lane.now += Duration::seconds(6);
        assert_eq!(lane.pick(k), Some(A));
        // A fail-over success without a failure of the bound account re-binds (the adapter served
        // it elsewhere on purpose).
        lane.aff.record_success(k, C, true, lane.now);
        assert_eq!(lane.aff.bound(k.unwrap(), lane.now), Some(C));
        lane.assert_counts_exact();
    }

    /// docs/rules/router.md §2.2: the exclusion a failure leaves is brief only for a brief-able kind
    /// (rate_limit, transient, pool throttle) ending within 60 s, or no exclusion at all.
    #[test]
    fn a_failure_exclusion_is_brief_only_for_a_brief_kind_within_sixty_seconds() {
        let lane = Lane::flat(1);
        let now = lane.now;
        let at = |s: i64| Some(now + Duration::seconds(s));
        let judge = |kind: bool, until| lane.aff.failure_exclusion(kind, until, now);
        assert_eq!(judge(true, at(60)), FailureExclusion::Brief);
        assert_eq!(judge(true, at(61)), FailureExclusion::Long);
        assert_eq!(judge(false, at(1)), FailureExclusion::Long);
        assert_eq!(judge(false, None), FailureExclusion::Brief);
        assert_eq!(judge(true, None), FailureExclusion::Brief);
    }

    /// The field report's case: the bound account `A` of a conversation fails during a request
    /// with an exclusion that is not brief (`brief_kind`, lasting `d`), `B` serves it. The
    /// conversation is now `B`'s for good: its next request stays on `B` while `A` is still
    /// out — also when another fresh session arrived in between, which took `B` while the
    /// binding wrongly stayed on `A` and pushed the conversation to a third account — and after
    /// `A`'s exclusion ended (it used to return to `A`, losing the cache twice).
    fn assert_re_bound_to_the_server_for_good(d: Duration, brief_kind: bool) {
        let k = sid("s");
        // Next request during the exclusion (after another session's), then after it.
        let mut lane = Lane::flat(3);
        assert_eq!(lane.serve(k, true), Some(A));
        assert_eq!(lane.fail_over(k, d, brief_kind), (A, B));
        assert_eq!(lane.aff.bound(k.unwrap(), lane.now), Some(B), "re-bound");
        assert_eq!(lane.serve(sid("other"), true), Some(C), "B is taken");
        lane.now += d / 2;
        assert_eq!(lane.serve(k, true), Some(B), "while A is out");
        assert_eq!(lane.last, AffinityChoice::Bound);
        lane.now += d;
        assert_eq!(lane.serve(k, true), Some(B), "after A's exclusion");
        assert_eq!(lane.last, AffinityChoice::Bound);
        lane.assert_counts_exact();
        // Next request only after the exclusion ended.
        let mut lane = Lane::flat(3);
        assert_eq!(lane.serve(k, true), Some(A));
        assert_eq!(lane.fail_over(k, d, brief_kind), (A, B));
        lane.now += d + Duration::seconds(1);
        assert_eq!(lane.serve(k, true), Some(B), "not back to A");
        assert_eq!(lane.last, AffinityChoice::Bound);
        lane.assert_counts_exact();
    }

    /// A 429 with `Retry-After: 65`: a rate limit, but longer than 60 s.
    #[test]
    fn a_long_429_of_the_bound_account_during_a_request_re_binds_to_the_server() {
        assert_re_bound_to_the_server_for_good(Duration::seconds(65), true);
    }

    /// Codex `usage_limit_reached` resetting in 30 s: a quota is never brief, however short.
    #[test]
    fn a_quota_of_the_bound_account_during_a_request_re_binds_to_the_server() {
        assert_re_bound_to_the_server_for_good(Duration::seconds(30), false);
    }

    /// 401 / 403 JSON (session_dead: the credential is invalid), 30 min.
    #[test]
    fn an_invalid_bound_account_during_a_request_re_binds_to_the_server() {
        assert_re_bound_to_the_server_for_good(Duration::minutes(30), false);
    }

    /// 402 (payment: a quota whose reset is not known, 10 min).
    #[test]
    fn a_payment_failure_of_the_bound_account_during_a_request_re_binds_to_the_server() {
        assert_re_bound_to_the_server_for_good(Duration::minutes(10), false);
    }

    /// A brief exclusion (a 429 of 30 s, a transient 30 s) keeps the binding: the next request
    /// while `A` still cools down is served elsewhere with the binding kept, the one after the
    /// cooldown returns to `A`.
    #[test]
    fn a_brief_failure_of_the_bound_account_during_a_request_keeps_the_binding_and_it_returns() {
        let k = sid("s");
        let mut lane = Lane::flat(3);
        assert_eq!(lane.serve(k, true), Some(A));
        assert_eq!(lane.fail_over(k, Duration::seconds(30), true), (A, B));
        assert_eq!(lane.aff.bound(k.unwrap(), lane.now), Some(A), "kept");
        lane.now += Duration::seconds(10);
        assert_ne!(lane.serve(k, true), Some(A));
        assert_eq!(lane.last, AffinityChoice::KeptBriefExclusion);
        assert_eq!(lane.aff.bound(k.unwrap(), lane.now), Some(A), "still kept");
        lane.now += Duration::seconds(21);
        assert_eq!(lane.serve(k, true), Some(A), "back on its warm account");
        assert_eq!(lane.last, AffinityChoice::Bound);
        lane.assert_counts_exact();
    }

    /// A failure that does not touch the bound account (the fail-over of a request kept through
    /// a brief exclusion) never moves the binding, however long the failed account is out.
    #[test]
    fn a_long_failure_of_another_account_during_a_kept_request_keeps_the_binding() {
        let k = sid("s");
        let mut lane = Lane::flat(3);
        assert_eq!(lane.serve(k, true), Some(A));
        lane.cool(A, Duration::seconds(20));
        let (failed, served) = lane.fail_over(k, Duration::minutes(30), false);
        assert_eq!(lane.last, AffinityChoice::KeptBriefExclusion);
        assert!(failed != A && served != A);
        assert_eq!(lane.aff.bound(k.unwrap(), lane.now), Some(A));
        lane.now += Duration::seconds(21);
        assert_eq!(lane.serve(k, true), Some(A));
    }

    /// §7.1 case 21 and case 40 (per-session samples).
    #[test]
    fn a_session_with_forty_eight_misses_is_demoted_on_its_account_and_moves() {
        let mut lane = Lane::flat(2);
        let k = sid("cold");
        assert_eq!(lane.serve_n(k, 48, false), vec![A; 48]);
        assert_eq!(lane.pick(k), Some(B));
        assert_eq!(lane.last, AffinityChoice::Rebound);
        assert!(
            !lane.aff.is_demoted(A, lane.now),
            "only this session's picks are affected"
        );
    }

    /// §7.1 case 40: sessions sharing one account do not falsely demote it.
    #[test]
    fn two_sessions_sharing_an_account_at_half_hits_are_not_demoted() {
        let mut lane = Lane::flat(2);
        lane.cool(B, Duration::hours(1));
        let (s1, s2) = (sid("one"), sid("two"));
        for i in 0..24 {
            assert_eq!(lane.serve(s1, i % 2 == 0), Some(A));
            assert_eq!(lane.serve(s2, i % 2 == 1), Some(A));
        }
        lane.state.cooldowns.clear(B);
        assert_eq!(lane.pick(s1), Some(A));
        assert_eq!(lane.last, AffinityChoice::Bound);
        assert_eq!(lane.pick(s2), Some(A));
        assert_eq!(lane.last, AffinityChoice::Bound);
    }

    #[test]
    fn a_session_demoted_everywhere_is_still_served_by_its_binding() {
        let mut lane = Lane::flat(1);
        let k = sid("cold");
        lane.serve_n(k, 48, false);
        assert_eq!(lane.pick(k), Some(A));
        assert_eq!(lane.last, AffinityChoice::Bound);
    }

    #[test]
    fn bindings_expire_after_an_hour_idle_and_hits_refresh_them() {
        let mut lane = Lane::flat(3);
        let k = sid("s");
        assert_eq!(lane.serve(k, true), Some(A));
        lane.serve(sid("other"), true); // on B; moves the spread cursor on
        for _ in 0..3 {
            lane.now += Duration::minutes(59);
            assert_eq!(lane.serve(k, true), Some(A));
            assert_eq!(lane.last, AffinityChoice::Bound);
        }
        assert_eq!(
            lane.aff.bindings(lane.now),
            1,
            "the other session idled out"
        );
        lane.now += Duration::minutes(60);
        assert_eq!(lane.aff.bound(k.unwrap(), lane.now), None);
        assert_eq!(lane.aff.bindings(lane.now), 0);
        lane.assert_counts_exact();
        lane.pick(k);
        assert_eq!(lane.last, AffinityChoice::Fresh);
    }

    /// §7.1 case 24 with true LRU: a hot session survives floods for any account count.
    #[test]
    fn a_hot_session_survives_floods_of_new_sessions() {
        let config = AffinityConfig {
            capacity: 512,
            ..AffinityConfig::default()
        };
        let mut lane = Lane::with(config, vec![cand(1), cand(1)]);
        let s0 = sid("s0");
        let hot = sid("hot");
        lane.serve(s0, true);
        let home = lane.serve(hot, true);
        for i in 0..600 {
            lane.serve(sid(&format!("flood-{i}")), true);
            assert_eq!(lane.serve(hot, true), home, "after flood {i}");
        }
        assert_eq!(
            lane.aff.bound(s0.unwrap(), lane.now),
            None,
            "s0 was evicted"
        );
        assert!(lane.serve(s0, true).is_some());
        assert_eq!(lane.aff.bindings(lane.now), 512);
        lane.assert_counts_exact();
    }

    #[test]
    fn nothing_eligible_is_no_candidate_and_keeps_the_binding() {
        let mut lane = Lane::flat(2);
        let k = sid("s");
        lane.serve(k, true);
        lane.cool(A, Duration::minutes(10));
        lane.cool(B, Duration::minutes(10));
        assert_eq!(lane.pick(k), None);
        assert_eq!(lane.last, AffinityChoice::NoCandidate);
        assert_eq!(lane.pick(None), None);
        assert_eq!(lane.aff.bound(k.unwrap(), lane.now), Some(A));
    }

    // ---- properties ----

    /// One step of a random lane history.
    #[derive(Debug, Clone)]
    enum Op {
        /// Rank for key (0..6, 6 = no key) and serve on the first ranked (`hit`), or fail it
        /// (cooling it 30 s for a rate limit, or 30 min for a quota when `long`).
        Request {
            key: u8,
            ok: bool,
            hit: bool,
            long: bool,
        },
        /// Cool a candidate down for `secs` (≤ 0: no-op end in the past).
        Cool { index: usize, secs: i64 },
        /// Time passes.
        Wait { secs: i64 },
    }

    fn op(n: usize) -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u8..7, prop::bool::weighted(0.9), any::<bool>(), any::<bool>())
                .prop_map(|(key, ok, hit, long)| Op::Request { key, ok, hit, long }),
            2 => (0..n, -10i64..900).prop_map(|(index, secs)| Op::Cool { index, secs }),
            1 => (0i64..2000).prop_map(|secs| Op::Wait { secs }),
        ]
    }

    fn availability() -> impl Strategy<Value = Availability> {
        prop_oneof![
            5 => Just(Availability::Usable),
            1 => Just(Availability::Invalid),
            1 => (-60i64..3600).prop_map(|s| Availability::Exhausted { until: Some(t0() + Duration::seconds(s)) }),
        ]
    }

    fn history() -> impl Strategy<Value = (Vec<Candidate>, Vec<Op>, bool)> {
        (1usize..9)
            .prop_flat_map(|n| {
                (
                    prop::collection::vec((1u32..4, availability()), n),
                    prop::collection::vec(op(n), 1..120),
                    any::<bool>(),
                )
            })
            .prop_map(|(cs, ops, hits_only)| {
                let cs = cs
                    .into_iter()
                    .map(|(tier, availability)| Candidate {
                        availability,
                        ..cand(tier)
                    })
                    .collect();
                (cs, ops, hits_only)
            })
    }

    /// One step of a random history around one tracked conversation (docs/rules/router.md §2.2).
    #[derive(Debug, Clone)]
    enum Turn {
        /// A request of the tracked session (`other: None`) or of another one (0..4): its first
        /// ranked account fails with a cooldown of `secs` of a brief-able kind or not (`fail`),
        /// then the next `skip` fail-over accounts fail too (30 s transient, brief) and the one
        /// after serves (none left: nobody serves); `fail: None` ⇒ the first ranked serves.
        Request {
            other: Option<u8>,
            fail: Option<(i64, bool)>,
            skip: usize,
        },
        /// Some account cools down for `secs` (≤ 0: an end in the past), of a kind.
        Cool {
            index: usize,
            secs: i64,
            brief_kind: bool,
        },
        /// Time passes (mostly within or just past the exclusions above).
        Wait { secs: i64 },
    }

    fn turn(n: usize) -> impl Strategy<Value = Turn> {
        let fail = prop_oneof![
            2 => Just(None),
            3 => (1i64..=60, any::<bool>()).prop_map(Some),
            3 => (61i64..1800, any::<bool>()).prop_map(Some),
        ];
        let other = prop_oneof![3 => Just(None), 2 => (0u8..4).prop_map(Some)];
        prop_oneof![
            8 => (other, fail, prop_oneof![4 => Just(0usize), 1 => 1usize..4])
                .prop_map(|(other, fail, skip)| Turn::Request { other, fail, skip }),
            1 => (0..n, -10i64..300, any::<bool>())
                .prop_map(|(index, secs, brief_kind)| Turn::Cool { index, secs, brief_kind }),
            3 => prop_oneof![6 => 0i64..120, 1 => 0i64..4000].prop_map(|secs| Turn::Wait { secs }),
        ]
    }

    /// What the tracked conversation's binding must do from now on (docs/rules/router.md §2.2).
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Expect {
        /// Nothing claimed beyond the general rules.
        Nothing,
        /// Its bound account failed with a long exclusion and `j` served: bound to `j`, first on
        /// `j` for every request while `j` is eligible, whatever became of the old account.
        Pinned(usize),
        /// Its bound account `a` failed briefly: bound to `a`, which is first again once it is
        /// eligible; while it is still briefly cooling, kept.
        Kept(usize),
    }

    /// The tracked conversation's ranking (`first`, `lane.last`) checked against `expect`
    /// (`plain`: the same ranking without affinity, i.e. the eligible set); what is expected
    /// after it.
    fn check_ranking(
        lane: &Lane,
        key: SessionKey,
        expect: Expect,
        first: Option<usize>,
        plain: &Ranking,
    ) -> Result<Expect, TestCaseError> {
        let eligible = |i: usize| plain.order().contains(&i);
        let briefly_out = |i: usize| {
            lane.brief_kinds[i]
                && (lane.state.cooldowns.until(i, lane.now))
                    .is_some_and(|t| t <= lane.now + Duration::seconds(60))
        };
        match expect {
            Expect::Pinned(j) if eligible(j) => {
                prop_assert_eq!(first, Some(j), "stays on the server");
                prop_assert_eq!(lane.last, AffinityChoice::Bound);
                Ok(expect)
            }
            Expect::Kept(a) if eligible(a) => {
                prop_assert_eq!(first, Some(a), "returns to its account");
                prop_assert_eq!(lane.last, AffinityChoice::Bound);
                Ok(Expect::Nothing)
            }
            Expect::Kept(a) if briefly_out(a) => {
                if first.is_some() {
                    prop_assert_eq!(lane.last, AffinityChoice::KeptBriefExclusion);
                }
                prop_assert_eq!(lane.aff.bound(key, lane.now), Some(a), "kept");
                Ok(expect)
            }
            _ => Ok(Expect::Nothing),
        }
    }

    /// The rest of a request of `key` ranked with `first` first: served there (`fail: None`),
    /// or failing there (cooldown of `secs`, brief-able kind or not) with the next `skip`
    /// fail-over accounts failing too (30 s transient) and the one after serving (if any).
    /// Checks the binding after it: a brief failure of the bound account keeps it, a long one
    /// hands it to the server, another account's failure (a kept binding's fail-over) leaves
    /// it. Returns the new expectation, `None` when it does not change.
    fn finish(
        lane: &mut Lane,
        key: SessionKey,
        first: usize,
        fail: Option<(i64, bool)>,
        skip: usize,
    ) -> Result<Option<Expect>, TestCaseError> {
        let Some((secs, brief_kind)) = fail else {
            lane.aff.record_success(Some(key), first, true, lane.now);
            return Ok(None);
        };
        let bound = lane.aff.bound(key, lane.now);
        let exclusion = lane.fail(Some(key), first, Duration::seconds(secs), brief_kind);
        let rest = lane.out.order()[1..].to_vec();
        for &i in rest.iter().take(skip) {
            lane.fail(Some(key), i, Duration::seconds(30), true);
        }
        let server = rest.get(skip).copied();
        if let Some(j) = server {
            lane.aff.record_success(Some(key), j, true, lane.now);
        }
        let now_bound = lane.aff.bound(key, lane.now);
        if bound != Some(first) {
            prop_assert_eq!(now_bound, bound, "a kept binding stays");
            return Ok(None);
        }
        match (exclusion, server) {
            (FailureExclusion::Brief, _) => {
                prop_assert_eq!(now_bound, Some(first), "a brief failure keeps it");
                Ok(Some(Expect::Kept(first)))
            }
            (FailureExclusion::Long, Some(j)) => {
                prop_assert_eq!(now_bound, Some(j), "re-bound to the server");
                Ok(Some(Expect::Pinned(j)))
            }
            // Nobody served: the next ranking decides.
            (FailureExclusion::Long, None) => Ok(Some(Expect::Nothing)),
        }
    }

    /// The plain ranking the rules give (docs/rules/router.md §1), written as plainly as possible:
    /// eligible candidates by (tier, index), the best tier rotated left by `cursor % len`.
    fn reference_plain(lane: &Lane, cursor: usize) -> Vec<usize> {
        let cs = lane.set.candidates();
        let mut order: Vec<usize> = (0..cs.len())
            .filter(|&i| own_usable(lane, i) && lane.state.cooldowns.until(i, lane.now).is_none())
            .collect();
        order.sort_by_key(|&i| (cs[i].tier, i));
        if let Some(&first) = order.first() {
            let best = order
                .iter()
                .take_while(|&&i| cs[i].tier == cs[first].tier)
                .count();
            order[..best].rotate_left(cursor % best);
        }
        order
    }

    /// Whether candidate `i`'s own state (hold, admin, availability) lets it be ranked now.
    fn own_usable(lane: &Lane, i: usize) -> bool {
        let c = &lane.set.candidates()[i];
        c.hold.is_none()
            && c.admin == Admin::Enabled
            && match c.availability {
                Availability::Usable => true,
                Availability::Exhausted { until } => until.is_some_and(|t| t <= lane.now),
                _ => false,
            }
    }

    /// The ranking and choice the rules of docs/rules/router.md §2 give for one request of `key`
    /// on `lane` as it stands (read before the ranking), written plainly from
    /// [`LaneAffinity::rank`]'s doc: demoted accounts last (in demotion order) unless all are,
    /// then the binding first while eligible and undemoted, else the spread (first free account
    /// of the best tier from the cursor, else its least-bound one), or for no key the sticky
    /// block.
    fn reference_rank(lane: &Lane, key: Option<SessionKey>) -> (Vec<usize>, AffinityChoice) {
        let aff = &lane.aff;
        let now_us = lane.now.timestamp_micros();
        let cs = lane.set.candidates();
        let alive = |b: &Binding| b.seen_us + aff.idle_us > now_us;
        let binding = key
            .and_then(|k| aff.bindings.peek(&k.hash))
            .filter(|b| alive(b));
        let cursor = if key.is_some() {
            aff.spread_cursor
        } else {
            aff.block_cursor
        };
        let mut order = reference_plain(lane, cursor);
        if order.is_empty() {
            return (order, AffinityChoice::NoCandidate);
        }
        let demoted: Vec<usize> = match key {
            Some(_) => binding
                .and_then(|b| b.demoted)
                .filter(|&(_, until)| until > now_us)
                .map(|(i, _)| i)
                .into_iter()
                .collect(),
            None => aff
                .demoted
                .iter()
                .filter(|d| d.1 > now_us)
                .map(|d| d.0)
                .collect(),
        };
        let demoted: Vec<usize> = demoted.into_iter().filter(|i| order.contains(i)).collect();
        let mut usable = order.len();
        if !demoted.is_empty() && demoted.len() < order.len() {
            order.retain(|i| !demoted.contains(i));
            usable = order.len();
            order.extend(&demoted);
        }
        let promote = |order: &mut Vec<usize>, at: usize| {
            let i = order.remove(at);
            order.insert(0, i);
        };
        let tier = cs[order[0]].tier;
        let best_len = order[..usable]
            .iter()
            .take_while(|&&i| cs[i].tier == tier)
            .count();
        let Some(_) = key else {
            let keeps = |r: usize| {
                let s = aff.samples[r];
                let c = &aff.config;
                s.served < c.block_max
                    && (s.served < c.block_min
                        || f64::from(s.hits) < c.min_hit_ratio * f64::from(s.served))
            };
            let at = match aff.resident {
                Some(r) if !aff.block_ended && keeps(r) && order[..best_len].contains(&r) => {
                    order.iter().position(|&i| i == r).unwrap()
                }
                r => order[..best_len]
                    .iter()
                    .position(|&i| Some(i) != r)
                    .unwrap_or(0),
            };
            promote(&mut order, at);
            return (order, AffinityChoice::Block);
        };
        let spread = |mut order: Vec<usize>, choice: AffinityChoice| {
            let live = |i: usize| {
                aff.bindings
                    .iter()
                    .filter(|(_, b)| b.index == i && alive(b))
                    .count()
            };
            let mut at = 0;
            for k in 0..best_len {
                if live(order[k]) < live(order[at]) {
                    at = k;
                }
                if live(order[at]) == 0 {
                    break;
                }
            }
            let shared = live(order[at]) > 0;
            promote(&mut order, at);
            let choice = match choice {
                AffinityChoice::Fresh if shared => AffinityChoice::Shared,
                c => c,
            };
            (order, choice)
        };
        let Some(b) = binding.map(|b| b.index) else {
            return spread(order, AffinityChoice::Fresh);
        };
        match order.iter().position(|&i| i == b) {
            Some(at) if at < usable => {
                promote(&mut order, at);
                (order, AffinityChoice::Bound)
            }
            Some(_) => spread(order, AffinityChoice::Rebound),
            None => {
                let brief = own_usable(lane, b)
                    && lane.brief_kinds[b]
                    && lane
                        .state
                        .cooldowns
                        .until(b, lane.now)
                        .is_some_and(|t| t.timestamp_micros() <= now_us + aff.short_us);
                let choice = if brief {
                    AffinityChoice::KeptBriefExclusion
                } else {
                    AffinityChoice::Rebound
                };
                spread(order, choice)
            }
        }
    }

    proptest! {
        /// docs/rules/router.md §2.2 over interleavings (the tracked session's requests, other sessions',
        /// cooldowns, time): after a non-brief failure of the bound account during a request
        /// served by `j`, the key is bound to `j` and stays on `j` while `j` is eligible,
        /// whether or not the old account's exclusion ended; after a brief one the binding stays
        /// on the old account (kept while it briefly cools, first again once eligible); live
        /// counts stay exact.
        #[test]
        fn a_failure_of_the_bound_account_re_binds_to_the_server_only_when_not_brief(
            (tiers, turns) in (2usize..7).prop_flat_map(|n| (
                prop::collection::vec(1u32..3, n),
                prop::collection::vec(turn(n), 1..80),
            )),
        ) {
            let mut lane = Lane::new(&tiers);
            let tracked = sid("tracked").unwrap();
            let others: Vec<_> = (0..4).map(|i| sid(&format!("other{i}")).unwrap()).collect();
            let mut expect = Expect::Nothing;
            let mut last_seen = lane.now;
            let mut plain = Ranking::default();
            for turn in turns {
                match turn {
                    Turn::Cool { index, secs, brief_kind } => {
                        lane.cool_kind(index, Duration::seconds(secs), brief_kind);
                    }
                    Turn::Wait { secs } => lane.now += Duration::seconds(secs),
                    Turn::Request { other, fail, skip } => {
                        let key = other.map_or(tracked, |o| others[o as usize]);
                        let mine = other.is_none();
                        if mine && lane.now - last_seen >= Duration::minutes(60) {
                            expect = Expect::Nothing; // idled out
                        }
                        rank(&lane.set, &lane.state, lane.now, 0, &mut plain);
                        let first = lane.pick(Some(key));
                        if mine {
                            if first.is_some() {
                                last_seen = lane.now; // a ranking with a candidate refreshes
                            }
                            expect = check_ranking(&lane, key, expect, first, &plain)?;
                        }
                        if let Some(first) = first
                            && let Some(next) = finish(&mut lane, key, first, fail, skip)?
                            && mine
                        {
                            expect = next;
                        }
                    }
                }
                lane.assert_counts_exact();
            }
        }

        /// An excluded account is never ranked; nothing eligible is dropped (demotion never
        /// empties a non-empty eligible set); the bound account comes first while eligible (with
        /// hits only, so no demotion); live counts stay exact and within capacity.
        #[test]
        fn affinity_only_reorders_the_eligible_and_keeps_bindings_first(
            (cs, ops, hits_only) in history(),
        ) {
            let config = AffinityConfig { capacity: 4, ..AffinityConfig::default() };
            let mut lane = Lane::with(config, cs);
            let mut plain = Ranking::default();
            let keys: Vec<Option<SessionKey>> =
                (0..6).map(|i| sid(&format!("k{i}"))).chain([None]).collect();
            for op in ops {
                match op {
                    Op::Cool { index, secs } => lane.cool(index, Duration::seconds(secs)),
                    Op::Wait { secs } => lane.now += Duration::seconds(secs),
                    Op::Request { key, ok, hit, long } => {
                        let key = keys[key as usize];
                        let before = key.and_then(|k| lane.aff.bound(k, lane.now));
                        let first = lane.pick(key);
                        rank(&lane.set, &lane.state, lane.now, 0, &mut plain);
                        let mut got = lane.out.order().to_vec();
                        let mut want = plain.order().to_vec();
                        got.sort_unstable();
                        want.sort_unstable();
                        prop_assert_eq!(got, want, "a permutation of the eligible set");
                        prop_assert_eq!(first.is_none(), plain.order().is_empty());
                        if let Some(b) = before && hits_only && plain.order().contains(&b) {
                            prop_assert_eq!(first, Some(b), "bound first while eligible");
                            prop_assert_eq!(lane.last, AffinityChoice::Bound);
                        }
                        let Some(first) = first else { continue };
                        let hit = hit || hits_only;
                        lane.outcome(key, first, ok, hit, long);
                    }
                }
                lane.assert_counts_exact();
                prop_assert!(lane.aff.bindings(lane.now) <= 4);
            }
        }

        /// Every ranking (order and choice) is exactly the reference's, over random pools (up to
        /// 140 candidates: several 64-candidate blocks), bindings, demotions, blocks, cursors,
        /// cooldowns of both kinds and time.
        #[test]
        fn every_ranking_is_exactly_the_reference_ranking(
            (cs, ops, kinds) in (1usize..140).prop_flat_map(|n| (
                prop::collection::vec((0u32..4, availability()), n),
                prop::collection::vec(op(n), 1..120),
                prop::collection::vec(any::<bool>(), n),
            )),
        ) {
            let config = AffinityConfig {
                capacity: 5,
                block_min: 2,
                block_max: 4,
                ..AffinityConfig::default()
            };
            let cs = cs
                .into_iter()
                .map(|(tier, availability)| Candidate { availability, ..cand(tier) })
                .collect();
            let mut lane = Lane::with(config, cs);
            lane.brief_kinds = kinds;
            let keys: Vec<Option<SessionKey>> =
                (0..6).map(|i| sid(&format!("k{i}"))).chain([None]).collect();
            for op in ops {
                match op {
                    Op::Cool { index, secs } => {
                        let kind = lane.brief_kinds[index];
                        lane.cool_kind(index, Duration::seconds(secs), kind);
                    }
                    Op::Wait { secs } => lane.now += Duration::seconds(secs),
                    Op::Request { key, ok, hit, long } => {
                        let key = keys[key as usize];
                        let (want, choice) = reference_rank(&lane, key);
                        let first = lane.pick(key);
                        prop_assert_eq!(lane.out.order(), &want[..]);
                        prop_assert_eq!(lane.last, choice);
                        let Some(first) = first else { continue };
                        lane.outcome(key, first, ok, hit, long);
                    }
                }
            }
        }

        /// docs/rules/router.md §2.2 acceptance: N accounts in one tier, M ≤ N fresh sessions arriving in any
        /// interleaving (ranked before any is served, or served as they come) ⇒ M distinct accounts.
        #[test]
        fn fresh_sessions_in_any_interleaving_get_distinct_accounts(
            n in 1usize..9,
            m_seed in 0usize..9,
            order in prop::collection::vec((0usize..9, any::<bool>()), 0..60),
            warm_cursor in 0usize..5,
        ) {
            let m = 1 + m_seed % n;
            let mut lane = Lane::flat(n);
            // The spread cursor starts anywhere (other sessions came and went).
            for i in 0..warm_cursor {
                lane.serve(sid(&format!("gone{i}")), true);
            }
            lane.now += Duration::hours(2);
            let mut chosen: Vec<Option<usize>> = vec![None; m];
            let mut pending: Vec<usize> = Vec::new();
            let sessions: Vec<_> = (0..m).map(|s| sid(&format!("s{s}"))).collect();
            let mut step = |s: usize, serve_now: bool, lane: &mut Lane, pending: &mut Vec<usize>| {
                let got = lane.pick(sessions[s]).unwrap();
                if let Some(prev) = chosen[s] {
                    assert_eq!(prev, got, "a session sticks");
                }
                chosen[s] = Some(got);
                if serve_now {
                    lane.aff.record_success(sessions[s], got, true, lane.now);
                } else {
                    pending.push(s);
                }
            };
            for (s, serve_now) in order {
                step(s % m, serve_now, &mut lane, &mut pending);
            }
            for s in 0..m {
                step(s, false, &mut lane, &mut pending);
            }
            for s in pending {
                let got = chosen[s].unwrap();
                lane.aff.record_success(sessions[s], got, true, lane.now);
            }
            let mut got: Vec<usize> = chosen.into_iter().flatten().collect();
            got.sort_unstable();
            got.dedup();
            prop_assert_eq!(got.len(), m);
        }

        /// docs/rules/router.md §2.2: a cooldown of at most 60 s keeps the binding (and the conversation comes
        /// back), a longer one re-binds; a better tier recovering never moves it.
        #[test]
        fn short_cooldowns_keep_bindings_and_longer_ones_re_bind(secs in 1i64..3000, better in any::<bool>()) {
            let mut lane = Lane::new(&[1, 2, 2, 2]);
            lane.cool(A, Duration::minutes(30));
            let k = sid("s");
            let home = lane.serve(k, true).unwrap();
            prop_assert_ne!(home, A);
            if better {
                lane.now += Duration::minutes(31);
            }
            lane.cool(home, Duration::seconds(secs));
            let served = lane.serve(k, true).unwrap();
            prop_assert_ne!(served, home);
            if secs <= 60 {
                prop_assert_eq!(lane.last, AffinityChoice::KeptBriefExclusion);
                lane.now += Duration::seconds(secs);
                prop_assert_eq!(lane.serve(k, true), Some(home));
            } else {
                prop_assert_eq!(lane.last, AffinityChoice::Rebound);
                lane.now += Duration::seconds(secs);
                prop_assert_eq!(lane.serve(k, true), Some(served));
            }
        }

        /// Idle expiry: a binding lives 60 min after its last hit, whatever the hit pattern.
        #[test]
        fn bindings_live_an_hour_after_their_last_hit(gaps in prop::collection::vec(0i64..3600, 0..10), extra in 0i64..7200) {
            let mut lane = Lane::flat(4);
            let k = sid("s");
            let home = lane.serve(k, true);
            for g in gaps {
                lane.now += Duration::seconds(g);
                prop_assert_eq!(lane.serve(k, true), home);
            }
            lane.now += Duration::seconds(extra);
            let alive = extra < 3600;
            prop_assert_eq!(lane.aff.bound(k.unwrap(), lane.now).is_some(), alive);
            prop_assert_eq!(lane.aff.bindings(lane.now), usize::from(alive));
        }
    }
}
