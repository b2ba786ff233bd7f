//! The page: one HTML document with its script and style sheet compiled into the binary
//! (no external assets), and a small JSON API that applies steps to an [`Engine`] held by
//! this process.
//!
//! - `GET /` the page; `GET /app.js`, `GET /style.css` its parts.
//! - `GET /api/state` the [`crate::engine::View`].
//! - `POST /api/step` `{"step": "wait-5"}`: take one step; the new view, or
//!   `400 {"error": "..."}` with nothing changed.
//! - `POST /api/reset` `{"n": 5, "seed": 7, "start": "term41", "steps": "wait-14,..."}`:
//!   replay a share link (`start` is optional: `fresh` by default); the new view, or 400
//!   with the old cluster kept. `{"scenario": "split-vote", "steps": "wait-40"}` loads a
//!   prepared scenario to step through, with `steps` (a beginning of its list) taken;
//!   without `steps`, all of them.
//! - `POST /api/next` takes the loaded scenario's next step; `POST /api/run-to-end` the
//!   rest of them.
//! - `GET /api/scenarios` the prepared scenarios; `GET /api/starts` the start states.
//!
//! A refused step answers `400 {"error": "why: remedy", "why": "...", "remedy": "..."}`.

use std::future::Future;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;

use crate::engine::{Engine, Start};
use crate::scenarios::{find, SCENARIOS};
use crate::step::{parse_step, StepError};

const INDEX_HTML: &str = include_str!("page/index.html");
const APP_JS: &str = include_str!("page/app.js");
const STYLE_CSS: &str = include_str!("page/style.css");

/// The cluster size and seed the page starts with.
pub const DEFAULT_NODES: u64 = 5;
/// See [`DEFAULT_NODES`].
pub const DEFAULT_SEED: u64 = 7;

type Shared = Arc<Mutex<Engine>>;

#[derive(Deserialize)]
struct StepRequest {
    step: String,
}

#[derive(Deserialize)]
struct ResetRequest {
    /// A prepared scenario to step through; `n`, `seed` and `start` are then its own.
    #[serde(default)]
    scenario: Option<String>,
    #[serde(default)]
    n: Option<u64>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    start: String,
    /// The steps to take; for a scenario, `None` means all of its steps.
    #[serde(default)]
    steps: Option<String>,
}

fn bad(e: StepError) -> Response {
    let mut body = serde_json::json!({ "error": e.to_string() });
    // A step that does not apply now says why and what would make it possible, apart, so
    // that the page can show both.
    let refused = match &e {
        StepError::NotNow(r) => Some(r),
        StepError::Replay { error, .. } => match error.as_ref() {
            StepError::NotNow(r) => Some(r),
            _ => None,
        },
        _ => None,
    };
    if let Some(r) = refused {
        body["why"] = r.why.clone().into();
        body["remedy"] = r.remedy.clone().into();
    }
    (StatusCode::BAD_REQUEST, Json(body)).into_response()
}

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Engine> {
    // A panic while holding the lock would be a bug in the engine; the page keeps working
    // with the state as it was left rather than refusing every later request.
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

async fn state(State(shared): State<Shared>) -> Response {
    Json(lock(&shared).view()).into_response()
}

async fn step(State(shared): State<Shared>, Json(req): Json<StepRequest>) -> Response {
    let mut engine = lock(&shared);
    let next = engine.steps().len() + 1;
    match parse_step(next, req.step.trim()).and_then(|s| engine.apply(s)) {
        Ok(()) => Json(engine.view()).into_response(),
        Err(e) => bad(e),
    }
}

async fn next(State(shared): State<Shared>) -> Response {
    let mut engine = lock(&shared);
    match engine.next_step() {
        Ok(()) => Json(engine.view()).into_response(),
        Err(e) => bad(e),
    }
}

async fn run_to_end(State(shared): State<Shared>) -> Response {
    let mut engine = lock(&shared);
    match engine.run_to_end() {
        Ok(()) => Json(engine.view()).into_response(),
        Err(e) => bad(e),
    }
}

fn fresh(req: &ResetRequest) -> Result<Engine, StepError> {
    if let Some(name) = &req.scenario {
        let s = find(name).ok_or_else(|| StepError::UnknownScenario(name.clone()))?;
        return Engine::scenario(s, req.steps.as_deref());
    }
    let start: Start = req.start.parse()?;
    Engine::replay_from(
        req.n.unwrap_or(DEFAULT_NODES),
        req.seed.unwrap_or(DEFAULT_SEED),
        start,
        req.steps.as_deref().unwrap_or_default(),
    )
}

async fn reset(State(shared): State<Shared>, Json(req): Json<ResetRequest>) -> Response {
    match fresh(&req) {
        Ok(fresh) => {
            let mut engine = lock(&shared);
            *engine = fresh;
            Json(engine.view()).into_response()
        }
        Err(e) => bad(e),
    }
}

async fn scenarios() -> Response {
    let list: Vec<serde_json::Value> = SCENARIOS
        .iter()
        .map(|s| {
            serde_json::json!({
                "name": s.name, "title": s.title, "n": s.n, "seed": s.seed,
                "start": s.start, "steps": s.steps,
            })
        })
        .collect();
    Json(list).into_response()
}

async fn starts() -> Response {
    let list: Vec<serde_json::Value> = Start::ALL
        .iter()
        .map(|s| serde_json::json!({ "name": s, "title": s.title() }))
        .collect();
    Json(list).into_response()
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

/// The page's routes, over a fresh cluster of [`DEFAULT_NODES`] nodes.
pub fn router() -> Router {
    let engine = Engine::new(DEFAULT_NODES, DEFAULT_SEED).expect("the default size is valid");
    Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }),
        )
        .route(
            "/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/style.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE_CSS) }),
        )
        .route("/api/state", get(state))
        .route("/api/step", post(step))
        .route("/api/reset", post(reset))
        .route("/api/next", post(next))
        .route("/api/run-to-end", post(run_to_end))
        .route("/api/scenarios", get(scenarios))
        .route("/api/starts", get(starts))
        .with_state(Arc::new(Mutex::new(engine)))
}

/// Serves the page on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router())
        .with_graceful_shutdown(shutdown)
        .await
}
