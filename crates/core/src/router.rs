//! The request router's domain, shared by the config file, the store, the admin API and the
//! router itself (docs/rules/router.md §4–§5): pools of upstream accounts, fallback chains of
//! (pool, model) legs, client key hashes and the one usage record per client request. Plain
//! data and its validation only; how requests are routed lives in `core::selection`,
//! `core::affinity` and `core::failure`, the HTTP side in the daemon's `router` module.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Who declared a pool, account or chain: the `[router]` section of the config file (read-only
/// through the admin API: edit the file) or the admin API (stored in the database).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SpecSource {
    Config,
    Api,
}

/// A pool: upstream accounts that serve the same models (docs/rules/router.md §4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolSpec {
    /// Unique pool id, e.g. `codex`.
    pub id: String,
    /// Models the pool serves (upstream names, passed through unchanged); an account may narrow
    /// them with its own list.
    pub models: Vec<String>,
    pub source: SpecSource,
}

/// One upstream account of a pool: an OpenAI-compatible API with its key (docs/rules/router.md §4).
#[derive(Debug, Clone)]
pub struct UpstreamAccount {
    /// Unique within its pool; shown in `x-quota-patrol-account`.
    pub id: String,
    /// The pool it belongs to ([`PoolSpec::id`]).
    pub pool: String,
    /// Base URL of the OpenAI-compatible API, up to and including `/v1`
    /// (e.g. `http://127.0.0.1:8317/v1`); the router appends `/chat/completions`, `/responses`.
    pub base_url: String,
    /// The upstream API key (resolved from `api_key_env` or stored); never logged or returned.
    pub api_key: Option<SecretString>,
    /// The environment variable the key came from, for display (`None` = stored or none).
    pub api_key_env: Option<String>,
    /// Priority tier: **lower wins** (1 before 2), as in the patrol's priority list.
    pub tier: u32,
    /// Optional weight inside its tier (carried; the ranking does not read it yet).
    pub weight: Option<u32>,
    /// The models this account serves; empty = every model of its pool.
    pub models: Vec<String>,
    /// Patrol link: the id of the quota-patrol site whose CPA `/v1` endpoint this account is
    /// (docs/rules/router.md §4 "link to patrol state"). Its availability follows that site's published
    /// pool snapshot.
    pub site: Option<String>,
    /// Admin state: `false` excludes it first (`adminDisabled`).
    pub enabled: bool,
    pub source: SpecSource,
}

impl UpstreamAccount {
    /// Whether this account serves `model` of its pool (an empty list = all the pool's models).
    pub fn serves(&self, model: &str) -> bool {
        self.models.is_empty() || self.models.iter().any(|m| m == model)
    }
}

/// One leg of a chain: a model of a pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Leg {
    pub pool: String,
    pub model: String,
}

/// A chain (combo): legs tried in order, exposed to clients as one model name (docs/rules/router.md §4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChainSpec {
    /// The model name clients ask for, e.g. `codex-auto`.
    pub name: String,
    pub legs: Vec<Leg>,
    pub source: SpecSource,
}

/// Everything the router routes over: pools, their accounts, chains.
#[derive(Debug, Clone, Default)]
pub struct RouterSpec {
    pub pools: Vec<PoolSpec>,
    pub accounts: Vec<UpstreamAccount>,
    pub chains: Vec<ChainSpec>,
}

impl RouterSpec {
    /// Every problem at once, each a sentence naming the entry: duplicate pool ids, account ids
    /// duplicated within a pool, accounts of an unknown pool, a base URL that is not
    /// `http(s)://…`, a tier of 0, a chain with no leg or a leg of an unknown pool or of a model
    /// its pool does not serve, a chain name equal to a pool model (it would shadow it).
    /// Empty = valid.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut pools = HashSet::new();
        for p in &self.pools {
            if p.id.trim().is_empty() {
                out.push("a router pool has an empty id".to_string());
            } else if !pools.insert(p.id.as_str()) {
                out.push(format!("router pool {:?} is declared twice", p.id));
            }
        }
        let mut accounts = HashSet::new();
        for a in &self.accounts {
            let name = format!("router account {:?} of pool {:?}", a.id, a.pool);
            if a.id.trim().is_empty() {
                out.push(format!(
                    "a router account of pool {:?} has an empty id",
                    a.pool
                ));
            } else if !accounts.insert((a.pool.as_str(), a.id.as_str())) {
                out.push(format!("{name} is declared twice"));
            }
            if !pools.contains(a.pool.as_str()) {
                out.push(format!("{name}: unknown pool"));
            }
            if !(a.base_url.starts_with("http://") || a.base_url.starts_with("https://")) {
                out.push(format!(
                    "{name}: base URL must start with http:// or https://"
                ));
            }
            if a.tier == 0 {
                out.push(format!("{name}: tier must be 1 or more (1 is tried first)"));
            }
        }
        for c in &self.chains {
            if c.legs.is_empty() {
                out.push(format!("router chain {:?} has no leg", c.name));
            }
            for leg in &c.legs {
                match self.pools.iter().find(|p| p.id == leg.pool) {
                    None => out.push(format!(
                        "router chain {:?}: leg of unknown pool {:?}",
                        c.name, leg.pool
                    )),
                    Some(p) if !p.models.iter().any(|m| m == &leg.model) => out.push(format!(
                        "router chain {:?}: pool {:?} does not serve model {:?}",
                        c.name, leg.pool, leg.model
                    )),
                    Some(_) => {}
                }
            }
            if self.pools.iter().any(|p| p.models.contains(&c.name)) {
                out.push(format!(
                    "router chain {:?} has the name of a pool model (it would shadow it)",
                    c.name
                ));
            }
        }
        out
    }

    /// The legs a client model name stands for: a chain's legs, else one leg per pool serving
    /// that model (pools in declaration order). Empty = unknown model.
    pub fn legs_for(&self, model: &str) -> Vec<Leg> {
        if let Some(c) = self.chains.iter().find(|c| c.name == model) {
            return c.legs.clone();
        }
        self.pools
            .iter()
            .filter(|p| p.models.iter().any(|m| m == model))
            .map(|p| Leg {
                pool: p.id.clone(),
                model: model.to_string(),
            })
            .collect()
    }
}

/// SHA-256 of a router client key, hex (keys are stored and compared hashed, docs/rules/router.md §5).
pub fn key_hash(key: &str) -> String {
    key_hash_in(key, &mut [0; 64]).to_string()
}

/// [`key_hash`] written into `buf` (no allocation: the router checks a client key per request).
pub fn key_hash_in<'a>(key: &str, buf: &'a mut [u8; 64]) -> &'a str {
    hex::encode_to_slice(Sha256::digest(key.as_bytes()), buf)
        .expect("64 hex digits hold a SHA-256");
    std::str::from_utf8(buf).expect("hex digits are ASCII")
}

/// Which OpenAI API a request used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub enum Api {
    /// `POST /v1/chat/completions`.
    ChatCompletions,
    /// `POST /v1/responses`.
    Responses,
    /// `POST /v1/responses/compact`: the Codex CLI's remote compaction v1 of a conversation's
    /// history (JSON `{model, input, instructions, ...}` in, `{"output": [...]}` out, never
    /// streamed; codex-rs/codex-api/src/endpoint/compact.rs). Codex CLI 0.171 no longer calls
    /// it: its remote compaction v2 is a `/v1/responses` request.
    ResponsesCompact,
}

/// One client request as served (docs/rules/router.md §5 "Usage": one record per client request, not per
/// attempt). Tokens are as the upstream reported them (`cached_tokens` is inside `prompt_tokens`,
/// OpenAI's convention); 0 when not reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageRecord {
    /// When the client request arrived.
    pub at: DateTime<Utc>,
    pub api: Api,
    /// The model name the client asked for (a chain name or a pool model).
    pub requested_model: String,
    /// The leg that answered last: pool and upstream model (`None` when nothing was tried).
    pub pool: Option<String>,
    pub model: Option<String>,
    /// The account that answered last (`None` when nothing was tried).
    pub account: Option<String>,
    /// SHA-256 hex of the session key, when the request had one and the router stores
    /// per-request rows (`[router] usage_request_rows`); never the key itself.
    pub session_key_hash: Option<String>,
    /// The client got a complete upstream answer.
    pub ok: bool,
    /// The HTTP status the client got.
    pub status: u16,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: u64,
    /// Upstream requests made (retries and fail-overs included).
    pub attempts: u32,
    /// From arrival to the last byte sent, milliseconds.
    pub duration_ms: u64,
    /// From arrival to the first byte sent, milliseconds (`None` when no upstream byte came).
    pub ttfb_ms: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(id: &str, models: &[&str]) -> PoolSpec {
        PoolSpec {
            id: id.into(),
            models: models.iter().map(|m| m.to_string()).collect(),
            source: SpecSource::Config,
        }
    }

    fn account(pool: &str, id: &str) -> UpstreamAccount {
        UpstreamAccount {
            id: id.into(),
            pool: pool.into(),
            base_url: "http://127.0.0.1:1/v1".into(),
            api_key: None,
            api_key_env: None,
            tier: 1,
            weight: None,
            models: vec![],
            site: None,
            enabled: true,
            source: SpecSource::Config,
        }
    }

    #[test]
    fn a_valid_spec_has_no_problem_and_a_broken_one_lists_each() {
        let mut spec = RouterSpec {
            pools: vec![pool("codex", &["gpt-5"]), pool("backup", &["gpt-5-mini"])],
            accounts: vec![account("codex", "a"), account("backup", "a")],
            chains: vec![ChainSpec {
                name: "auto".into(),
                legs: vec![
                    Leg {
                        pool: "codex".into(),
                        model: "gpt-5".into(),
                    },
                    Leg {
                        pool: "backup".into(),
                        model: "gpt-5-mini".into(),
                    },
                ],
                source: SpecSource::Config,
            }],
        };
        assert!(spec.problems().is_empty(), "{:?}", spec.problems());
        spec.accounts.push(account("codex", "a"));
        spec.accounts.push(account("ghost", "b"));
        spec.accounts[0].tier = 0;
        spec.chains[0].legs[1].model = "gpt-4".into();
        let p = spec.problems();
        assert_eq!(p.len(), 4, "{p:?}");
        assert!(p.iter().any(|s| s.contains("declared twice")));
        assert!(p.iter().any(|s| s.contains("unknown pool")));
        assert!(p.iter().any(|s| s.contains("tier must be")));
        assert!(
            p.iter()
                .any(|s| s.contains("does not serve model \"gpt-4\""))
        );
    }

    #[test]
    fn a_chain_name_resolves_to_its_legs_and_a_pool_model_to_every_pool_serving_it() {
        let spec = RouterSpec {
            pools: vec![pool("p1", &["m"]), pool("p2", &["m", "n"])],
            accounts: vec![],
            chains: vec![ChainSpec {
                name: "c".into(),
                legs: vec![Leg {
                    pool: "p2".into(),
                    model: "n".into(),
                }],
                source: SpecSource::Api,
            }],
        };
        let pools: Vec<_> = spec.legs_for("m").into_iter().map(|l| l.pool).collect();
        assert_eq!(pools, ["p1", "p2"]);
        assert_eq!(spec.legs_for("c")[0].model, "n");
        assert!(spec.legs_for("unknown").is_empty());
    }

    #[test]
    fn key_hash_is_hex_sha256_and_never_the_key() {
        let h = key_hash("sk-router-secret");
        assert_eq!(h.len(), 64);
        assert!(!h.contains("secret"));
        assert_eq!(h, key_hash("sk-router-secret"));
    }
}
