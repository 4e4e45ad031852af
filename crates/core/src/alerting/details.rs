//! What an alert message says beyond its kind ([`AlertDetails`]): stored with the event and
//! rendered at delivery. Pure data.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::pool::{AccountLine, ForecastView, PoolView};
use crate::digest::Digest;

/// What a message says beyond its kind: stored with the event, rendered at delivery.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", default)]
pub struct AlertDetails {
    pub total_accounts: Option<usize>,
    pub usable_accounts: Option<usize>,
    pub earliest_reset_at: Option<DateTime<Utc>>,
    /// The site's accounts (soonest reset first).
    pub accounts: Vec<AccountLine>,
    /// Accounts left out of `accounts` (table size limit).
    pub omitted_accounts: usize,
    /// `invalid_accounts`: the accounts deleted or disabled as invalid.
    pub invalid_accounts: Vec<String>,
    /// `below_min_active`: the configured minimum.
    pub min_active: Option<u32>,
    /// Reachability events: last successful CPA contact and the start of the failures.
    pub last_contact_at: Option<DateTime<Utc>>,
    pub failing_since: Option<DateTime<Utc>>,
    /// Reachability events: why the management calls fail, when known.
    pub cause: Option<String>,
    /// Clearing events: when the condition was told.
    pub raised_at: Option<DateTime<Utc>>,
    /// Pool events: when the forecast projects the site to run dry (`None`: not projected, or
    /// no forecast).
    pub projected_dry_at: Option<DateTime<Utc>>,
    /// Pool events: the earliest window reset among the site's accounts, by the forecast.
    pub forecast_reset_at: Option<DateTime<Utc>>,
    /// Pool events: summed burn of the accounts in use, percent per hour.
    pub burn_per_hour: Option<f64>,
    /// `pool_low`: the site's `earlyWarningMinutes` and `lowCapacityAccounts`.
    pub early_warning_minutes: Option<i64>,
    pub low_capacity_accounts: Option<u32>,
    /// `daily_digest`: the summary of the last 24 h.
    pub digest: Option<Digest>,
}

impl AlertDetails {
    /// The pool part of a message, with the forecast when one is known.
    pub fn from_pool(pool: &PoolView, forecast: Option<&ForecastView>) -> Self {
        Self {
            total_accounts: Some(pool.total),
            usable_accounts: Some(pool.usable),
            earliest_reset_at: pool.earliest_reset_at,
            accounts: pool.accounts.clone(),
            omitted_accounts: pool.omitted_accounts,
            projected_dry_at: forecast.and_then(|f| f.projected_dry_at),
            forecast_reset_at: forecast.and_then(|f| f.earliest_reset_at),
            burn_per_hour: forecast.map(|f| f.burn_per_hour),
            ..Default::default()
        }
    }
}
