//! Priority routing rules: the per-site priority list (maintenance on every reload, saving),
//! the reorder after an inspection, the active set and the dispatch plan (through the shared
//! selection engine), and the incremental CPA priority mapping. Pure: no I/O.
//! Rules: docs/rules/patrol.md §6.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use chrono::{DateTime, Utc};

use super::account::DisableReason;
use super::availability::Availability;
use super::selection::{
    self, Admin, Candidate, CandidateSet, EngineState, Exclusion, Hold, Ranking,
};

/// One entry of a site's priority list (1 = first).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PriorityEntry {
    pub name: String,
    pub priority: u32,
    pub pending_first_inspection: bool,
}

/// One entry of a list as saved through `PUT /api/settings/priority-routing` (api.md): as
/// [`PriorityEntry`], except that `pendingFirstInspection` may be omitted (default `false`: an
/// entry the operator places is not pending).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SavedPriorityEntry {
    pub name: String,
    /// 1 = first; entries below 1 are dropped on save (docs/rules/patrol.md §6.4).
    pub priority: u32,
    /// Default `false`.
    #[serde(default)]
    pub pending_first_inspection: bool,
}

impl From<SavedPriorityEntry> for PriorityEntry {
    fn from(e: SavedPriorityEntry) -> Self {
        Self {
            name: e.name,
            priority: e.priority,
            pending_first_inspection: e.pending_first_inspection,
        }
    }
}

fn key(name: &str) -> String {
    name.trim().to_lowercase()
}

/// Renumbers 1..N in the given order.
fn renumber(mut list: Vec<PriorityEntry>) -> Vec<PriorityEntry> {
    for (i, e) in list.iter_mut().enumerate() {
        e.priority = u32::try_from(i + 1).unwrap_or(u32::MAX);
    }
    list
}

/// List maintenance on every account reload (docs/rules/patrol.md §6.1): drops entries whose account is
/// gone or is now an exception (case-insensitive), blank names, priority 0 and case-insensitive
/// duplicates (the first wins here), appends new non-exception accounts in `accounts` order as
/// pending, renumbers.
pub fn maintain(
    list: &[PriorityEntry],
    accounts: &[&str],
    exceptions: &HashSet<String>,
) -> Vec<PriorityEntry> {
    let exceptions: HashSet<String> = exceptions.iter().map(|n| key(n)).collect();
    // Exceptions are never part of routing: an account that became one leaves the list.
    // key -> CPA's own spelling: entries follow it, so exact-name lookups keep working.
    let present: HashMap<String, &str> = accounts
        .iter()
        .map(|n| (key(n), *n))
        .filter(|(k, _)| !exceptions.contains(k))
        .collect();
    let mut sorted: Vec<&PriorityEntry> = list.iter().collect();
    sorted.sort_by_key(|e| e.priority);
    let mut seen = HashSet::new();
    let mut out: Vec<PriorityEntry> = Vec::new();
    for e in sorted {
        let k = key(&e.name);
        let Some(spelling) = present.get(&k) else {
            continue;
        };
        if k.is_empty() || e.priority == 0 || !seen.insert(k) {
            continue;
        }
        out.push(PriorityEntry {
            name: (*spelling).to_string(),
            ..e.clone()
        });
    }
    for name in accounts {
        let k = key(name);
        if !k.is_empty() && !exceptions.contains(&k) && seen.insert(k) {
            out.push(PriorityEntry {
                name: name.to_string(),
                priority: 0,
                pending_first_inspection: true,
            });
        }
    }
    renumber(out)
}

/// A list as saved through the API (docs/rules/patrol.md §6.4): blank names and priority < 1 dropped,
/// case-insensitive duplicates resolved with the **last** occurrence winning, ordered by the
/// given priority (stable), renumbered. Names not in `known` are kept out and returned.
pub fn normalize_saved(
    entries: &[PriorityEntry],
    known: &[&str],
) -> (Vec<PriorityEntry>, Vec<String>) {
    let known: HashMap<String, &str> = known.iter().map(|n| (key(n), *n)).collect();
    let mut last: HashMap<String, usize> = HashMap::new();
    for (i, e) in entries.iter().enumerate() {
        if !key(&e.name).is_empty() && e.priority >= 1 {
            last.insert(key(&e.name), i);
        }
    }
    let mut unknown = Vec::new();
    let mut kept: Vec<(usize, PriorityEntry)> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let k = key(&e.name);
        if last.get(&k) != Some(&i) {
            continue;
        }
        match known.get(&k) {
            Some(actual) => kept.push((
                i,
                PriorityEntry {
                    name: (*actual).to_string(),
                    ..e.clone()
                },
            )),
            None => unknown.push(e.name.trim().to_string()),
        }
    }
    kept.sort_by_key(|(i, e)| (e.priority, *i));
    (
        renumber(kept.into_iter().map(|(_, e)| e).collect()),
        unknown,
    )
}

/// What the reorder needs to know about one account after an inspection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Standing {
    /// Free-like plan (`None` when the plan is unknown).
    pub free_like: Option<bool>,
    /// Main weekly (or monthly) used percent of the last good snapshot, in percent: only the
    /// sort key of newly graduated free-like accounts (and their "has weekly data" test).
    pub weekly: Option<f64>,
    /// The account's availability by the one rule ([`super::availability::availability`]):
    /// `Exhausted` sinks a free-like account, `Usable` marks a still-usable one.
    pub availability: Availability,
    /// The account got a successful evaluation this round (probe or fresh cache).
    pub evaluated_ok: bool,
}

/// Reorders the list after an inspection with routing on (docs/rules/patrol.md §6.2): pending accounts
/// that were evaluated successfully graduate (a free-like one needs weekly data); newly
/// graduated free-like accounts go right after the last still-usable (`Availability::Usable`)
/// existing free-like account, by weekly usage ascending, new paid accounts after them;
/// exhausted (`Availability::Exhausted`) free-like accounts sink to the bottom (after the
/// still-pending ones); paid accounts are never moved for quota; existing accounts are not
/// re-sorted. Exceptions keep their place.
pub fn reorder(
    list: &[PriorityEntry],
    standing: &HashMap<String, Standing>,
    exceptions: &HashSet<String>,
) -> Vec<PriorityEntry> {
    let mut ordered: Vec<PriorityEntry> = list.to_vec();
    ordered.sort_by_key(|e| e.priority);
    let (mut baseline, mut new_free, mut new_other, mut pending, mut bottom) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for mut e in ordered {
        if exceptions.contains(&e.name) {
            baseline.push(e);
            continue;
        }
        let st = standing.get(&e.name).copied().unwrap_or(Standing {
            free_like: None,
            weekly: None,
            availability: Availability::NoData,
            evaluated_ok: false,
        });
        let free = st.free_like == Some(true);
        let was_pending = e.pending_first_inspection;
        if was_pending {
            let graduates = st.evaluated_ok && (!free || st.weekly.is_some());
            if !graduates {
                pending.push(e);
                continue;
            }
            e.pending_first_inspection = false;
        }
        if free && st.availability.is_exhausted() {
            bottom.push(e);
            continue;
        }
        if was_pending {
            if free {
                new_free.push((st.weekly.unwrap_or(0.0), e));
            } else {
                new_other.push(e);
            }
            continue;
        }
        baseline.push(e);
    }
    new_free.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.priority.cmp(&b.1.priority)));
    let insert_at = baseline
        .iter()
        .rposition(|e| {
            standing
                .get(&e.name)
                .is_some_and(|s| s.free_like == Some(true) && s.availability.is_usable())
        })
        .map_or(baseline.len(), |k| k + 1);
    let tail = baseline.split_off(insert_at);
    let mut out = baseline;
    out.extend(new_free.into_iter().map(|(_, e)| e));
    out.extend(new_other);
    out.extend(tail);
    out.extend(pending);
    out.extend(bottom);
    renumber(out)
}

/// Whether two lists differ in order, names or pending flags.
pub fn changed(a: &[PriorityEntry], b: &[PriorityEntry]) -> bool {
    let sort = |l: &[PriorityEntry]| {
        let mut v: Vec<(u32, String, bool)> = l
            .iter()
            .map(|e| (e.priority, e.name.clone(), e.pending_first_inspection))
            .collect();
        v.sort();
        v
    };
    sort(a) != sort(b)
}

/// What routing knows about one listed account for the active set.
#[derive(Debug, Clone, PartialEq)]
pub struct RoutingAccount {
    /// Disabled in CPA (routing's own lever: a standby account is disabled yet routable).
    pub disabled: bool,
    /// Persisted disable reason (decides which disabled accounts routing may enable).
    pub reason: Option<DisableReason>,
    pub exception: bool,
    /// The one usability reading (`core::availability::availability` of the stored facts): a
    /// person's disable is `Disabled`, a failing probe `Invalid` / `Deactivated` / `Failing`.
    pub availability: Availability,
}

/// A routing action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoutingStep {
    /// Enable an active account that is disabled (its reason is cleared).
    Enable(String),
    /// Disable an enabled account outside the active set as `OrderedStandby`.
    Standby(String),
}

/// Active set and dispatch plan (docs/rules/patrol.md §6.3), named from the engine's ranking.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Dispatch {
    /// The first `priorityMinActiveCount` of the ranking, in priority order.
    pub active: Vec<String>,
    /// The rest of the ranking (eligible, kept disabled as standby), in priority order.
    pub standby: Vec<String>,
    /// Listed accounts the engine excluded, with why and until when, in priority order.
    pub excluded: Vec<(String, Exclusion)>,
    pub steps: Vec<RoutingStep>,
    /// "only n usable, below minimum m" or "all prioritised accounts exhausted".
    pub warning: Option<String>,
    /// No usable account at all in the list.
    pub all_exhausted: bool,
}

impl Dispatch {
    /// Eligible accounts in total (active + standby).
    pub fn eligible_count(&self) -> usize {
        self.active.len() + self.standby.len()
    }
}

/// The engine's candidates for a priority list (the same call a router makes per request):
/// entries in priority order, each with tier = its priority (position 1 is best, so the
/// ranking with cursor 0 is the list order), admin `Enabled` (CPA's disabled flag is routing's
/// own lever, a person's disable arrives as `Availability::Disabled`), and a hold for accounts
/// unknown to CPA, exceptions and pending ones. Returns the ordered entries beside their
/// candidates (same index).
pub fn routing_candidates<'a>(
    list: &'a [PriorityEntry],
    accounts: &HashMap<String, RoutingAccount>,
) -> (Vec<&'a PriorityEntry>, CandidateSet) {
    let mut ordered: Vec<&PriorityEntry> = list.iter().collect();
    ordered.sort_by_key(|e| e.priority);
    let candidates = ordered
        .iter()
        .map(|e| {
            let account = accounts.get(&e.name);
            let hold = match account {
                None => Some(Hold::Unknown),
                Some(a) if a.exception => Some(Hold::Exception),
                Some(_) if e.pending_first_inspection => Some(Hold::Pending),
                Some(_) => None,
            };
            Candidate {
                tier: e.priority,
                weight: None,
                admin: Admin::Enabled,
                availability: account.map_or(Availability::NoData, |a| a.availability),
                hold,
            }
        })
        .collect();
    (ordered, candidates)
}

/// Computes the active set — the first `min_active` (clamped 1..10) of the selection engine's
/// ranking over the priority list ([`routing_candidates`]; pending, exception, unknown, a
/// person's disable and every unusable availability are excluded) — and the steps to reach it:
/// enable active accounts that are disabled by the patrol or routing, standby-disable enabled
/// listed accounts outside it. Accounts without an entry, exceptions, pending accounts (enable)
/// and ManualDisabled accounts are never touched. **[divergence]** with no usable account at
/// all nothing is standby-disabled (the anchor disables every prioritised account, leaving CPA
/// with none). `now` is the instant the availabilities were read at.
pub fn dispatch(
    list: &[PriorityEntry],
    accounts: &HashMap<String, RoutingAccount>,
    min_active: u32,
    now: DateTime<Utc>,
) -> Dispatch {
    let (ordered, candidates) = routing_candidates(list, accounts);
    let mut ranking = Ranking::with_capacity(candidates.len());
    let state = EngineState::default();
    selection::rank(&candidates, &state, now, 0, &mut ranking);
    let min = min_active.clamp(1, 10) as usize;
    let order = ranking.order();
    let name = |i: &usize| ordered[*i].name.clone();
    let active: Vec<String> = order.iter().take(min).map(name).collect();
    let standby: Vec<String> = order.iter().skip(min).map(name).collect();
    let excluded = ranking
        .excluded(&candidates, &state)
        .map(|e| (ordered[e.index].name.clone(), e.exclusion))
        .collect();
    let usable = order.len();
    let all_exhausted = usable == 0;
    let warning = if all_exhausted {
        Some("all prioritised accounts exhausted".to_string())
    } else if usable < min {
        Some(format!("only {usable} usable, below minimum {min}"))
    } else {
        None
    };
    let steps = steps_to(&ordered, accounts, &active, all_exhausted);
    Dispatch {
        active,
        standby,
        excluded,
        steps,
        warning,
        all_exhausted,
    }
}

/// Enable the disabled active accounts routing or the patrol disabled; standby-disable the
/// enabled listed ones outside the active set (none when every account is excluded).
fn steps_to(
    ordered: &[&PriorityEntry],
    accounts: &HashMap<String, RoutingAccount>,
    active: &[String],
    all_exhausted: bool,
) -> Vec<RoutingStep> {
    let mut steps = Vec::new();
    for e in ordered {
        let Some(a) = accounts.get(&e.name) else {
            continue;
        };
        if a.exception {
            continue;
        }
        if active.contains(&e.name) {
            if a.disabled
                && matches!(
                    a.reason,
                    Some(
                        DisableReason::OrderedStandby
                            | DisableReason::QuotaExhausted
                            | DisableReason::ErrorDisabled
                    )
                )
            {
                steps.push(RoutingStep::Enable(e.name.clone()));
            }
        } else if !a.disabled && !all_exhausted {
            steps.push(RoutingStep::Standby(e.name.clone()));
        }
    }
    steps
}

/// Why a CPA priority sync stopped (docs/rules/patrol.md §6.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncStop {
    /// CPA lists these names more than once (case-insensitive).
    DuplicateNames(Vec<String>),
    /// These local entries are not in CPA.
    Missing(Vec<String>),
}

impl std::fmt::Display for SyncStop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SyncStop::DuplicateNames(n) => write!(
                f,
                "CPA has duplicate account names {}; sync stopped",
                n.join(", ")
            ),
            SyncStop::Missing(n) => {
                write!(f, "accounts missing in CPA: {}; sync stopped", n.join(", "))
            }
        }
    }
}

/// The CPA priority patches needed (docs/rules/patrol.md §6.5): entries that are not pending and not
/// exceptions, in priority order, map to `N - i`; only differing values are returned, with the
/// name spelled as CPA spells it. `cpa` = (name, current CPA priority) of every listed file.
pub fn sync_plan(
    list: &[PriorityEntry],
    cpa: &[(String, i64)],
    exceptions: &HashSet<String>,
) -> Result<Vec<(String, i64)>, SyncStop> {
    let mut by_key: HashMap<String, Vec<&(String, i64)>> = HashMap::new();
    for f in cpa.iter().filter(|(n, _)| !n.trim().is_empty()) {
        by_key.entry(key(&f.0)).or_default().push(f);
    }
    let mut dups: Vec<String> = by_key
        .values()
        .filter(|v| v.len() > 1)
        .map(|v| v[0].0.clone())
        .collect();
    if !dups.is_empty() {
        dups.sort();
        return Err(SyncStop::DuplicateNames(dups));
    }
    let mut entries: Vec<&PriorityEntry> = list
        .iter()
        .filter(|e| {
            !e.pending_first_inspection
                && !exceptions.contains(&e.name)
                && !e.name.trim().is_empty()
        })
        .collect();
    entries.sort_by(|a, b| a.priority.cmp(&b.priority).then(a.name.cmp(&b.name)));
    let missing: Vec<String> = entries
        .iter()
        .filter(|e| !by_key.contains_key(&key(&e.name)))
        .map(|e| e.name.clone())
        .collect();
    if !missing.is_empty() {
        return Err(SyncStop::Missing(missing));
    }
    let n = entries.len() as i64;
    Ok(entries
        .iter()
        .enumerate()
        .filter_map(|(i, e)| {
            let remote = by_key[&key(&e.name)][0];
            let want = n - i as i64;
            (remote.1 != want).then(|| (remote.0.clone(), want))
        })
        .collect())
}

/// An exception or pending account whose CPA `priority` is above every routed account's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StalePriority {
    pub name: String,
    /// Its CPA priority now.
    pub priority: i64,
    /// The highest CPA priority among routed accounts.
    pub routed_top: i64,
    /// `true`: pending first inspection; `false`: an exception.
    pub pending: bool,
}

impl StalePriority {
    /// The warning shown in `warnings` of the routing API and in the operation log.
    pub fn warning(&self) -> String {
        format!(
            "{} ({}) keeps CPA priority {} above the routed accounts' highest ({}): CPA serves only its highest tier and sends it the traffic",
            self.name,
            if self.pending {
                "pending first inspection"
            } else {
                "exception"
            },
            self.priority,
            self.routed_top
        )
    }
}

/// Exception and pending accounts whose CPA priority is above the routed accounts' (patrol.md
/// §6.5 syncs only routed accounts, so the others keep whatever priority they had; CPA serves
/// only its highest tier, docs/rules/cpa.md §6.2). Routed = listed, not pending, not an exception. `cpa`
/// holds (name, CPA priority) of the listed accounts. Empty when no routed account is listed
/// or none of the others has a positive priority above their highest. Sorted by name.
pub fn stale_priorities(
    list: &[PriorityEntry],
    cpa: &[(String, i64)],
    exceptions: &HashSet<String>,
) -> Vec<StalePriority> {
    let pending: HashSet<String> = list
        .iter()
        .filter(|e| e.pending_first_inspection)
        .map(|e| key(&e.name))
        .collect();
    let routed: HashSet<String> = list
        .iter()
        .filter(|e| !e.pending_first_inspection && !exceptions.contains(&e.name))
        .map(|e| key(&e.name))
        .collect();
    let exception_keys: HashSet<String> = exceptions.iter().map(|n| key(n)).collect();
    let Some(top) = cpa
        .iter()
        .filter(|(n, _)| routed.contains(&key(n)))
        .map(|(_, p)| *p)
        .max()
    else {
        return vec![];
    };
    let mut out: Vec<StalePriority> = cpa
        .iter()
        .filter(|(_, p)| *p > 0 && *p > top)
        .filter_map(|(n, p)| {
            let k = key(n);
            let is_exception = exception_keys.contains(&k);
            (is_exception || pending.contains(&k)).then(|| StalePriority {
                name: n.clone(),
                priority: *p,
                routed_top: top,
                pending: !is_exception,
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::account::ReasonOwner;
    use crate::availability::{AccountFacts, availability};
    use proptest::prelude::*;

    fn entry(name: &str, priority: u32, pending: bool) -> PriorityEntry {
        PriorityEntry {
            name: name.into(),
            priority,
            pending_first_inspection: pending,
        }
    }

    #[test]
    fn a_saved_entry_without_pending_first_inspection_is_not_pending() {
        let e: SavedPriorityEntry = serde_json::from_str(r#"{"name":"a","priority":1}"#).unwrap();
        assert_eq!(PriorityEntry::from(e), entry("a", 1, false));
        let e: SavedPriorityEntry =
            serde_json::from_str(r#"{"name":"a","priority":2,"pendingFirstInspection":true}"#)
                .unwrap();
        assert_eq!(PriorityEntry::from(e), entry("a", 2, true));
        // The stored / answered entry still requires the flag.
        assert!(serde_json::from_str::<PriorityEntry>(r#"{"name":"a","priority":1}"#).is_err());
    }

    fn names(l: &[PriorityEntry]) -> Vec<&str> {
        let mut v: Vec<&PriorityEntry> = l.iter().collect();
        v.sort_by_key(|e| e.priority);
        v.into_iter().map(|e| e.name.as_str()).collect()
    }

    #[test]
    fn maintenance_drops_vanished_appends_new_as_pending_and_renumbers() {
        let list = vec![
            entry("b", 2, false),
            entry("gone", 1, false),
            entry("a", 5, false),
            entry("A", 6, false),
            entry("X", 7, false),
        ];
        // "X" became an exception: it leaves the list and is not re-added.
        let exceptions = HashSet::from(["x".to_string()]);
        let out = maintain(&list, &["a", "b", "c", "x"], &exceptions);
        assert_eq!(
            out,
            vec![
                entry("b", 1, false),
                entry("a", 2, false),
                entry("c", 3, true)
            ]
        );
    }

    #[test]
    fn maintenance_follows_cpas_spelling_of_a_name() {
        let out = maintain(
            &[entry("Codex-A.json", 1, false)],
            &["codex-a.json"],
            &HashSet::new(),
        );
        assert_eq!(out, vec![entry("codex-a.json", 1, false)]);
    }

    #[test]
    fn maintenance_of_an_empty_list_adds_every_non_exception_account_as_pending() {
        let out = maintain(&[], &["a", "b"], &HashSet::new());
        assert!(out.iter().all(|e| e.pending_first_inspection));
        assert_eq!(names(&out), vec!["a", "b"]);
    }

    #[test]
    fn saving_keeps_the_last_duplicate_and_reports_unknown_names() {
        let sent = vec![
            entry("a", 3, false),
            entry("B", 1, false),
            entry("ghost", 2, false),
            entry("A", 2, false),
            entry("", 1, false),
            entry("c", 0, false),
        ];
        let (out, unknown) = normalize_saved(&sent, &["a", "b", "c"]);
        assert_eq!(unknown, vec!["ghost"]);
        assert_eq!(
            out,
            vec![entry("b", 1, false), entry("a", 2, false)],
            "last 'A' (priority 2) wins; priority 0 dropped"
        );
    }

    /// A standing whose availability is what the one rule says of `weekly` at T = 95 with a
    /// fine last probe (≥ 95 exhausted, below usable, none no data).
    fn st(free: bool, weekly: Option<f64>, ok: bool) -> Standing {
        let availability = match weekly {
            Some(w) if w >= 95.0 => Availability::Exhausted { until: None },
            Some(_) => Availability::Usable,
            None => Availability::NoData,
        };
        Standing {
            free_like: Some(free),
            weekly,
            availability,
            evaluated_ok: ok,
        }
    }

    #[test]
    fn a_free_account_sinks_by_its_availability_not_by_its_weekly_percent() {
        let list = vec![
            entry("free-five-hour-full", 1, false),
            entry("free-failing", 2, false),
            entry("paid", 3, false),
            entry("new-free", 4, true),
        ];
        // Weekly 10 % but the five-hour window at 100 %: exhausted by rule 3, so it sinks.
        let mut five_full = st(true, Some(10.0), true);
        five_full.availability = Availability::Exhausted { until: None };
        // Weekly 99 % in the old snapshot, but the last probe failed: not exhausted (it stays)
        // and not usable (new free accounts do not go after it).
        let mut failing = st(true, Some(99.0), false);
        failing.availability = Availability::Failing { since: None };
        let standing = HashMap::from([
            ("free-five-hour-full".to_string(), five_full),
            ("free-failing".to_string(), failing),
            ("paid".to_string(), st(false, Some(1.0), true)),
            ("new-free".to_string(), st(true, Some(1.0), true)),
        ]);
        assert_eq!(
            names(&reorder(&list, &standing, &HashSet::new())),
            vec!["free-failing", "paid", "new-free", "free-five-hour-full"]
        );
    }

    #[test]
    fn reorder_matches_the_spec_example() {
        let list = vec![
            entry("free-1", 1, false),
            entry("paid-1", 2, false),
            entry("free-2", 3, false),
            entry("new-free-high", 4, true),
            entry("new-free-low", 5, true),
            entry("new-paid", 6, true),
        ];
        let standing = HashMap::from([
            ("free-1".to_string(), st(true, Some(20.0), true)),
            ("paid-1".to_string(), st(false, Some(50.0), true)),
            ("free-2".to_string(), st(true, Some(99.0), true)),
            ("new-free-high".to_string(), st(true, Some(10.0), true)),
            ("new-free-low".to_string(), st(true, Some(40.0), true)),
            ("new-paid".to_string(), st(false, Some(5.0), true)),
        ]);
        let out = reorder(&list, &standing, &HashSet::new());
        assert_eq!(
            names(&out),
            vec![
                "free-1",
                "new-free-high",
                "new-free-low",
                "new-paid",
                "paid-1",
                "free-2"
            ]
        );
        assert!(out.iter().all(|e| !e.pending_first_inspection));
        assert_eq!(
            out.iter().map(|e| e.priority).collect::<Vec<_>>(),
            vec![1, 2, 3, 4, 5, 6]
        );
    }

    #[test]
    fn a_failed_probe_graduates_nothing_and_a_free_account_needs_weekly_data() {
        let list = vec![
            entry("a", 1, false),
            entry("failed", 2, true),
            entry("free-no-data", 3, true),
        ];
        let standing = HashMap::from([
            ("a".to_string(), st(false, Some(10.0), true)),
            ("failed".to_string(), st(false, None, false)),
            ("free-no-data".to_string(), st(true, None, true)),
        ]);
        let out = reorder(&list, &standing, &HashSet::new());
        assert!(
            out.iter()
                .filter(|e| e.name != "a")
                .all(|e| e.pending_first_inspection)
        );
    }

    #[test]
    fn exhausted_free_accounts_sink_below_pending_ones_and_paid_never_move() {
        let list = vec![
            entry("free-ex", 1, false),
            entry("paid-ex", 2, false),
            entry("free-ok", 3, false),
            entry("pend", 4, true),
        ];
        let standing = HashMap::from([
            ("free-ex".to_string(), st(true, Some(100.0), true)),
            ("paid-ex".to_string(), st(false, Some(100.0), true)),
            ("free-ok".to_string(), st(true, Some(5.0), true)),
        ]);
        let out = reorder(&list, &standing, &HashSet::new());
        assert_eq!(names(&out), vec!["paid-ex", "free-ok", "pend", "free-ex"]);
        // Recovered: it stays where it is.
        let mut recovered = standing.clone();
        recovered.insert("free-ex".into(), st(true, Some(0.0), true));
        let again = reorder(&out, &recovered, &HashSet::new());
        assert_eq!(
            names(&again),
            vec!["paid-ex", "free-ok", "free-ex", "pend"],
            "still pending ones stay last"
        );
    }

    #[test]
    fn new_accounts_go_after_the_existing_ones_when_no_free_account_is_usable() {
        let list = vec![entry("paid", 1, false), entry("new-free", 2, true)];
        let standing = HashMap::from([
            ("paid".to_string(), st(false, Some(1.0), true)),
            ("new-free".to_string(), st(true, Some(1.0), true)),
        ]);
        assert_eq!(
            names(&reorder(&list, &standing, &HashSet::new())),
            vec!["paid", "new-free"]
        );
    }

    const OK: Availability = Availability::Usable;
    const EXHAUSTED: Availability = Availability::Exhausted { until: None };

    fn t0() -> DateTime<Utc> {
        use chrono::TimeZone;
        Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap()
    }

    /// A routing account whose availability is what the one rule reads for its admin facts
    /// (a person's or an unowned disable ⇒ `Disabled`), else `quota`.
    fn ra(disabled: bool, reason: Option<DisableReason>, quota: Availability) -> RoutingAccount {
        let owner = |r| match r {
            DisableReason::ManualDisabled => ReasonOwner::Manual,
            DisableReason::OrderedStandby => ReasonOwner::Routing,
            _ => ReasonOwner::Patrol,
        };
        let facts = AccountFacts {
            disabled,
            reason: reason.map(|r| (r, owner(r))),
            probe: None,
        };
        let availability = match availability(facts, &crate::policy::QuotaPolicy::uniform(95), t0())
        {
            d @ Availability::Disabled { .. } => d,
            _ => quota,
        };
        RoutingAccount {
            disabled,
            reason,
            exception: false,
            availability,
        }
    }

    fn three(
        a1: Availability,
        a2: Availability,
        a3: Availability,
        disabled: [bool; 3],
    ) -> (Vec<PriorityEntry>, HashMap<String, RoutingAccount>) {
        let list = vec![
            entry("A1", 1, false),
            entry("A2", 2, false),
            entry("A3", 3, false),
        ];
        let reason = |d: bool| d.then_some(DisableReason::OrderedStandby);
        let accounts = HashMap::from([
            ("A1".to_string(), ra(disabled[0], reason(disabled[0]), a1)),
            ("A2".to_string(), ra(disabled[1], reason(disabled[1]), a2)),
            ("A3".to_string(), ra(disabled[2], reason(disabled[2]), a3)),
        ]);
        (list, accounts)
    }

    #[test]
    fn all_usable_keeps_the_first_two_and_stands_the_third_by() {
        let (list, acc) = three(OK, OK, OK, [false, false, false]);
        let d = dispatch(&list, &acc, 2, t0());
        assert_eq!(d.active, vec!["A1", "A2"]);
        assert_eq!(d.steps, vec![RoutingStep::Standby("A3".into())]);
        assert_eq!(d.warning, None);
    }

    #[test]
    fn one_exhausted_brings_the_third_in() {
        let (list, acc) = three(EXHAUSTED, OK, OK, [true, false, true]);
        let d = dispatch(&list, &acc, 2, t0());
        assert_eq!(d.active, vec!["A2", "A3"]);
        assert_eq!(d.steps, vec![RoutingStep::Enable("A3".into())]);
    }

    #[test]
    fn two_exhausted_leave_one_and_warn() {
        let (list, acc) = three(EXHAUSTED, EXHAUSTED, OK, [true, true, true]);
        let d = dispatch(&list, &acc, 2, t0());
        assert_eq!(d.active, vec!["A3"]);
        assert_eq!(d.warning.as_deref(), Some("only 1 usable, below minimum 2"));
    }

    #[test]
    fn all_exhausted_is_reported_and_nothing_is_standby_disabled() {
        let (list, acc) = three(
            EXHAUSTED,
            Availability::NoData,
            EXHAUSTED,
            [true, false, true],
        );
        let d = dispatch(&list, &acc, 2, t0());
        assert!(d.all_exhausted);
        assert_eq!(
            d.warning.as_deref(),
            Some("all prioritised accounts exhausted")
        );
        assert!(d.steps.is_empty());
    }

    #[test]
    fn a_recovered_first_account_comes_back_and_the_third_returns_to_standby() {
        let (list, acc) = three(OK, OK, OK, [true, false, false]);
        let d = dispatch(&list, &acc, 2, t0());
        assert_eq!(
            d.steps,
            vec![
                RoutingStep::Enable("A1".into()),
                RoutingStep::Standby("A3".into())
            ]
        );
    }

    #[test]
    fn paid_five_hour_over_is_not_active_and_min_active_one_takes_only_the_first() {
        let five_hour_reset = t0() + chrono::Duration::hours(3);
        let (list, acc) = three(
            Availability::Exhausted {
                until: Some(five_hour_reset),
            },
            OK,
            OK,
            [false, false, false],
        );
        let d = dispatch(&list, &acc, 1, t0());
        assert_eq!(d.active, vec!["A2"]);
        assert_eq!(
            d.steps,
            vec![
                RoutingStep::Standby("A1".into()),
                RoutingStep::Standby("A3".into())
            ]
        );
    }

    #[test]
    fn manual_pending_exception_and_unlisted_accounts_are_never_enabled() {
        let list = vec![
            entry("manual", 1, false),
            entry("pending", 2, true),
            entry("exc", 3, false),
            entry("ok", 4, false),
        ];
        let mut acc = HashMap::from([
            (
                "manual".to_string(),
                ra(true, Some(DisableReason::ManualDisabled), OK),
            ),
            (
                "pending".to_string(),
                ra(true, Some(DisableReason::OrderedStandby), OK),
            ),
            (
                "exc".to_string(),
                RoutingAccount {
                    exception: true,
                    ..ra(true, Some(DisableReason::OrderedStandby), OK)
                },
            ),
            ("ok".to_string(), ra(false, None, OK)),
            (
                "unlisted".to_string(),
                ra(true, Some(DisableReason::OrderedStandby), OK),
            ),
        ]);
        let d = dispatch(&list, &acc, 3, t0());
        assert_eq!(d.active, vec!["ok"]);
        assert!(d.steps.is_empty(), "{:?}", d.steps);
        let why: Vec<(&str, selection::ExclusionReason)> = d
            .excluded
            .iter()
            .map(|(n, e)| (n.as_str(), e.reason))
            .collect();
        assert_eq!(
            why,
            vec![
                (
                    "manual",
                    selection::ExclusionReason::Disabled {
                        reason: DisableReason::ManualDisabled,
                        owner: ReasonOwner::Manual
                    }
                ),
                ("pending", selection::ExclusionReason::Pending),
                ("exc", selection::ExclusionReason::Exception),
            ]
        );
        // An unowned disable counts as manual too.
        acc.insert("manual".into(), ra(true, None, OK));
        assert!(dispatch(&list, &acc, 3, t0()).steps.is_empty());
    }

    #[test]
    fn sync_maps_n_to_1_and_patches_only_changed_values() {
        let list = vec![
            entry("a", 1, false),
            entry("b", 2, false),
            entry("p", 3, true),
            entry("x", 4, false),
            entry("c", 5, false),
        ];
        let cpa = vec![
            ("A".to_string(), 3),
            ("b".to_string(), 0),
            ("c".to_string(), 1),
            ("p".to_string(), 9),
            ("x".to_string(), 7),
        ];
        let plan = sync_plan(&list, &cpa, &HashSet::from(["x".to_string()])).unwrap();
        assert_eq!(
            plan,
            vec![("b".to_string(), 2)],
            "a=3 and c=1 already right; pending and exceptions skipped"
        );
    }

    #[test]
    fn sync_stops_on_duplicate_or_missing_names() {
        let list = vec![entry("a", 1, false), entry("gone", 2, false)];
        let dup = vec![
            ("a".to_string(), 0),
            ("A".to_string(), 0),
            ("gone".to_string(), 0),
        ];
        assert!(matches!(
            sync_plan(&list, &dup, &HashSet::new()),
            Err(SyncStop::DuplicateNames(_))
        ));
        let missing = vec![("a".to_string(), 0)];
        assert_eq!(
            sync_plan(&list, &missing, &HashSet::new()),
            Err(SyncStop::Missing(vec!["gone".into()]))
        );
    }

    fn quota() -> impl Strategy<Value = Availability> {
        prop_oneof![
            Just(OK),
            Just(EXHAUSTED),
            Just(Availability::Exhausted {
                until: Some(t0() + chrono::Duration::hours(5))
            }),
            Just(Availability::NoData),
            Just(Availability::Invalid),
            Just(Availability::Failing { since: None }),
        ]
    }

    fn reason() -> impl Strategy<Value = Option<DisableReason>> {
        prop_oneof![
            Just(None),
            Just(Some(DisableReason::ManualDisabled)),
            Just(Some(DisableReason::OrderedStandby)),
            Just(Some(DisableReason::QuotaExhausted))
        ]
    }

    proptest! {
        #[test]
        fn the_active_set_is_the_first_n_of_the_engines_ranking(
            accts in proptest::collection::vec((quota(), any::<bool>(), reason(), any::<bool>(), any::<bool>()), 0..20),
            min in 1u32..10,
            unknown in proptest::collection::vec(any::<bool>(), 20),
        ) {
            let mut list = Vec::new();
            let mut map = HashMap::new();
            for (i, (quota, disabled, reason, pending, exception)) in accts.iter().cloned().enumerate() {
                let name = format!("a{i}");
                list.push(entry(&name, i as u32 + 1, pending));
                if !unknown[i] {
                    let a = ra(disabled, if disabled { reason } else { None }, quota);
                    map.insert(name, RoutingAccount { exception, ..a });
                }
            }
            let d = dispatch(&list, &map, min, t0());
            // The same call a router makes: the active set is the first N of that ranking.
            let (ordered, candidates) = routing_candidates(&list, &map);
            let mut ranking = Ranking::default();
            selection::rank(&candidates, &EngineState::default(), t0(), 0, &mut ranking);
            let ranked: Vec<String> = ranking.order().iter().map(|&i| ordered[i].name.clone()).collect();
            let n = (min as usize).min(ranked.len());
            prop_assert_eq!(&d.active[..], &ranked[..n]);
            prop_assert_eq!(&d.standby[..], &ranked[n..]);
            // And that ranking is the list order of the accounts docs/rules/patrol.md §6.3 calls usable.
            let eligible: Vec<String> = list.iter().filter(|e| {
                map.get(&e.name).is_some_and(|a| {
                    !e.pending_first_inspection && !a.exception && a.availability.is_usable()
                        && (!a.disabled || !matches!(a.reason, None | Some(DisableReason::ManualDisabled)))
                })
            }).map(|e| e.name.clone()).collect();
            prop_assert_eq!(&ranked, &eligible);
            prop_assert_eq!(d.excluded.len() + ranked.len(), list.len());
            for step in &d.steps {
                if let RoutingStep::Enable(n) = step {
                    let a = &map[n];
                    prop_assert!(a.availability.is_usable() && !a.exception && a.reason != Some(DisableReason::ManualDisabled));
                    prop_assert!(!list.iter().any(|e| &e.name == n && e.pending_first_inspection));
                }
            }
        }
    }

    #[test]
    fn exception_and_pending_priorities_above_the_routed_ones_are_stale() {
        let list = vec![
            PriorityEntry {
                name: "r1".into(),
                priority: 1,
                pending_first_inspection: false,
            },
            PriorityEntry {
                name: "r2".into(),
                priority: 2,
                pending_first_inspection: false,
            },
            PriorityEntry {
                name: "new".into(),
                priority: 3,
                pending_first_inspection: true,
            },
            PriorityEntry {
                name: "low-new".into(),
                priority: 4,
                pending_first_inspection: true,
            },
        ];
        let cpa = vec![
            ("r1".to_string(), 2),
            ("r2".to_string(), 1),
            ("new".to_string(), 7),
            ("low-new".to_string(), 2),
            ("exc".to_string(), 10),
            ("other".to_string(), 50),
        ];
        let exceptions: HashSet<String> = ["exc".to_string()].into();
        let stale = stale_priorities(&list, &cpa, &exceptions);
        let names: Vec<(&str, bool)> = stale.iter().map(|s| (s.name.as_str(), s.pending)).collect();
        // A tie with the routed top shares the tier: not reported; "other" is neither listed
        // nor an exception (not ours to judge).
        assert_eq!(names, vec![("exc", false), ("new", true)]);
        assert!(stale[0].warning().contains("exception"));
        assert_eq!(stale[1].routed_top, 2);
    }

    #[test]
    fn without_routed_accounts_nothing_is_stale() {
        let list = vec![PriorityEntry {
            name: "new".into(),
            priority: 1,
            pending_first_inspection: true,
        }];
        let cpa = vec![("new".to_string(), 9)];
        assert!(stale_priorities(&list, &cpa, &HashSet::new()).is_empty());
    }
}
