//! Session affinity of the request router (spec/router.md §2, §1 "a binding first"): session
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
/// (router.md §2.1). Explicit ids (header, `prompt_cache_key`) share one hash space, so the
/// same id sent either way is the same session; fingerprints have their own.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct SessionKey {
    pub hash: u64,
    pub origin: KeyOrigin,
}

/// Where a [`SessionKey`] came from, in precedence order (router.md §2.1).
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
/// `x-session-id`, `session_id`, `x-dsh-router-session`, `x-claude-code-session-id`,
/// `conversation_id`), the parsed JSON body, which API, and the session key already linked to
/// `previous_response_id` (if any; `None` when not known, see [`ResponseLinks`]).
pub struct KeyInput<'a> {
    pub header: Option<&'a str>,
    pub body: &'a Value,
    pub api: Api,
    pub previous_response: Option<SessionKey>,
}

/// Characters of a message's text that go into the fingerprint (router.md §2.1).
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

/// The session key of a request (router.md §2.1), first found of: the session header, the body's
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
        Api::Responses => {
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

/// Affinity settings of a lane (router.md §2; defaults: capacity 10,000 bindings, idle TTL
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

/// Cache-quality sample counts (router.md §2.3).
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
    /// Kept although this request may be served elsewhere (a brief exclusion, or the bound
    /// account failed during it): a success elsewhere does not re-bind.
    held: bool,
}

/// All affinity state of one lane = one (pool, model) (router.md §2): bindings (bounded LRU,
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

    /// Ranks one request into `out` (router.md §1, §2) with one `selection::rank_with` call:
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
    pub fn rank(
        &mut self,
        set: &CandidateSet,
        state: &EngineState,
        key: Option<SessionKey>,
        now: DateTime<Utc>,
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
    /// exclusion, or its account failed during this request: the next ranking then decides by
    /// the length of that account's exclusion), and samples the cache `hit` for the session on
    /// its bound account; key-less ⇒ samples `index` (the resident's samples are its block
    /// counters). `block_max` samples with a hit ratio under `min_hit_ratio` demote for
    /// `demotion` (router.md §2.3).
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

    /// A failed attempt on `index` (never sampled): key-less, the sticky block of a resident
    /// `index` ends (the next key-less request moves on); keyed, a binding to `index` is held
    /// (see [`LaneAffinity::record_success`]).
    pub fn record_failure(&mut self, key: Option<SessionKey>, index: usize, now: DateTime<Utc>) {
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
                    b.held = true;
                }
            }
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
    decision: Cell<Decision>,
}

impl Affinity for Apply<'_> {
    fn apply(&self, candidates: &[Candidate], ranking: &mut Ranking) {
        if ranking.order().is_empty() {
            return;
        }
        let usable = self.demote(ranking);
        let decision = if self.keyed {
            self.keyed(candidates, ranking, usable)
        } else {
            self.block(candidates, ranking, usable)
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
    fn keyed(&self, candidates: &[Candidate], ranking: &mut Ranking, usable: usize) -> Decision {
        let Some(b) = self.bound else {
            return self.spread(candidates, ranking, usable, AffinityChoice::Fresh);
        };
        match ranking.order().iter().position(|&i| i == b) {
            Some(at) if at < usable => {
                ranking.promote(b);
                Decision {
                    choice: AffinityChoice::Bound,
                    chosen: Some(b),
                    ..Decision::NONE
                }
            }
            Some(_) => self.spread(candidates, ranking, usable, AffinityChoice::Rebound),
            None if self.briefly_excluded(b, ranking) => self.spread(
                candidates,
                ranking,
                usable,
                AffinityChoice::KeptBriefExclusion,
            ),
            None => self.spread(candidates, ranking, usable, AffinityChoice::Rebound),
        }
    }

    /// Whether the excluded `index` is only cooling down, ending within `short_exclusion`
    /// (router.md §2.2); its own state (quota, invalid, disabled...) never is brief.
    fn briefly_excluded(&self, index: usize, ranking: &Ranking) -> bool {
        let limit = self.now_us.saturating_add(self.lane.short_us);
        // The cheap test first: most exclusions are not a short cooldown.
        let short = self
            .state
            .cooldowns
            .until(index, self.now)
            .is_some_and(|t| t.timestamp_micros() <= limit);
        short
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
    fn spread(
        &self,
        candidates: &[Candidate],
        ranking: &mut Ranking,
        usable: usize,
        choice: AffinityChoice,
    ) -> Decision {
        let order = ranking.order();
        let tier = candidates[order[0]].tier;
        let live = &self.lane.live;
        let mut best = (u32::MAX, 0usize);
        for (at, &i) in order[..usable].iter().enumerate() {
            if candidates[i].tier != tier {
                break;
            }
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
        ranking.promote(index);
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

    /// A key-less request: the sticky block (router.md §2.4).
    fn block(&self, candidates: &[Candidate], ranking: &mut Ranking, usable: usize) -> Decision {
        let lane = self.lane;
        let order = ranking.order();
        let tier = candidates[order[0]].tier;
        let best_len = order[..usable]
            .iter()
            .position(|&i| candidates[i].tier != tier)
            .unwrap_or(usable);
        if let Some(r) = lane.resident
            && !lane.block_ended
            && lane.keeps(r)
            && order[..best_len].contains(&r)
        {
            ranking.promote(r);
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
        ranking.promote(index);
        Decision {
            choice: AffinityChoice::Block,
            chosen: Some(index),
            position: at,
            new_residency: true,
        }
    }
}

impl LaneAffinity {
    /// Whether the resident `index` keeps its block (router.md §2.4): below `block_max`, and
    /// young (`served < block_min`) or still cold (hit ratio under `min_hit_ratio`).
    fn keeps(&self, index: usize) -> bool {
        let s = self.samples.get(index).copied().unwrap_or_default();
        let c = &self.config;
        s.served < c.block_max
            && (s.served < c.block_min || f64::from(s.hits) < c.min_hit_ratio * f64::from(s.served))
    }
}

/// Links Responses API response ids to session keys (bounded LRU), so that a request with
/// `previous_response_id` continues the session of the response it names (router.md §2.1).
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
mod tests;
