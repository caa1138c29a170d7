//! Creating, listing, reading, changing, forking, trimming and purging
//! sessions.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{json, Value};

use super::super::admission::Admission;
use super::super::auth::Caller;
use super::super::extract::ApiJson;
use super::super::request_metrics::RequestModel;
use super::super::types::CompletionRequest;
use super::super::{ApiError, AppState};
use super::bodies::{AtBody, CreateBody, ListQuery, PatchBody, PurgeQuery, SessionView};
use super::{if_match, owner, params, session_id, store};
use crate::sessions::{Meta, MetaPatch, SessionId, SessionInfo, SessionStore, Turn};

/// Sessions listed per page unless `limit` says otherwise, and the most.
const LIST_DEFAULT: i64 = 20;
const LIST_MAX: i64 = 100;

/// The query string, or a 400 that says what is wrong with it.
pub fn query<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    query.map(|Query(q)| q).map_err(|e| {
        ApiError::param(
            "query",
            format!(
                "the query string is not what this route takes: {}",
                e.body_text()
            ),
        )
    })
}

/// `info` as JSON with its version as the `ETag`.
pub fn session_response(store: &SessionStore, info: SessionInfo, status: StatusCode) -> Response {
    let etag = HeaderValue::from_str(&format!("\"{}\"", info.version)).ok();
    let generating = store.is_generating(info.id);
    let mut response = (status, Json(SessionView::new(info, generating))).into_response();
    if let Some(etag) = etag {
        response.headers_mut().insert(header::ETAG, etag);
    }
    response
}

/// `POST /v1/sessions`.
pub async fn create(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    counted: Option<Extension<RequestModel>>,
    ApiJson(body): ApiJson<CreateBody>,
) -> Result<Response, ApiError> {
    let store = store(&state)?;
    let settings = body.params.unwrap_or_default();
    params::check_keys(&settings)?;
    // Checked as chat completions check them; kept as given.
    crate::api::tools::ToolSet::from_request(body.tools.as_ref(), None, None)?;
    let tools = body
        .tools
        .clone()
        .filter(|t| !t.is_null())
        .unwrap_or_else(|| json!([]));
    // The model and settings are checked now, not at the first generation.
    let req: CompletionRequest = params::request(
        body.model.as_deref().unwrap_or_default(),
        Vec::new(),
        &settings,
    )?;
    let req = CompletionRequest {
        model: body.model.clone(),
        ..req
    };
    let admission = Admission {
        state: &state,
        received: std::time::Instant::now(),
        caller: caller.as_ref(),
    };
    let codec = admission.text_model(req.model_id()?, counted.as_ref())?;
    req.params()?;
    let created = json!({
        "model": codec.id(),
        "system": body.system,
        "tools": tools,
        "params": settings,
    });
    let meta = Meta {
        title: body.title,
        tags: body.tags.unwrap_or_default(),
        archived: false,
    };
    // The hold on the new session is let go at the end of the statement.
    let info = store
        .create_for(owner(caller.as_ref()), created, meta, Turn::default())
        .await?
        .info;
    Ok(session_response(store, info, StatusCode::CREATED))
}

/// `GET /v1/sessions?after=ID&limit=N`.
pub async fn list(
    State(state): State<AppState>,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let store = store(&state)?;
    let q = query(q)?;
    let limit = q.limit.unwrap_or(LIST_DEFAULT);
    if !(1..=LIST_MAX).contains(&limit) {
        return Err(ApiError::param(
            "limit",
            format!("`limit` must be from 1 to {LIST_MAX} (got {limit}); page on with `after`"),
        ));
    }
    // One more than asked says whether there are more.
    let mut found = store
        .list(q.after.map(SessionId), limit as usize + 1)
        .await?;
    let has_more = found.len() > limit as usize;
    found.truncate(limit as usize);
    let next_after = if has_more {
        found.last().map(|s| s.id)
    } else {
        None
    };
    let data: Vec<SessionView> = found
        .into_iter()
        .map(|info| {
            let generating = store.is_generating(info.id);
            SessionView::new(info, generating)
        })
        .collect();
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "has_more": has_more,
        "next_after": next_after,
    })))
}

/// `GET /v1/sessions/{id}`.
pub async fn get(
    State(state): State<AppState>,
    id: Result<Path<i64>, PathRejection>,
) -> Result<Response, ApiError> {
    let store = store(&state)?;
    let id = session_id(id)?;
    let info = store.get(id).await?;
    Ok(session_response(store, info, StatusCode::OK))
}

/// `PATCH /v1/sessions/{id}` with `If-Match: VERSION`.
pub async fn patch(
    State(state): State<AppState>,
    id: Result<Path<i64>, PathRejection>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<PatchBody>,
) -> Result<Response, ApiError> {
    let store = store(&state)?;
    let id = session_id(id)?;
    let expected = if_match(&headers)?.ok_or(ApiError::IfMatchRequired {
        what: "changing a session's metadata",
        session: id.0,
    })?;
    let patch = MetaPatch {
        title: body.title,
        tags: body.tags,
        archived: body.archived,
    };
    let info = store.update_meta(id, expected, patch).await?;
    Ok(session_response(store, info, StatusCode::OK))
}

/// `POST /v1/sessions/{id}/fork` `{"at": EVENT_ID}`: the child.
pub async fn fork(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    id: Result<Path<i64>, PathRejection>,
    ApiJson(body): ApiJson<AtBody>,
) -> Result<Response, ApiError> {
    let store = store(&state)?;
    let id = session_id(id)?;
    let info = store
        .fork_for(owner(caller.as_ref()), id, body.at, Turn::default())
        .await?
        .info;
    Ok(session_response(store, info, StatusCode::CREATED))
}

/// `POST /v1/sessions/{id}/trim` `{"at": EVENT_ID}`, optionally with
/// `If-Match: VERSION`.
pub async fn trim(
    State(state): State<AppState>,
    id: Result<Path<i64>, PathRejection>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<AtBody>,
) -> Result<Response, ApiError> {
    let store = store(&state)?;
    let id = session_id(id)?;
    let expected = if_match(&headers)?;
    let info = store.trim(id, body.at, expected).await?;
    Ok(session_response(store, info, StatusCode::OK))
}

/// `DELETE /v1/sessions/{id}[?cascade=true]`, optionally with
/// `If-Match: VERSION`.
pub async fn purge(
    State(state): State<AppState>,
    id: Result<Path<i64>, PathRejection>,
    headers: HeaderMap,
    q: Result<Query<PurgeQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let store = store(&state)?;
    let id = session_id(id)?;
    let q = query(q)?;
    let expected = if_match(&headers)?;
    let purged = store.purge(id, expected, q.cascade).await?;
    Ok(Json(json!({
        "id": id,
        "object": "session.deleted",
        "deleted": true,
        "purged": purged,
    })))
}
