//! The page: one HTML document with its script and style sheet compiled into the binary
//! (no external assets), and a small JSON API that applies steps to an [`Engine`] held by
//! this process.
//!
//! - `GET /` the page; `GET /app.js`, `GET /style.css` its parts.
//! - `GET /api/state` the [`crate::engine::View`].
//! - `POST /api/step` `{"step": "wait-5"}`: take one step; the new view, or
//!   `400 {"error": "..."}` with nothing changed.
//! - `POST /api/reset` `{"n": 5, "seed": 7, "steps": "wait-14,..."}`: replay a scenario
//!   (a share link); the new view, or 400 with the old scenario kept.
//! - `GET /api/scenarios` the prepared scenarios.

use std::future::Future;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;

use crate::engine::Engine;
use crate::scenarios::SCENARIOS;
use crate::step::parse_step;

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
    n: u64,
    seed: u64,
    #[serde(default)]
    steps: String,
}

fn bad(e: impl std::fmt::Display) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(serde_json::json!({ "error": e.to_string() })),
    )
        .into_response()
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

async fn reset(State(shared): State<Shared>, Json(req): Json<ResetRequest>) -> Response {
    match Engine::replay(req.n, req.seed, &req.steps) {
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
                "name": s.name, "title": s.title, "n": s.n, "seed": s.seed, "steps": s.steps,
            })
        })
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
        .route("/api/scenarios", get(scenarios))
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
