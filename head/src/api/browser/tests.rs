use super::*;
use axum::body::Body;
use axum::http::{HeaderValue, Request, StatusCode};
use axum::response::Response;
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

use crate::api::tests::catalog;
use crate::api::{router_with_keys, AppState};
use crate::fleet::Fleet;
use host_check::parse_host;

fn name(text: &str) -> Host {
    Host::Name(text.into())
}

fn ip(text: &str) -> Host {
    Host::Ip(text.parse().expect("an IP literal"))
}

#[test]
fn a_host_is_read_with_or_without_its_port() {
    assert_eq!(parse_host("localhost"), Some((name("localhost"), None)));
    assert_eq!(
        parse_host("localhost:7700"),
        Some((name("localhost"), Some(7700)))
    );
    assert_eq!(parse_host("localhost:"), Some((name("localhost"), None)));
    assert_eq!(
        parse_host("127.0.0.1:80"),
        Some((ip("127.0.0.1"), Some(80)))
    );
    assert_eq!(parse_host("[::1]:7700"), Some((ip("::1"), Some(7700))));
    assert_eq!(parse_host("[::1]"), Some((ip("::1"), None)));
}

#[test]
fn a_host_name_is_compared_in_lower_case() {
    assert_eq!(
        parse_host("LocalHost:7700"),
        Some((name("localhost"), Some(7700)))
    );
    assert_eq!(
        parse_host("Chat.Example.LAN"),
        Some((name("chat.example.lan"), None))
    );
}

#[test]
fn what_is_not_host_and_port_is_not_a_host() {
    for bad in [
        "",
        ":7700",
        "::1",
        "[::1",
        "[::1]x",
        "[localhost]:80",
        "localhost:http",
        "localhost:99999",
        "localhost:80:80",
        "user@localhost",
        "localhost/path",
        "local host",
    ] {
        assert_eq!(parse_host(bad), None, "{bad:?}");
    }
}

#[test]
fn only_localhost_and_loopback_addresses_are_loopback() {
    for host in [
        "localhost",
        "LOCALHOST:1",
        "127.0.0.1:7700",
        "127.8.9.10",
        "[::1]:7700",
        "[::ffff:127.0.0.1]",
    ] {
        let (host, _) = parse_host(host).expect("a host");
        assert!(host.is_loopback(), "{host:?}");
    }
    for host in [
        "evil.example:7700",
        "localhost.evil.example",
        "0.0.0.0:7700",
        "192.168.1.2",
        "[::]",
    ] {
        let (host, _) = parse_host(host).expect("a host");
        assert!(!host.is_loopback(), "{host:?}");
    }
}

fn request(host: Option<&str>) -> Request<Body> {
    let mut request = Request::get("/health");
    if let Some(host) = host {
        request = request.header("host", host);
    }
    request.body(Body::empty()).unwrap_or_default()
}

#[test]
fn a_loopback_head_answers_loopback_names_and_allowed_hosts_only() {
    let allowed = AllowedHosts::new(vec![name("chat.example.lan")]);
    for host in [
        "localhost:7700",
        "127.0.0.1:7700",
        "[::1]:7700",
        "Chat.Example.Lan:7700",
    ] {
        assert!(allowed.check(&request(Some(host))).is_ok(), "{host}");
    }
    for host in [
        "evil.example:7700",
        "chat.example.lan.evil.example",
        "bad host",
    ] {
        assert!(allowed.check(&request(Some(host))).is_err(), "{host}");
    }
    assert!(
        allowed.check(&request(None)).is_err(),
        "a request without Host follows the same rule"
    );
    let twice = Request::get("/health")
        .header("host", "localhost")
        .header("host", "evil.example")
        .body(Body::empty())
        .unwrap_or_default();
    assert!(allowed.check(&twice).is_err(), "two Host headers");
}

#[test]
fn an_absolute_uri_names_the_host_and_not_the_header() {
    let allowed = AllowedHosts::default();
    let absolute = |uri: &str, host: &str| {
        Request::get(uri)
            .header("host", host)
            .body(Body::empty())
            .unwrap_or_default()
    };
    assert!(allowed
        .check(&absolute("http://evil.example/health", "localhost"))
        .is_err());
    assert!(allowed
        .check(&absolute("http://localhost:7700/health", "evil.example"))
        .is_ok());
}

#[test]
fn allowed_hosts_are_bare_names() {
    let keys = Keys::default();
    let policy =
        BrowserPolicy::from_flags(&[], &["Chat.Example.Lan".into()], &keys).expect("a host name");
    assert!(policy.hosts.admits(&name("chat.example.lan")));
    for bad in ["http://chat.example.lan", "chat.example.lan:7700", "a/b"] {
        let refused = BrowserPolicy::from_flags(&[], &[bad.into()], &keys);
        assert!(
            matches!(refused, Err(BrowserError::BadAllowedHost { .. })),
            "{bad}: {refused:?}"
        );
    }
}

#[test]
fn any_origin_needs_keys_and_then_keeps_them_required() {
    let open = Keys::default();
    let refused = CorsOrigins::parse(&["*".into()], &open);
    assert!(
        matches!(refused, Err(BrowserError::AnyOriginWithoutKeys)),
        "{refused:?}"
    );
    let message = BrowserError::AnyOriginWithoutKeys.to_string();
    assert!(message.contains("--api-key"), "says what to do: {message}");

    let keyed = Keys::in_memory(&["team".into()]).expect("a static key");
    assert_eq!(
        CorsOrigins::parse(&["*".into()], &keyed).expect("keys exist"),
        CorsOrigins::Any
    );
    let none_left = Keys::default();
    none_left.keep_required();
    assert!(none_left.required());
}

#[test]
fn origins_are_read_as_browsers_send_them() {
    let origins = CorsOrigins::parse(
        &[
            "http://LocalHost:3000/".into(),
            "https://chat.example.com".into(),
            "http://localhost:3000".into(),
        ],
        &Keys::default(),
    )
    .expect("origins");
    assert_eq!(
        origins,
        CorsOrigins::Only(vec![
            HeaderValue::from_static("http://localhost:3000"),
            HeaderValue::from_static("https://chat.example.com"),
        ])
    );
    for bad in [
        "localhost:3000",
        "null",
        "http://",
        "http://a.example/app",
        "1http://a",
    ] {
        let refused = CorsOrigins::parse(&[bad.into()], &Keys::default());
        assert!(
            matches!(refused, Err(BrowserError::BadOrigin { .. })),
            "{bad}: {refused:?}"
        );
    }
}

fn client_app(policy: &BrowserPolicy, keys: Keys) -> Router {
    let app = router_with_keys(
        AppState {
            catalog: catalog(),
            fleet: Fleet::new(),
            sessions: None,
        },
        keys,
    );
    policy.with_cors(app)
}

async fn send(app: Router, request: Request<Body>) -> Response {
    match app.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

fn header(response: &Response, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn preflight(origin: &str) -> Request<Body> {
    Request::options("/v1/chat/completions")
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization,content-type",
        )
        .body(Body::empty())
        .unwrap_or_default()
}

fn policy(origins: &[&str], keys: &Keys) -> BrowserPolicy {
    let origins: Vec<String> = origins.iter().map(|o| (*o).to_owned()).collect();
    BrowserPolicy::from_flags(&origins, &[], keys).expect("a policy")
}

#[tokio::test]
async fn without_cors_origins_no_answer_carries_cors_headers() {
    let keys = Keys::default();
    let app = client_app(&policy(&[], &keys), keys);
    let response = send(app, preflight("http://localhost:3000")).await;
    assert_eq!(header(&response, "access-control-allow-origin"), None);
    assert_ne!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_preflight_from_an_allowed_origin_is_answered_without_a_key() {
    let keys = Keys::in_memory(&["team".into()]).expect("a static key");
    let app = client_app(&policy(&["http://localhost:3000"], &keys), keys);
    let response = send(app.clone(), preflight("http://localhost:3000")).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        header(&response, "access-control-allow-origin").as_deref(),
        Some("http://localhost:3000")
    );
    let allowed = header(&response, "access-control-allow-headers").unwrap_or_default();
    for name in ["authorization", "content-type", "x-api-key"] {
        assert!(allowed.contains(name), "{name} in {allowed}");
    }
    let methods = header(&response, "access-control-allow-methods").unwrap_or_default();
    assert!(
        methods.contains("POST") && methods.contains("GET"),
        "{methods}"
    );

    let other = send(app, preflight("http://evil.example")).await;
    assert_eq!(header(&other, "access-control-allow-origin"), None);
}

#[tokio::test]
async fn a_preflight_allows_the_headers_openai_and_anthropic_browser_clients_send() {
    let keys = Keys::in_memory(&["team".into()]).expect("a static key");
    let app = client_app(&policy(&["http://localhost:3000"], &keys), keys);
    let sent = [
        "anthropic-version",
        "x-api-key",
        "anthropic-beta",
        "anthropic-dangerous-direct-browser-access",
        "openai-organization",
        "openai-project",
        "x-stainless-lang",
        "x-stainless-package-version",
        "x-stainless-os",
        "x-stainless-arch",
        "x-stainless-runtime",
        "x-stainless-runtime-version",
        "x-stainless-retry-count",
        "x-stainless-timeout",
    ];
    let request = Request::options("/v1/messages")
        .header("origin", "http://localhost:3000")
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", sent.join(","))
        .body(Body::empty())
        .unwrap_or_default();
    let response = send(app, request).await;
    assert_eq!(response.status(), StatusCode::OK);
    let allowed = header(&response, "access-control-allow-headers").unwrap_or_default();
    for name in sent {
        assert!(allowed.contains(name), "{name} in {allowed}");
    }
}

#[tokio::test]
async fn a_refused_key_is_readable_by_an_allowed_origin() {
    let keys = Keys::in_memory(&["team".into()]).expect("a static key");
    let app = client_app(&policy(&["http://localhost:3000"], &keys), keys);
    let request = Request::get("/v1/models")
        .header("origin", "http://localhost:3000")
        .body(Body::empty())
        .unwrap_or_default();
    let response = send(app, request).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        header(&response, "access-control-allow-origin").as_deref(),
        Some("http://localhost:3000")
    );
    let exposed = header(&response, "access-control-expose-headers").unwrap_or_default();
    for name in ["x-ratelimit-remaining-requests", "retry-after"] {
        assert!(exposed.contains(name), "{name} in {exposed}");
    }
}

async fn host_status(app: Router, host: &str) -> (StatusCode, Value) {
    let response = send(app, request(Some(host))).await;
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    (status, serde_json::from_slice(&bytes).unwrap_or_default())
}

#[tokio::test]
async fn a_loopback_head_refuses_a_rebound_name_with_an_openai_error() {
    let policy = BrowserPolicy::default();
    let app = client_app(&policy, Keys::default());
    let loopback = policy.with_host_check(app.clone(), ([127, 0, 0, 1], 7700).into());
    let (status, body) = host_status(loopback.clone(), "evil.example:7700").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"]["code"], "host_not_allowed", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("evil.example") && message.contains("--allowed-host"),
        "{message}"
    );
    let (status, _) = host_status(loopback, "localhost:7700").await;
    assert_ne!(status, StatusCode::FORBIDDEN);

    let reachable = policy.with_host_check(app, ([0, 0, 0, 0], 7700).into());
    let (status, _) = host_status(reachable, "evil.example:7700").await;
    assert_ne!(
        status,
        StatusCode::FORBIDDEN,
        "a reachable head checks keys, not Host"
    );
}
