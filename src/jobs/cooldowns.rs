//! Clearing stale CPA cooldowns (docs/rules/patrol.md §11.3; CPA #5277, #5639, #5649): after an early
//! upstream reset CPA keeps an account in its own quota cooldown long after the quota is back.
//! On CPA ≥ v7.2.22 (from `X-CPA-VERSION`; unknown/`dev` = old) and with the site setting
//! `clearCpaCooldowns` on, `POST /reset-quota {"auth_index"}` is called once when the patrol or
//! routing re-enables an account, and once per cooldown episode (`core::writes::cooldown_episode`,
//! persisted in `cpa_cooldown_resets`) when an enabled account probes usable while CPA's listing
//! shows it cooling down. Every call is logged (category `account`, `cooldownReset`).

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::Patrol;
use crate::core::account::Account;
use crate::core::oplog::{Category, Level, NewLogEntry, Source};
use crate::core::site::Site;
use crate::core::writes::{cooldown_episode, cooling_down};
use crate::cpa::CpaClient;
use crate::store;

/// Why `reset-quota` is considered for an account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// quota-patrol (patrol or routing) just re-enabled it after its reset.
    ReEnabled,
    /// It probed usable this round while enabled, and CPA lists it as cooling down.
    ProbedUsable,
    /// Priority routing enabled it (its turn came; not necessarily after a reset), and CPA
    /// lists it as cooling down.
    RoutingEnabled,
}

/// One account to consider.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub name: String,
    pub auth_index: Option<String>,
    pub trigger: Trigger,
    /// The CPA cooldown episode seen in the listing (`None`: not listed as cooling down).
    pub episode: Option<String>,
}

impl Candidate {
    /// A candidate for `account` as listed at the start of the round, or `None` when the trigger
    /// does not apply (a usable probe of an account CPA does not list as cooling down).
    pub fn new(account: &Account, trigger: Trigger, now: DateTime<Utc>) -> Option<Self> {
        if trigger != Trigger::ReEnabled && !cooling_down(account, now) {
            return None;
        }
        Some(Self {
            name: account.name.clone(),
            auth_index: account.auth_index.clone(),
            trigger,
            episode: cooldown_episode(account, now),
        })
    }
}

/// Calls `reset-quota` for the candidates that need it (see the module docs) and forgets the
/// recorded episodes of the accounts in `over` (listed, not cooling down any more). Returns the names reset. A no-op when
/// `clearCpaCooldowns` is off or CPA is older than v7.2.22. Failures are logged, never fatal.
pub async fn clear_stale(
    p: &Patrol,
    site: &Site,
    client: &CpaClient,
    candidates: &[Candidate],
    over: Vec<String>,
    source: Source,
) -> Vec<String> {
    // reset-quota is a write to CPA: none after the stop signal.
    if !site.settings.clear_cpa_cooldowns
        || !client.cpa_version().has_reset_quota()
        || p.is_shutting_down()
    {
        return vec![];
    }
    let now = p.now();
    let sid = site.site_id.clone();
    let stored: HashMap<String, String> = match p
        .store
        .run(move |c| {
            let mut stored = store::writes::cooldown_resets(c, &sid)?;
            for name in &over {
                if stored.remove(name).is_some() {
                    store::writes::clear_cooldown_reset(c, &sid, name)?;
                }
            }
            Ok(stored)
        })
        .await
    {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(site = %site.site_id, error = %e, "cannot load cooldown resets");
            return vec![];
        }
    };
    let mut logs = Vec::new();
    let mut done = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for c in candidates {
        let Some(index) = c.auth_index.as_deref() else {
            continue;
        };
        let already = c.trigger != Trigger::ReEnabled
            && c.episode.is_some()
            && stored.get(&c.name) == c.episode.as_ref();
        if already || !seen.insert(c.name.clone()) {
            continue;
        }
        let res = client.reset_quota(index).await;
        let why = match c.trigger {
            Trigger::ReEnabled => "re-enabled after its reset".to_string(),
            Trigger::ProbedUsable => format!(
                "probed usable while CPA lists it cooling down ({})",
                c.episode.as_deref().unwrap_or("-")
            ),
            Trigger::RoutingEnabled => format!(
                "enabled by priority routing while CPA lists it cooling down ({})",
                c.episode.as_deref().unwrap_or("-")
            ),
        };
        let entry = NewLogEntry::info(
            &site.site_id,
            Category::Account,
            "cooldownReset",
            source,
            match &res {
                Ok(()) => format!("cleared CPA's cooldown of {} (reset-quota): {why}", c.name),
                Err(e) => format!("reset-quota for {} failed: {e} ({why})", c.name),
            },
        )
        .for_account(&c.name);
        metrics::counter!("quota_patrol_cpa_cooldown_resets_total", "site" => site.site_id.clone(), "result" => if res.is_ok() { "ok" } else { "error" }).increment(1);
        logs.push(if res.is_ok() {
            entry
        } else {
            entry.at_level(Level::Warning)
        });
        if res.is_ok() {
            done.push((c.name.clone(), c.episode.clone()));
        }
    }
    let sid = site.site_id.clone();
    let to_store = done.clone();
    let res = p
        .store
        .run(move |c| {
            for (name, episode) in &to_store {
                // A re-enable outside any listed episode still marks the reset, so a cooldown
                // that CPA shows only afterwards is a new episode.
                let ep = episode.as_deref().unwrap_or("re-enabled");
                store::writes::record_cooldown_reset(c, &sid, name, ep, now)?;
            }
            Ok(())
        })
        .await;
    if let Err(e) = res {
        tracing::warn!(site = %site.site_id, error = %e, "cannot record cooldown resets");
    }
    p.log(logs).await;
    done.into_iter().map(|(n, _)| n).collect()
}
