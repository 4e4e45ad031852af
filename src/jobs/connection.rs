//! A site's connection to its CPA: which management key to use, whether CPA may be called with
//! it (the persisted refused-key gate of `core::key_refusal`), the client, and what the calls
//! taught about the key ([`Patrol::settle_key`]). CPA bans a client IP after 5 refused keys and
//! forgets the count after 2 h idle (docs/rules/cpa.md §1.2): a refused key is tried again automatically
//! at most once per 3 h, whatever restarts, `inspect` runs or settings saves happen meanwhile.

use chrono::{DateTime, Utc};
use secrecy::{ExposeSecret, SecretString};
use serde::Serialize;

use super::{JobError, Patrol};
use crate::core::key_refusal::{self, KeyGate, KeyRefusal, TryReason};
use crate::core::oplog::{Category, Level, NewLogEntry, Source};
use crate::core::site::Site;
use crate::cpa::{CpaClient, CpaConfig};
use crate::store;

/// The refused-key state of a site as the API shows it (`GET /api/inspection/status`,
/// `/readyz`). Never holds the key.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyRefusalView {
    pub first_refused_at: DateTime<Utc>,
    pub refused_at: DateTime<Utc>,
    pub next_automatic_try_at: DateTime<Utc>,
    /// Refused attempts with this key.
    pub attempts: u32,
    /// Refused attempts CPA may still count (each within 2 h of the previous; it bans at 5).
    pub counted_by_cpa: u32,
    /// CPA's answer, e.g. `401 invalid management key`.
    pub cause: String,
    /// An operator asked for one retry that has not happened yet.
    pub retry_requested: bool,
    /// "management key refused at …, next automatic try at …".
    pub detail: String,
}

/// What an operator can do about a refused key of `site_id`.
pub fn advice(site_id: &str) -> String {
    format!(
        "set a new key (PUT /api/settings, config or environment) or ask for one retry (POST /api/settings/sites/{site_id}/retry-connection)"
    )
}

impl KeyRefusalView {
    /// The view of `r`, a refusal of `site_id`'s key.
    pub fn new(site_id: &str, r: &KeyRefusal) -> Self {
        Self {
            first_refused_at: r.first_refused_at,
            refused_at: r.refused_at,
            next_automatic_try_at: r.next_automatic_try_at(),
            attempts: r.attempts,
            cause: format!("{} {}", r.status, r.message),
            counted_by_cpa: r.window_attempts,
            retry_requested: r.retry_requested,
            detail: format!("{}; {}", r.detail(), advice(site_id)),
        }
    }
}

/// The management key of `site`: its environment variable when set and not empty, else the key
/// stored through the API; `NoKey` when neither.
pub fn management_key(site: &Site) -> Result<SecretString, JobError> {
    match &site.management_key_env {
        Some(var) if !var.is_empty() => std::env::var(var)
            .ok()
            .filter(|k| !k.is_empty())
            .map(SecretString::from),
        _ => None,
    }
    .or_else(|| {
        site.management_key
            .clone()
            .filter(|k| !k.expose_secret().is_empty())
    })
    .ok_or_else(|| JobError::NoKey(site.site_id.clone()))
}

/// `core::key_refusal::fingerprint` of the site's effective management key (`NoKey` when none).
pub fn key_fingerprint(site: &Site) -> Result<String, JobError> {
    Ok(key_refusal::fingerprint(
        management_key(site)?.expose_secret(),
    ))
}

/// The error of work that may not call CPA because of the stored refusal `r`.
pub(crate) fn refused(site: &Site, r: &KeyRefusal) -> JobError {
    JobError::KeyRefused {
        site: site.site_id.clone(),
        detail: r.detail(),
        next_try_at: r.next_automatic_try_at(),
        status: r.status,
    }
}

impl Patrol {
    /// The stored refusal of the site's key, if any.
    pub async fn key_refusal(&self, site_id: &str) -> Result<Option<KeyRefusal>, JobError> {
        let sid = site_id.to_string();
        Ok(self
            .store
            .run(move |c| store::key_refusals::get(c, &sid))
            .await?)
    }

    /// Whether CPA may be called with the site's key now, without changing anything (the
    /// scheduler asks before starting work). `Err(KeyRefused)` while the gate is closed.
    pub async fn check_key(&self, site: &Site) -> Result<(), JobError> {
        let fp = key_fingerprint(site)?;
        let stored = self.key_refusal(&site.site_id).await?;
        match (key_refusal::gate(stored.as_ref(), &fp, self.now()), stored) {
            (KeyGate::Closed { .. }, Some(r)) => Err(refused(site, &r)),
            _ => Ok(()),
        }
    }

    /// A CPA client for `site`, sharing the site's concurrency limit and key latch; call
    /// [`Patrol::settle_key`] with it when the work is done.
    ///
    /// Errors: `NoKey`; `KeyRefused` while the key CPA refused is not to be tried (no
    /// automatic try due, no operator retry asked, the key unchanged). A changed key clears
    /// the stored refusal; a due try is claimed in the store before any call, so that two
    /// processes or operations never both spend it.
    pub async fn client(&self, site: &Site) -> Result<CpaClient, JobError> {
        let key = management_key(site)?;
        let fp = key_refusal::fingerprint(key.expose_secret());
        let rt = self.runtime(&site.site_id);
        let now = self.now();
        let sid = site.site_id.clone();
        let fp2 = fp.clone();
        let (gate, stored, recorded_version) = self
            .store
            .run(move |c| {
                let (gate, stored) = store::key_refusals::gate_and_claim(c, &sid, &fp2, now)?;
                Ok((gate, stored, store::sites::runtime(c, &sid)?.cpa_version))
            })
            .await?;
        match gate {
            // `gate` closes only over a stored refusal.
            KeyGate::Closed { .. } => {
                if let Some(r) = &stored {
                    return Err(refused(site, r));
                }
            }
            KeyGate::Open => {
                // Refused in this process but not settled yet (another operation's call).
                if let Some((status, message)) = rt.latch().closed_for(&fp) {
                    let r = KeyRefusal::first(&fp, status, &message, now);
                    return Err(refused(site, &r));
                }
            }
            KeyGate::NewKey => {
                rt.latch().open();
                self.log(vec![NewLogEntry::info(
                    &site.site_id,
                    Category::System,
                    "managementKey",
                    Source::System,
                    "the management key changed: the refused-key state is cleared and the new key is tried",
                )])
                .await;
            }
            KeyGate::TryOnce { why } => {
                rt.latch().open();
                let who = match why {
                    TryReason::Operator => "an operator asked for one retry",
                    TryReason::Automatic => "the automatic retry interval (3 h) passed",
                };
                self.log(vec![NewLogEntry::info(
                    &site.site_id,
                    Category::System,
                    "managementKey",
                    Source::System,
                    format!("trying the refused management key once: {who}"),
                )])
                .await;
            }
        }
        let s = &site.settings;
        let size = s.probe_workers.max(s.action_workers) as usize;
        let cfg = CpaConfig {
            base_url: site.cpa_base_url.clone(),
            management_key: key,
            timeout: std::time::Duration::from_millis(s.timeout_ms),
        };
        Ok(CpaClient::new(cfg, rt.http(), rt.limit(size), rt.latch())?
            .with_recorded_version(recorded_version))
    }

    /// Records what the calls made with `client` said of the key: refused ⇒ the refusal is
    /// stored (attempts counted), logged and the site's CPA counts as failing (alerts);
    /// answered ⇒ a stored refusal of this key is cleared. Returns the refusal when CPA
    /// refused the key during this work (`None` otherwise, e.g. a try that timed out).
    pub async fn settle_key(
        &self,
        site: &Site,
        client: &CpaClient,
    ) -> Result<Option<KeyRefusal>, JobError> {
        let report = self.runtime(&site.site_id).latch().take_report();
        let now = self.now();
        let fp = client.key_fingerprint().to_string();
        let sid = site.site_id.clone();
        match (report.refused, report.last_refusal) {
            (n, Some((status, message))) if n > 0 => {
                self.runtime(&site.site_id).note_key_refused(now);
                let m = message.clone();
                let saved = self
                    .store
                    .run(move |c| {
                        let prev = store::key_refusals::get(c, &sid)?;
                        let mut r = match prev.filter(|r| r.fingerprint == fp) {
                            Some(prev) => prev.again(status, &m, now),
                            None => KeyRefusal::first(&fp, status, &m, now),
                        };
                        r.attempts = r.attempts.saturating_add(n - 1);
                        store::key_refusals::save(c, &sid, &r)?;
                        Ok(r)
                    })
                    .await?;
                metrics::counter!("quota_patrol_management_key_refusals_total", "site" => site.site_id.clone()).increment(u64::from(n));
                self.log(vec![
                    NewLogEntry::info(
                        &site.site_id,
                        Category::System,
                        "managementKey",
                        Source::System,
                        format!(
                            "CPA refused the management key ({status} {message}); {}. Set a new key (PUT /api/settings, config or environment) or ask for one retry (POST /api/settings/sites/{}/retry-connection)",
                            saved.detail(),
                            site.site_id
                        ),
                    )
                    .at_level(Level::Error),
                ])
                .await;
                Ok(Some(saved))
            }
            _ if report.succeeded => {
                let cleared = self
                    .store
                    .run(move |c| match store::key_refusals::get(c, &sid)? {
                        Some(r) if r.fingerprint == fp => store::key_refusals::clear(c, &sid),
                        _ => Ok(false),
                    })
                    .await?;
                if cleared {
                    self.log(vec![NewLogEntry::info(
                        &site.site_id,
                        Category::System,
                        "managementKey",
                        Source::System,
                        "CPA accepted the management key again: the refused-key state is cleared",
                    )])
                    .await;
                }
                Ok(None)
            }
            _ => Ok(None),
        }
    }
}

/// What an operator's retry found (`POST /api/settings/sites/{id}/retry-connection`).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryConnectionResult {
    /// `ok` (CPA accepted the key; automatic work resumes).
    pub status: String,
    /// Accounts CPA listed.
    pub accounts: usize,
    pub cpa_version: Option<String>,
}

/// One operator-requested try of the site's key: marks the stored refusal for one retry, lists
/// the auth files once (exactly one management call), and settles. `KeyRefused` when CPA
/// refused again; `Busy` while a round runs (it would make its own calls).
pub async fn retry_connection(
    p: &Patrol,
    site_id: &str,
) -> Result<RetryConnectionResult, JobError> {
    let site = p.site(site_id).await?;
    let rt = p.runtime(site_id);
    let _guard = rt.begin(site_id)?;
    request_key_retry(p, site_id).await?;
    let client = p.client(&site).await?;
    let listed = super::listing::reload_accounts(p, &site, &client, Source::Manual).await;
    let stored = p.settle_key(&site, &client).await?;
    match (listed, stored) {
        (Ok(accounts), _) => Ok(RetryConnectionResult {
            status: "ok".into(),
            accounts: accounts.len(),
            cpa_version: client.version(),
        }),
        (Err(_), Some(r)) => Err(refused(&site, &r)),
        (Err(e), None) => Err(e),
    }
}

/// Marks the stored refusal for one try by the next operation (`retry-connection`,
/// `inspect --retry-key`). Returns whether a refusal was stored.
///
/// Errors: `KeyRefused` when one more refused attempt with the same key would be the 5th
/// failure CPA still counts (each within 2 h of the previous): CPA would then ban this host
/// for 30 min, the CPA web UI on it included. The detail says when a retry is safe again.
pub async fn request_key_retry(p: &Patrol, site_id: &str) -> Result<bool, JobError> {
    let site = p.site(site_id).await?;
    let now = p.now();
    let fp = key_fingerprint(&site)?;
    if let Some(r) = p.key_refusal(site_id).await?
        && r.fingerprint == fp
        && r.retry_would_ban(now)
    {
        return Err(JobError::KeyRefused {
            site: site.site_id.clone(),
            detail: format!(
                "retry refused: CPA still counts {} refused attempt(s) of this key and bans this host at {}; a retry is safe from {} (or set a new key)",
                r.counted_by_cpa(now),
                key_refusal::CPA_BANS_AT,
                r.safe_retry_at().to_rfc3339()
            ),
            next_try_at: r.next_automatic_try_at(),
            status: r.status,
        });
    }
    let sid = site_id.to_string();
    Ok(p.store
        .run(move |c| store::key_refusals::request_retry(c, &sid))
        .await?)
}
