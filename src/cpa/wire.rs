//! Wire shapes of CPA's management API (CPA v7.1.19 … v7.2.140, docs/rules/cpa.md §2–§3, §5.2).
//! Tolerant reading: unknown fields ignored, optional fields optional, numbers that arrive as
//! strings accepted. These types never leave `cpa/`.

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use std::collections::HashMap;
use std::fmt;

use crate::core::codex_json;

/// An integer sent as a number or a numeric string, floats truncated
/// ([`codex_json::truncated_integer`]); anything else is `None`.
fn lenient_i64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    let v = Option::<Value>::deserialize(d)?;
    Ok(v.as_ref().and_then(codex_json::truncated_integer))
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

/// Sum of `success + failed` over the `recent_requests` buckets, read bucket by bucket (a
/// listing has 20 buckets per account: no `Vec` of them is built). Negative counts count 0;
/// `null` or absent is `None`.
fn sum_buckets<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    struct Sum;
    impl<'de> Visitor<'de> for Sum {
        type Value = Option<u64>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list of request buckets")
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(Sum)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut total = 0u64;
            while let Some(b) = seq.next_element::<RecentBucket>()? {
                total += b.success.unwrap_or(0).max(0) as u64 + b.failed.unwrap_or(0).max(0) as u64;
            }
            Ok(Some(total))
        }
    }
    d.deserialize_option(Sum)
}

/// Reads a `GET /v0/management/auth-files` answer entry by entry as the body is read (the
/// client streams it): `keep` turns each entry into what the caller keeps (`None`: skip it), so
/// neither the ~17 MB body of a 10,000-account listing nor a list of every raw entry is held.
/// `files` is required: an object without it is not a listing (and must not empty the pool);
/// other keys are ignored. Returns what `keep` kept, in CPA's order.
pub struct FilesSeed<F>(pub F);

impl<'de, T, F: FnMut(AuthFileEntry) -> Option<T>> DeserializeSeed<'de> for FilesSeed<F> {
    type Value = Vec<T>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<T>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, T, F: FnMut(AuthFileEntry) -> Option<T>> Visitor<'de> for FilesSeed<F> {
    type Value = Vec<T>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an auth-files listing (an object with `files`)")
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Vec<T>, A::Error> {
        let mut files = None;
        while let Some(key) = map.next_key::<String>()? {
            if key != "files" {
                map.next_value::<IgnoredAny>()?;
            } else if files.is_some() {
                return Err(de::Error::duplicate_field("files"));
            } else {
                files = Some(map.next_value_seed(Entries(&mut self.0))?);
            }
        }
        files.ok_or_else(|| de::Error::missing_field("files"))
    }
}

/// A reader that keeps the first bytes it passes on, for the "body starts with" of a listing
/// that does not parse (the listing itself is streamed, never held whole).
pub struct Head<R> {
    inner: R,
    seen: Vec<u8>,
    keep: usize,
}

impl<R> Head<R> {
    /// Passes `inner` on, keeping its first `keep` bytes.
    pub fn new(inner: R, keep: usize) -> Self {
        Self {
            inner,
            seen: Vec::new(),
            keep,
        }
    }

    /// The first bytes read so far (at most `keep`).
    pub fn seen(&self) -> &[u8] {
        &self.seen
    }
}

impl<R: std::io::Read> std::io::Read for Head<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let room = self.keep.saturating_sub(self.seen.len()).min(n);
        self.seen.extend_from_slice(&buf[..room]);
        Ok(n)
    }
}

/// The `files` array, each entry handed to the caller's `keep` as soon as it is parsed.
struct Entries<'a, F>(&'a mut F);

impl<'de, T, F: FnMut(AuthFileEntry) -> Option<T>> DeserializeSeed<'de> for Entries<'_, F> {
    type Value = Vec<T>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<T>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, T, F: FnMut(AuthFileEntry) -> Option<T>> Visitor<'de> for Entries<'_, F> {
    type Value = Vec<T>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of auth files")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        let mut out = Vec::new();
        while let Some(entry) = seq.next_element::<AuthFileEntry>()? {
            out.extend((self.0)(entry));
        }
        Ok(out)
    }
}

/// One entry of the listing (docs/rules/cpa.md §2.1).
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
    /// Auth-level cooling-down flag (docs/rules/cpa.md §2.1).
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
    /// `success + failed` summed over the buckets (see [`sum_buckets`]).
    #[serde(default, deserialize_with = "sum_buckets")]
    pub recent_requests: Option<u64>,
    #[serde(default)]
    pub id_token: Option<IdTokenClaims>,
    /// Passive quota: what CPA saw on the account's last upstream response (CPA builds after
    /// v7.2.140, docs/rules/cpa.md §9). Kept raw: `core::passive::read` feature-detects and
    /// reads it, so a garbage value never fails the listing.
    #[serde(default)]
    pub quota: Option<Value>,
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

/// `POST /v0/management/api-call` request (docs/rules/cpa.md §3). The header map key is `header`, singular.
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

/// `PATCH /auth-files/status` body; `auth_index` only to CPA ≥ v7.2.22 (docs/rules/cpa.md §2.2).
#[derive(Debug, Serialize)]
pub struct StatusPatch<'a> {
    pub name: &'a str,
    pub disabled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth_index: Option<&'a str>,
}

/// `POST /reset-quota` body (CPA ≥ v7.2.22, docs/rules/cpa.md §2.5).
#[derive(Debug, Serialize)]
pub struct ResetQuota<'a> {
    pub auth_index: &'a str,
}

/// `PATCH /auth-files/fields` body: exactly `name` + `priority` (docs/rules/patrol.md §6.5).
#[derive(Debug, Serialize)]
pub struct PriorityPatch<'a> {
    pub name: &'a str,
    pub priority: i64,
}

/// One usage-queue record; only the identifier matters here (docs/rules/cpa.md §5.2).
#[derive(Debug, Deserialize)]
pub struct UsageRecord {
    #[serde(default, deserialize_with = "lenient_string")]
    pub auth_index: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_passes_every_byte_on_and_keeps_only_the_first() {
        let body = "{\"files\":[".to_string() + &"x".repeat(5000);
        let mut head = Head::new(std::io::Cursor::new(body.as_bytes()), 800);
        let mut read = Vec::new();
        std::io::Read::read_to_end(&mut head, &mut read).unwrap();
        assert_eq!(read, body.as_bytes(), "the parser sees the whole body");
        assert_eq!(
            head.seen(),
            &body.as_bytes()[..800],
            "only the first 800 bytes are kept"
        );
    }

    /// Names and bucket sums kept from a listing body, through [`FilesSeed`].
    fn kept(body: &str) -> Result<Vec<(String, Option<u64>)>, serde_json::Error> {
        let mut de = serde_json::Deserializer::from_str(body);
        let v = FilesSeed(|e: AuthFileEntry| Some((e.name?, e.recent_requests)))
            .deserialize(&mut de)?;
        de.end()?;
        Ok(v)
    }

    #[test]
    fn real_listings_keep_every_entry_in_order_with_bucket_sums() {
        for body in [
            include_str!("../../fixtures/cpa/auth-files__v7.1.19.json"),
            include_str!("../../fixtures/cpa/auth-files__v7.2.140.json"),
        ] {
            let v: Value = serde_json::from_str(body).unwrap();
            let expected: Vec<(String, Option<u64>)> = v["files"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| {
                    let sum = e["recent_requests"].as_array().map(|b| {
                        b.iter()
                            .map(|x| x["success"].as_u64().unwrap() + x["failed"].as_u64().unwrap())
                            .sum()
                    });
                    (e["name"].as_str().unwrap().to_string(), sum)
                })
                .collect();
            assert!(!expected.is_empty());
            assert_eq!(kept(body).unwrap(), expected);
        }
    }

    #[test]
    fn buckets_sum_leniently_and_null_or_absent_is_none() {
        let body = r#"{"other": {"x": [1, 2]}, "files": [
            {"name": "a", "recent_requests": [{"success": "3", "failed": 2}, {"success": -4, "failed": null}, {}]},
            {"name": "b", "recent_requests": null},
            {"name": "c"},
            {"name": "d", "recent_requests": []},
            {"id": "no-name"}
        ], "total": 5}"#;
        assert_eq!(
            kept(body).unwrap(),
            vec![
                ("a".into(), Some(5)),
                ("b".into(), None),
                ("c".into(), None),
                ("d".into(), Some(0)),
            ]
        );
    }

    #[test]
    fn a_body_without_files_or_with_two_is_not_a_listing() {
        assert!(kept(r#"{"error": "nope"}"#).is_err());
        assert!(kept(r#"{"files": [], "files": []}"#).is_err());
        assert!(kept(r#"[{"name": "a"}]"#).is_err());
        assert!(kept(r#"{"files": [{"name": "a", "recent_requests": 3}]}"#).is_err());
        assert!(kept(r#"{"files": []} trailing"#).is_err());
    }

    #[test]
    fn auth_index_is_read_as_a_hex_string_or_a_number() {
        // Hex string (CPA v7.1.19 … v8) or a number (older builds, per a third-party client;
        // docs/rules/cpa.md §11); in the listing and in the usage queue alike.
        let body = r#"{"files": [
            {"name": "a", "auth_index": "dced952c87a12d9f"},
            {"name": "b", "auth_index": 15918232567513091487},
            {"name": "c", "auth_index": null}
        ]}"#;
        let mut de = serde_json::Deserializer::from_str(body);
        let got = FilesSeed(|e: AuthFileEntry| Some(e.auth_index))
            .deserialize(&mut de)
            .unwrap();
        assert_eq!(
            got,
            vec![
                Some("dced952c87a12d9f".to_string()),
                Some("15918232567513091487".to_string()),
                None
            ]
        );
        for (raw, want) in [
            (r#"{"auth_index": 42}"#, "42"),
            (r#"{"auth_index": "0a1b"}"#, "0a1b"),
        ] {
            let r: UsageRecord = serde_json::from_str(raw).unwrap();
            assert_eq!(r.auth_index.as_deref(), Some(want));
        }
    }

    #[test]
    fn any_quota_value_is_kept_raw_and_never_fails_the_listing() {
        // docs/rules/cpa.md §9: feature-detected per entry; garbage is the reader's to drop.
        let body = r#"{"files": [
            {"name": "a", "quota": {"observed_at": "2026-08-22T08:00:00.5+08:00",
                "signals": {"X-Codex-Primary-Used-Percent": "58", "X-Codex-Primary-Window-Minutes": "300"}}},
            {"name": "b", "quota": {"signals": {}}},
            {"name": "c", "quota": "garbage"},
            {"name": "d", "quota": [1, {"signals": 2}]},
            {"name": "e"}
        ]}"#;
        let mut de = serde_json::Deserializer::from_str(body);
        let kept = FilesSeed(|e: AuthFileEntry| Some((e.name?, e.quota)))
            .deserialize(&mut de)
            .unwrap();
        let read: Vec<(String, Option<crate::core::passive::PassiveEvidence>)> = kept
            .into_iter()
            .map(|(n, q)| (n, crate::core::passive::read(q.as_ref())))
            .collect();
        assert_eq!(read.len(), 5);
        let a = read[0].1.as_ref().expect("a has the feature");
        assert_eq!(
            a.observed_at.map(|t| t.to_rfc3339()),
            Some("2026-08-22T00:00:00.500+00:00".to_string())
        );
        let five = a.report.as_ref().and_then(|r| r.windows.first()).unwrap();
        assert_eq!(five.kind, crate::core::quota::WindowKind::FiveHour);
        assert_eq!(five.used_percent, Some(58.0));
        let b = read[1]
            .1
            .as_ref()
            .expect("empty signals: the feature, nothing seen");
        assert!(b.observed_at.is_none() && b.report.is_none());
        assert!(read[2].1.is_none() && read[3].1.is_none() && read[4].1.is_none());
    }
}
