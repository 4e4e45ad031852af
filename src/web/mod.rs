//! The status page (docs/rules/api.md §7): read-only HTML on the API listener — `/` (one card per site),
//! `/sites/{id}` (accounts in priority order, rounds, operation log, 7-day chart, router) —
//! rendered by minijinja from `templates/web/` (embedded at build time), behind a sign-in form
//! that exchanges the admin token for a session cookie (`session.rs`). No JavaScript, no
//! external asset; the pages reload themselves every minute. It changes no state but its own
//! sessions and reads `jobs::status_page` only.

mod chart;
mod session;
mod view;

use std::sync::Arc;

use axum::Form;
use axum::extract::{OriginalUri, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum_extra::extract::cookie::CookieJar;
use chrono::Duration;
use chrono_tz::Tz;
use minijinja::{Environment, UndefinedBehavior};
use secrecy::SecretString;
use serde::{Deserialize, Serialize};

use crate::jobs::{JobError, Patrol, status_page};

pub use session::COOKIE;

/// What the pages serve from; built by the app wiring.
pub struct WebState {
    pub patrol: Patrol,
    /// The API's admin token: the sign-in form takes it.
    pub admin_token: SecretString,
    /// `[alerts] timezone`: every time on the pages is shown in it.
    pub tz: Tz,
    /// `[server] session_hours`: how long a sign-in lasts.
    pub session: Duration,
    pages: Pages,
}

impl WebState {
    /// The state of the pages (templates compiled here).
    pub fn new(patrol: Patrol, admin_token: SecretString, tz: Tz, session: Duration) -> Self {
        Self {
            patrol,
            admin_token,
            tz,
            session,
            pages: Pages::new(),
        }
    }
}

type Shared = Arc<WebState>;

/// The embedded templates.
struct Pages {
    env: Environment<'static>,
}

impl Pages {
    /// Every template of `templates/web/`; undefined variables are errors, `.html` escapes.
    fn new() -> Self {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        for (name, source) in [
            (
                "base.html",
                include_str!("../../templates/web/base.html.j2"),
            ),
            (
                "macros.html",
                include_str!("../../templates/web/macros.html.j2"),
            ),
            (
                "signin.html",
                include_str!("../../templates/web/signin.html.j2"),
            ),
            (
                "overview.html",
                include_str!("../../templates/web/overview.html.j2"),
            ),
            (
                "site.html",
                include_str!("../../templates/web/site.html.j2"),
            ),
            (
                "not_found.html",
                include_str!("../../templates/web/not_found.html.j2"),
            ),
        ] {
            env.add_template(name, source)
                .unwrap_or_else(|e| panic!("embedded template {name} does not parse: {e}"));
        }
        Self { env }
    }

    /// Renders `name` with `ctx`; a template failure (a bug: the tests render every page) is
    /// logged and answered 500 without details.
    fn render(&self, name: &str, ctx: impl Serialize, status: StatusCode) -> Response {
        let body = self
            .env
            .get_template(name)
            .and_then(|t| t.render(minijinja::Value::from(minijinja::value::Serde(ctx))));
        match body {
            Ok(html) => html_response(status, html),
            Err(e) => {
                tracing::error!(template = name, error = %e, "status page template failed");
                html_response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "<!doctype html><title>Error</title><p>The page could not be rendered; see the daemon's log.</p>".into(),
                )
            }
        }
    }
}

/// An HTML answer with the headers of every page: no caching (the pages show live state), a
/// content security policy allowing only inline styles and same-origin forms (no script at
/// all), no framing, no referrer.
fn html_response(status: StatusCode, html: String) -> Response {
    let mut r = (status, html).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    r
}

/// `/`, `/sites/{id}`, `GET|POST /signin`, `POST /signout`.
pub fn routes(state: WebState) -> axum::Router {
    axum::Router::new()
        .route("/", get(overview_page))
        .route("/sites/{id}", get(site_page))
        .route("/signin", get(signin_form).post(signin))
        .route("/signout", post(signout))
        .with_state(Arc::new(state))
}

/// Redirect to the sign-in form, coming back to `uri` afterwards.
fn to_signin(uri: &axum::http::Uri) -> Response {
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let query = serde_urlencoded::to_string([("next", path)]).unwrap_or_default();
    Redirect::to(&format!("/signin?{query}")).into_response()
}

fn clock(st: &WebState) -> view::Clock {
    view::Clock {
        now: st.patrol.now(),
        tz: st.tz,
    }
}

/// A read that failed: logged, answered 503 (the page says to retry; nothing else changes).
fn unavailable(st: &WebState, e: &JobError) -> Response {
    tracing::warn!(error = %e, "status page not rendered: read failed");
    st.pages.render(
        "not_found.html",
        NotFound {
            frame: view::Frame::new(clock(st), true),
            title: "Temporarily unavailable",
            message: "The state could not be read just now; the page reloads in a minute.".into(),
        },
        StatusCode::SERVICE_UNAVAILABLE,
    )
}

#[derive(Serialize)]
struct NotFound {
    frame: view::Frame,
    title: &'static str,
    message: String,
}

async fn overview_page(
    State(st): State<Shared>,
    jar: CookieJar,
    OriginalUri(uri): OriginalUri,
) -> Response {
    if !session::signed_in(&st, &jar).await {
        return to_signin(&uri);
    }
    match status_page::overview(&st.patrol).await {
        Ok(cards) => st.pages.render(
            "overview.html",
            view::overview(clock(&st), &cards),
            StatusCode::OK,
        ),
        Err(e) => unavailable(&st, &e),
    }
}

async fn site_page(
    State(st): State<Shared>,
    jar: CookieJar,
    OriginalUri(uri): OriginalUri,
    Path(id): Path<String>,
) -> Response {
    if !session::signed_in(&st, &jar).await {
        return to_signin(&uri);
    }
    let site = match st.patrol.site(&id).await {
        Ok(s) => s,
        Err(JobError::UnknownSite(_)) => {
            return st.pages.render(
                "not_found.html",
                NotFound {
                    frame: view::Frame::new(clock(&st), true),
                    title: "No such site",
                    message: format!("There is no site with the id {id:?}."),
                },
                StatusCode::NOT_FOUND,
            );
        }
        Err(e) => return unavailable(&st, &e),
    };
    match status_page::site_page(&st.patrol, &site).await {
        Ok(p) => st
            .pages
            .render("site.html", view::site(clock(&st), &p), StatusCode::OK),
        Err(e) => unavailable(&st, &e),
    }
}

/// `?next=` of the sign-in form.
#[derive(Debug, Deserialize)]
struct NextQuery {
    next: Option<String>,
}

#[derive(Serialize)]
struct SignInPage {
    frame: view::Frame,
    next: String,
    error: Option<&'static str>,
}

async fn signin_form(
    State(st): State<Shared>,
    jar: CookieJar,
    Query(q): Query<NextQuery>,
) -> Response {
    let next = session::local_path(q.next.as_deref());
    if session::signed_in(&st, &jar).await {
        return Redirect::to(&next).into_response();
    }
    let page = SignInPage {
        frame: view::Frame::new(clock(&st), false),
        next,
        error: None,
    };
    st.pages.render("signin.html", page, StatusCode::OK)
}

/// The sign-in form's fields. Not `Debug`: it carries the token.
#[derive(Deserialize)]
struct SignInForm {
    #[serde(default)]
    token: String,
    next: Option<String>,
}

async fn signin(
    State(st): State<Shared>,
    headers: HeaderMap,
    jar: CookieJar,
    Form(form): Form<SignInForm>,
) -> Response {
    let next = session::local_path(form.next.as_deref());
    match session::sign_in(&st, jar, &form.token, session::via_tls(&headers)).await {
        Ok(jar) => {
            tracing::info!("status page: signed in");
            (jar, Redirect::to(&next)).into_response()
        }
        Err(e) => {
            let (status, message) = match e {
                session::SignInError::WrongToken => {
                    tracing::warn!("status page sign-in refused: wrong admin token");
                    (StatusCode::UNAUTHORIZED, "That is not the admin token.")
                }
                session::SignInError::Store(e) => {
                    tracing::warn!(error = %e, "status page sign-in failed: store");
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        "The session could not be stored; try again.",
                    )
                }
            };
            let page = SignInPage {
                frame: view::Frame::new(clock(&st), false),
                next,
                error: Some(message),
            };
            st.pages.render("signin.html", page, status)
        }
    }
}

async fn signout(State(st): State<Shared>, headers: HeaderMap, jar: CookieJar) -> Response {
    let jar = session::sign_out(&st, jar, session::via_tls(&headers)).await;
    (jar, Redirect::to("/signin")).into_response()
}
