//! Manual account operations (docs/rules/api.md §3, §4): disable / enable /
//! release with their disable-reason bookkeeping (docs/rules/patrol.md §5.1), list reloads and the
//! exception list. Manual operations do not wait for a running round.

use super::listing::reload_accounts;
use super::{JobError, Patrol};
use crate::core::account::{Account, DisableReason, ReasonOwner};
use crate::core::oplog::{Category, Level, NewLogEntry, Source};
use crate::core::pool::PublishCause;
use crate::store;

/// Reloads the site's accounts from CPA (`POST /api/accounts/refresh`).
pub async fn refresh_accounts(p: &Patrol, site_id: &str) -> Result<Vec<Account>, JobError> {
    let site = p.site(site_id).await?;
    let client = p.client(&site).await?;
    let listed = reload_accounts(p, &site, &client, Source::Manual).await;
    p.settle_key(&site, &client).await?;
    if listed.is_ok() {
        super::pool::publish(p, site_id, PublishCause::ListingReload).await;
    }
    listed
}

/// The account from the stored list; reloads the list from CPA once when the name is unknown
/// (an account added since the last round).
async fn find(p: &Patrol, site_id: &str, name: &str) -> Result<Account, JobError> {
    let sid = site_id.to_string();
    let accounts = p.store.run(move |c| store::accounts::list(c, &sid)).await?;
    if let Some(a) = accounts.into_iter().find(|a| a.name == name) {
        return Ok(a);
    }
    refresh_accounts(p, site_id)
        .await?
        .into_iter()
        .find(|a| a.name == name)
        .ok_or_else(|| JobError::NotFound(format!("account {name} not found in site {site_id}")))
}

/// Manual disable in CPA; records ManualDisabled with owner `manual`.
pub async fn disable(p: &Patrol, site_id: &str, name: &str) -> Result<Account, JobError> {
    set_enabled(p, site_id, name, false).await
}

/// Manual enable in CPA; clears the reason.
pub async fn enable(p: &Patrol, site_id: &str, name: &str) -> Result<Account, JobError> {
    set_enabled(p, site_id, name, true).await
}

async fn set_enabled(
    p: &Patrol,
    site_id: &str,
    name: &str,
    enabled: bool,
) -> Result<Account, JobError> {
    let site = p.site(site_id).await?;
    let mut account = find(p, site_id, name).await?;
    let client = p.client(&site).await?;
    let verb = if enabled { "enable" } else { "disable" };
    let patched = client
        .set_status(name, !enabled, account.auth_index.as_deref())
        .await;
    p.settle_key(&site, &client).await?;
    if let Err(e) = patched {
        p.log(vec![
            NewLogEntry::info(
                site_id,
                Category::Account,
                "manualAction",
                Source::Manual,
                format!("manual {verb} of {name} failed: {e}"),
            )
            .at_level(Level::Error)
            .for_account(name),
        ])
        .await;
        return Err(e.into());
    }
    account.disabled = !enabled;
    account.status = if enabled {
        "active".into()
    } else {
        "disabled".into()
    };
    let now = p.now();
    let sid = site_id.to_string();
    let a = account.clone();
    p.store
        .run(move |c| {
            store::accounts::save_account(c, &sid, &a)?;
            // Read back at the next round like every write (docs/rules/patrol.md §11.2).
            store::writes::record(
                c,
                &sid,
                &a.name,
                crate::core::writes::WriteKind::Disabled,
                i64::from(!enabled),
                now,
            )?;
            if enabled {
                store::accounts::clear_reason(c, &sid, &a.name)
            } else {
                store::accounts::set_reason(
                    c,
                    &sid,
                    &a.name,
                    DisableReason::ManualDisabled,
                    ReasonOwner::Manual,
                    now,
                )
            }
        })
        .await?;
    // Visible to the API and the router when this call returns (docs/rules/patrol.md §12.2).
    super::pool::publish_after_manual(p, site_id, verb, Some(name)).await;
    let msg = if enabled {
        format!("{name} enabled manually; disable reason cleared")
    } else {
        format!(
            "{name} disabled manually (ManualDisabled, owner manual): the patrol will not re-enable it"
        )
    };
    p.log(vec![
        NewLogEntry::info(
            site_id,
            Category::Account,
            "manualAction",
            Source::Manual,
            msg,
        )
        .for_account(name),
    ])
    .await;
    Ok(account)
}

/// Hands a ManualDisabled account back to the patrol without enabling it (api.md `release`).
/// A still-disabled account is recorded as `OrderedStandby` owned by the patrol, so the next
/// round treats it like one of its own disables: re-enabled when usable (autoEnableRecovered,
/// docs/rules/patrol.md §5 rule 5) or by routing (rule 6), kept and re-checked at its reset when exhausted.
/// `NotFound` if the account holds no ManualDisabled reason (a disabled account without any
/// record holds a provisional one and can be released).
pub async fn release(p: &Patrol, site_id: &str, name: &str) -> Result<Account, JobError> {
    let account = find(p, site_id, name).await?;
    let sid = site_id.to_string();
    let n = name.to_string();
    let disabled = account.disabled;
    let now = p.now();
    let released = p
        .store
        .run(move |c| {
            let reasons = store::accounts::load_reasons(c, &sid)?;
            // A disabled account without a record shows a provisional ManualDisabled
            // (docs/rules/patrol.md §5.1): releasing it hands it to the patrol as well.
            let manual = match reasons.get(&n) {
                Some(r) => r.reason == DisableReason::ManualDisabled,
                None => disabled,
            };
            if !manual {
                return Ok(false);
            }
            if disabled {
                store::accounts::set_reason(
                    c,
                    &sid,
                    &n,
                    DisableReason::OrderedStandby,
                    ReasonOwner::Patrol,
                    now,
                )?;
            } else {
                store::accounts::clear_reason(c, &sid, &n)?;
            }
            Ok(true)
        })
        .await?;
    if !released {
        return Err(JobError::NotFound(format!(
            "account {name} holds no ManualDisabled reason"
        )));
    }
    super::pool::publish_after_manual(p, site_id, "release", Some(name)).await;
    p.log(vec![
        NewLogEntry::info(
            site_id,
            Category::Account,
            "release",
            Source::Manual,
            format!("{name} released: the patrol manages it again"),
        )
        .for_account(name),
    ])
    .await;
    Ok(account)
}

/// The site's exception list.
pub async fn exceptions(p: &Patrol, site_id: &str) -> Result<Vec<String>, JobError> {
    let sid = site_id.to_string();
    Ok(p.store
        .run(move |c| store::accounts::exceptions(c, &sid))
        .await?)
}

/// Replaces the exception list; every name must be a known account (`Invalid` lists the
/// unknown ones). Blank names are dropped, duplicates (case-insensitive) removed.
pub async fn set_exceptions(
    p: &Patrol,
    site_id: &str,
    names: Vec<String>,
) -> Result<Vec<String>, JobError> {
    let sid = site_id.to_string();
    let mut known = p.store.run(move |c| store::accounts::list(c, &sid)).await?;
    let mut clean: Vec<String> = Vec::new();
    for n in names
        .into_iter()
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
    {
        if !clean.iter().any(|c| c.eq_ignore_ascii_case(&n)) {
            clean.push(n);
        }
    }
    if clean.iter().any(|n| !known.iter().any(|a| &a.name == n)) {
        // Names added to CPA since the last round: reload the list once before refusing them.
        // A CPA that cannot answer leaves the stored list as the reference.
        if let Ok(list) = refresh_accounts(p, site_id).await {
            known = list;
        }
    }
    let unknown: Vec<String> = clean
        .iter()
        .filter(|n| !known.iter().any(|a| &a.name == *n))
        .map(|n| format!("unknown account {n}"))
        .collect();
    if !unknown.is_empty() {
        return Err(JobError::Invalid(unknown));
    }
    let sid = site_id.to_string();
    let list = clean.clone();
    p.store
        .run(move |c| store::accounts::replace_exceptions(c, &sid, &list))
        .await?;
    super::pool::publish_after_manual(p, site_id, "exceptions", None).await;
    p.log(vec![NewLogEntry::info(
        site_id,
        Category::System,
        "exceptions",
        Source::Manual,
        format!("exception list set to {} account(s)", clean.len()),
    )])
    .await;
    exceptions(p, site_id).await
}

/// Adds one exception.
pub async fn add_exception(p: &Patrol, site_id: &str, name: &str) -> Result<Vec<String>, JobError> {
    let mut list = exceptions(p, site_id).await?;
    list.push(name.to_string());
    set_exceptions(p, site_id, list).await
}

/// Removes one exception (no error if absent).
pub async fn remove_exception(
    p: &Patrol,
    site_id: &str,
    name: &str,
) -> Result<Vec<String>, JobError> {
    let list: Vec<String> = exceptions(p, site_id)
        .await?
        .into_iter()
        .filter(|n| n != name)
        .collect();
    let sid = site_id.to_string();
    p.store
        .run(move |c| store::accounts::replace_exceptions(c, &sid, &list))
        .await?;
    super::pool::publish_after_manual(p, site_id, "exceptions", None).await;
    exceptions(p, site_id).await
}
