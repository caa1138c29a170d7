//! The admin API, behind the head's admin key: mint join tokens, list,
//! drain and revoke nodes (the `superfluid fleet` commands), and manage API
//! keys ([`admin_keys`](super::admin_keys), the `superfluid keys` commands).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{Path, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::extract::ApiJson;
use super::ApiError;
use crate::fleet::{FleetError, NodeSnapshot};

pub use super::admin_state::AdminState;

/// The admin routes, under `/admin/v1`.
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/admin/v1/tokens", post(mint))
        .route("/admin/v1/nodes", get(nodes))
        .route("/admin/v1/nodes/{node}/revoke", post(revoke))
        .route("/admin/v1/nodes/{node}/drain", post(drain))
        .merge(super::admin_keys::routes())
        .merge(super::admin_models::routes())
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            require_admin_key,
        ))
        .with_state(state)
}

/// Refuses any request whose bearer token is not the admin key.
async fn require_admin_key(
    State(state): State<AdminState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let membership = state
        .fleet
        .membership()
        .ok_or(ApiError::Fleet(FleetError::NoMembership))?;
    let presented = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if !constant_time_eq(
        presented.trim().as_bytes(),
        membership.admin_key().as_bytes(),
    ) {
        return Err(ApiError::Unauthorized);
    }
    Ok(next.run(request).await)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `POST /admin/v1/tokens` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenRequest {
    /// Seconds the token stays valid (default one hour).
    ttl_secs: Option<u64>,
    /// Nodes the token admits (default 1).
    uses: Option<u32>,
    /// Labels given to the nodes that join with it.
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

async fn mint(
    State(state): State<AdminState>,
    ApiJson(req): ApiJson<TokenRequest>,
) -> Result<Json<Value>, ApiError> {
    let membership = state
        .fleet
        .membership()
        .ok_or(ApiError::Fleet(FleetError::NoMembership))?;
    let ttl = req.ttl_secs.unwrap_or(3600);
    if ttl == 0 {
        return Err(ApiError::param("ttl_secs", "ttl_secs must be at least 1"));
    }
    let uses = req.uses.unwrap_or(1);
    if uses == 0 {
        return Err(ApiError::param("uses", "uses must be at least 1"));
    }
    let labels: Vec<(String, String)> = req.labels.into_iter().collect();
    let token = membership
        .mint(
            Duration::from_secs(ttl),
            uses,
            labels,
            state.link_addrs.clone(),
        )
        .map_err(|e| ApiError::Fleet(FleetError::Membership(e)))?;
    tracing::info!(ttl_secs = ttl, uses, "minted a join token");
    Ok(Json(json!({"token": token, "ttl_secs": ttl, "uses": uses})))
}

async fn nodes(State(state): State<AdminState>) -> Json<Value> {
    let roster = state.fleet.roster();
    let listed = roster.iter().map(|n| {
        let mut node = node_json(n);
        // A node downloading a model it lacks shows how far it has come.
        if let (Some(progress), Some(fields)) =
            (state.fleet.fetching(&n.node_id), node.as_object_mut())
        {
            fields.insert(
                "fetching".into(),
                json!({"model": progress.model, "done": progress.done, "total": progress.total, "percent": progress.percent()}),
            );
        }
        node
    });
    Json(Value::Array(listed.collect()))
}

async fn revoke(
    State(state): State<AdminState>,
    Path(node): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let revoked = state.fleet.revoke(&node)?;
    tracing::info!(node = %revoked.name, fingerprint = %revoked.fingerprint, "revoked a node");
    Ok(Json(json!({
        "name": revoked.name,
        "fingerprint": revoked.fingerprint.to_string(),
        "closed": revoked.closed.iter().map(node_json).collect::<Vec<_>>(),
    })))
}

async fn drain(
    State(state): State<AdminState>,
    Path(node): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let drained = state.fleet.drain(&node)?;
    tracing::info!(node = %drained.name, "draining a node");
    Ok(Json(node_json(&drained)))
}

fn unix(t: SystemTime) -> Value {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) if !d.is_zero() => json!(d.as_secs()),
        _ => Value::Null,
    }
}

/// One node as `fleet nodes --json` prints it.
pub fn node_json(n: &NodeSnapshot) -> Value {
    let models: Vec<Value> = n
        .models
        .iter()
        .map(|m| {
            json!({
                "id": m.id,
                "ctx": m.ctx,
                "slots": m.slots,
                "sha256": m.sha256,
                "kv_cache_type": m.kv_cache_type,
                "kv_bytes": m.kv_bytes,
            })
        })
        .collect();
    let labels: BTreeMap<&str, &str> = n
        .labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    json!({
        "id": n.node_id,
        "name": n.name,
        "fingerprint": n.fingerprint.to_string(),
        "address": if n.address.port() == 0 { Value::Null } else { json!(n.address.to_string()) },
        "models": models,
        "hardware": n.hardware,
        "slots": n.slots,
        "context": n.ctx,
        "state": n.state.as_str(),
        "connected_since": unix(n.connected_since),
        "last_heartbeat": unix(n.last_heartbeat),
        "in_flight": n.in_flight,
        "served": n.served,
        "labels": labels,
        "ineligible": n.ineligible,
        "busy_slots": n.load.busy_slots,
        "idle_slots": n.load.idle_slots,
        "queued": n.load.queued,
        "queued_prompt_tokens": n.load.queued_prompt_tokens,
        "prefill_tokens_per_sec": n.load.prefill_tokens_per_sec,
        "decode_tokens_per_sec": n.load.decode_tokens_per_sec,
        "mean_generation_secs": n.load.mean_generation_secs,
        "cached_blocks": n.load.cached_blocks,
    })
}
