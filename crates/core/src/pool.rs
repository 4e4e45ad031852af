//! The published pool snapshot of one site: every account with its tier, admin state, shown
//! disable reason and [`Availability`], in the order a router tries them, plus site-level
//! counts and the pool's "usable until". The patrol rebuilds it after every round, reset
//! re-check, listing reload and manual account action and publishes it (`jobs::pool`); the API
//! and the router read only this, never the database, on their request path (docs/rules/patrol.md §12.2).
//! Pure: the builder takes the stored state, the threshold and `now` as arguments.
//! Rules: docs/rules/router.md §1 (candidates: id, priority, admin state, reported state with
//! `availableAt`), §4 (patrol link: a site with no usable account is `quota` until its
//! earliest reset), docs/rules/patrol.md §5.1 (shown reasons, provisional ManualDisabled), §6.1
//! (priority list).

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::account::{Account, DisableRecord, ProbeState, ShownReason, shown_reason};
use super::availability::{AccountFacts, Availability, availability, pool_usable_until};
use super::policy::{AccountPolicy, QuotaPolicy};
use super::priority::PriorityEntry;
use super::settings::PatrolSettings;

/// What made the patrol publish a snapshot (shown in the API; lets a reader tell a round's
/// result from a manual action's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "cause", rename_all = "camelCase")]
pub enum PublishCause {
    /// Built from the stored state when the process started (or the site was created).
    Startup,
    /// The end of a round. `kind` is the round's source spelling (`auto`, `manual`,
    /// `quotaRefresh`, `reset`, `freshness`, `warmup`); `run_id` the round's id.
    #[serde(rename_all = "camelCase")]
    Round { run_id: String, kind: String },
    /// The account list was reloaded from CPA outside a round (`POST /api/accounts/refresh`,
    /// warm-up).
    ListingReload,
    /// A person acted on an account or the exception list through the API; `action` is
    /// `disable`, `enable`, `release` or `exceptions`; `account` the account, when one.
    #[serde(rename_all = "camelCase")]
    ManualAction {
        action: String,
        account: Option<String>,
    },
    /// Site settings or the priority list changed (threshold, routing switch, tiers).
    SettingsChange,
}

/// One account of the snapshot.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolAccount {
    /// Auth-file name (the account's id in CPA).
    pub name: String,
    /// What a person reads ([`Account::display_name`]).
    pub display_name: String,
    /// Position in the site's priority list (1 = first = best tier); `None` when not listed
    /// (exceptions, accounts added since the last list maintenance).
    pub tier: Option<u32>,
    /// Listed but not inspected yet since it joined the list (docs/rules/patrol.md §6.1).
    pub pending_first_inspection: bool,
    /// Admin state: disabled in CPA (CPA is the source of truth).
    pub disabled: bool,
    /// On the exception list: the patrol takes no action on it.
    pub exception: bool,
    /// The disable reason the API shows, with owner; a disabled account without a record of
    /// ours shows a provisional ManualDisabled owned by `external` (docs/rules/patrol.md §5.1).
    pub reason: Option<ShownReason>,
    /// Usable now, or why not and until when (`core::availability::availability`).
    pub availability: Availability,
}

/// Accounts of the snapshot by availability state; `total` = every account, `admin_disabled`
/// = disabled in CPA whatever the reason (so `disabled` ≤ `admin_disabled`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PoolCounts {
    pub total: usize,
    pub usable: usize,
    pub exhausted: usize,
    pub invalid: usize,
    pub deactivated: usize,
    pub failing: usize,
    pub no_data: usize,
    /// Availability `disabled`: a person's (or another tool's) disable.
    pub disabled: usize,
    /// Disabled in CPA, any reason (patrol disables included).
    pub admin_disabled: usize,
}

impl PoolCounts {
    fn add(&mut self, a: &PoolAccount) {
        self.total += 1;
        self.admin_disabled += usize::from(a.disabled);
        let slot = match a.availability {
            Availability::Usable => &mut self.usable,
            Availability::Exhausted { .. } => &mut self.exhausted,
            Availability::Invalid => &mut self.invalid,
            Availability::Deactivated => &mut self.deactivated,
            Availability::Failing { .. } => &mut self.failing,
            Availability::NoData => &mut self.no_data,
            Availability::Disabled { .. } => &mut self.disabled,
        };
        *slot += 1;
    }
}

/// One site's pool as the patrol last published it. Immutable once built: readers share it
/// through an `Arc` and a newer publish replaces it whole.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolSnapshot {
    pub site_id: String,
    /// Publish number of this site in this process, from 1, increasing by one per publish.
    pub version: u64,
    /// The `now` the availabilities were judged at (injected clock). An `Exhausted` account
    /// whose `until` has passed since is awaiting its reset re-check, which publishes again.
    pub taken_at: DateTime<Utc>,
    /// What produced it.
    pub origin: PublishCause,
    /// `usedPercentThreshold` the availabilities were judged with (percent, 1–100).
    pub threshold: u8,
    /// `priorityRoutingEnabled` at build time: whether `accounts` is in priority order.
    pub routing_enabled: bool,
    /// Routing on: the priority list's order (tier 1 first), unlisted accounts after it in
    /// listing order. Routing off: CPA's listing order.
    pub accounts: Vec<PoolAccount>,
    pub counts: PoolCounts,
    /// The pool's "usable until" ([`pool_usable_until`]): `None` when some account is usable
    /// or no exhausted account has a known reset, else the earliest reset (docs/rules/router.md §4).
    pub usable_until: Option<DateTime<Utc>>,
    /// name → index in `accounts`.
    #[serde(skip)]
    index: HashMap<String, usize>,
}

impl PoolSnapshot {
    /// The account named `name`, in O(1).
    pub fn account(&self, name: &str) -> Option<&PoolAccount> {
        self.index.get(name).map(|&i| &self.accounts[i])
    }

    /// Names of the usable accounts, in the snapshot's order.
    pub fn usable_names(&self) -> impl Iterator<Item = &str> {
        self.accounts
            .iter()
            .filter(|a| a.availability.is_usable())
            .map(|a| a.name.as_str())
    }
}

/// Where a router's patrol-linked account reads its site's published pool (docs/rules/router.md §4 "link
/// to patrol state"). Implemented by `jobs::pool::PublishedPool`; a read must be lock-free and
/// cheap (it happens per request), never touching the database.
pub trait PoolFeed: Send + Sync {
    /// The site's current snapshot; `None` before its first publish (or for an unknown site).
    fn current(&self) -> Option<std::sync::Arc<PoolSnapshot>>;
}

/// The stored state a snapshot is built from (one read of the site's tables).
#[derive(Debug, Clone, Copy)]
pub struct PoolInputs<'a> {
    pub site_id: &'a str,
    /// CPA's listing, in its order.
    pub accounts: &'a [Account],
    /// Probe state by account name.
    pub states: &'a HashMap<String, ProbeState>,
    /// Persisted disable reasons by account name.
    pub reasons: &'a HashMap<String, DisableRecord>,
    pub exceptions: &'a HashSet<String>,
    /// The site's priority list (any order; sorted by position here).
    pub priorities: &'a [PriorityEntry],
    /// `priorityRoutingEnabled`.
    pub routing_enabled: bool,
    /// The site settings: `usedPercentThreshold` (published as `threshold`) and the
    /// per-window thresholds every account's effective policy starts from.
    pub settings: &'a PatrolSettings,
    /// Per-account policy overrides by name (docs/rules/patrol.md §9).
    pub policies: &'a HashMap<String, AccountPolicy>,
}

/// Builds the snapshot (see [`PoolSnapshot`] for the order and fields). Priority entries
/// naming no listed account are ignored; `version` is the caller's publish number.
pub fn build(
    input: PoolInputs<'_>,
    origin: PublishCause,
    version: u64,
    now: DateTime<Utc>,
) -> PoolSnapshot {
    let mut list: Vec<&PriorityEntry> = input.priorities.iter().collect();
    list.sort_by_key(|e| e.priority);
    let tiers: HashMap<&str, &PriorityEntry> = list.iter().map(|e| (e.name.as_str(), *e)).collect();
    let by_name: HashMap<&str, &Account> = input
        .accounts
        .iter()
        .map(|a| (a.name.as_str(), a))
        .collect();
    let order: Vec<&Account> = if input.routing_enabled {
        let listed = list
            .iter()
            .filter_map(|e| by_name.get(e.name.as_str()).copied());
        let unlisted = input
            .accounts
            .iter()
            .filter(|a| !tiers.contains_key(a.name.as_str()));
        let mut seen = HashSet::new();
        listed
            .chain(unlisted)
            .filter(|a| seen.insert(a.name.as_str()))
            .collect()
    } else {
        input.accounts.iter().collect()
    };
    let mut counts = PoolCounts::default();
    let mut index = HashMap::with_capacity(order.len());
    let accounts: Vec<PoolAccount> = order
        .into_iter()
        .map(|a| {
            let record = input.reasons.get(&a.name);
            let facts = AccountFacts {
                disabled: a.disabled,
                reason: record.map(|r| (r.reason, r.owner)),
                probe: input.states.get(&a.name),
            };
            let entry = tiers.get(a.name.as_str());
            let account = PoolAccount {
                name: a.name.clone(),
                display_name: a.display_name().to_string(),
                tier: entry.map(|e| e.priority),
                pending_first_inspection: entry.is_some_and(|e| e.pending_first_inspection),
                disabled: a.disabled,
                exception: input.exceptions.contains(&a.name),
                reason: shown_reason(a.disabled, record),
                availability: availability(
                    facts,
                    &QuotaPolicy::resolve(input.settings, input.policies.get(&a.name)),
                    now,
                ),
            };
            counts.add(&account);
            index.insert(account.name.clone(), index.len());
            account
        })
        .collect();
    PoolSnapshot {
        site_id: input.site_id.to_string(),
        version,
        taken_at: now,
        origin,
        threshold: input.settings.used_percent_threshold,
        routing_enabled: input.routing_enabled,
        usable_until: pool_usable_until(accounts.iter().map(|a| a.availability)),
        accounts,
        counts,
        index,
    }
}

/// One point of a site's pool history (migration 0009, the status page's 7-day chart): the
/// published counts after a round and the forecast's remaining capacity.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolSample {
    pub at: DateTime<Utc>,
    pub total: u32,
    pub usable: u32,
    /// Usable accounts in use (the active set under priority routing, else every usable one).
    pub active: u32,
    pub exhausted: u32,
    pub invalid: u32,
    /// Sum of the usable accounts' headroom to their threshold on the long window, percentage
    /// points (100 = one whole account's window; `core::forecast::SiteForecast`).
    pub remaining_percent: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::account::{DisableReason, ReasonOwner};
    use crate::quota::WindowKind;
    use crate::testkit::{main_window, snapshot};
    use chrono::{Duration, TimeZone};

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap()
    }

    fn account(name: &str, disabled: bool) -> Account {
        Account {
            name: name.into(),
            email: Some(format!("{name}@example.com")),
            disabled,
            ..Account::default()
        }
    }

    fn probed(weekly: f64, reset: DateTime<Utc>) -> ProbeState {
        ProbeState {
            snapshot: Some(snapshot(
                "free",
                vec![main_window(WindowKind::Weekly, weekly, reset)],
                now(),
            )),
            ..ProbeState::default()
        }
    }

    fn entry(name: &str, priority: u32) -> PriorityEntry {
        PriorityEntry {
            name: name.into(),
            priority,
            pending_first_inspection: false,
        }
    }

    struct Fixture {
        accounts: Vec<Account>,
        states: HashMap<String, ProbeState>,
        reasons: HashMap<String, DisableRecord>,
        exceptions: HashSet<String>,
        priorities: Vec<PriorityEntry>,
    }

    impl Fixture {
        /// a: usable; b: exhausted until +2 d; c: disabled by a person; d: disabled with no
        /// record (provisional); e: never probed. Priority list: c, b, a (d, e unlisted).
        fn new() -> Self {
            let soon = now() + Duration::days(2);
            let states = HashMap::from([
                ("a".to_string(), probed(10.0, now() + Duration::days(4))),
                ("b".to_string(), probed(100.0, soon)),
                ("c".to_string(), probed(10.0, now() + Duration::days(4))),
            ]);
            let reasons = HashMap::from([(
                "c".to_string(),
                DisableRecord {
                    reason: DisableReason::ManualDisabled,
                    owner: ReasonOwner::Manual,
                    set_at: now(),
                },
            )]);
            Self {
                accounts: vec![
                    account("a", false),
                    account("b", false),
                    account("c", true),
                    account("d", true),
                    account("e", false),
                ],
                states,
                reasons,
                exceptions: HashSet::from(["e".to_string()]),
                priorities: vec![
                    entry("a", 3),
                    entry("c", 1),
                    entry("b", 2),
                    entry("gone", 4),
                ],
            }
        }

        fn build(&self, routing_enabled: bool) -> PoolSnapshot {
            let input = PoolInputs {
                site_id: "s",
                accounts: &self.accounts,
                states: &self.states,
                reasons: &self.reasons,
                exceptions: &self.exceptions,
                priorities: &self.priorities,
                routing_enabled,
                settings: &PatrolSettings {
                    used_percent_threshold: 90,
                    ..PatrolSettings::default()
                },
                policies: &HashMap::new(),
            };
            build(input, PublishCause::Startup, 7, now())
        }
    }

    fn names(s: &PoolSnapshot) -> Vec<&str> {
        s.accounts.iter().map(|a| a.name.as_str()).collect()
    }

    #[test]
    fn routing_on_orders_by_tier_then_unlisted_accounts_in_listing_order() {
        let s = Fixture::new().build(true);
        assert_eq!(names(&s), ["c", "b", "a", "d", "e"]);
        let tiers: Vec<Option<u32>> = s.accounts.iter().map(|a| a.tier).collect();
        assert_eq!(tiers, [Some(1), Some(2), Some(3), None, None]);
        assert!(s.routing_enabled);
    }

    #[test]
    fn routing_off_keeps_the_listing_order_and_still_shows_tiers() {
        let s = Fixture::new().build(false);
        assert_eq!(names(&s), ["a", "b", "c", "d", "e"]);
        assert_eq!(s.account("a").unwrap().tier, Some(3));
        assert_eq!(
            s.account("gone"),
            None,
            "a priority entry naming no account"
        );
    }

    #[test]
    fn each_account_carries_its_availability_admin_state_and_shown_reason() {
        let s = Fixture::new().build(true);
        assert_eq!(s.account("a").unwrap().availability, Availability::Usable);
        assert_eq!(
            s.account("b").unwrap().availability,
            Availability::Exhausted {
                until: Some(now() + Duration::days(2))
            }
        );
        let c = s.account("c").unwrap();
        assert!(c.disabled);
        assert_eq!(
            c.availability,
            Availability::Disabled {
                reason: DisableReason::ManualDisabled,
                owner: ReasonOwner::Manual
            }
        );
        assert_eq!(
            c.reason.map(|r| (r.owner, r.provisional)),
            Some((ReasonOwner::Manual, false))
        );
        let d = s.account("d").unwrap();
        assert_eq!(
            d.reason.map(|r| (r.reason, r.owner, r.provisional)),
            Some((DisableReason::ManualDisabled, ReasonOwner::External, true))
        );
        let e = s.account("e").unwrap();
        assert_eq!(e.availability, Availability::NoData);
        assert!(e.exception && e.reason.is_none());
        assert_eq!(e.display_name, "e@example.com");
        assert_eq!(s.usable_names().collect::<Vec<_>>(), ["a"]);
    }

    #[test]
    fn counts_add_up_and_record_the_judging_context() {
        let s = Fixture::new().build(true);
        assert_eq!(
            s.counts,
            PoolCounts {
                total: 5,
                usable: 1,
                exhausted: 1,
                invalid: 0,
                deactivated: 0,
                failing: 0,
                no_data: 1,
                disabled: 2,
                admin_disabled: 2,
            }
        );
        assert_eq!((s.version, s.taken_at, s.threshold), (7, now(), 90));
        assert_eq!(s.origin, PublishCause::Startup);
        assert_eq!(s.usable_until, None, "a is usable");
    }

    #[test]
    fn a_pool_without_usable_accounts_is_usable_again_at_its_earliest_known_reset() {
        let mut f = Fixture::new();
        let soon = now() + Duration::hours(5);
        f.states.insert("a".into(), probed(95.0, soon));
        let s = f.build(true);
        assert_eq!(s.counts.usable, 0);
        assert_eq!(s.counts.exhausted, 2);
        assert_eq!(s.usable_until, Some(soon));
    }

    #[test]
    fn the_snapshot_serialises_with_api_spellings() {
        let s = Fixture::new().build(true);
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["origin"]["cause"], "startup");
        assert_eq!(v["accounts"][1]["availability"]["state"], "exhausted");
        assert!(v["accounts"][1]["availability"]["until"].is_string());
        assert_eq!(v["counts"]["noData"], 1);
        assert!(v.get("index").is_none());
    }
}
