//! The router's admin use cases (docs/rules/router.md §4–§5, docs/rules/api.md §6): composes the store
//! (`store::router`) with the running router, seen through [`RouterControl`]. Owns the merge of
//! the router spec (the config file's `[router]` part ∪ the API-owned stored part), the
//! ownership rule (config-owned entries are read-only here: 409), validation of every change on
//! the merged spec before it is stored, client-key creation (shown once, stored hashed) and
//! revocation, the usage writer task and the usage read model. It never routes a request and
//! never reads the upstream keys back out to a caller.

use std::collections::HashSet;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use rusqlite::Connection;
use secrecy::SecretString;
use serde::{Deserialize, Serialize};

use super::{JobError, Patrol};
use crate::core::router::{
    ChainSpec, Leg, PoolSpec, RouterSpec, SpecSource, UpstreamAccount, UsageRecord, key_hash,
};
use crate::core::usage::{MinuteKey, UsageSums, UsageTally};
use crate::router::UsageQueue;
use crate::store::router as db;
use crate::store::{Store, StoreError};

/// What the admin API needs from the running router (C's `RouterHandle` implements it; the impl
/// is written at merge). Every method is cheap and non-blocking.
pub trait RouterControl: Send + Sync {
    /// Replaces the accepted client-key hashes (hex SHA-256, `core::router::key_hash`).
    fn set_keys(&self, hashes: HashSet<String>);
    /// Validates `spec` and rebuilds the lanes; `Err` lists every problem (spec unchanged).
    fn reload(&self, spec: RouterSpec) -> Result<(), Vec<String>>;
    /// `GET /api/router/status`: pools, accounts, cooldowns, bindings, counters (camelCase JSON).
    fn status_json(&self) -> serde_json::Value;
    /// `GET /api/router/preview`: per leg the ranking and the exclusions; `Err` = unknown model
    /// (or another reason the preview cannot be made), as a sentence.
    fn preview_json(
        &self,
        model: &str,
        session_key: Option<&str>,
    ) -> Result<serde_json::Value, String>;
}

impl RouterControl for crate::router::RouterHandle {
    fn set_keys(&self, hashes: HashSet<String>) {
        crate::router::RouterHandle::set_keys(self, hashes);
    }

    fn reload(&self, spec: RouterSpec) -> Result<(), Vec<String>> {
        crate::router::RouterHandle::reload(self, spec)
    }

    fn status_json(&self) -> serde_json::Value {
        serde_json::to_value(self.status()).unwrap_or_default()
    }

    fn preview_json(
        &self,
        model: &str,
        session_key: Option<&str>,
    ) -> Result<serde_json::Value, String> {
        self.preview(model, session_key)
            .map(|p| serde_json::to_value(p).unwrap_or_default())
            .map_err(|e| e.to_string())
    }
}

/// The admin side of a running router: its control, the config file's part of the spec, and
/// a lock that makes admin changes (read, validate, store, reload) one at a time.
pub struct RouterAdmin {
    control: Arc<dyn RouterControl>,
    config_part: RouterSpec,
    changes: tokio::sync::Mutex<()>,
}

impl RouterAdmin {
    /// The admin side of the router behind `control`, whose config file declared `config_part`
    /// (every entry with `source: Config`).
    pub fn new(control: Arc<dyn RouterControl>, config_part: RouterSpec) -> Self {
        Self {
            control,
            config_part,
            changes: tokio::sync::Mutex::new(()),
        }
    }

    /// The running router.
    pub fn control(&self) -> &Arc<dyn RouterControl> {
        &self.control
    }

    /// The config file's part of the spec.
    pub fn config_part(&self) -> &RouterSpec {
        &self.config_part
    }
}

/// The spec the router runs (docs/rules/router.md §4): the config file's part (source Config) ∪ the
/// stored part (source Api). A stored entry with the id of a config entry (the file declared
/// it later) is shadowed: the config wins and a warning is logged. A stored account whose key
/// lives in an environment variable gets it resolved now (`None` when unset).
///
/// Errors: the store fails or holds invalid JSON.
pub async fn load_spec(store: &Store, config_part: &RouterSpec) -> Result<RouterSpec, StoreError> {
    let (pools, accounts, chains) = store
        .run(|c| Ok((db::pools(c)?, db::accounts(c)?, db::chains(c)?)))
        .await?;
    Ok(merge(config_part, pools, accounts, chains))
}

fn merge(
    config_part: &RouterSpec,
    pools: Vec<PoolSpec>,
    accounts: Vec<UpstreamAccount>,
    chains: Vec<ChainSpec>,
) -> RouterSpec {
    let mut spec = config_part.clone();
    for p in pools {
        if spec.pools.iter().any(|c| c.id == p.id) {
            tracing::warn!(pool = %p.id, "stored router pool shadowed by the config file's");
        } else {
            spec.pools.push(p);
        }
    }
    for mut a in accounts {
        if spec
            .accounts
            .iter()
            .any(|c| c.pool == a.pool && c.id == a.id)
        {
            tracing::warn!(pool = %a.pool, account = %a.id, "stored router account shadowed by the config file's");
            continue;
        }
        if a.api_key.is_none() {
            a.api_key = a
                .api_key_env
                .as_deref()
                .and_then(|v| std::env::var(v).ok())
                .filter(|k| !k.is_empty())
                .map(SecretString::from);
        }
        spec.accounts.push(a);
    }
    for ch in chains {
        if spec.chains.iter().any(|c| c.name == ch.name) {
            tracing::warn!(chain = %ch.name, "stored router chain shadowed by the config file's");
        } else {
            spec.chains.push(ch);
        }
    }
    spec
}

/// Key hashes the router accepts (every key not revoked), for `RouterControl::set_keys`.
///
/// Errors: the store fails.
pub async fn load_key_hashes(store: &Store) -> Result<HashSet<String>, StoreError> {
    store.run(|c| db::active_key_hashes(c)).await
}

/// Hands the router the stored spec and key hashes (app start, after building the router).
///
/// Errors: the store fails; the router refuses the spec (`Invalid`, every problem).
pub async fn sync(p: &Patrol, admin: &RouterAdmin) -> Result<(), JobError> {
    reload(p, admin).await?;
    admin.control.set_keys(load_key_hashes(&p.store).await?);
    Ok(())
}

async fn reload(p: &Patrol, admin: &RouterAdmin) -> Result<(), JobError> {
    let spec = load_spec(&p.store, &admin.config_part).await?;
    admin.control.reload(spec).map_err(JobError::InvalidSpec)
}

/// The running router's admin side; [`JobError::RouterDisabled`] without `[router]`.
pub fn admin(p: &Patrol) -> Result<Arc<RouterAdmin>, JobError> {
    p.router_admin().ok_or(JobError::RouterDisabled)
}

// ---------------------------------------------------------------------------------------------
// Views and inputs of the admin API.

fn source_name(s: SpecSource) -> String {
    match s {
        SpecSource::Config => "config".into(),
        SpecSource::Api => "api".into(),
    }
}

/// A pool as the admin API shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouterPool {
    pub id: String,
    pub models: Vec<String>,
    /// `config` (read-only here: edit the file) or `api`.
    pub source: String,
}

/// Create (`POST`: `id` required) or replace (`PUT`: the path's id wins) an API-owned pool.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouterPoolInput {
    pub id: Option<String>,
    /// Upstream model names the pool serves.
    pub models: Vec<String>,
}

/// An upstream account as the admin API shows it: never its key.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouterAccount {
    pub pool: String,
    pub id: String,
    pub base_url: String,
    /// Whether the router has a key for it (stored, or its environment variable is set).
    pub api_key_set: bool,
    /// The environment variable the key is read from, when it is one.
    pub api_key_env: Option<String>,
    /// Lower is tried first.
    pub tier: u32,
    pub weight: Option<u32>,
    /// Empty = every model of the pool.
    pub models: Vec<String>,
    /// Linked quota-patrol site.
    pub site: Option<String>,
    pub enabled: bool,
    /// `config` or `api`.
    pub source: String,
}

impl RouterAccount {
    fn of(a: &UpstreamAccount) -> Self {
        Self {
            pool: a.pool.clone(),
            id: a.id.clone(),
            base_url: a.base_url.clone(),
            api_key_set: a.api_key.is_some(),
            api_key_env: a.api_key_env.clone(),
            tier: a.tier,
            weight: a.weight,
            models: a.models.clone(),
            site: a.site.clone(),
            enabled: a.enabled,
            source: source_name(a.source),
        }
    }
}

/// Create (`POST`: `pool` and `id` required) or replace (`PUT`: the path's pool and id win) an
/// API-owned upstream account. `apiKey` is stored (the router must send it) and never shown;
/// `apiKeyEnv` names an environment variable instead; on `PUT`, giving neither keeps the key.
/// Not `Debug`: it carries the key.
#[derive(Clone, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouterAccountInput {
    pub pool: Option<String>,
    pub id: Option<String>,
    /// OpenAI-compatible base URL up to `/v1`.
    pub base_url: String,
    pub api_key: Option<String>,
    pub api_key_env: Option<String>,
    /// Default 1 (tried first).
    pub tier: Option<u32>,
    pub weight: Option<u32>,
    /// Default: every model of the pool.
    pub models: Option<Vec<String>>,
    pub site: Option<String>,
    /// Default true.
    pub enabled: Option<bool>,
}

/// One leg of a chain.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouterLeg {
    pub pool: String,
    pub model: String,
}

/// A chain as the admin API shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouterChain {
    /// The model name clients ask for.
    pub name: String,
    pub legs: Vec<RouterLeg>,
    /// `config` or `api`.
    pub source: String,
}

/// Create (`POST`: `name` required) or replace (`PUT`: the path's name wins) an API-owned chain.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouterChainInput {
    pub name: Option<String>,
    pub legs: Vec<RouterLeg>,
}

/// The router spec as the admin API shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouterSpecView {
    pub pools: Vec<RouterPool>,
    pub accounts: Vec<RouterAccount>,
    pub chains: Vec<RouterChain>,
}

/// The merged spec (config then API entries), as shown (no key).
///
/// Errors: router disabled; the store fails.
pub async fn spec_view(p: &Patrol) -> Result<RouterSpecView, JobError> {
    let admin = admin(p)?;
    let spec = load_spec(&p.store, &admin.config_part).await?;
    Ok(RouterSpecView {
        pools: spec
            .pools
            .iter()
            .map(|x| RouterPool {
                id: x.id.clone(),
                models: x.models.clone(),
                source: source_name(x.source),
            })
            .collect(),
        accounts: spec.accounts.iter().map(RouterAccount::of).collect(),
        chains: spec
            .chains
            .iter()
            .map(|c| RouterChain {
                name: c.name.clone(),
                legs: c
                    .legs
                    .iter()
                    .map(|l| RouterLeg {
                        pool: l.pool.clone(),
                        model: l.model.clone(),
                    })
                    .collect(),
                source: source_name(c.source),
            })
            .collect(),
    })
}

// ---------------------------------------------------------------------------------------------
// Changes: read, check ownership, validate the merged spec, store, reload.

type StoreOp = Box<dyn FnOnce(&mut Connection) -> Result<(), StoreError> + Send>;

/// The state a change is decided on: the merged spec and the stored accounts (their own key
/// and variable, before the environment is read).
struct Current {
    spec: RouterSpec,
    stored_accounts: Vec<UpstreamAccount>,
}

/// One admin change, serialised with the others: `edit` turns the current state into the
/// candidate spec and the store write; the candidate must have no problem (else
/// `InvalidSpec`, nothing stored); after the write the router reloads the stored spec.
async fn change(
    p: &Patrol,
    edit: impl FnOnce(Current) -> Result<(RouterSpec, StoreOp), JobError>,
) -> Result<(), JobError> {
    let admin = admin(p)?;
    let _one_at_a_time = admin.changes.lock().await;
    let (pools, accounts, chains) = p
        .store
        .run(|c| Ok((db::pools(c)?, db::accounts(c)?, db::chains(c)?)))
        .await?;
    let current = Current {
        spec: merge(&admin.config_part, pools, accounts.clone(), chains),
        stored_accounts: accounts,
    };
    let (candidate, op) = edit(current)?;
    let problems = candidate.problems();
    if !problems.is_empty() {
        return Err(JobError::InvalidSpec(problems));
    }
    p.store.run(op).await?;
    reload(p, &admin).await
}

/// 409 for a config-owned entry, else whether an API-owned one exists.
fn owner(found: Option<SpecSource>, what: &str) -> Result<bool, JobError> {
    match found {
        Some(SpecSource::Config) => Err(JobError::Conflict(format!(
            "{what} is declared in the config file (edit the file to change it)"
        ))),
        Some(SpecSource::Api) => Ok(true),
        None => Ok(false),
    }
}

/// Checks a create (`create`: must not exist) or an update/delete (must exist).
fn check(found: Option<SpecSource>, what: &str, create: bool) -> Result<(), JobError> {
    match (owner(found, what)?, create) {
        (true, true) => Err(JobError::Conflict(format!("{what} exists already"))),
        (false, false) => Err(JobError::NotFound(format!("{what} not found"))),
        _ => Ok(()),
    }
}

fn required(v: Option<String>, field: &str) -> Result<String, JobError> {
    v.map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| JobError::Invalid(vec![format!("{field} is required")]))
}

/// Creates (`id = None`: from the body) or replaces (`Some(path id)`) an API-owned pool, or
/// deletes it (`input = None`). Errors: router disabled; 409 config-owned or (create) existing;
/// 404 (update/delete) absent; `InvalidSpec` when the merged spec would have problems (e.g. a
/// deleted pool still has accounts or chain legs); the store fails; the router refuses.
pub async fn save_pool(
    p: &Patrol,
    id: Option<&str>,
    input: Option<RouterPoolInput>,
) -> Result<(), JobError> {
    let create = id.is_none();
    let id = match (id, &input) {
        (Some(id), _) => id.to_string(),
        (None, Some(i)) => required(i.id.clone(), "id")?,
        (None, None) => return Err(JobError::Invalid(vec!["id is required".into()])),
    };
    let now = p.now();
    change(p, move |cur| {
        let mut spec = cur.spec;
        let what = format!("router pool {id:?}");
        check(
            spec.pools.iter().find(|x| x.id == id).map(|x| x.source),
            &what,
            create,
        )?;
        spec.pools.retain(|x| x.id != id);
        let op: StoreOp = match input {
            Some(i) => {
                let pool = PoolSpec {
                    id: id.clone(),
                    models: i.models,
                    source: SpecSource::Api,
                };
                spec.pools.push(pool.clone());
                Box::new(move |c| db::save_pool(c, &pool, now))
            }
            None => Box::new(move |c| db::delete_pool(c, &id).map(drop)),
        };
        Ok((spec, op))
    })
    .await
}

/// Creates (`key = None`: pool and id from the body) or replaces (`Some((pool, id))` of the
/// path) an API-owned upstream account, or deletes it (`input = None`). Errors as
/// [`save_pool`]; 400 when both `apiKey` and `apiKeyEnv` are given.
pub async fn save_account(
    p: &Patrol,
    key: Option<(&str, &str)>,
    input: Option<RouterAccountInput>,
) -> Result<(), JobError> {
    let create = key.is_none();
    let (pool, id) = match (key, &input) {
        (Some((p, i)), _) => (p.to_string(), i.to_string()),
        (None, Some(i)) => (
            required(i.pool.clone(), "pool")?,
            required(i.id.clone(), "id")?,
        ),
        (None, None) => return Err(JobError::Invalid(vec!["pool and id are required".into()])),
    };
    let blank = |s: &Option<String>| s.as_deref().is_none_or(|s| s.trim().is_empty());
    if let Some(i) = &input
        && !blank(&i.api_key)
        && !blank(&i.api_key_env)
    {
        return Err(JobError::Invalid(vec![
            "give apiKey or apiKeyEnv, not both".into(),
        ]));
    }
    let now = p.now();
    change(p, move |cur| {
        let mut spec = cur.spec;
        let what = format!("router account {id:?} of pool {pool:?}");
        let found = spec.accounts.iter().find(|a| a.pool == pool && a.id == id);
        check(found.map(|a| a.source), &what, create)?;
        spec.accounts.retain(|a| !(a.pool == pool && a.id == id));
        let Some(i) = input else {
            return Ok((
                spec,
                Box::new(move |c: &mut Connection| db::delete_account(c, &pool, &id).map(drop))
                    as StoreOp,
            ));
        };
        let stored = cur
            .stored_accounts
            .iter()
            .find(|a| a.pool == pool && a.id == id);
        let (api_key, api_key_env) = if !blank(&i.api_key) {
            (i.api_key.map(SecretString::from), None)
        } else if !blank(&i.api_key_env) {
            (None, i.api_key_env.map(|v| v.trim().to_string()))
        } else {
            (
                stored.and_then(|a| a.api_key.clone()),
                stored.and_then(|a| a.api_key_env.clone()),
            )
        };
        let account = UpstreamAccount {
            id,
            pool,
            base_url: i.base_url.trim().trim_end_matches('/').to_string(),
            api_key,
            api_key_env,
            tier: i.tier.unwrap_or(1),
            weight: i.weight,
            models: i.models.unwrap_or_default(),
            site: i.site.filter(|s| !s.trim().is_empty()),
            enabled: i.enabled.unwrap_or(true),
            source: SpecSource::Api,
        };
        spec.accounts.push(account.clone());
        Ok((
            spec,
            Box::new(move |c: &mut Connection| db::save_account(c, &account, now)) as StoreOp,
        ))
    })
    .await
}

/// Creates (`name = None`: from the body) or replaces (`Some(path name)`) an API-owned chain,
/// or deletes it (`input = None`). Errors as [`save_pool`].
pub async fn save_chain(
    p: &Patrol,
    name: Option<&str>,
    input: Option<RouterChainInput>,
) -> Result<(), JobError> {
    let create = name.is_none();
    let name = match (name, &input) {
        (Some(n), _) => n.to_string(),
        (None, Some(i)) => required(i.name.clone(), "name")?,
        (None, None) => return Err(JobError::Invalid(vec!["name is required".into()])),
    };
    let now = p.now();
    change(p, move |cur| {
        let mut spec = cur.spec;
        let what = format!("router chain {name:?}");
        check(
            spec.chains
                .iter()
                .find(|c| c.name == name)
                .map(|c| c.source),
            &what,
            create,
        )?;
        spec.chains.retain(|c| c.name != name);
        let op: StoreOp = match input {
            Some(i) => {
                let chain = ChainSpec {
                    name: name.clone(),
                    legs: i
                        .legs
                        .into_iter()
                        .map(|l| Leg {
                            pool: l.pool,
                            model: l.model,
                        })
                        .collect(),
                    source: SpecSource::Api,
                };
                spec.chains.push(chain.clone());
                Box::new(move |c| db::save_chain(c, &chain, now))
            }
            None => Box::new(move |c| db::delete_chain(c, &name).map(drop)),
        };
        Ok((spec, op))
    })
    .await
}

// ---------------------------------------------------------------------------------------------
// Client keys.

/// Prefix of every router client key.
pub const KEY_PREFIX: &str = "qpr-";

/// A client key as listed: never the key, only its last 4 characters.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouterKey {
    pub id: String,
    pub name: String,
    /// `qpr-…` and the key's last 4 characters, to recognise it.
    pub hint: String,
    pub created_at: DateTime<Utc>,
    /// When revoked (the router refuses it since); `null` = active.
    pub revoked_at: Option<DateTime<Utc>>,
}

impl RouterKey {
    fn of(k: db::ClientKey) -> Self {
        Self {
            id: k.id,
            name: k.name,
            hint: format!("{KEY_PREFIX}…{}", k.last4),
            created_at: k.created_at,
            revoked_at: k.revoked_at,
        }
    }
}

/// A key just created: the only answer that carries the key itself.
#[derive(Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouterKeyCreated {
    #[serde(flatten)]
    pub listed: RouterKey,
    /// The key, shown this once: `Authorization: Bearer <key>` on the router listener.
    pub key: String,
}

/// `POST /api/router/keys` body.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouterKeyInput {
    /// Who or what uses it (1–100 characters).
    pub name: String,
}

/// Creates a client key `qpr-` + 64 hex characters (32 bytes of `crate::random::secret_bytes`),
/// stores its SHA-256 and last 4 characters, hands the router the new key set, and returns the
/// key once. Errors: router disabled; a blank or over-long name (400); the store fails.
pub async fn create_key(p: &Patrol, input: RouterKeyInput) -> Result<RouterKeyCreated, JobError> {
    let admin = admin(p)?;
    let name = input.name.trim().to_string();
    if name.is_empty() || name.chars().count() > 100 {
        return Err(JobError::Invalid(vec![
            "name must have 1 to 100 characters".into(),
        ]));
    }
    let key = format!(
        "{KEY_PREFIX}{}",
        hex::encode(crate::random::secret_bytes::<32>())
    );
    let stored = db::ClientKey {
        id: uuid::Uuid::new_v4().simple().to_string()[..12].to_string(),
        name,
        last4: key[key.len() - 4..].to_string(),
        created_at: p.now(),
        revoked_at: None,
    };
    let hash = key_hash(&key);
    let row = stored.clone();
    p.store.run(move |c| db::insert_key(c, &row, &hash)).await?;
    admin.control.set_keys(load_key_hashes(&p.store).await?);
    Ok(RouterKeyCreated {
        listed: RouterKey::of(stored),
        key,
    })
}

/// Every client key (revoked ones too), oldest first, without the keys.
pub async fn list_keys(p: &Patrol) -> Result<Vec<RouterKey>, JobError> {
    admin(p)?;
    let keys = p.store.run(|c| db::keys(c)).await?;
    Ok(keys.into_iter().map(RouterKey::of).collect())
}

/// Revokes key `id` (again: no-op) and hands the router the remaining keys.
/// Errors: router disabled; unknown id (404); the store fails.
pub async fn revoke_key(p: &Patrol, id: &str) -> Result<(), JobError> {
    let admin = admin(p)?;
    let (key_id, now) = (id.to_string(), p.now());
    let found = p
        .store
        .run(move |c| db::revoke_key(c, &key_id, now))
        .await?;
    if found.is_none() {
        return Err(JobError::NotFound(format!("router key {id:?} not found")));
    }
    admin.control.set_keys(load_key_hashes(&p.store).await?);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Usage.

/// The usage writer stores what it gathered at least this often (docs/decisions.md §20: a
/// `kill -9` loses at most about this much of the counts).
pub const USAGE_FLUSH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// With per-request rows on, the writer also stores once a drain leaves at least this many
/// rows waiting (so at most this many plus one full queue wait).
pub const USAGE_RAW_ROWS_AT_ONCE: usize = 4096;

/// At the close, a store that fails is tried again this many times in all, this long apart,
/// before the counts are given up as lost (well inside the app's shutdown deadline).
pub const USAGE_CLOSE_ATTEMPTS: u32 = 3;
pub const USAGE_CLOSE_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

/// What the usage writer did (tests watch it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UsageEvent {
    /// Records taken off the queue and added to the tally in memory.
    Folded(usize),
    /// Records whose sums (and rows) were stored in one transaction.
    Stored(u64),
    /// Records whose store failed (their sums kept when the database answered).
    Failed(u64),
}

/// Writes the router's usage (docs/rules/router.md §5 "Usage", docs/decisions.md §20). When the
/// request path fills a batch of [`crate::router::USAGE_BATCH`] records it drains the queue and
/// adds the records to a per-minute tally in memory (`core::usage::UsageTally`); every
/// [`USAGE_FLUSH_EVERY`] it stores the tally in one transaction (`store::router::write_usage`:
/// minute and daily aggregates, 30-day retention), with one row per record when
/// `request_rows` (`[router] usage_request_rows`). Ends once the queue is closed and everything
/// queued is stored. A failed store is logged and counted
/// (`quota_patrol_router_usage_write_failures_total`); the tally is kept for the next store,
/// the per-request rows of that store are dropped.
pub fn spawn_usage_writer(
    store: Store,
    queue: Arc<UsageQueue>,
    request_rows: bool,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(usage_writer(
        store,
        queue,
        USAGE_FLUSH_EVERY,
        request_rows,
        |_| {},
    ))
}

/// What the writer holds between two stores.
#[derive(Default)]
struct Gathered {
    tally: UsageTally,
    raw: Vec<UsageRecord>,
}

/// The writer loop; `seen` is told what it did (tests).
async fn usage_writer(
    store: Store,
    queue: Arc<UsageQueue>,
    every: std::time::Duration,
    request_rows: bool,
    mut seen: impl FnMut(UsageEvent) + Send,
) {
    let mut batch: Vec<UsageRecord> = Vec::new();
    let mut gathered = Gathered::default();
    // The first tick one period from now: nothing is gathered yet.
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let due = tokio::select! {
            () = queue.woken() => false,
            _ = tick.tick() => true,
        };
        let closed = queue.drain_into(&mut batch);
        if !batch.is_empty() {
            seen(UsageEvent::Folded(batch.len()));
        }
        for r in batch.drain(..) {
            if request_rows {
                gathered.raw.push(r.clone());
            }
            gathered.tally.add(r);
        }
        if closed {
            return store_at_close(&store, gathered, &mut seen).await;
        }
        if due || gathered.raw.len() >= USAGE_RAW_ROWS_AT_ONCE {
            store_gathered(&store, &mut gathered, &mut seen).await;
        }
    }
}

/// The last store, at the close: tried up to [`USAGE_CLOSE_ATTEMPTS`] times; what is still not
/// stored then is logged as lost.
async fn store_at_close(store: &Store, mut gathered: Gathered, seen: &mut impl FnMut(UsageEvent)) {
    for attempt in 1..=USAGE_CLOSE_ATTEMPTS {
        if attempt > 1 {
            tokio::time::sleep(USAGE_CLOSE_RETRY_PAUSE).await;
        }
        store_gathered(store, &mut gathered, seen).await;
        if gathered.tally.is_empty() {
            return;
        }
    }
    tracing::error!(
        records = gathered.tally.records(),
        attempts = USAGE_CLOSE_ATTEMPTS,
        "router usage could not be stored at the stop: these counts are lost"
    );
}

async fn store_gathered(store: &Store, gathered: &mut Gathered, seen: &mut impl FnMut(UsageEvent)) {
    if gathered.tally.is_empty() {
        return;
    }
    let Gathered { tally, raw } = std::mem::take(gathered);
    let n = tally.records();
    // The tally comes back when the write fails, for the next write.
    let result = store
        .run(move |c| Ok(db::write_usage(c, &tally, &raw).map_err(|e| (e, tally))))
        .await;
    let (error, kept) = match result {
        Ok(Ok(_)) => return seen(UsageEvent::Stored(n)),
        Ok(Err((e, tally))) => (e, Some(tally)),
        Err(e) => (e, None),
    };
    metrics::counter!("quota_patrol_router_usage_write_failures_total").increment(1);
    seen(UsageEvent::Failed(n));
    tracing::error!(
        records = n,
        error = %error,
        sums_kept = kept.is_some(),
        "cannot write router usage: the sums are kept for the next write when the database \
         answered, per-request rows are dropped"
    );
    if let Some(tally) = kept {
        gathered.tally.merge(tally);
    }
}

/// The figures both usage reads answer, from stored sums.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageFigures {
    /// Client requests (one each, whatever the attempts).
    pub requests: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Cached prompt tokens (inside `promptTokens`).
    pub cached_tokens: u64,
    /// Upstream requests made (retries and fail-overs included).
    pub attempts: u64,
    /// Mean duration, milliseconds.
    pub avg_duration_ms: f64,
    /// Mean time to first byte over the requests that had one, milliseconds.
    pub avg_ttfb_ms: Option<f64>,
}

impl UsageFigures {
    fn of(s: &UsageSums) -> Self {
        Self {
            requests: s.requests,
            prompt_tokens: s.prompt_tokens,
            completion_tokens: s.completion_tokens,
            cached_tokens: s.cached_tokens,
            attempts: s.attempts,
            avg_duration_ms: mean(s.duration_ms_sum, s.requests).unwrap_or(0.0),
            avg_ttfb_ms: mean(s.ttfb_ms_sum, s.ttfb_count),
        }
    }
}

/// One account's usage on one UTC day (`GET /api/router/usage`).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouterUsageDay {
    /// UTC day, `YYYY-MM-DD`.
    pub day: String,
    /// `null` for requests that reached no account (every account excluded).
    pub pool: Option<String>,
    pub account: Option<String>,
    /// Requests the client got a complete answer for.
    pub ok: u64,
    #[serde(flatten)]
    pub figures: UsageFigures,
}

/// Usage per account and UTC day over the last `days` days (today included), newest first.
/// Errors: router disabled; `days` outside 1..=366 (400); the store fails.
pub async fn usage(p: &Patrol, days: u32) -> Result<Vec<RouterUsageDay>, JobError> {
    admin(p)?;
    if !(1..=366).contains(&days) {
        return Err(JobError::Invalid(vec!["days must be 1 to 366".into()]));
    }
    let since = (p.now().date_naive() - chrono::Days::new(u64::from(days - 1))).to_string();
    let rows = p.store.run(move |c| db::daily_usage(c, &since)).await?;
    Ok(rows
        .into_iter()
        .map(|d| RouterUsageDay {
            figures: UsageFigures::of(&d.sums),
            ok: d.sums.ok,
            day: d.day,
            pool: d.pool,
            account: d.account,
        })
        .collect())
}

/// The requests of one UTC minute with one (API, requested model, pool, model, account,
/// status, ok) (`GET /api/router/usage/minutes`).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouterUsageMinute {
    #[serde(flatten)]
    pub key: MinuteKey,
    #[serde(flatten)]
    pub figures: UsageFigures,
    /// The longest duration, milliseconds.
    pub max_duration_ms: u64,
}

/// The per-minute usage of the last `minutes` minutes (the current one included), newest
/// minute first. Counts reach the database about once a second (docs/decisions.md §20).
/// Errors: router disabled; `minutes` outside 1..=1440 (400); the store fails.
pub async fn usage_minutes(p: &Patrol, minutes: u32) -> Result<Vec<RouterUsageMinute>, JobError> {
    admin(p)?;
    if !(1..=1440).contains(&minutes) {
        return Err(JobError::Invalid(vec!["minutes must be 1 to 1440".into()]));
    }
    let since = p.now() - chrono::Duration::minutes(i64::from(minutes - 1));
    let rows = p.store.run(move |c| db::minute_usage(c, since)).await?;
    Ok(rows
        .into_iter()
        .map(|m| RouterUsageMinute {
            figures: UsageFigures::of(&m.sums),
            max_duration_ms: m.sums.duration_ms_max,
            key: m.key,
        })
        .collect())
}

fn mean(sum: u64, n: u64) -> Option<f64> {
    (n > 0).then(|| (sum as f64 / n as f64 * 10.0).round() / 10.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::router::Api;
    use chrono::TimeZone;

    fn record(i: u64) -> UsageRecord {
        UsageRecord {
            at: Utc.with_ymd_and_hms(2026, 5, 21, 3, 0, 0).unwrap(),
            api: Api::Responses,
            requested_model: "gpt-5".into(),
            pool: Some("codex".into()),
            model: Some("gpt-5".into()),
            account: Some("a".into()),
            session_key_hash: None,
            ok: true,
            status: 200,
            prompt_tokens: i,
            completion_tokens: 1,
            cached_tokens: 0,
            attempts: 1,
            duration_ms: 10,
            ttfb_ms: Some(5),
        }
    }

    /// The writer on `queue` with its events on a channel.
    fn watched_writer(
        store: &Store,
        queue: &Arc<UsageQueue>,
        every: std::time::Duration,
        request_rows: bool,
    ) -> (
        tokio::task::JoinHandle<()>,
        tokio::sync::mpsc::UnboundedReceiver<UsageEvent>,
    ) {
        let (seen_tx, seen) = tokio::sync::mpsc::unbounded_channel();
        let writer = tokio::spawn(usage_writer(
            store.clone(),
            queue.clone(),
            every,
            request_rows,
            move |e| seen_tx.send(e).unwrap(),
        ));
        (writer, seen)
    }

    /// Raw rows, requests in the daily aggregate, requests in the minute aggregate.
    fn stored(store: &Store) -> (u64, u64, u64) {
        store
            .run_blocking(|c| {
                let d = db::daily_usage(c, "2026-01-01")?;
                let m = db::minute_usage(c, chrono::DateTime::UNIX_EPOCH)?;
                Ok((
                    db::raw_usage_count(c)?,
                    d.iter().map(|d| d.sums.requests).sum(),
                    m.iter().map(|m| m.sums.requests).sum(),
                ))
            })
            .unwrap()
    }

    #[tokio::test]
    async fn a_full_batch_is_taken_off_the_queue_at_once_and_stored_on_the_tick_or_the_close() {
        let store = Store::open_in_memory().unwrap();
        let queue = Arc::new(UsageQueue::new(300, 256));
        let (writer, mut seen) =
            watched_writer(&store, &queue, std::time::Duration::from_secs(3600), false);
        for i in 0..300 {
            assert!(queue.push(record(i)));
        }
        let UsageEvent::Folded(first) = seen.recv().await.unwrap() else {
            panic!("a full batch is folded, not stored");
        };
        assert!(
            (256..=300).contains(&first),
            "a full batch wakes the writer long before its hourly tick ({first})"
        );
        assert_eq!(stored(&store), (0, 0, 0), "nothing stored before the tick");
        assert!(queue.push(record(300)), "the queue has room again");
        queue.close();
        writer.await.unwrap();
        let events: Vec<UsageEvent> = std::iter::from_fn(|| seen.try_recv().ok()).collect();
        assert_eq!(
            events.last(),
            Some(&UsageEvent::Stored(301)),
            "the close stores everything in one write: {events:?}"
        );
        assert_eq!(stored(&store), (0, 301, 301));
    }

    #[tokio::test]
    async fn the_usage_writer_stores_on_its_tick_without_a_full_batch() {
        let store = Store::open_in_memory().unwrap();
        let queue = Arc::new(UsageQueue::new(64, 64));
        let (writer, mut seen) =
            watched_writer(&store, &queue, std::time::Duration::from_millis(20), true);
        for i in 0..10 {
            assert!(queue.push(record(i)));
        }
        loop {
            match seen.recv().await.unwrap() {
                UsageEvent::Stored(n) => {
                    assert_eq!(n, 10, "the tick stores what is queued");
                    break;
                }
                UsageEvent::Folded(_) => {}
                UsageEvent::Failed(n) => panic!("a store of {n} failed"),
            }
        }
        assert_eq!(stored(&store), (10, 10, 10), "rows too, when asked for");
        queue.close();
        writer.await.unwrap();
    }

    #[tokio::test]
    async fn the_usage_writer_stores_everything_when_the_queue_closes() {
        let store = Store::open_in_memory().unwrap();
        let queue = Arc::new(UsageQueue::new(64, 64));
        let writer = spawn_usage_writer(store.clone(), queue.clone(), false);
        for i in 0..10 {
            assert!(queue.push(record(i)));
        }
        queue.close();
        writer.await.unwrap();
        assert_eq!(stored(&store), (0, 10, 10));
    }

    /// Makes the minute table refuse inserts (every store fails and rolls back) until dropped.
    fn refuse_stores(store: &Store) {
        store
            .run_blocking(|c| {
                c.execute_batch(
                    "CREATE TRIGGER refuse BEFORE INSERT ON router_usage_minute
                     BEGIN SELECT RAISE(ABORT, 'refused'); END;",
                )?;
                Ok(())
            })
            .unwrap();
    }

    fn accept_stores(store: &Store) {
        store
            .run_blocking(|c| Ok(c.execute_batch("DROP TRIGGER IF EXISTS refuse;")?))
            .unwrap();
    }

    fn stored_total(events: &[UsageEvent]) -> u64 {
        events
            .iter()
            .map(|e| match e {
                UsageEvent::Stored(n) => *n,
                _ => 0,
            })
            .sum()
    }

    #[tokio::test]
    async fn a_failed_write_keeps_the_sums_for_the_next_one() {
        let store = Store::open_in_memory().unwrap();
        refuse_stores(&store);
        let queue = Arc::new(UsageQueue::new(64, 64));
        let (writer, mut seen) =
            watched_writer(&store, &queue, std::time::Duration::from_millis(20), false);
        for i in 0..4 {
            assert!(queue.push(record(i)));
        }
        assert_eq!(seen.recv().await, Some(UsageEvent::Folded(4)));
        assert_eq!(seen.recv().await, Some(UsageEvent::Failed(4)));
        accept_stores(&store);
        for i in 4..6 {
            assert!(queue.push(record(i)));
        }
        queue.close();
        writer.await.unwrap();
        let events: Vec<UsageEvent> = std::iter::from_fn(|| seen.try_recv().ok()).collect();
        assert_eq!(
            stored_total(&events),
            6,
            "every record stored exactly once: {events:?}"
        );
        assert_eq!(stored(&store), (0, 6, 6));
    }

    #[tokio::test]
    async fn a_store_that_fails_at_the_close_is_tried_again() {
        let store = Store::open_in_memory().unwrap();
        refuse_stores(&store);
        let queue = Arc::new(UsageQueue::new(64, 64));
        let (events_tx, mut events) = tokio::sync::mpsc::unbounded_channel();
        let refusing = store.clone();
        let writer = tokio::spawn(usage_writer(
            store.clone(),
            queue.clone(),
            std::time::Duration::from_secs(3600),
            false,
            move |e| {
                if matches!(e, UsageEvent::Failed(_)) {
                    // The database recovers after the first failure.
                    accept_stores(&refusing);
                }
                events_tx.send(e).unwrap();
            },
        ));
        for i in 0..3 {
            assert!(queue.push(record(i)));
        }
        queue.close();
        writer.await.unwrap();
        let events: Vec<UsageEvent> = std::iter::from_fn(|| events.try_recv().ok()).collect();
        assert_eq!(
            events,
            [
                UsageEvent::Folded(3),
                UsageEvent::Failed(3),
                UsageEvent::Stored(3)
            ]
        );
        assert_eq!(stored(&store), (0, 3, 3));
    }

    #[test]
    fn a_stored_entry_named_like_a_config_one_is_shadowed() {
        let config = RouterSpec {
            pools: vec![PoolSpec {
                id: "codex".into(),
                models: vec!["gpt-5".into()],
                source: SpecSource::Config,
            }],
            ..Default::default()
        };
        let stored = vec![
            PoolSpec {
                id: "codex".into(),
                models: vec!["other".into()],
                source: SpecSource::Api,
            },
            PoolSpec {
                id: "backup".into(),
                models: vec![],
                source: SpecSource::Api,
            },
        ];
        let spec = merge(&config, stored, vec![], vec![]);
        assert_eq!(spec.pools.len(), 2);
        assert_eq!(spec.pools[0].models, ["gpt-5"]);
        assert_eq!(spec.pools[1].source, SpecSource::Api);
    }
}
