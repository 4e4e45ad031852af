//! The selection engine shared by the patrol's active set and (later) the request router:
//! an ordered candidate list, an eligibility check that says *why* a candidate is excluded,
//! and a bounded pick. Pure: no I/O, no clock reads.
//! Rules: spec/patrol.md §6.3 (usable = weekly < T and, for paid plans, 5-hour < T; no weekly
//! data ⇒ not usable), spec/router.md §1 (every exclusion carries a reason).

use serde::Serialize;

/// Why a candidate cannot be selected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum Exclusion {
    /// Not inspected successfully yet (priority list `pendingFirstInspection`).
    Pending,
    /// The last probe failed (error, 401, 402): the older snapshot does not speak for it.
    ProbeFailing,
    /// On the site's exception list.
    Exception,
    /// In the priority list but not in CPA's account list.
    Unknown,
    /// Disabled by a person (or another tool): never enabled automatically.
    ManualDisabled,
    /// No weekly (or monthly) data in the last good snapshot.
    NoQuotaData,
    /// Weekly (or monthly) window at or over the threshold, or limit reached.
    Exhausted,
    /// Paid plan with the five-hour window at or over the threshold.
    FiveHourExhausted,
}

/// What the engine needs to know about one candidate, in priority order.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate<'a> {
    pub id: &'a str,
    /// `Ok(())` when eligible, else the first reason it is not.
    pub eligibility: Result<(), Exclusion>,
}

/// Result of a pick.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Selection {
    /// Chosen ids, in priority order (at most `limit`).
    pub chosen: Vec<String>,
    /// Eligible candidates beyond the limit, in order.
    pub standby: Vec<String>,
    /// Ineligible candidates with the reason.
    pub excluded: Vec<(String, Exclusion)>,
}

impl Selection {
    /// Eligible candidates in total (chosen + standby).
    pub fn eligible_count(&self) -> usize {
        self.chosen.len() + self.standby.len()
    }
}

/// Picks the first `limit` eligible candidates in the given order (a prefix of the eligible
/// ones; patrol.md §6.3 "the first minActive usable accounts").
pub fn pick<'a>(candidates: impl IntoIterator<Item = Candidate<'a>>, limit: usize) -> Selection {
    let mut s = Selection::default();
    for c in candidates {
        match c.eligibility {
            Ok(()) if s.chosen.len() < limit => s.chosen.push(c.id.to_string()),
            Ok(()) => s.standby.push(c.id.to_string()),
            Err(why) => s.excluded.push((c.id.to_string(), why)),
        }
    }
    s
}

/// Quota eligibility of an account from its last good snapshot (patrol.md §6.3).
pub fn quota_eligibility(
    snapshot: Option<&super::account::QuotaSnapshot>,
    threshold: u8,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), Exclusion> {
    let Some(s) = snapshot else {
        return Err(Exclusion::NoQuotaData);
    };
    if s.weekly_used().is_none() {
        return Err(Exclusion::NoQuotaData);
    }
    let exhausted = s.exhausted_windows(threshold, now);
    if exhausted
        .iter()
        .any(|w| w.kind != super::quota::WindowKind::FiveHour)
        || (s.main_limit_reached && !s.is_stale(now))
    {
        return Err(Exclusion::Exhausted);
    }
    if !exhausted.is_empty() {
        return Err(Exclusion::FiveHourExhausted);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn c(id: &str, ok: bool) -> Candidate<'_> {
        Candidate {
            id,
            eligibility: if ok {
                Ok(())
            } else {
                Err(Exclusion::Exhausted)
            },
        }
    }

    #[test]
    fn pick_takes_the_first_eligible_in_order() {
        let s = pick([c("a", false), c("b", true), c("c", true), c("d", true)], 2);
        assert_eq!(s.chosen, vec!["b", "c"]);
        assert_eq!(s.standby, vec!["d"]);
        assert_eq!(s.excluded, vec![("a".to_string(), Exclusion::Exhausted)]);
    }

    proptest! {
        #[test]
        fn the_chosen_set_is_a_bounded_prefix_of_the_eligible_ones(flags in proptest::collection::vec(any::<bool>(), 0..40), limit in 1usize..10) {
            let ids: Vec<String> = (0..flags.len()).map(|i| format!("a{i}")).collect();
            let s = pick(ids.iter().zip(&flags).map(|(id, ok)| c(id, *ok)), limit);
            let eligible: Vec<String> = ids.iter().zip(&flags).filter(|(_, ok)| **ok).map(|(id, _)| id.clone()).collect();
            prop_assert!(s.chosen.len() <= limit);
            prop_assert_eq!(&s.chosen[..], &eligible[..s.chosen.len()]);
            prop_assert_eq!(s.chosen.len(), eligible.len().min(limit));
            for id in &s.chosen {
                prop_assert!(!s.excluded.iter().any(|(x, _)| x == id), "an ineligible account is never chosen");
            }
        }
    }
}
