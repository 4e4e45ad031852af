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
            publish_cpa_state(&site.site_id, &rt, client.version().as_deref(), None);
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
    if e.is_unsupported() {
        return unsupported(p, site, source, e).await;
    }
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

/// A management answer saying this CPA cannot be used (`CpaError::is_unsupported`: an 8.x CPA
/// that dropped `/v0`, management off or a cluster node; docs/rules/cpa.md §11), from the
/// listing or a probe: the site backs off like after any management failure, the state is
/// kept for the status views and metrics, the version an 8.x reported is stored, and one
/// clear line is logged (the round that meets it logs nothing more, `inspect::settle`).
/// Never a key failure; nothing is acted on.
pub(crate) async fn unsupported(p: &Patrol, site: &Site, source: Source, e: CpaError) -> JobError {
    let rt = p.runtime(&site.site_id);
    let until = rt.note_cpa_failure(p.now(), &e);
    let version = match &e {
        CpaError::V0Dropped { version } => Some(version.clone()),
        _ => None,
    };
    publish_cpa_state(&site.site_id, &rt, version.as_deref(), Some(&e));
    if let Some(v) = version {
        let sid = site.site_id.clone();
        if let Err(err) = p
            .store
            .run(move |c| store::sites::set_cpa_version(c, &sid, &v))
            .await
        {
            tracing::error!(error = %err, "cannot store the CPA version");
        }
    }
    let pause = until
        .map(|u| format!("; automatic work pauses until {}", u.to_rfc3339()))
        .unwrap_or_default();
    p.log(vec![
        NewLogEntry::info(
            &site.site_id,
            Category::System,
            "cpaUnsupported",
            source,
            format!("{e}; no account is acted on{pause}"),
        )
        .at_level(Level::Error),
    ])
    .await;
    e.into()
}

/// Publishes the site's CPA state as gauges: `quota_patrol_cpa_info{site,version}` 1 for the
/// version last reported (the one it replaces goes to 0) and
/// `quota_patrol_cpa_unsupported{site,kind}` 1 for the kind `unsupported` names, 0 for the
/// other kinds (docs/operations.md "Metrics").
pub(crate) fn publish_cpa_state(
    site_id: &str,
    rt: &super::SiteRuntime,
    version: Option<&str>,
    unsupported: Option<&CpaError>,
) {
    if let Some(v) = version
        && let Some(old) = rt.swap_version_shown(v)
    {
        if let Some(old) = old {
            metrics::gauge!("quota_patrol_cpa_info", "site" => site_id.to_string(), "version" => old)
                .set(0.0);
        }
        metrics::gauge!("quota_patrol_cpa_info", "site" => site_id.to_string(), "version" => v.to_string())
            .set(1.0);
    }
    let kind = unsupported.and_then(CpaError::unsupported_kind);
    for k in ["v0Dropped", "managementOff"] {
        metrics::gauge!("quota_patrol_cpa_unsupported", "site" => site_id.to_string(), "kind" => k)
            .set(if kind == Some(k) { 1.0 } else { 0.0 });
    }
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use metrics_exporter_prometheus::PrometheusBuilder;

    use super::*;
    use crate::jobs::SiteRuntime;
    use crate::random::FixedRandom;

    #[test]
    fn the_cpa_gauges_carry_the_version_and_the_unsupported_kind() {
        let rt = SiteRuntime::new(Arc::new(FixedRandom::new(0.0)));
        let recorder = PrometheusBuilder::new().build_recorder();
        metrics::with_local_recorder(&recorder, || {
            publish_cpa_state("s1", &rt, Some("v7.2.140"), None);
            let dropped = CpaError::V0Dropped {
                version: "v8.0.3".into(),
            };
            publish_cpa_state("s1", &rt, Some("v8.0.3"), Some(&dropped));
        });
        let text = recorder.handle().render();
        for line in [
            r#"quota_patrol_cpa_info{site="s1",version="v7.2.140"} 0"#,
            r#"quota_patrol_cpa_info{site="s1",version="v8.0.3"} 1"#,
            r#"quota_patrol_cpa_unsupported{site="s1",kind="v0Dropped"} 1"#,
            r#"quota_patrol_cpa_unsupported{site="s1",kind="managementOff"} 0"#,
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        metrics::with_local_recorder(&recorder, || {
            publish_cpa_state("s1", &rt, None, Some(&CpaError::ManagementOff));
        });
        let text = recorder.handle().render();
        assert!(text.contains(r#"quota_patrol_cpa_unsupported{site="s1",kind="managementOff"} 1"#));
        assert!(text.contains(r#"quota_patrol_cpa_unsupported{site="s1",kind="v0Dropped"} 0"#));
        assert!(
            text.contains(r#"quota_patrol_cpa_info{site="s1",version="v8.0.3"} 1"#),
            "no version on the answer keeps the last one"
        );
    }
}
