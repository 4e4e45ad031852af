//! The account listing of a site: reloading it from CPA (stored, priority list maintained,
//! added/removed accounts logged) and what a failed listing does (counted, automatic work
//! paused). Used by the round, the single re-read, manual account actions and connection
//! tests; it must not decide anything about the accounts it lists.

use std::collections::HashSet;
use std::sync::Arc;

use super::{JobError, Patrol};
use crate::core::account::{Account, QuotaSnapshot};
use crate::core::oplog::{Category, Level, NewLogEntry, Source};
use crate::core::site::Site;
use crate::cpa::{CpaClient, CpaError};
use crate::store;

/// Reloads the account list from CPA and stores it; logs added/removed accounts.
pub async fn reload_accounts(
    p: &Patrol,
    site: &Site,
    client: &CpaClient,
    source: Source,
) -> Result<Vec<Account>, JobError> {
    let rt = p.runtime(&site.site_id);
    let listing = match client.list_accounts(&site.provider).await {
        Ok(l)
            if l.accounts.is_empty()
                && !rt.accept_empty_listing()
                && known_accounts(p, site).await? > 0 =>
        {
            // A CPA that just restarted may list nothing before its auth files are loaded;
            // dropping every account would lose reasons, streaks and the priority list.
            let e = CpaError::Protocol("CPA listed no accounts although the site had some; listing ignored (accepted when it repeats 3 times)".into());
            p.log(vec![
                NewLogEntry::info(
                    &site.site_id,
                    Category::System,
                    "emptyListing",
                    source,
                    e.to_string(),
                )
                .at_level(Level::Warning),
            ])
            .await;
            return Err(e.into());
        }
        Ok(l) => {
            rt.note_cpa_success();
            rt.reset_empty_listings();
            l
        }
        Err(e) => return Err(listing_failed(p, site, source, e).await),
    };
    let now = p.now();
    let version = client.version();
    let sid = site.site_id.clone();
    let accounts = Arc::new(listing.accounts);
    let shared = accounts.clone();
    let change = p
        .store
        .run(move |c| {
            let ch = store::accounts::replace_listing(c, &sid, &shared, now)?;
            store::passive::save(c, &sid, &passive_rows(&shared), now)?;
            store::sites::set_cpa_contact(c, &sid, now, version.as_deref())?;
            // Priority-list maintenance runs on every reload, routing on or off (docs/rules/patrol.md §6.1).
            let list = store::priorities::load(c, &sid)?;
            let exceptions: HashSet<String> =
                store::accounts::exceptions(c, &sid)?.into_iter().collect();
            let names: Vec<&str> = shared.iter().map(|a| a.name.as_str()).collect();
            let maintained = crate::core::priority::maintain(&list, &names, &exceptions);
            if crate::core::priority::changed(&list, &maintained) {
                store::priorities::replace(c, &sid, &maintained)?;
            }
            Ok(ch)
        })
        .await?;
    let mut logs = Vec::new();
    if !change.added.is_empty() {
        logs.push(NewLogEntry::info(
            &site.site_id,
            Category::Account,
            "accountsAdded",
            source,
            format!(
                "{} new account(s): {}",
                change.added.len(),
                preview(&change.added)
            ),
        ));
    }
    if !change.removed.is_empty() {
        logs.push(NewLogEntry::info(
            &site.site_id,
            Category::Account,
            "accountsRemoved",
            source,
            format!(
                "{} account(s) gone from CPA: {}",
                change.removed.len(),
                preview(&change.removed)
            ),
        ));
    }
    p.log(logs).await;
    Ok(Arc::try_unwrap(accounts).unwrap_or_else(|a| (*a).clone()))
}

/// The usable passive evidence of listed accounts as snapshots to store (docs/rules/patrol.md
/// §4.7); accounts whose listing carries none, or none usable, are left out.
pub(crate) fn passive_rows(accounts: &[Account]) -> Vec<(String, QuotaSnapshot)> {
    accounts
        .iter()
        .filter_map(|a| {
            let snap = crate::core::passive::snapshot(a.passive.as_ref()?)?;
            Some((a.name.clone(), snap))
        })
        .collect()
}

/// The account list as CPA lists it, for a dry run: nothing is stored, counted, paused or
/// logged (docs/patrol.md "What a round does", dry runs). An empty listing while the site knows
/// accounts is refused as [`reload_accounts`] refuses it, without counting towards accepting it.
/// Errors: the listing's CPA error; store failures.
pub async fn read_accounts(
    p: &Patrol,
    site: &Site,
    client: &CpaClient,
) -> Result<Vec<Account>, JobError> {
    let listing = client.list_accounts(&site.provider).await?;
    if listing.accounts.is_empty() && known_accounts(p, site).await? > 0 {
        return Err(CpaError::Protocol(
            "CPA listed no accounts although the site had some; a dry run decides nothing on it"
                .into(),
        )
        .into());
    }
    Ok(listing.accounts)
}

/// A failed listing (full or single): counted, the site's automatic work paused and logged
/// (a refused key is logged and stored when the caller settles the client).
pub(crate) async fn listing_failed(
    p: &Patrol,
    site: &Site,
    source: Source,
    e: CpaError,
) -> JobError {
    metrics::counter!("quota_patrol_cpa_errors_total", "site" => site.site_id.clone(), "endpoint" => "auth-files").increment(1);
    if let Some(until) = p.runtime(&site.site_id).note_cpa_failure(p.now(), &e) {
        p.log(vec![
            NewLogEntry::info(
                &site.site_id,
                Category::System,
                "cpaUnavailable",
                source,
                format!(
                    "{e}; CPA management API failed; automatic work pauses until {}",
                    until.to_rfc3339()
                ),
            )
            .at_level(Level::Error),
        ])
        .await;
    }
    e.into()
}

async fn known_accounts(p: &Patrol, site: &Site) -> Result<usize, JobError> {
    let sid = site.site_id.clone();
    Ok(p.store
        .run(move |c| store::accounts::count(c, &sid))
        .await?)
}

fn preview(names: &[String]) -> String {
    let mut s = names.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > 5 {
        s.push_str(&format!(" and {} more", names.len() - 5));
    }
    s
}
