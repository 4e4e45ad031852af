//! Banked rate-limit reset credits in the patrol (docs/reset-credits.md, docs/rules/cpa.md §10):
//! the read models (per account and per site) shown by the API, the CLI table, the status page
//! and the daily digest. Each site's `resetCreditsMode` decides: `off` shows nothing, `observe`
//! and `redeem` show what the probes and list reads saw.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{JobError, Patrol};
use crate::core::account::QuotaSnapshot;
use crate::core::settings::ResetCreditsMode;
use crate::core::site::Site;
use crate::store;
use crate::store::reset_credits::ListedCredits;

/// One account's banked reset credits. Counts are `null` when unknown (the usage body had no
/// `rate_limit_reset_credits`, or the account was never probed): unknown is not zero.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccountCreditsView {
    /// `available_count` of the last probe's usage body.
    pub available: Option<u32>,
    /// `applicable_available_count`: credits that would reset a window now (0 when nothing is
    /// limited).
    pub applicable: Option<u32>,
    /// When the credit list was last read (before a redemption); `null` = never.
    pub listed_at: Option<DateTime<Utc>>,
    /// The soonest expiry among the available credits of that list read.
    pub soonest_expires_at: Option<DateTime<Utc>>,
}

/// A site's banked reset credits: sums over the accounts whose count is known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SiteCreditsView {
    /// `observe` or `redeem` (a site in `off` has no summary).
    #[schema(value_type = String)]
    pub mode: ResetCreditsMode,
    /// Sum of `available` over the accounts that reported it.
    pub available: u32,
    /// Sum of `applicable` over the accounts that reported it.
    pub applicable: u32,
    /// Accounts whose count is known.
    pub accounts_known: u32,
    /// The soonest expiry over every list read of the site (`null` when none was read).
    pub soonest_expires_at: Option<DateTime<Utc>>,
}

impl AccountCreditsView {
    /// `2 (1 now)` = 2 banked, 1 would reset a window now; `-` when the count is unknown.
    pub fn short(&self) -> String {
        match (self.available, self.applicable) {
            (Some(a), Some(n)) => format!("{a} ({n} now)"),
            (Some(a), None) => a.to_string(),
            _ => "-".into(),
        }
    }
}

impl SiteCreditsView {
    /// `reset credits (observe): 3 banked on 2 accounts, 1 usable now, soonest expiry
    /// 2026-06-01 12:00 UTC` (the table's and the status page's line).
    pub fn line(&self) -> String {
        let expiry = self
            .soonest_expires_at
            .map(|at| format!(", soonest expiry {}", at.format("%Y-%m-%d %H:%M UTC")))
            .unwrap_or_default();
        format!(
            "reset credits ({}): {} banked on {} accounts, {} usable now{expiry}",
            self.mode.as_str(),
            self.available,
            self.accounts_known,
            self.applicable
        )
    }
}

/// The view of one account under `mode` (`None` in `off`, or when nothing is known).
pub fn account_view(
    mode: ResetCreditsMode,
    snap: Option<&QuotaSnapshot>,
    listed: Option<&ListedCredits>,
) -> Option<AccountCreditsView> {
    if mode == ResetCreditsMode::Off {
        return None;
    }
    let hint = snap.and_then(|s| s.reset_credits);
    if hint.is_none() && listed.is_none() {
        return None;
    }
    Some(AccountCreditsView {
        available: hint.and_then(|h| h.available),
        applicable: hint.and_then(|h| h.applicable),
        listed_at: listed.map(|l| l.listed_at),
        soonest_expires_at: listed.and_then(|l| l.soonest_expires_at),
    })
}

/// The site summary of the account views (`None` in `off`).
pub fn site_summary<'a>(
    mode: ResetCreditsMode,
    accounts: impl IntoIterator<Item = Option<&'a AccountCreditsView>>,
) -> Option<SiteCreditsView> {
    if mode == ResetCreditsMode::Off {
        return None;
    }
    let mut s = SiteCreditsView {
        mode,
        available: 0,
        applicable: 0,
        accounts_known: 0,
        soonest_expires_at: None,
    };
    for v in accounts.into_iter().flatten() {
        if let Some(n) = v.available {
            s.available += n;
            s.accounts_known += 1;
        }
        s.applicable += v.applicable.unwrap_or(0);
        if let Some(at) = v.soonest_expires_at {
            s.soonest_expires_at = Some(s.soonest_expires_at.map_or(at, |cur| cur.min(at)));
        }
    }
    Some(s)
}

/// The list reads of a site by account name.
pub(crate) fn lists_by_name(
    c: &rusqlite::Connection,
    site_id: &str,
) -> Result<HashMap<String, ListedCredits>, store::StoreError> {
    Ok(store::reset_credits::lists(c, site_id)?
        .into_iter()
        .map(|l| (l.name.clone(), l))
        .collect())
}

/// The per-account views and the summary of a site (`GET /api/reset-credits`, the table, the
/// status page, the digest).
pub async fn site_credits(
    p: &Patrol,
    site: &Site,
) -> Result<(Vec<(String, AccountCreditsView)>, Option<SiteCreditsView>), JobError> {
    let mode = site.settings.reset_credits_mode;
    if mode == ResetCreditsMode::Off {
        return Ok((Vec::new(), None));
    }
    let sid = site.site_id.clone();
    let (states, lists) = p
        .store
        .run(move |c| {
            Ok((
                store::accounts::load_states(c, &sid)?,
                lists_by_name(c, &sid)?,
            ))
        })
        .await?;
    let mut names: Vec<&String> = states.keys().chain(lists.keys()).collect();
    names.sort();
    names.dedup();
    let views: Vec<(String, AccountCreditsView)> = names
        .into_iter()
        .filter_map(|n| {
            let snap = states.get(n).and_then(|s| s.snapshot.as_ref());
            account_view(mode, snap, lists.get(n)).map(|v| (n.clone(), v))
        })
        .collect();
    let summary = site_summary(mode, views.iter().map(|(_, v)| Some(v)));
    Ok((views, summary))
}

/// The digest's credits line of `site` (`None` in `off`): the summary of now and the credits
/// redeemed (`reset` or `already_redeemed`) since `since`.
pub async fn digest_credits(
    p: &Patrol,
    site: &Site,
    since: DateTime<Utc>,
) -> Result<Option<crate::core::digest::DigestCredits>, JobError> {
    let (_, Some(summary)) = site_credits(p, site).await? else {
        return Ok(None);
    };
    let sid = site.site_id.clone();
    let guards = p
        .store
        .run(move |c| store::reset_credits::guards_in_site(c, &sid))
        .await?;
    let redeemed = guards
        .iter()
        .filter(|g| g.settled_at.is_some_and(|at| at >= since))
        .filter(|g| {
            matches!(
                g.guard.settled.as_deref(),
                Some("reset" | "already_redeemed")
            )
        })
        .count();
    Ok(Some(crate::core::digest::DigestCredits {
        mode: summary.mode.as_str().to_string(),
        available: summary.available,
        applicable: summary.applicable,
        accounts_known: summary.accounts_known,
        soonest_expires_at: summary.soonest_expires_at,
        redeemed: u32::try_from(redeemed).unwrap_or(u32::MAX),
    }))
}

/// What a round's table shows of the credits: per account by name, and the site line (`None`
/// when the site's mode is `off`).
#[derive(Debug, Clone, Default)]
pub struct RoundCredits {
    pub accounts: HashMap<String, AccountCreditsView>,
    pub site: Option<SiteCreditsView>,
}

/// [`site_credits`] of `site_id` for a round's table.
pub async fn round_credits(p: &Patrol, site_id: &str) -> Result<RoundCredits, JobError> {
    let site = p.site(site_id).await?;
    let (accounts, site) = site_credits(p, &site).await?;
    Ok(RoundCredits {
        accounts: accounts.into_iter().collect(),
        site,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::reset_credits::CreditHint;
    use chrono::{Duration, TimeZone};

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 5, 26, 12, 0, 0).unwrap()
    }

    fn view(
        available: Option<u32>,
        applicable: Option<u32>,
        exp: Option<i64>,
    ) -> AccountCreditsView {
        AccountCreditsView {
            available,
            applicable,
            listed_at: exp.map(|_| t0()),
            soonest_expires_at: exp.map(|d| t0() + Duration::days(d)),
        }
    }

    #[test]
    fn off_shows_nothing_and_unknown_is_not_zero() {
        let mut snap = crate::store::stored::tests::fixed_snapshot();
        snap.reset_credits = Some(CreditHint {
            available: Some(2),
            applicable: Some(1),
        });
        assert_eq!(account_view(ResetCreditsMode::Off, Some(&snap), None), None);
        let v = account_view(ResetCreditsMode::Observe, Some(&snap), None).unwrap();
        assert_eq!((v.available, v.applicable), (Some(2), Some(1)));
        snap.reset_credits = None;
        assert_eq!(
            account_view(ResetCreditsMode::Observe, Some(&snap), None),
            None
        );
    }

    #[test]
    fn the_site_sums_known_counts_and_takes_the_soonest_expiry() {
        let a = view(Some(2), Some(1), Some(9));
        let b = view(Some(1), Some(0), Some(4));
        let c = view(None, None, None);
        let s = site_summary(
            ResetCreditsMode::Redeem,
            [Some(&a), Some(&b), Some(&c), None],
        )
        .unwrap();
        assert_eq!((s.available, s.applicable, s.accounts_known), (3, 1, 2));
        assert_eq!(s.soonest_expires_at, Some(t0() + Duration::days(4)));
        assert_eq!(site_summary(ResetCreditsMode::Off, [Some(&a)]), None);
    }
}
