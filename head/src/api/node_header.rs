//! `x-superfluid-node`: the response header naming the node that served a
//! request, set the same way on every dialect's answer.

use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};

/// The response header naming the node that served the request.
pub const NODE_HEADER: &str = "x-superfluid-node";

/// `response` with the header naming `node`, the node that served it.
pub fn with_node(node: &str, response: impl IntoResponse) -> Response {
    let mut response = response.into_response();
    if let Ok(value) = HeaderValue::from_str(node) {
        response.headers_mut().insert(NODE_HEADER, value);
    }
    response
}
