//! TEMPORARY stand-in for `core::affinity` (part A), written to its contract signatures (issue 9 contract.md) so the adapter compiles before they land.
//! Deliberately minimal (no affinity, a coarse classification); deleted at the merge, when the
//! adapter switches its `use` lines to `crate::core::affinity`.
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
