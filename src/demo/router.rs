//! WIRING for the demo's router (docs/router.md "Try it"): one `sim::openai::FakeUpstream` per
//! router account, the `[router]` part of the demo's config (pool `codex` with 4 accounts in 2
//! tiers, 2 of them linked to the simulated CPA site, pool `backup`, chain `codex-auto`), a little
//! scripted upstream trouble so retries and fail-over show, and simulated client traffic through
//! the router. Must not: print or log an upstream key, or print the router client key anywhere
//! but the demo's start banner (`demo::run` does that once).

use std::net::SocketAddr;
use std::time::Duration;

use secrecy::SecretString;

use crate::config::RouterConfig;
use crate::core::router::{ChainSpec, Leg, PoolSpec, RouterSpec, SpecSource, UpstreamAccount};
use crate::jobs::router as jobs_router;
use crate::jobs::{JobError, Patrol};
use crate::router::RouterSettings;
use quota_patrol_sim::openai::{FakeUpstream, Step};

/// The demo router's pools: (id, models).
pub const DEMO_ROUTER_POOLS: [(&str, &[&str]); 2] =
    [("codex", &["gpt-5-codex", "gpt-5"]), ("backup", &["gpt-5"])];

/// One upstream account of the demo router.
#[derive(Debug, Clone, Copy)]
pub struct DemoRouterAccount {
    pub pool: &'static str,
    pub id: &'static str,
    /// Lower wins (docs/rules/router.md §1 tiers; docs/router.md "Pools, accounts and chains").
    pub tier: u32,
    /// Patrol link: the demo's simulated CPA site, or none.
    pub site: Option<&'static str>,
}

/// The demo router's accounts, in the order [`start_upstreams`] starts their fake upstreams.
/// `cpa-a` and `cpa-b` stand for the simulated CPA's `/v1` endpoint: they take their availability
/// from the `demo` site's published pool (excluded while it has no usable account).
pub const DEMO_ROUTER_ACCOUNTS: [DemoRouterAccount; 5] = [
    DemoRouterAccount {
        pool: "codex",
        id: "cpa-a",
        tier: 1,
        site: Some(super::DEMO_SITE),
    },
    DemoRouterAccount {
        pool: "codex",
        id: "cpa-b",
        tier: 1,
        site: Some(super::DEMO_SITE),
    },
    DemoRouterAccount {
        pool: "codex",
        id: "spare-a",
        tier: 2,
        site: None,
    },
    DemoRouterAccount {
        pool: "codex",
        id: "spare-b",
        tier: 2,
        site: None,
    },
    DemoRouterAccount {
        pool: "backup",
        id: "backup-1",
        tier: 1,
        site: None,
    },
];

/// The demo's chain: the codex pool's `gpt-5-codex`, then the backup pool's `gpt-5`.
pub const DEMO_CHAIN: &str = "codex-auto";

/// `cpa-b` answers a 503 on every this-many-th request it gets (retried on the same account).
pub const FLAKY_EVERY: usize = 8;
/// `cpa-a` answers Codex's `usage_limit_reached` on every this-many-th request (fail-over; the
/// account is excluded until the stated reset, [`USAGE_LIMIT_RESET_SECONDS`] later).
pub const USAGE_LIMIT_EVERY: usize = 25;
/// The reset `cpa-a`'s scripted usage limit states.
pub const USAGE_LIMIT_RESET_SECONDS: i64 = 90;
/// Cached prompt tokens every fake upstream reports (so cache samples are hits and nothing gets
/// demoted for poor cache quality during the demo).
const CACHED_TOKENS: u64 = 8;
/// Script length in cycles: far more requests than a demo session sends.
const SCRIPT_CYCLES: usize = 2_000;

/// The `[router]` part of the demo's config: `listen`, defaults otherwise, `base_urls[i]` for
/// [`DEMO_ROUTER_ACCOUNTS`]`[i]` (panics when fewer are given). Upstream keys are fixed demo
/// strings (the fake upstreams accept any key).
pub fn demo_router_config(listen: SocketAddr, base_urls: &[String]) -> RouterConfig {
    let accounts = DEMO_ROUTER_ACCOUNTS
        .iter()
        .zip(base_urls)
        .map(|(a, url)| UpstreamAccount {
            id: a.id.into(),
            pool: a.pool.into(),
            base_url: url.clone(),
            api_key: Some(SecretString::from(format!("demo-upstream-key-{}", a.id))),
            api_key_env: None,
            tier: a.tier,
            weight: None,
            models: vec![],
            site: a.site.map(str::to_string),
            enabled: true,
            source: SpecSource::Config,
        })
        .collect::<Vec<_>>();
    assert_eq!(
        accounts.len(),
        DEMO_ROUTER_ACCOUNTS.len(),
        "a URL per account"
    );
    let spec = RouterSpec {
        pools: DEMO_ROUTER_POOLS
            .iter()
            .map(|(id, models)| PoolSpec {
                id: (*id).into(),
                models: models.iter().map(|m| (*m).to_string()).collect(),
                source: SpecSource::Config,
            })
            .collect(),
        accounts,
        chains: vec![ChainSpec {
            name: DEMO_CHAIN.into(),
            legs: vec![
                Leg {
                    pool: "codex".into(),
                    model: "gpt-5-codex".into(),
                },
                Leg {
                    pool: "backup".into(),
                    model: "gpt-5".into(),
                },
            ],
            source: SpecSource::Config,
        }],
    };
    RouterConfig {
        settings: RouterSettings {
            listen,
            ..RouterSettings::default()
        },
        spec,
    }
}

/// Starts one fake upstream per [`DEMO_ROUTER_ACCOUNTS`] entry on 127.0.0.1 (free ports), with
/// cached tokens reported and the demo's trouble scripted: `cpa-b` a 503 every
/// [`FLAKY_EVERY`]-th request, `cpa-a` a `usage_limit_reached` 429 every
/// [`USAGE_LIMIT_EVERY`]-th. Errors: a bind fails.
pub async fn start_upstreams() -> std::io::Result<Vec<FakeUpstream>> {
    let mut out = Vec::with_capacity(DEMO_ROUTER_ACCOUNTS.len());
    for a in DEMO_ROUTER_ACCOUNTS {
        let up = FakeUpstream::start().await?;
        up.set_cached_tokens(CACHED_TOKENS);
        match a.id {
            "cpa-a" => up.script(every(USAGE_LIMIT_EVERY, || Step::UsageLimitJson {
                resets_in_seconds: USAGE_LIMIT_RESET_SECONDS,
            })),
            "cpa-b" => up.script(every(FLAKY_EVERY, || Step::Status {
                status: 503,
                headers: vec![],
                body: r#"{"error":{"message":"upstream overloaded (scripted by the demo)","type":"server_error","code":"overloaded"}}"#.into(),
                content_type: "application/json".into(),
            })),
            _ => {}
        }
        out.push(up);
    }
    Ok(out)
}

/// `n - 1` × `Ok` then `fault()`, [`SCRIPT_CYCLES`] times.
fn every(n: usize, fault: impl Fn() -> Step) -> Vec<Step> {
    let mut steps = Vec::with_capacity(n * SCRIPT_CYCLES);
    for _ in 0..SCRIPT_CYCLES {
        steps.extend((1..n).map(|_| Step::Ok));
        steps.push(fault());
    }
    steps
}

/// A new router client key named `demo`, made like `POST /api/router/keys` (only its hash is
/// stored); earlier `demo` keys of a kept database are revoked first, so one demo key is valid
/// at a time. Returns the key (for the banner only). Errors: the router admin or the store.
pub async fn demo_key(patrol: &Patrol) -> Result<String, JobError> {
    for old in jobs_router::list_keys(patrol).await? {
        if old.name == "demo" && old.revoked_at.is_none() {
            jobs_router::revoke_key(patrol, &old.id).await?;
        }
    }
    let input = jobs_router::RouterKeyInput {
        name: "demo".into(),
    };
    Ok(jobs_router::create_key(patrol, input).await?.key)
}

/// The router lines of the demo's start banner: URL, key, a ready-made `curl`, the accounts and
/// the scripted trouble. The one place the key is shown (stdout, never the log).
pub fn print_banner(router_url: &str, key: &str, upstreams: usize) {
    println!(
        "  router URL   : {router_url}/v1   (OpenAI-compatible; models gpt-5-codex, gpt-5, {DEMO_CHAIN})"
    );
    println!("  router key   : {key}");
    println!(
        "  try          : curl -i {router_url}/v1/chat/completions -H 'Authorization: Bearer {key}' -H 'x-session-id: s1' -H 'content-type: application/json' -d '{{\"model\":\"gpt-5-codex\",\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}'"
    );
    println!(
        "  router       : {upstreams} fake upstream accounts; cpa-a and cpa-b follow site {}; cpa-b answers 503 on every {FLAKY_EVERY}th request, cpa-a usage_limit_reached on every {USAGE_LIMIT_EVERY}th",
        super::DEMO_SITE
    );
}

/// One simulated client request through the router.
struct DemoCall {
    session: &'static str,
    path: &'static str,
    body: serde_json::Value,
}

/// The requests of one traffic tick: three coding sessions on `gpt-5-codex` (chat completions,
/// each with its `x-session-id`) and one streamed Responses session on the chain.
fn demo_calls() -> Vec<DemoCall> {
    let chat = |n: u32| {
        serde_json::json!({
            "model": "gpt-5-codex",
            "messages": [
                {"role": "system", "content": "You are a coding agent."},
                {"role": "user", "content": format!("Refactor module {n} of the demo.")}
            ]
        })
    };
    vec![
        DemoCall {
            session: "demo-session-1",
            path: "/v1/chat/completions",
            body: chat(1),
        },
        DemoCall {
            session: "demo-session-2",
            path: "/v1/chat/completions",
            body: chat(2),
        },
        DemoCall {
            session: "demo-session-3",
            path: "/v1/chat/completions",
            body: chat(3),
        },
        DemoCall {
            session: "demo-session-4",
            path: "/v1/responses",
            body: serde_json::json!({
                "model": DEMO_CHAIN,
                "stream": true,
                "instructions": "You are a coding agent.",
                "input": "Write the release notes."
            }),
        },
    ]
}

/// Sends the demo's client traffic through the router at `router_url` (`http://host:port`)
/// every `every` until the task is aborted, starting once the patrol has published a `demo`
/// pool with a usable account (before that the linked tier-1 accounts are excluded and the
/// sessions would bind to tier 2 for good). Prints one line per request that needed more than
/// one attempt, did not succeed or moved its session to another account, so retries and
/// fail-over show; never the key.
pub fn spawn_traffic(
    router_url: String,
    key: String,
    every: Duration,
    patrol: Patrol,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(90))
            .build()
            .expect("a reqwest client");
        let auth = format!("Bearer {key}");
        let mut started = false;
        let mut last_account = std::collections::HashMap::new();
        loop {
            tokio::time::sleep(every).await;
            started = started
                || patrol
                    .pool_snapshot(super::DEMO_SITE)
                    .is_some_and(|p| p.counts.usable > 0);
            if !started {
                continue;
            }
            for call in demo_calls() {
                let sent = client
                    .post(format!("{router_url}{}", call.path))
                    .header("authorization", &auth)
                    .header("x-session-id", call.session)
                    .json(&call.body)
                    .send()
                    .await;
                if let Some(line) = report_line(&call, sent, &mut last_account).await {
                    println!("{line}");
                }
            }
        }
    })
}

/// The line printed for one demo request: `None` for a plain success on the first attempt by
/// the account that served the session last time (`last_account`, updated).
async fn report_line(
    call: &DemoCall,
    sent: reqwest::Result<reqwest::Response>,
    last_account: &mut std::collections::HashMap<&'static str, String>,
) -> Option<String> {
    let resp = match sent {
        Ok(r) => r,
        Err(e) => return Some(format!("router demo traffic: {} failed: {e}", call.session)),
    };
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_string()
    };
    let status = resp.status().as_u16();
    let account = header("x-quota-patrol-account");
    let attempts = header("x-quota-patrol-attempts");
    // Read the body whole (a stream ends with the upstream's last event).
    let _ = resp.bytes().await;
    let before = last_account.insert(call.session, account.clone());
    let moved = before.as_ref().is_some_and(|b| *b != account);
    (status != 200 || attempts != "1" || moved).then(|| {
        let was = match before {
            Some(b) if moved => format!(" (was {b})"),
            _ => String::new(),
        };
        format!(
            "router: {} {} {} -> {status} from {account}{was} after {attempts} attempt(s)",
            call.session, call.path, call.body["model"]
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls() -> Vec<String> {
        (0..DEMO_ROUTER_ACCOUNTS.len())
            .map(|i| format!("http://127.0.0.1:{}/v1", 9000 + i))
            .collect()
    }

    #[test]
    fn the_demo_router_spec_is_valid_and_its_chain_resolves_to_both_pools() {
        let rc = demo_router_config(SocketAddr::from(([127, 0, 0, 1], 8320)), &urls());
        assert_eq!(rc.spec.problems(), Vec::<String>::new());
        let legs: Vec<(String, String)> = rc
            .spec
            .legs_for(DEMO_CHAIN)
            .into_iter()
            .map(|l| (l.pool, l.model))
            .collect();
        assert_eq!(
            legs,
            vec![
                ("codex".to_string(), "gpt-5-codex".to_string()),
                ("backup".to_string(), "gpt-5".to_string()),
            ]
        );
        // Every leg has accounts serving its model, and the plain models resolve too.
        for (pool, model) in &legs {
            assert!(
                rc.spec
                    .accounts
                    .iter()
                    .any(|a| &a.pool == pool && a.serves(model)),
                "{pool}/{model} has an account"
            );
        }
        assert_eq!(rc.spec.legs_for("gpt-5").len(), 2);
        assert_eq!(rc.spec.legs_for("gpt-5-codex").len(), 1);
    }

    #[test]
    fn two_codex_accounts_follow_the_demo_site_and_the_listener_is_the_one_asked() {
        let listen = SocketAddr::from(([127, 0, 0, 1], 18320));
        let rc = demo_router_config(listen, &urls());
        assert_eq!(rc.settings.listen, listen);
        assert!(!rc.settings.open, "the demo router asks for a client key");
        let linked: Vec<&str> = rc
            .spec
            .accounts
            .iter()
            .filter(|a| a.site.as_deref() == Some(super::super::DEMO_SITE))
            .map(|a| a.id.as_str())
            .collect();
        assert_eq!(linked, ["cpa-a", "cpa-b"]);
        let tiers: Vec<u32> = rc
            .spec
            .accounts
            .iter()
            .filter(|a| a.pool == "codex")
            .map(|a| a.tier)
            .collect();
        assert_eq!(tiers, [1, 1, 2, 2]);
    }

    #[test]
    fn a_fault_is_scripted_on_every_nth_request_only() {
        let steps = every(3, || Step::UsageLimitJson {
            resets_in_seconds: 1,
        });
        assert_eq!(steps.len(), 3 * SCRIPT_CYCLES);
        for (i, s) in steps.iter().enumerate().take(9) {
            assert_eq!(
                matches!(s, Step::UsageLimitJson { .. }),
                i % 3 == 2,
                "step {i}"
            );
        }
    }
}
