//! Wire shapes of CPA's management API (CPA v7.1.19 … v7.2.140, spec/cpa.md §2–§3, §5.2).
//! Tolerant reading: unknown fields ignored, optional fields optional, numbers that arrive as
//! strings accepted. These types never leave `cpa/`.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use std::collections::HashMap;

fn lenient_i64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    let v = Option::<Value>::deserialize(d)?;
    Ok(match v {
        Some(Value::Number(n)) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Some(Value::String(s)) => s.trim().parse::<f64>().ok().map(|f| f as i64),
        _ => None,
    })
}

fn lenient_bool<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    let v = Option::<Value>::deserialize(d)?;
    Ok(match v {
        Some(Value::Bool(b)) => b,
        Some(Value::String(s)) => s.trim().eq_ignore_ascii_case("true"),
        Some(Value::Number(n)) => n.as_i64() == Some(1),
        _ => false,
    })
}

fn lenient_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let v = Option::<Value>::deserialize(d)?;
    Ok(match v {
        Some(Value::String(s)) => Some(s),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    })
}

/// `GET /v0/management/auth-files` answer.
#[derive(Debug, Deserialize)]
pub struct AuthFileList {
    /// Required: an object without `files` is not a listing (and must not empty the pool).
    pub files: Vec<AuthFileEntry>,
}

/// One entry of the listing (cpa.md §2.1).
#[derive(Debug, Deserialize)]
pub struct AuthFileEntry {
    #[serde(default, deserialize_with = "lenient_string")]
    pub id: Option<String>,
    #[serde(default, deserialize_with = "lenient_string")]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "lenient_string")]
    pub auth_index: Option<String>,
    #[serde(default, deserialize_with = "lenient_string", rename = "type")]
    pub kind: Option<String>,
    #[serde(default, deserialize_with = "lenient_string")]
    pub provider: Option<String>,
    #[serde(default, deserialize_with = "lenient_string")]
    pub label: Option<String>,
    #[serde(default, deserialize_with = "lenient_string")]
    pub email: Option<String>,
    #[serde(default, deserialize_with = "lenient_string")]
    pub account: Option<String>,
    #[serde(default, deserialize_with = "lenient_string")]
    pub status: Option<String>,
    #[serde(default, deserialize_with = "lenient_string")]
    pub status_message: Option<String>,
    #[serde(default, deserialize_with = "lenient_bool")]
    pub disabled: bool,
    /// Auth-level cooling-down flag (cpa.md §2.1).
    #[serde(default, deserialize_with = "lenient_bool")]
    pub unavailable: bool,
    /// Go time of the auth-level retry when cooling down (CPA ≥ v6.8.31).
    #[serde(default, deserialize_with = "lenient_string")]
    pub next_retry_after: Option<String>,
    /// Go time of the last successful token refresh.
    #[serde(default, deserialize_with = "lenient_string")]
    pub last_refresh: Option<String>,
    #[serde(default, deserialize_with = "lenient_i64")]
    pub priority: Option<i64>,
    #[serde(default, deserialize_with = "lenient_i64")]
    pub success: Option<i64>,
    #[serde(default, deserialize_with = "lenient_i64")]
    pub failed: Option<i64>,
    #[serde(default)]
    pub recent_requests: Option<Vec<RecentBucket>>,
    #[serde(default)]
    pub id_token: Option<IdTokenClaims>,
}

/// One 10-minute bucket of `recent_requests`.
#[derive(Debug, Deserialize)]
pub struct RecentBucket {
    #[serde(default, deserialize_with = "lenient_i64")]
    pub success: Option<i64>,
    #[serde(default, deserialize_with = "lenient_i64")]
    pub failed: Option<i64>,
}

/// Parsed `id_token` claims in a Codex entry (CPA ≥ v6.6.66).
#[derive(Debug, Default, Deserialize)]
pub struct IdTokenClaims {
    #[serde(default, deserialize_with = "lenient_string")]
    pub chatgpt_account_id: Option<String>,
    #[serde(default, deserialize_with = "lenient_string")]
    pub plan_type: Option<String>,
}

/// `POST /v0/management/api-call` request (cpa.md §3). The header map key is `header`, singular.
#[derive(Debug, Serialize)]
pub struct ApiCallRequest<'a> {
    pub auth_index: &'a str,
    pub method: &'a str,
    pub url: &'a str,
    pub header: HashMap<&'a str, String>,
    pub data: &'a str,
}

/// `api-call` answer: the upstream status and body (a JSON string).
#[derive(Debug, Deserialize)]
pub struct ApiCallResponse {
    #[serde(deserialize_with = "lenient_i64")]
    pub status_code: Option<i64>,
    #[serde(default, deserialize_with = "lenient_string")]
    pub body: Option<String>,
}

/// `{"error": "..."}` answers.
#[derive(Debug, Deserialize)]
pub struct ErrorBody {
    #[serde(default)]
    pub error: Option<String>,
}

/// `PATCH /auth-files/status` body; `auth_index` only to CPA ≥ v7.2.22 (cpa.md §2.2).
#[derive(Debug, Serialize)]
pub struct StatusPatch<'a> {
    pub name: &'a str,
    pub disabled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth_index: Option<&'a str>,
}

/// `POST /reset-quota` body (CPA ≥ v7.2.22, cpa.md §2.5).
#[derive(Debug, Serialize)]
pub struct ResetQuota<'a> {
    pub auth_index: &'a str,
}

/// `PATCH /auth-files/fields` body: exactly `name` + `priority` (patrol.md §6.5).
#[derive(Debug, Serialize)]
pub struct PriorityPatch<'a> {
    pub name: &'a str,
    pub priority: i64,
}

/// One usage-queue record; only the identifier matters here (cpa.md §5.2).
#[derive(Debug, Deserialize)]
pub struct UsageRecord {
    #[serde(default, deserialize_with = "lenient_string")]
    pub auth_index: Option<String>,
}
