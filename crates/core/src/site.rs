//! A site: one CPA instance with its connection data and patrol settings (docs/rules/patrol.md §1).
//! Pure data; the management key is a secret that never prints.

use secrecy::{ExposeSecret, SecretString};

use std::collections::HashMap;

use super::policy::{AccountPolicy, QuotaPolicy};
use super::settings::PatrolSettings;

/// Default Codex usage URL (CPA v7.1.19 `api-call` target; docs/rules/cpa.md §4.1).
pub const DEFAULT_USAGE_URL: &str = "https://chatgpt.com/backend-api/wham/usage";
/// Default Codex-CLI-like User-Agent (docs/rules/cpa.md §4.1).
pub const DEFAULT_USER_AGENT: &str = "codex_cli_rs/0.76.0 (Debian 13.0.0; x86_64) WindowsTerminal";

/// One CPA instance managed by quota-patrol.
#[derive(Debug, Clone)]
pub struct Site {
    /// Normalised id (lowercase, `[a-z0-9-]`).
    pub site_id: String,
    pub site_name: String,
    pub site_enabled: bool,
    /// CPA root URL, e.g. `http://127.0.0.1:8317` (the management API is under `/v0/management`).
    pub cpa_base_url: String,
    /// Management key stored through the API (plaintext in the database).
    pub management_key: Option<SecretString>,
    /// Environment variable holding the key (config bootstrap); wins over `management_key`.
    pub management_key_env: Option<String>,
    /// Provider filter of the auth-file listing (`codex`).
    pub provider: String,
    pub usage_url: String,
    pub user_agent: String,
    pub settings: PatrolSettings,
    /// Per-account quota policy overrides by account name (`PUT /api/accounts/{name}/policy`,
    /// table `account_policies`; docs/rules/patrol.md §9). Loaded with the site.
    pub account_policies: HashMap<String, AccountPolicy>,
}

impl Site {
    /// The effective quota policy of account `name`: the site settings overlaid with its
    /// override, if any ([`QuotaPolicy::resolve`]).
    pub fn quota_policy(&self, name: &str) -> QuotaPolicy {
        QuotaPolicy::resolve(&self.settings, self.account_policies.get(name))
    }

    /// Whether a key is configured (the key itself is never shown).
    pub fn has_management_key(&self) -> bool {
        self.management_key
            .as_ref()
            .is_some_and(|k| !k.expose_secret().is_empty())
            || self
                .management_key_env
                .as_ref()
                .is_some_and(|v| !v.is_empty())
    }
}

/// Normalises a site id: lowercase, every non-alphanumeric → `-`, runs collapsed, trimmed
/// (api.md `POST /api/settings/sites`). Empty input gives `"site"`.
pub fn normalize_site_id(raw: &str) -> String {
    let mut out = String::new();
    for c in raw.trim().chars().flat_map(char::to_lowercase) {
        if c.is_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let trimmed = out.trim_matches('-').to_string();
    if trimmed.is_empty() {
        "site".into()
    } else {
        trimmed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn site_ids_are_normalised() {
        assert_eq!(normalize_site_id("  My CPA / Tokyo "), "my-cpa-tokyo");
        assert_eq!(normalize_site_id("---"), "site");
        assert_eq!(normalize_site_id("Default"), "default");
    }
}
