//! Test-only fault injection on the HTTP port (`fault_injection = true`): cutting this node
//! off from its peers, and killing its driver thread.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::connect_info::ConnectInfo;
use axum::http::StatusCode;
use axum::Router;

use super::HttpPeer;
use crate::auth::{Action, Policy};
use crate::driver::DriverHandle;

/// Test-only fault injection: `POST /debug/block` with a body of comma-separated node ids
/// drops all traffic to and from those peers at this node's transport (an empty body heals).
/// One-way links: `in=1,2;out=3` drops what arrives from nodes 1 and 2 and what would
/// leave for node 3 (either part may be left out). Each call replaces the previous sets.
/// Mounted only when the server runs with `fault_injection = true`; with authentication on
/// (TLS or an auth file), only admins may call it, decided from the headers before the body
/// is read.
pub fn router(
    transport: tenure_transport::TransportHandle,
    driver: DriverHandle,
    enabled: bool,
    policy: Option<Arc<Policy>>,
    cluster_id: &str,
) -> Router {
    if !enabled {
        return Router::new();
    }
    let cluster_id = cluster_id.to_string();
    let metrics = Arc::clone(&driver.metrics);
    let admins_only = axum::middleware::from_fn(
        move |req: axum::extract::Request, next: axum::middleware::Next| {
            let (policy, cluster_id, metrics) =
                (policy.clone(), cluster_id.clone(), Arc::clone(&metrics));
            async move {
                let leaf = req
                    .extensions()
                    .get::<ConnectInfo<HttpPeer>>()
                    .and_then(|c| c.0.leaf.clone());
                let checked = crate::auth::authorize(
                    policy.as_deref(),
                    &cluster_id,
                    req.headers().get("authorization").map(|v| v.as_bytes()),
                    leaf.as_ref(),
                    &Action::Admin,
                    &metrics,
                );
                match checked {
                    Ok(_) => next.run(req).await,
                    Err(denied) => super::refused("fault injection: ", &denied),
                }
            }
        },
    );
    Router::new()
        .route(
            "/debug/block",
            axum::routing::post(move |body: String| {
                let transport = transport.clone();
                async move {
                    match parse_block(&body) {
                        Ok((inbound, outbound)) => {
                            transport.set_blocked_directed(inbound.clone(), outbound.clone());
                            (
                                StatusCode::OK,
                                format!("blocked from {inbound:?} to {outbound:?}\n"),
                            )
                        }
                        Err(e) => (StatusCode::BAD_REQUEST, format!("{e}\n")),
                    }
                }
            }),
        )
        .route(
            "/debug/driver-panic",
            axum::routing::post(move || {
                let driver = driver.clone();
                async move {
                    // Answered once the driver thread is gone (or after 5 s), so that what a
                    // caller asks next meets a node without its driver.
                    let _ = driver.inputs.send(crate::driver::Input::InjectPanic).await;
                    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
                    while driver.running.load(std::sync::atomic::Ordering::SeqCst) {
                        if tokio::time::Instant::now() > deadline {
                            return (
                                StatusCode::INTERNAL_SERVER_ERROR,
                                "the driver thread is still running\n",
                            );
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    (StatusCode::OK, "the driver thread panicked\n")
                }
            }),
        )
        .route_layer(admins_only)
}

/// Parses `/debug/block`'s body into the (inbound, outbound) sets of blocked peers.
fn parse_block(body: &str) -> Result<(BTreeSet<u64>, BTreeSet<u64>), String> {
    fn ids(list: &str) -> Result<BTreeSet<u64>, String> {
        let mut out = BTreeSet::new();
        for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            out.insert(
                part.parse::<u64>()
                    .map_err(|_| format!("bad node id {part:?}"))?,
            );
        }
        Ok(out)
    }
    let body = body.trim();
    if !body.contains('=') {
        let both = ids(body)?;
        return Ok((both.clone(), both));
    }
    let (mut inbound, mut outbound) = (BTreeSet::new(), BTreeSet::new());
    for part in body.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('=') {
            Some(("in", list)) => inbound = ids(list)?,
            Some(("out", list)) => outbound = ids(list)?,
            _ => return Err(format!("bad block spec {part:?} (want in=IDS;out=IDS)")),
        }
    }
    Ok((inbound, outbound))
}

#[cfg(test)]
mod tests {
    use super::parse_block;
    use std::collections::BTreeSet;

    #[test]
    fn block_specs_parse_both_directions_and_one_way_links() {
        let set = |v: &[u64]| v.iter().copied().collect::<BTreeSet<u64>>();
        assert_eq!(parse_block("").unwrap(), (set(&[]), set(&[])));
        assert_eq!(parse_block("1, 3").unwrap(), (set(&[1, 3]), set(&[1, 3])));
        assert_eq!(parse_block("in=2").unwrap(), (set(&[2]), set(&[])));
        assert_eq!(
            parse_block("in=1,2;out=3").unwrap(),
            (set(&[1, 2]), set(&[3]))
        );
        assert!(parse_block("x").is_err());
        assert!(parse_block("up=1").is_err());
        assert!(parse_block("in=a").is_err());
    }
}
