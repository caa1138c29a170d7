//! `GET /`: what a browser tab and a probe each expect of a server's root.
//!
//! A browser (one that accepts `text/html`) gets the status page: one
//! self-contained HTML file, no CDN and no build step, that polls
//! `GET /v1/fleet` every two seconds and draws the nodes and the last
//! requests. The page itself shows nothing of the fleet, so it needs no
//! key; when the head has keys, it asks for one the first time
//! `/v1/fleet` answers 401 and keeps it in the tab's `sessionStorage`.
//!
//! Anything else (curl, and the Ollama clients that probe `GET /` and
//! `HEAD /` before they talk) gets `200 superfluid is running`.

use axum::http::{header, HeaderMap};
use axum::response::{Html, IntoResponse, Response};

/// The status page.
pub const PAGE: &str = include_str!("status_page/page.html");

/// The plain answer for clients that are not browsers.
pub const RUNNING: &str = "superfluid is running";

/// `GET /` (and `HEAD /`).
pub async fn root(headers: HeaderMap) -> Response {
    if wants_html(&headers) {
        Html(PAGE).into_response()
    } else {
        RUNNING.into_response()
    }
}

/// Whether the client's `Accept` names `text/html`, as browsers' does.
fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|kind| {
            kind.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("text/html"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn accept(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_str(value).expect("a header value"),
        );
        headers
    }

    #[test]
    fn browsers_get_the_page_and_probes_do_not() {
        let firefox = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
        assert!(wants_html(&accept(firefox)));
        assert!(!wants_html(&accept("*/*")));
        assert!(!wants_html(&accept("application/json")));
        assert!(!wants_html(&HeaderMap::new()));
    }

    #[test]
    fn the_page_needs_nothing_from_another_origin() {
        assert!(PAGE.contains("/v1/fleet"));
        assert!(!PAGE.contains("http://") && !PAGE.contains("https://"));
    }
}
