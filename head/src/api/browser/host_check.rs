//! Refusing requests that name a loopback server by a foreign name.
//!
//! DNS rebinding: a web page on evil.example makes that name resolve to
//! 127.0.0.1, and the browser, which sees the same origin as the page's own,
//! lets the page call this server and read its answers (Ollama's
//! CVE-2024-28224). The browser still sends `Host: evil.example`, so a server
//! bound to loopback answers only requests addressed to a loopback name:
//! `localhost`, a loopback IP literal (which no DNS answer can stand for), or
//! a name the operator admitted with `--allowed-host`. A server on a
//! reachable address needs keys (see [`crate::keys::check_bind`]), so it does
//! not check `Host`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::HOST;
use axum::middleware::Next;
use axum::response::Response;

use crate::api::ApiError;

/// The longest host a refusal repeats back; a longer one is cut.
const MAX_ECHOED: usize = 255;

/// The host a request was addressed to, without its port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// An IP literal (`127.0.0.1`, `[::1]`).
    Ip(IpAddr),
    /// A DNS name, lower-cased.
    Name(String),
}

impl Host {
    /// Whether only this machine can be meant: `localhost` or a loopback IP.
    pub fn is_loopback(&self) -> bool {
        match self {
            Host::Ip(ip) => ip.to_canonical().is_loopback(),
            Host::Name(name) => name == "localhost",
        }
    }
}

/// Parses `host[:port]` as in a `Host` header or a URI's authority: a DNS
/// name (any case), an IPv4 literal, or an IPv6 literal in brackets. The
/// port, when there is one, must be digits; it is dropped. `None` for
/// anything else (user info, a path, spaces, an empty host).
pub fn parse_host(text: &str) -> Option<(Host, Option<u16>)> {
    let (host, port) = match text.strip_prefix('[') {
        Some(bracketed) => {
            let (inside, after) = bracketed.split_once(']')?;
            let ip: Ipv6Addr = inside.parse().ok()?;
            (Host::Ip(IpAddr::V6(ip)), after)
        }
        None => {
            let (name, after) = match text.find(':') {
                Some(colon) => text.split_at(colon),
                None => (text, ""),
            };
            (parse_name(name)?, after)
        }
    };
    let port = match port.strip_prefix(':') {
        None if port.is_empty() => None,
        None => return None,
        // RFC 3986 allows an empty port: `localhost:` is `localhost`.
        Some("") => None,
        Some(digits) if digits.bytes().all(|b| b.is_ascii_digit()) => Some(digits.parse().ok()?),
        Some(_) => return None,
    };
    Some((host, port))
}

fn parse_name(name: &str) -> Option<Host> {
    if let Ok(ip) = name.parse::<Ipv4Addr>() {
        return Some(Host::Ip(IpAddr::V4(ip)));
    }
    let is_name = !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
    is_name.then(|| Host::Name(name.to_ascii_lowercase()))
}

/// The hosts a loopback server answers to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedHosts {
    /// Names admitted besides the loopback ones.
    extra: Vec<Host>,
}

impl AllowedHosts {
    /// The loopback names and `extra`.
    pub fn new(extra: Vec<Host>) -> AllowedHosts {
        AllowedHosts { extra }
    }

    /// Whether a request addressed to `host` is answered.
    pub fn admits(&self, host: &Host) -> bool {
        host.is_loopback() || self.extra.contains(host)
    }

    /// Whether a request may reach a loopback server: it names exactly one
    /// host, in its URI (HTTP/2, or an absolute-form HTTP/1.1 request, where
    /// it overrides `Host`) or else in one `Host` header, and that host is
    /// admitted. A request that names none is refused too: browsers always
    /// send one.
    pub fn check(&self, request: &Request) -> Result<(), ApiError> {
        let named = match request.uri().authority() {
            Some(authority) => Some(authority.as_str().to_owned()),
            None => {
                let mut hosts = request.headers().get_all(HOST).iter();
                match (hosts.next(), hosts.next()) {
                    (Some(host), None) => Some(String::from_utf8_lossy(host.as_bytes()).into()),
                    (Some(_), Some(_)) => {
                        return Err(ApiError::HostNotAllowed {
                            host: "more than one Host header".into(),
                        })
                    }
                    (None, _) => None,
                }
            }
        };
        let Some(named) = named else {
            return Err(ApiError::HostNotAllowed {
                host: "no Host header".into(),
            });
        };
        match parse_host(&named) {
            Some((host, _port)) if self.admits(&host) => Ok(()),
            _ => Err(ApiError::HostNotAllowed {
                host: format!("Host {:?}", cut(&named)),
            }),
        }
    }
}

fn cut(text: &str) -> &str {
    match text.char_indices().nth(MAX_ECHOED) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

/// Refuses a request to a loopback server that names a host it does not
/// answer to (403, before any other check).
pub async fn refuse_foreign_host(
    State(allowed): State<Arc<AllowedHosts>>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    allowed.check(&request)?;
    Ok(next.run(request).await)
}
