//! Confirming quota-patrol's writes to CPA (docs/rules/patrol.md §11.2): every successful status and
//! priority patch is recorded (`store::writes`), compared with the listing re-read after it
//! (a mismatch is re-applied once, counted in `quota_patrol_cpa_write_drift_total{site,kind}`
//! and logged as a warning: CPA #5967 answered "ok" without applying), and compared again at the
//! start of every acting round: a value CPA itself lost (token refresh, CPA #5465/#5528) is
//! repaired, a person's change is adopted and logged (rule: `core::writes::classify`). Also the
//! single-account re-read through `GET /auth-files?name=` (CPA ≥ v7.2.94).

use std::collections::HashMap;

use super::{JobError, Patrol};
use crate::core::account::Account;
use crate::core::oplog::{Category, Level, NewLogEntry, Source};
use crate::core::site::Site;
use crate::core::writes::{self, Drift, LastWrite, WriteKind};
use crate::cpa::{CpaClient, CpaError};
use crate::store;

/// One value quota-patrol wrote to CPA successfully.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub name: String,
    pub kind: WriteKind,
    /// `disabled`: 1/0; `priority`: the priority.
    pub value: i64,
    /// The probed file's `auth_index`, sent as the status-patch guard on CPA v7.2.x.
    pub auth_index: Option<String>,
}

impl Written {
    /// A successful status patch.
    pub fn status(name: &str, disabled: bool, auth_index: Option<&str>) -> Self {
        Self {
            name: name.to_string(),
            kind: WriteKind::Disabled,
            value: i64::from(disabled),
            auth_index: auth_index.map(str::to_string),
        }
    }

    /// A successful priority patch.
    pub fn priority(name: &str, priority: i64) -> Self {
        Self {
            name: name.to_string(),
            kind: WriteKind::Priority,
            value: priority,
            auth_index: None,
        }
    }

    async fn apply(&self, client: &CpaClient) -> Result<(), CpaError> {
        match self.kind {
            WriteKind::Disabled => {
                client
                    .set_status(&self.name, self.value != 0, self.auth_index.as_deref())
                    .await
            }
            WriteKind::Priority => client.set_priority(&self.name, self.value).await,
        }
    }

    fn describe(&self) -> String {
        match self.kind {
            WriteKind::Disabled => format!("disabled={}", self.value != 0),
            WriteKind::Priority => format!("priority={}", self.value),
        }
    }
}

/// Persists `written` as the last values quota-patrol wrote (store failures are logged only:
/// the write itself happened).
pub async fn record(p: &Patrol, site_id: &str, written: &[Written]) {
    if written.is_empty() {
        return;
    }
    let (sid, w, now) = (site_id.to_string(), written.to_vec(), p.now());
    let res = p
        .store
        .run(move |c| {
            let tx = c.transaction()?;
            for x in &w {
                store::writes::record(&tx, &sid, &x.name, x.kind, x.value, now)?;
            }
            tx.commit()?;
            Ok(())
        })
        .await;
    if let Err(e) = res {
        tracing::warn!(site = site_id, error = %e, "cannot record CPA writes");
    }
}

/// Compares what was just written with `listed` (name, `disabled` as 0/1 or priority) as CPA
/// answers right after; each mismatch is counted, logged and re-applied once. Returns how many
/// were re-applied successfully (the caller re-reads CPA when > 0).
pub async fn confirm(
    p: &Patrol,
    site: &Site,
    client: &CpaClient,
    written: &[Written],
    listed: &HashMap<String, i64>,
    source: Source,
) -> usize {
    // Re-applying is a new write to CPA: none after the stop signal.
    if p.is_shutting_down() {
        return 0;
    }
    let mut logs = Vec::new();
    let mut again = Vec::new();
    for w in written {
        let Some(&now_listed) = listed.get(&w.name) else {
            continue; // gone (deleted meanwhile): nothing to confirm
        };
        if now_listed == w.value {
            continue;
        }
        count_drift(site, w.kind);
        let res = w.apply(client).await;
        let msg = format!(
            "CPA answered ok to {} {} but lists {}={}; re-applied once: {}",
            w.name,
            w.describe(),
            w.kind.as_str(),
            now_listed,
            match &res {
                Ok(()) => "ok".to_string(),
                Err(e) => format!("failed: {e}"),
            }
        );
        logs.push(drift_log(site, &w.name, source, msg));
        if res.is_ok() {
            again.push(w.clone());
        }
    }
    record(p, &site.site_id, &again).await;
    p.log(logs).await;
    again.len()
}

/// `listed` values of `accounts` for `kind`, by name (input of [`confirm`]).
pub fn listed_values(accounts: &[Account], kind: WriteKind) -> HashMap<String, i64> {
    accounts
        .iter()
        .map(|a| (a.name.clone(), kind.listed(a)))
        .collect()
}

fn count_drift(site: &Site, kind: WriteKind) {
    metrics::counter!("quota_patrol_cpa_write_drift_total", "site" => site.site_id.clone(), "kind" => kind.as_str()).increment(1);
}

fn drift_log(site: &Site, name: &str, source: Source, msg: String) -> NewLogEntry {
    NewLogEntry::info(&site.site_id, Category::Account, "writeDrift", source, msg)
        .at_level(Level::Warning)
        .for_account(name)
}

/// Start of an acting round: compares `accounts` (just listed) with the stored last writes.
/// CPA drift ([`Drift::ByCpa`]) is repaired (re-written, counted, logged as a warning) and
/// `accounts` updated so the round decides on the repaired values; a person's change
/// ([`Drift::External`]) is adopted: the stored write is forgotten and the change logged.
/// Records of accounts CPA no longer lists are dropped — only when `accounts` is the whole
/// listing (`full_listing`), never after a single-account re-read. Never fails the round; does
/// nothing after the stop signal (repairs are writes).
pub async fn repair_drift(
    p: &Patrol,
    site: &Site,
    client: &CpaClient,
    accounts: &mut [Account],
    full_listing: bool,
    source: Source,
) {
    if p.is_shutting_down() {
        return;
    }
    let sid = site.site_id.clone();
    let names: Vec<String> = accounts.iter().map(|a| a.name.clone()).collect();
    let loaded = p
        .store
        .run(move |c| {
            if full_listing {
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                store::writes::prune(c, &sid, &refs)?;
            }
            store::writes::load(c, &sid)
        })
        .await;
    let stored = match loaded {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(site = %site.site_id, error = %e, "cannot load recorded CPA writes");
            return;
        }
    };
    let by_name: HashMap<String, usize> = accounts
        .iter()
        .enumerate()
        .map(|(i, a)| (a.name.clone(), i))
        .collect();
    let mut logs = Vec::new();
    let (mut repaired, mut adopted, mut changed) = (Vec::new(), Vec::new(), Vec::new());
    for w in &stored {
        let Some(&i) = by_name.get(&w.account_name) else {
            continue;
        };
        if site.quota_policy(&w.account_name).never_act {
            // Observe only (docs/rules/patrol.md §9): a lost value is not written back either.
            continue;
        }
        let account = &accounts[i];
        match writes::classify(w, account) {
            Drift::InSync => {}
            Drift::ByCpa => {
                let (entry, redo) = repair_one(site, client, w, account, source).await;
                logs.push(entry);
                if let Some(redo) = redo {
                    changed.push((i, w.kind, w.value));
                    repaired.push(redo);
                }
            }
            Drift::External => {
                logs.push(adopted_log(site, w, account, source));
                adopted.push((w.account_name.clone(), w.kind));
            }
        }
    }
    for (i, kind, value) in changed {
        match kind {
            WriteKind::Disabled => accounts[i].disabled = value != 0,
            WriteKind::Priority => accounts[i].cpa_priority = value,
        }
    }
    let saved: Vec<Account> = repaired
        .iter()
        .filter_map(|w| by_name.get(&w.name).map(|&i| accounts[i].clone()))
        .collect();
    record(p, &site.site_id, &repaired).await;
    let sid = site.site_id.clone();
    let res = p
        .store
        .run(move |c| {
            for (name, kind) in &adopted {
                store::writes::forget(c, &sid, name, *kind)?;
            }
            for a in &saved {
                store::accounts::save_account(c, &sid, a)?;
            }
            Ok(())
        })
        .await;
    if let Err(e) = res {
        tracing::warn!(site = %site.site_id, error = %e, "cannot store drift results");
    }
    p.log(logs).await;
}

/// Re-writes a value CPA lost; returns the log entry and the write when it succeeded.
async fn repair_one(
    site: &Site,
    client: &CpaClient,
    w: &LastWrite,
    account: &Account,
    source: Source,
) -> (NewLogEntry, Option<Written>) {
    count_drift(site, w.kind);
    let redo = Written {
        name: w.account_name.clone(),
        kind: w.kind,
        value: w.value,
        auth_index: account.auth_index.clone(),
    };
    let res = redo.apply(client).await;
    let entry = drift_log(
        site,
        &w.account_name,
        source,
        format!(
            "CPA lost {} of {} (back to its default after a token refresh at {}); repaired: {}",
            redo.describe(),
            w.account_name,
            account
                .last_refresh
                .map(|t| t.to_rfc3339())
                .unwrap_or_default(),
            match &res {
                Ok(()) => "ok".to_string(),
                Err(e) => format!("failed: {e}"),
            }
        ),
    );
    (entry, res.is_ok().then_some(redo))
}

fn adopted_log(site: &Site, w: &LastWrite, account: &Account, source: Source) -> NewLogEntry {
    NewLogEntry::info(
        &site.site_id,
        Category::Account,
        "externalChange",
        source,
        format!(
            "{} of {} was changed in CPA since quota-patrol wrote {} at {} (now {}); a person's change: adopted, not overridden",
            w.kind.as_str(),
            w.account_name,
            w.value,
            w.written_at.to_rfc3339(),
            w.kind.listed(account)
        ),
    )
    .for_account(&w.account_name)
}

/// The accounts a round works on: a single-account round re-reads just that account
/// ([`reload_one`]), any other the whole listing; an acting round then repairs CPA's drift
/// ([`repair_drift`]) before anything is decided.
pub async fn round_accounts(
    p: &Patrol,
    site: &Site,
    client: &CpaClient,
    single: Option<&str>,
    acting: bool,
    source: Source,
) -> Result<Vec<Account>, JobError> {
    let mut accounts = match single {
        Some(name) => reload_one(p, site, client, name, source).await?,
        None => super::listing::reload_accounts(p, site, client, source).await?,
    };
    if acting {
        repair_drift(p, site, client, &mut accounts, single.is_none(), source).await;
    }
    Ok(accounts)
}

/// Re-reads one account for a single-account round. On CPA ≥ v7.2.94 (the version stored at
/// the last contact, until CPA answers) it asks `GET /auth-files?name=` and updates only that
/// account; the answer is searched for the exact name, so a build that ignores the filter
/// (and lists everything) is tolerated. Older or unknown builds, and accounts not stored yet,
/// take the full reload ([`super::listing::reload_accounts`]). Returns the account (empty when
/// CPA does not list it).
pub async fn reload_one(
    p: &Patrol,
    site: &Site,
    client: &CpaClient,
    name: &str,
    source: Source,
) -> Result<Vec<Account>, JobError> {
    let (sid, n) = (site.site_id.clone(), name.to_string());
    let (runtime, known) = p
        .store
        .run(move |c| {
            let known = store::accounts::exists(c, &sid, &n)?;
            Ok((store::sites::runtime(c, &sid)?, known))
        })
        .await?;
    client.assume_version(runtime.cpa_version.as_deref());
    if !known || !client.cpa_version().has_list_filters() {
        return super::listing::reload_accounts(p, site, client, source).await;
    }
    let found = match client.get_account(&site.provider, name).await {
        Ok((found, _)) => found,
        Err(e) => return Err(super::listing::listing_failed(p, site, source, e).await),
    };
    p.runtime(&site.site_id).note_cpa_success();
    let (sid, now, version) = (site.site_id.clone(), p.now(), client.version());
    let saved = found.clone();
    p.store
        .run(move |c| {
            if let Some(a) = &saved {
                store::accounts::save_account(c, &sid, a)?;
                let rows = super::listing::passive_rows(std::slice::from_ref(a));
                store::passive::save(c, &sid, &rows, now)?;
            }
            store::sites::set_cpa_contact(c, &sid, now, version.as_deref())
        })
        .await?;
    Ok(found.into_iter().collect())
}

/// The successful status patches among `outcomes` (enable ⇒ `disabled=0`, disable ⇒ 1), with
/// the `auth_index` of each account from `indices`.
pub fn status_writes(
    outcomes: &[crate::core::report::ActionOutcome],
    indices: &HashMap<String, Option<String>>,
) -> Vec<Written> {
    use crate::core::inspect::Action;
    outcomes
        .iter()
        .filter(|o| o.success)
        .filter_map(|o| {
            let disabled = match o.action {
                Action::Enable => false,
                Action::Disable => true,
                _ => return None,
            };
            let index = indices.get(&o.account_name).cloned().flatten();
            Some(Written::status(&o.account_name, disabled, index.as_deref()))
        })
        .collect()
}

/// After status patches: records them, re-reads CPA, re-applies any mismatch once and re-reads
/// again when something was re-applied, so local state matches CPA (docs/rules/patrol.md §5).
pub async fn reread_after_status_writes(
    p: &Patrol,
    site: &Site,
    client: &CpaClient,
    written: &[Written],
    source: Source,
) -> Result<Vec<Account>, JobError> {
    record(p, &site.site_id, written).await;
    let listed = super::listing::reload_accounts(p, site, client, source).await?;
    let values = listed_values(&listed, WriteKind::Disabled);
    if confirm(p, site, client, written, &values, source).await > 0 {
        return super::listing::reload_accounts(p, site, client, source).await;
    }
    Ok(listed)
}
