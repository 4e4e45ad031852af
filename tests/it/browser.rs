//! The status page (docs/rules/api.md §7) in a real headless Chromium, driven over WebDriver by fantoccini
//! through Debian's `chromedriver`: sign-in, the overview and a site's page as the browser lays
//! them out (rows, counts, bar widths against the percentages), sign-out, and screenshots under
//! `target/screenshots/` (copies under `docs/` with `QP_UPDATE_SCREENSHOTS=1`). Without
//! `chromium` + `chromium-driver` the tests print one line and pass, unless `QP_REQUIRE_BROWSER`
//! is set (`.ci/run` sets it). Nothing sleeps: chromedriver's start line and the DOM are awaited.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration as StdDuration;

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use quota_patrol::clock::Clock;

use crate::helpers::*;

/// Debian's browser and its WebDriver server (packages `chromium`, `chromium-driver`).
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Window of every session (CSS pixels): the page's full width (its `main` stops at 1400 px;
/// the accounts table scrolls sideways past that), tall enough for a site of ten accounts;
/// screenshots are fitted to the page by resizing the window (see [`screenshot`]).
const WINDOW: (u32, u32) = (1440, 2000);

/// Deadline for chromedriver's start line and for a page element to appear (a failure bound,
/// not a wait: both are awaited as events).
const DEADLINE: StdDuration = StdDuration::from_secs(30);

const SKIP_LINE: &str = "skipped: headless Chromium not found (apt-get install chromium \
chromium-driver); set QP_REQUIRE_BROWSER=1 to make this a failure";

/// One browser test at a time: each starts its own Chromium, and two at once on a small
/// machine only make both slower.
static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Whether the browser is installed; when it is not, prints [`SKIP_LINE`] and answers false, or
/// fails the test when `QP_REQUIRE_BROWSER` is set (CI, where its absence is a broken install).
fn browser_installed() -> bool {
    let missing: Vec<&str> = [CHROMIUM, CHROMEDRIVER]
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var_os("QP_REQUIRE_BROWSER").is_none(),
        "QP_REQUIRE_BROWSER is set but {missing:?} is missing: apt-get install chromium chromium-driver"
    );
    println!("{SKIP_LINE}");
    false
}

/// A running chromedriver on 127.0.0.1 (port chosen by the OS); stopped on drop.
struct Chromedriver {
    child: Child,
    port: u16,
}

impl Chromedriver {
    /// Starts chromedriver on port 0 and awaits its `... started successfully on port N.` line,
    /// which names the bound port. Its log goes to `log_path`.
    async fn start(log_path: &Path) -> Chromedriver {
        let mut child = Command::new(CHROMEDRIVER)
            .arg("--port=0")
            .arg(format!("--log-path={}", log_path.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let stdout = child.stdout.take().expect("piped stdout");
        // The guard exists before the first await, so a failed start still stops the process.
        let mut driver = Chromedriver { child, port: 0 };
        let stdout = tokio::process::ChildStdout::from_std(stdout).expect("async stdout");
        let mut lines = BufReader::new(stdout).lines();
        let port = tokio::time::timeout(DEADLINE, async {
            while let Some(line) = lines.next_line().await.expect("chromedriver stdout") {
                if let Some(rest) = line.split("started successfully on port ").nth(1) {
                    return rest.trim_end_matches('.').parse::<u16>().ok();
                }
            }
            None
        })
        .await
        .expect("chromedriver prints its start line in time")
        .expect("chromedriver's start line names its port");
        // Keep draining its stdout so that a chatty driver never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        driver.port = port;
        driver
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Asks chromedriver to quit (it closes the browsers it started; a kill would orphan them).
    fn request_shutdown(&self) -> std::io::Result<()> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port))?;
        s.set_read_timeout(Some(DEADLINE))?;
        s.write_all(b"GET /shutdown HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")?;
        let mut answer = Vec::new();
        s.read_to_end(&mut answer)?;
        Ok(())
    }
}

impl Drop for Chromedriver {
    fn drop(&mut self) {
        if self.port == 0 || self.request_shutdown().is_err() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// The WebDriver capabilities: Debian's Chromium, headless, a fixed window, a fresh profile in
/// `profile`, and every host name but 127.0.0.1 unresolvable (no network beyond loopback).
fn capabilities(profile: &Path) -> fantoccini::wd::Capabilities {
    let caps = json!({
        "browserName": "chrome",
        "goog:chromeOptions": {
            "binary": CHROMIUM,
            "args": [
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                format!("--window-size={},{}", WINDOW.0, WINDOW.1),
                format!("--user-data-dir={}", profile.display()),
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                "--force-device-scale-factor=1",
                "--hide-scrollbars",
            ],
        },
    });
    match caps {
        Value::Object(map) => map,
        _ => unreachable!("a JSON object"),
    }
}

/// Runs `scenario` against a fresh headless Chromium, then ends the browser session — also
/// when the scenario panics (the panic is re-raised after), so no Chromium outlives the test.
async fn with_browser<F, Fut>(scenario: F)
where
    F: FnOnce(Client) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let _one = ONE_BROWSER.lock().await;
    let scratch = tempfile::tempdir().unwrap();
    let driver = Chromedriver::start(&scratch.path().join("chromedriver.log")).await;
    let client = ClientBuilder::new(HttpConnector::new())
        .capabilities(capabilities(&scratch.path().join("profile")))
        .connect(&driver.url())
        .await
        .expect("a WebDriver session with headless Chromium");
    let outcome = tokio::spawn(scenario(client.clone())).await;
    let closed = client.close().await;
    drop(driver);
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
    closed.expect("the browser session ends");
}

/// The path of the page the browser shows (`/signin`, `/`, …).
async fn path(c: &Client) -> String {
    c.current_url().await.unwrap().path().to_string()
}

/// Waits for the element `css` (as an event: WebDriver's own polling up to [`DEADLINE`]).
async fn wait_for(c: &Client, css: &str) -> fantoccini::elements::Element {
    match c
        .wait()
        .at_most(DEADLINE)
        .for_element(Locator::Css(css))
        .await
    {
        Ok(e) => e,
        Err(e) => panic!("no {css} on {}: {e}", path(c).await),
    }
}

/// Types `token` into the sign-in form and submits it; the next page has loaded on return.
async fn sign_in_with(c: &Client, token: &str) {
    let field = wait_for(c, "form[action='/signin'] input#token[type=password]").await;
    field.clear().await.unwrap();
    field.send_keys(token).await.unwrap();
    c.find(Locator::Css("button#signin"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for(c, "body").await;
}

/// The page's content height and the window's height beyond its viewport (CSS pixels).
const HEIGHTS_JS: &str = "const b = document.body;
return [Math.ceil(b.getBoundingClientRect().bottom + parseFloat(getComputedStyle(b).marginBottom)),
        window.outerHeight - window.innerHeight];";

/// Resizes the window so that its viewport holds the page (at most `max_height` pixels of it:
/// a crop) and saves a PNG of the viewport as `target/screenshots/{name}.png`, and as
/// `docs/{docs_name}.png` too when one is given. Returns the target path.
async fn screenshot(c: &Client, name: &str, docs_name: Option<&str>, max_height: u32) -> PathBuf {
    let heights: [u32; 2] =
        serde_json::from_value(c.execute(HEIGHTS_JS, vec![]).await.unwrap()).expect("two heights");
    let [content, chrome] = heights;
    c.set_window_size(WINDOW.0, content.clamp(300, max_height) + chrome)
        .await
        .unwrap();
    let png = c.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("target/screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{name}.png"));
    std::fs::write(&file, &png).unwrap();
    if let Some(docs_name) = docs_name {
        let docs = root.join("docs");
        std::fs::create_dir_all(&docs).unwrap();
        std::fs::write(docs.join(format!("{docs_name}.png")), &png).unwrap();
    }
    c.set_window_size(WINDOW.0, WINDOW.1).await.unwrap();
    file
}

/// Where the screenshots of one walk go: `target/screenshots/{target}-overview.png` and
/// `…/{target}-site.png`, plus `docs/status-overview.png` and `docs/status-page.png` when
/// `docs` is set. The site page is cut at [`SITE_SHOT_HEIGHT`] pixels.
#[derive(Clone, Copy)]
struct Shots {
    target: &'static str,
    docs: bool,
}

/// Height of the site page's screenshot: the card, the chart and the first accounts; the
/// docs' copy stays under 300 KB.
const SITE_SHOT_HEIGHT: u32 = 1600;

impl Shots {
    /// The walk of `target`, copied to `docs/` when `QP_UPDATE_SCREENSHOTS=1` and `for_docs`.
    fn new(target: &'static str, for_docs: bool) -> Shots {
        let asked = std::env::var("QP_UPDATE_SCREENSHOTS").is_ok_and(|v| v == "1");
        Shots {
            target,
            docs: for_docs && asked,
        }
    }
}

/// One meter cell of a rendered account row: the `data-percent`, the widths the browser laid
/// out (pixels) and the cell's text.
#[derive(Debug, serde::Deserialize)]
struct Cell {
    percent: Option<f64>,
    fill_px: Option<f64>,
    inner_px: Option<f64>,
    text: String,
}

/// One `tr[data-account]` of `#accounts` as rendered.
#[derive(Debug, serde::Deserialize)]
struct Row {
    account: String,
    availability: String,
    /// Carries the `active` mark (in the active set).
    active: bool,
    weekly: Option<Cell>,
    five_hour: Option<Cell>,
}

/// Reads every account row of the site page, in page order, with the laid-out widths of each
/// meter: `.fill`'s border box and `.meter`'s content box (its inner width), in CSS pixels.
const ROWS_JS: &str = r#"
const cell = (tr, cls) => {
  const td = tr.querySelector('td.' + cls);
  if (!td) return null;
  const meter = td.querySelector('.meter');
  if (!meter) return { percent: null, fill_px: null, inner_px: null, text: td.textContent.trim() };
  const fill = meter.querySelector('.fill');
  const s = getComputedStyle(meter);
  const inner = meter.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);
  return {
    percent: parseFloat(meter.dataset.percent),
    fill_px: fill ? fill.getBoundingClientRect().width : null,
    inner_px: inner,
    text: td.textContent.trim(),
  };
};
return Array.from(document.querySelectorAll('table#accounts tr[data-account]')).map(tr => ({
  account: tr.dataset.account,
  availability: tr.dataset.availability || '',
  active: Array.from(tr.querySelectorAll('.mark')).some(m => m.textContent.trim() === 'active'),
  weekly: cell(tr, 'weekly'),
  five_hour: cell(tr, 'five-hour'),
}));
"#;

async fn rows(c: &Client) -> Vec<Row> {
    let v = c.execute(ROWS_JS, vec![]).await.unwrap();
    serde_json::from_value(v).expect("rows as read by ROWS_JS")
}

/// Checks one meter cell against the account's known usage (`None` = no data): the
/// `data-percent`, the text, and the bar's width = percent of the meter's inner width (±1 pt).
fn check_cell(account: &str, what: &str, cell: Option<&Cell>, known: Option<f64>) {
    let cell = cell.unwrap_or_else(|| panic!("{account}: no {what} cell"));
    let Some(expected) = known else {
        assert!(
            cell.percent.is_none(),
            "{account} {what}: a meter without data: {cell:?}"
        );
        assert_eq!(cell.text, "—", "{account} {what}: no data shows a dash");
        return;
    };
    let percent = cell
        .percent
        .unwrap_or_else(|| panic!("{account} {what}: no meter: {cell:?}"));
    assert!(
        (percent - expected).abs() <= 0.051,
        "{account} {what}: data-percent {percent}, the account is at {expected}"
    );
    assert!(
        cell.text.contains(&format!("{expected:.1} %")),
        "{account} {what}: the number is in the text: {cell:?}"
    );
    let (fill, inner) = (cell.fill_px.unwrap(), cell.inner_px.unwrap());
    assert!(
        inner > 0.0,
        "{account} {what}: the meter has a width: {cell:?}"
    );
    let drawn = fill / inner * 100.0;
    assert!(
        (drawn - percent.clamp(0.0, 100.0)).abs() <= 1.0,
        "{account} {what}: the bar is {drawn:.2} % of its meter for {percent} %"
    );
}

/// The site card's `dd[data-count]` numbers on `/`.
async fn card_counts(c: &Client, site: &str) -> BTreeMap<String, u64> {
    let js =
        "const card = document.querySelector(`article.site-card[data-site=\"${arguments[0]}\"]`);
        if (!card) return null;
        const out = {};
        card.querySelectorAll('dl.counts dd[data-count]').forEach(dd => {
          out[dd.dataset.count] = parseInt(dd.textContent.trim(), 10);
        });
        return out;";
    let v = c.execute(js, vec![json!(site)]).await.unwrap();
    serde_json::from_value(v).unwrap_or_else(|_| panic!("no site card for {site}"))
}

/// The published pool (`GET /api/pool`) the pages show.
async fn api_pool(t: &TestApp) -> Value {
    let r = t.get(&format!("/api/pool?siteId={SITE}")).await;
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

/// Known usage of some of the scenario's accounts as (e-mail, five-hour %, weekly %); `None`
/// = the cell shows no data (no such window, or never read successfully).
type Known = Vec<(String, Option<f64>, Option<f64>)>;

/// Signs in, checks the overview against the published pool and the site page against `known`,
/// saves the screenshots, and signs out.
async fn walk_the_pages(c: Client, t: TestApp, known: Known, shots: Shots) {
    // Every page needs a session: `/` leads to the sign-in form.
    c.goto(&t.url("/")).await.unwrap();
    wait_for(&c, "form[action='/signin']").await;
    assert_eq!(path(&c).await, "/signin");

    sign_in_with(&c, "not-the-admin-token").await;
    let error = wait_for(&c, "p.error[role=alert]").await;
    assert!(
        !error.text().await.unwrap().trim().is_empty(),
        "the refusal says why"
    );
    assert_eq!(path(&c).await, "/signin", "a wrong token stays on the form");

    sign_in_with(&c, ADMIN_TOKEN).await;
    wait_for(&c, "article.site-card").await;
    assert_eq!(
        path(&c).await,
        "/",
        "signed in, back where the visit started"
    );
    let cookie = c.get_named_cookie("qp_session").await.unwrap();
    assert_eq!(
        cookie.http_only(),
        Some(true),
        "the session cookie is HttpOnly"
    );
    let script_sees = c.execute("return document.cookie;", vec![]).await.unwrap();
    assert!(
        !script_sees.as_str().unwrap_or("").contains("qp_session"),
        "scripts cannot read the session cookie"
    );

    let pool = api_pool(&t).await;
    let counts = card_counts(&c, SITE).await;
    let of = |state: &str| pool["counts"][state].as_u64().unwrap();
    // The card's "invalid" counts rejected credentials and deactivated workspaces together.
    let expected = [
        ("usable", of("usable")),
        ("exhausted", of("exhausted")),
        ("invalid", of("invalid") + of("deactivated")),
    ];
    for (state, n) in expected {
        assert_eq!(
            counts.get(state).copied(),
            Some(n),
            "the card's {state} count is the published pool's: {counts:?}"
        );
    }
    let active = *counts.get("active").expect("an active count");
    let link = format!("a[href='/sites/{SITE}']");
    c.find(Locator::Css(&format!(
        "article.site-card[data-site='{SITE}'] {link}"
    )))
    .await
    .expect("the card links to the site page");
    let docs = shots.docs.then_some("status-overview");
    screenshot(&c, &format!("{}-overview", shots.target), docs, WINDOW.1).await;

    c.goto(&t.url(&format!("/sites/{SITE}"))).await.unwrap();
    wait_for(&c, "table#accounts").await;
    wait_for(&c, "figure#history svg[role=img]").await;
    let rendered = rows(&c).await;
    check_rows(&t, &pool, &rendered, &known);
    // "Active": the active set under priority routing (rows marked so), else every usable one.
    let in_use = if pool["routingEnabled"] == true {
        rendered.iter().filter(|r| r.active).count()
    } else {
        rendered
            .iter()
            .filter(|r| r.availability == "usable")
            .count()
    };
    assert_eq!(
        in_use as u64, active,
        "the card's active count is the rows in use"
    );
    let docs = shots.docs.then_some("status-page");
    let name = format!("{}-site", shots.target);
    screenshot(&c, &name, docs, SITE_SHOT_HEIGHT).await;

    c.find(Locator::Css("form[action='/signout'] button#signout"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for(&c, "form[action='/signin']").await;
    assert_eq!(path(&c).await, "/signin", "signed out, on the form");
    c.goto(&t.url("/")).await.unwrap();
    wait_for(&c, "form[action='/signin']").await;
    assert_eq!(
        path(&c).await,
        "/signin",
        "after sign-out `/` needs a session again"
    );
}

/// One row per account in the published pool's order, with its availability, and the meters
/// of every account in `known` match its usage.
fn check_rows(t: &TestApp, pool: &Value, rendered: &[Row], known: &Known) {
    let order: Vec<&str> = pool["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    let shown: Vec<&str> = rendered.iter().map(|r| r.account.as_str()).collect();
    assert_eq!(shown, order, "one row per account, in priority order");
    for (row, account) in rendered.iter().zip(pool["accounts"].as_array().unwrap()) {
        assert_eq!(
            row.availability, account["availability"],
            "{}: the row's availability is the pool's",
            row.account
        );
    }
    for &(ref email, five_hour, weekly) in known {
        let name = t.name_of(email);
        let row = rendered
            .iter()
            .find(|r| r.account == name)
            .unwrap_or_else(|| panic!("no row for {name}"));
        check_cell(&name, "weekly", row.weekly.as_ref(), weekly);
        check_cell(&name, "5-hour", row.five_hour.as_ref(), five_hour);
    }
}

#[tokio::test]
async fn the_status_page_signs_in_and_draws_each_account_s_usage_in_a_real_browser() {
    if !browser_installed() {
        return;
    }
    let revoked = "d.revoked@example.com";
    let t = spawn_app(vec![
        plus("a.light@example.com", 5.0, 12.0),
        plus("b.busy@example.com", 30.0, 63.5),
        plus("c.spent@example.com", 40.0, 97.0),
        with_behaviour(
            plus(revoked, 0.0, 20.0),
            quota_patrol_sim::UpstreamBehaviour::Status {
                status: 401,
                content_type: "application/json".into(),
                body: quota_patrol_sim::TOKEN_INVALIDATED.into(),
            },
        ),
    ])
    .await;
    t.inspect().await;
    let pool = api_pool(&t).await;
    let availability = |email: &str| {
        let name = t.name_of(email);
        pool["accounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == name.as_str())
            .map(|a| a["availability"].as_str().unwrap().to_string())
    };
    // The scenario the page must tell apart (the threshold is 95 %).
    assert_eq!(
        availability("a.light@example.com").as_deref(),
        Some("usable")
    );
    assert_eq!(
        availability("c.spent@example.com").as_deref(),
        Some("exhausted")
    );
    assert_eq!(availability(revoked).as_deref(), Some("invalid"));
    let known: Known = vec![
        ("a.light@example.com".into(), Some(5.0), Some(12.0)),
        ("b.busy@example.com".into(), Some(30.0), Some(63.5)),
        ("c.spent@example.com".into(), Some(40.0), Some(97.0)),
        (revoked.into(), None, None),
    ];
    let shots = Shots::new("status", false);
    with_browser(move |c| walk_the_pages(c, t, known, shots)).await;
}

/// The demo's pool (one account per situation, `sim::demo_accounts`) over a week of rounds
/// twelve hours apart with client traffic in between, so the chart has a week of samples and
/// windows have reset and refilled: every row is drawn, the bars of the accounts the last round
/// read match the simulated CPA's usage, and it is the pool docs/status-page.md's screenshots show
/// (`QP_UPDATE_SCREENSHOTS=1` writes `docs/status-*.png`).
#[tokio::test]
async fn a_week_of_the_demo_pool_renders_one_row_per_account_in_a_real_browser() {
    if !browser_installed() {
        return;
    }
    let start = t0() - chrono::Duration::days(7);
    let sim = quota_patrol_sim::SimConfig {
        management_key: Some(MGMT_KEY.into()),
        accounts: quota_patrol_sim::demo_accounts(start),
        ban_after_failures: None,
        ..Default::default()
    };
    let t = spawn_app_at(start, sim, fast_settings(), false, Default::default()).await;
    for round in 0..14u64 {
        t.sim.simulate_traffic(round, 0.6, 120);
        t.inspect_forced().await;
        t.clock.advance(chrono::Duration::hours(12));
    }
    t.sim.simulate_traffic(99, 0.6, 120);
    t.inspect_forced().await;
    let known = read_by_the_last_round(&t);
    assert!(
        known.len() >= 5,
        "most demo accounts answer normally: {known:?}"
    );
    let shots = Shots::new("demo", true);
    with_browser(move |c| walk_the_pages(c, t, known, shots)).await;
}

/// The usage the simulated CPA answers now for the accounts a forced round reads as is: normal
/// upstream, an auth index, not disabled by hand (windows rolled forward as the upstream does).
fn read_by_the_last_round(t: &TestApp) -> Known {
    let now = t.clock.now();
    t.sim
        .accounts()
        .into_iter()
        .filter(|a| {
            a.behaviour == quota_patrol_sim::UpstreamBehaviour::Normal && a.auth_index.is_some()
        })
        .map(|a| {
            let mut usage = a.usage.clone();
            quota_patrol_sim::roll_forward(&mut usage, now);
            let long = usage.weekly.as_ref().or(usage.monthly.as_ref());
            (
                a.email,
                usage.five_hour.as_ref().map(|w| w.used_percent),
                long.map(|w| w.used_percent),
            )
        })
        .collect()
}
