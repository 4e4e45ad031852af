//! Per-account quota policy overrides (docs/rules/patrol.md §9; `GET/PUT/DELETE
//! /api/accounts/{name}/policy`): read, replace and remove an account's [`AccountPolicy`],
//! answer it beside the effective [`QuotaPolicy`], log the change and republish the pool (the
//! override changes the account's availability). Validation of the body is
//! `core::policy::AccountPolicyInput::validate`'s; this module does no CPA call.

use serde::Serialize;

use super::{JobError, Patrol};
use crate::core::oplog::{Category, NewLogEntry, Source};
use crate::core::policy::{AccountPolicy, QuotaPolicy};
use crate::core::site::Site;
use crate::store;

/// An account's policy as the API shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccountPolicyView {
    pub account_name: String,
    /// The stored override (every field `null` / `false` when the account follows the site).
    pub policy: AccountPolicy,
    /// Whether the account has a stored override at all.
    pub overridden: bool,
    /// The site settings overlaid with the override, with the source of each value.
    pub effective: QuotaPolicy,
}

fn view(site: &Site, name: &str, own: Option<AccountPolicy>) -> AccountPolicyView {
    AccountPolicyView {
        account_name: name.to_string(),
        policy: own.unwrap_or_default(),
        overridden: own.is_some(),
        effective: QuotaPolicy::resolve(&site.settings, own.as_ref()),
    }
}

/// The account must be in the site's stored listing: 404 otherwise.
async fn known(p: &Patrol, site: &Site, name: &str) -> Result<(), JobError> {
    let (sid, n) = (site.site_id.clone(), name.to_string());
    let exists = p
        .store
        .run(move |c| store::accounts::exists(c, &sid, &n))
        .await?;
    if exists {
        Ok(())
    } else {
        Err(JobError::NotFound(format!(
            "account {name} not found in site {}",
            site.site_id
        )))
    }
}

/// The account's override and effective policy. Errors: [`JobError::NotFound`] for an account
/// the site does not list.
pub async fn get(p: &Patrol, site: &Site, name: &str) -> Result<AccountPolicyView, JobError> {
    known(p, site, name).await?;
    Ok(view(site, name, site.account_policies.get(name).copied()))
}

/// Replaces the account's override (an empty one removes it), logs the change and republishes
/// the pool. Errors: [`JobError::NotFound`] for an unknown account.
pub async fn put(
    p: &Patrol,
    site: &Site,
    name: &str,
    policy: AccountPolicy,
) -> Result<AccountPolicyView, JobError> {
    known(p, site, name).await?;
    let (sid, n, now) = (site.site_id.clone(), name.to_string(), p.now());
    p.store
        .run(move |c| store::policies::put(c, &sid, &n, &policy, now))
        .await?;
    let shown = view(site, name, (!policy.is_empty()).then_some(policy));
    changed(p, site, name, &shown).await;
    Ok(shown)
}

/// Removes the account's override (it follows the site again), logs and republishes. Errors:
/// [`JobError::NotFound`] for an unknown account.
pub async fn delete(p: &Patrol, site: &Site, name: &str) -> Result<AccountPolicyView, JobError> {
    known(p, site, name).await?;
    let (sid, n) = (site.site_id.clone(), name.to_string());
    p.store
        .run(move |c| store::policies::delete(c, &sid, &n))
        .await?;
    let shown = view(site, name, None);
    changed(p, site, name, &shown).await;
    Ok(shown)
}

async fn changed(p: &Patrol, site: &Site, name: &str, v: &AccountPolicyView) {
    let e = &v.effective;
    let text = format!(
        "quota policy of {name}: weekly {}%, 5-hour {}% ({}), monthly {}%{}{}",
        e.weekly,
        e.five_hour,
        e.five_hour_rule.as_str(),
        e.monthly,
        if e.never_act { ", neverAct" } else { "" },
        if v.overridden {
            ""
        } else {
            " (follows the site)"
        },
    );
    p.log(vec![
        NewLogEntry::info(
            &site.site_id,
            Category::Account,
            "accountPolicy",
            Source::Manual,
            text,
        )
        .for_account(name),
    ])
    .await;
    super::pool::publish_after_manual(p, &site.site_id, "policy", Some(name)).await;
}
