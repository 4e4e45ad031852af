//! `quota-patrol init`: a commented starter configuration for one CPA site
//! (`templates/init.toml.j2`, rendered with minijinja). It never holds a secret: the admin token
//! and the management key are named as environment variables.

use anyhow::{Context, bail};

/// Where the written daemon lives: its API listener and its SQLite file.
#[derive(Debug, Clone)]
pub struct Place {
    /// `[server] listen`: another port beside a demo or a second daemon, `0.0.0.0:8390` in a
    /// container.
    pub listen: std::net::SocketAddr,
    /// `[database] path` (relative paths are from the daemon's working directory).
    pub database: std::path::PathBuf,
}

/// The starter configuration for the CPA at `cpa_url` (an absolute `http`/`https` URL, without
/// query or fragment), as site `site_id` named `site_name`, with the API and database of `place`. Errors: an
/// invalid URL, or a site id that is not lower-case letters, digits and `-`/`_`.
pub fn starter_config(
    cpa_url: &str,
    site_id: &str,
    site_name: &str,
    place: &Place,
) -> anyhow::Result<String> {
    let url = reqwest::Url::parse(cpa_url.trim()).with_context(|| {
        format!("--cpa-url {cpa_url:?} is not a URL (e.g. http://127.0.0.1:8317)")
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        bail!("--cpa-url must be an http:// or https:// address with a host, got {cpa_url:?}");
    }
    if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
        bail!("--cpa-url takes CPA's base address only (no credentials, query or fragment)");
    }
    let ok_id = !site_id.is_empty()
        && site_id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !ok_id {
        bail!("--site-id {site_id:?}: use lower-case letters, digits, '-' and '_'");
    }
    let base = url.as_str().trim_end_matches('/').to_owned();
    let mut env = minijinja::Environment::new();
    env.add_template("init", include_str!("../templates/init.toml.j2"))?;
    let text = env.get_template("init")?.render(minijinja::context! {
        cpa_url => toml_text(&base),
        site_id => site_id,
        site_name => toml_text(site_name.trim()),
        listen => place.listen.to_string(),
        database => toml_text(&place.database.to_string_lossy()),
    })?;
    Ok(text)
}

/// `s` safe inside a TOML basic string (`"…"`).
fn toml_text(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place() -> Place {
        Place {
            listen: "127.0.0.1:8390".parse().unwrap(),
            database: "quota-patrol.db".into(),
        }
    }

    #[test]
    fn bad_addresses_and_ids_are_refused_with_the_reason() {
        for bad in [
            "127.0.0.1:8317",
            "ftp://cpa",
            "http://user:pw@cpa:8317",
            "http://cpa/?k=1",
            "",
        ] {
            assert!(
                starter_config(bad, "main", "Main", &place()).is_err(),
                "{bad}"
            );
        }
        assert!(starter_config("http://cpa:8317", "Main CPA", "x", &place()).is_err());
    }

    #[test]
    fn the_url_and_name_are_written_and_quoted() {
        let text = starter_config("http://cpa:8317/", "main", "My \"CPA\"", &place()).unwrap();
        assert!(text.contains("cpa_base_url = \"http://cpa:8317\""));
        assert!(text.contains("listen = \"127.0.0.1:8390\""));
        assert!(text.contains("path = \"quota-patrol.db\""));
        assert!(text.ends_with('\n'), "a text file ends with a newline");
        assert!(text.contains("name = \"My \\\"CPA\\\"\""));
        let parsed: toml::Table = text.parse().unwrap();
        assert_eq!(parsed["sites"][0]["name"].as_str(), Some("My \"CPA\""));
    }
}
