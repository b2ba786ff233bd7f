//! The page's HTTP API: steps are taken or refused with a 400 that changes nothing, a reset
//! replays a share link exactly, and the page needs nothing from outside the binary.

use axum::body::{to_bytes, Body};
use axum::http::{Request, StatusCode};
use tenure_ballot::engine::Engine;
use tenure_ballot::scenarios::find;
use tower::ServiceExt as _;

async fn call(
    app: &axum::Router,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> (StatusCode, String) {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(match body {
            Some(b) => Body::from(b.to_string()),
            None => Body::empty(),
        })
        .unwrap();
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let bytes = to_bytes(res.into_body(), 1 << 24).await.unwrap();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

#[tokio::test]
async fn steps_are_taken_or_refused_without_change() {
    let app = tenure_ballot::serve::router();
    let (_, fresh) = call(&app, "GET", "/api/state", None).await;
    let (status, body) = call(
        &app,
        "POST",
        "/api/step",
        Some(serde_json::json!({"step": "jump-2"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("not a step"), "{body}");
    let (status, body) = call(
        &app,
        "POST",
        "/api/step",
        Some(serde_json::json!({"step": "deliver-1-2"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("no message from node 1 to node 2"), "{body}");
    assert_eq!(call(&app, "GET", "/api/state", None).await.1, fresh);

    let (status, body) = call(
        &app,
        "POST",
        "/api/step",
        Some(serde_json::json!({"step": "wait-40"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let view: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(view["steps"], "wait-40");
    let leaders = view["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["role"] == "leader")
        .count();
    assert_eq!(leaders, 1);
}

#[tokio::test]
async fn reset_replays_a_share_link_and_refuses_a_bad_one() {
    let app = tenure_ballot::serve::router();
    let s = find("split-vote").unwrap();
    let (status, body) = call(
        &app,
        "POST",
        "/api/reset",
        Some(serde_json::json!({"n": s.n, "seed": s.seed, "steps": s.steps})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let expected =
        serde_json::to_string(&Engine::replay(s.n, s.seed, s.steps).unwrap().view()).unwrap();
    assert_eq!(body, expected);
    for bad in [
        serde_json::json!({"n": 4, "seed": 1, "steps": ""}),
        serde_json::json!({"n": 5, "seed": 1, "steps": "wait-40,crash-6"}),
        serde_json::json!({"n": 5, "seed": 1, "steps": "wait-40,,"}),
    ] {
        let (status, err) = call(&app, "POST", "/api/reset", Some(bad.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {err}");
        assert_eq!(
            call(&app, "GET", "/api/state", None).await.1,
            expected,
            "{bad} changed the state"
        );
    }
}

#[tokio::test]
async fn the_page_is_self_contained() {
    let app = tenure_ballot::serve::router();
    for path in ["/", "/app.js", "/style.css"] {
        let (status, body) = call(&app, "GET", path, None).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(
            !body.contains("http://") && !body.contains("https://") && !body.contains("//cdn"),
            "{path} refers to something outside the binary"
        );
    }
    let (_, html) = call(&app, "GET", "/", None).await;
    assert!(html.contains("src=\"/app.js\"") && html.contains("href=\"/style.css\""));
    let (_, list) = call(&app, "GET", "/api/scenarios", None).await;
    assert!(list.contains("split-vote") && list.contains("partition"));
}

#[tokio::test]
async fn a_scenario_steps_through_the_api_and_a_refusal_says_why_apart() {
    let app = tenure_ballot::serve::router();
    let (status, body) = call(
        &app,
        "POST",
        "/api/reset",
        Some(serde_json::json!({"scenario": "lease", "steps": ""})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let view: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(view["start"], "term41");
    assert_eq!(view["scenario"]["at"], 0);
    assert_eq!(view["scenario"]["next"], "pause-1");
    let (status, body) = call(&app, "POST", "/api/next", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let view: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (view["steps"].as_str(), &view["scenario"]["at"]),
        (Some("pause-1"), &1.into())
    );
    // A refused step: the message, and its why and remedy apart for the page.
    let (status, body) = call(
        &app,
        "POST",
        "/api/step",
        Some(serde_json::json!({"step": "resume-2"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let err: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(err["why"], "node 2 is running, not paused");
    assert_eq!(
        err["remedy"],
        "only a paused node resumes (pause node 2 first)"
    );
    assert_eq!(
        err["error"],
        "node 2 is running, not paused: only a paused node resumes (pause node 2 first)"
    );
    let (status, body) = call(&app, "POST", "/api/run-to-end", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let s = find("lease").unwrap();
    let whole = Engine::scenario(s, None).unwrap();
    assert_eq!(body, serde_json::to_string(&whole.view()).unwrap());
    let (status, _) = call(&app, "POST", "/api/next", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "no step left");
    // A share link with a start replays it; an unknown start or scenario is refused.
    let (status, body) = call(
        &app,
        "POST",
        "/api/reset",
        Some(serde_json::json!({"n": 3, "seed": 2, "start": "term41", "steps": "wait-2"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let expected =
        Engine::replay_from(3, 2, tenure_ballot::engine::Start::Term41, "wait-2").unwrap();
    assert_eq!(body, serde_json::to_string(&expected.view()).unwrap());
    for bad in [
        serde_json::json!({"n": 3, "seed": 2, "start": "term42"}),
        serde_json::json!({"scenario": "nope"}),
        serde_json::json!({"scenario": "lease", "steps": "wait-1"}),
    ] {
        let (status, err) = call(&app, "POST", "/api/reset", Some(bad.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {err}");
    }
}
