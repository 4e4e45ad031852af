//! CPA build versions as reported in `X-CPA-VERSION` and the management features each one has
//! (docs/rules/cpa.md §0 version timeline, §1.2). Builds report `v7.2.140` (Docker images), `7.2.140`
//! (release config) or `dev` (plain `go build`); anything that does not parse counts as the
//! oldest build, so a feature is used only when the version proves CPA has it.

use std::fmt;

/// A parsed `X-CPA-VERSION`: `Known(major, minor, patch)` or `Unknown` (absent, `dev`,
/// unparsable). `Unknown` has no optional feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CpaVersion {
    /// A release build, e.g. `v7.2.140` ⇒ `Known(7, 2, 140)`.
    Known(u32, u32, u32),
    /// No header yet, `dev`, or anything else: treated as the oldest build.
    #[default]
    Unknown,
}

impl CpaVersion {
    /// Parses `v7.2.140`, `7.2.140`, `V7.2.140`, `7.2` (patch 0) and a suffix after `-`/`+`
    /// (`v7.2.140-rc1`); everything else (`dev`, empty, `7`, `7.x.1`) is [`CpaVersion::Unknown`].
    pub fn parse(raw: &str) -> Self {
        let core = raw
            .trim()
            .trim_start_matches(['v', 'V'])
            .split(['-', '+', ' '])
            .next()
            .unwrap_or_default();
        let parts: Vec<&str> = core.split('.').collect();
        let num = |i: usize| parts.get(i).and_then(|p| p.parse::<u32>().ok());
        match parts.len() {
            3 => match (num(0), num(1), num(2)) {
                (Some(a), Some(b), Some(c)) => Self::Known(a, b, c),
                _ => Self::Unknown,
            },
            2 => match (num(0), num(1)) {
                (Some(a), Some(b)) => Self::Known(a, b, 0),
                _ => Self::Unknown,
            },
            _ => Self::Unknown,
        }
    }

    /// Parses an optional header value (`None` ⇒ [`CpaVersion::Unknown`]).
    pub fn from_header(raw: Option<&str>) -> Self {
        raw.map(Self::parse).unwrap_or_default()
    }

    fn at_least(self, major: u32, minor: u32, patch: u32) -> bool {
        match self {
            Self::Known(a, b, c) => (a, b, c) >= (major, minor, patch),
            Self::Unknown => false,
        }
    }

    /// `POST /v0/management/reset-quota {"auth_index"}` exists (CPA v7.2.22, docs/rules/cpa.md §2.5).
    pub fn has_reset_quota(self) -> bool {
        self.at_least(7, 2, 22)
    }

    /// `PATCH /auth-files/status` accepts `auth_index` as a guard; v7.2.140 answers 404 when it
    /// does not match the name (CPA v7.2.22, docs/rules/cpa.md §2.2).
    pub fn has_status_auth_index(self) -> bool {
        self.at_least(7, 2, 22)
    }

    /// CPA 8.0 or later: `/v8/management` exists and `/v0/management` is close to deprecated, so
    /// a 404 from `/v0` means the build dropped it (docs/rules/cpa.md §11).
    pub fn has_v8_management(self) -> bool {
        self.at_least(8, 0, 0)
    }

    /// `GET /auth-files?name=…&auth_index=…` filters (CPA v7.2.94, docs/rules/cpa.md §2.1); older builds
    /// ignore the query and list everything.
    pub fn has_list_filters(self) -> bool {
        self.at_least(7, 2, 94)
    }
}

impl fmt::Display for CpaVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Known(a, b, c) => write!(f, "v{a}.{b}.{c}"),
            Self::Unknown => f.write_str("unknown"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_spellings_builds_report_parse() {
        assert_eq!(CpaVersion::parse("v7.2.140"), CpaVersion::Known(7, 2, 140));
        assert_eq!(CpaVersion::parse("7.2.140"), CpaVersion::Known(7, 2, 140));
        assert_eq!(CpaVersion::parse(" V7.1.19 "), CpaVersion::Known(7, 1, 19));
        assert_eq!(
            CpaVersion::parse("v7.2.140-rc1"),
            CpaVersion::Known(7, 2, 140)
        );
        assert_eq!(CpaVersion::parse("7.2"), CpaVersion::Known(7, 2, 0));
    }

    #[test]
    fn dev_and_junk_are_unknown_and_have_no_feature() {
        for raw in ["dev", "", "7", "v7.x.1", "latest", "7.2.1.4"] {
            let v = CpaVersion::parse(raw);
            assert_eq!(v, CpaVersion::Unknown, "{raw:?}");
            assert!(!v.has_reset_quota() && !v.has_status_auth_index() && !v.has_list_filters());
        }
        assert_eq!(CpaVersion::from_header(None), CpaVersion::Unknown);
    }

    #[test]
    fn features_switch_on_at_the_versions_of_the_timeline() {
        let v = CpaVersion::parse;
        assert!(!v("v7.1.19").has_reset_quota());
        assert!(!v("v7.2.21").has_reset_quota());
        assert!(v("v7.2.22").has_reset_quota());
        assert!(v("v7.2.22").has_status_auth_index());
        assert!(!v("v7.2.93").has_list_filters());
        assert!(v("v7.2.94").has_list_filters());
        assert!(v("7.2.140").has_list_filters());
        assert!(
            v("v8.0.0").has_reset_quota(),
            "later majors keep the features"
        );
        assert!(!v("v6.9.99").has_status_auth_index());
        assert!(!v("v7.2.140").has_v8_management());
        assert!(v("8.0.0").has_v8_management() && v("v8.0.3").has_v8_management());
        assert!(!v("dev").has_v8_management(), "unknown counts as oldest");
    }
}
