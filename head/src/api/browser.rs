//! What web browsers may do with the head's HTTP API.
//!
//! Two doors a browser opens that no other client does:
//!
//! - [`cors`]: a page on another origin reads answers only from a head
//!   started with `--cors-origin` naming it; then its preflights are
//!   answered without a key (browsers send none) and the client routes'
//!   answers, errors included, carry the headers. The admin API never
//!   answers a browser.
//! - [`host_check`]: a head bound to loopback refuses requests addressed to
//!   any name but a loopback one or an `--allowed-host`, so that a page
//!   cannot reach it through DNS rebinding. This covers every route,
//!   `/health` and `/metrics` too: the tools that probe them on the
//!   machine itself address `localhost` or `127.0.0.1`, which pass, and a
//!   page has no more business reading the fleet's load than running it.

pub mod cors;
pub mod host_check;

#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::middleware;
use axum::Router;

pub use cors::CorsOrigins;
pub use host_check::{AllowedHosts, Host};

use crate::keys::Keys;

/// Why the browser settings could not be used.
#[derive(Debug, thiserror::Error)]
pub enum BrowserError {
    /// `--cors-origin '*'` on a head whose API needs no key.
    #[error("--cors-origin '*' would let every web page a user opens call this API, and it needs no key; pass --api-key KEY (or create one with `superfluid keys create NAME` on a head) so that only pages given a key can, or name the origins of your web apps instead, as --cors-origin http://localhost:3000")]
    AnyOriginWithoutKeys,
    /// A `--cors-origin` value that is not an origin.
    #[error("--cors-origin {origin:?} is not an origin; give a scheme, a host and an optional port and nothing else, as a browser sends it: http://localhost:3000 or https://chat.example.com")]
    BadOrigin {
        /// The value given.
        origin: String,
    },
    /// An `--allowed-host` value that is not a bare host.
    #[error("--allowed-host {name:?} is not a host name; give the name clients put in the URL, with no scheme, port or path (every port is admitted): chat.example.lan")]
    BadAllowedHost {
        /// The value given.
        name: String,
    },
}

/// What browsers may do: the CORS origins and the names besides loopback
/// that a loopback head answers to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrowserPolicy {
    /// The origins whose pages may read the client API's answers.
    pub cors: CorsOrigins,
    /// The hosts a loopback head answers to.
    pub hosts: AllowedHosts,
}

impl BrowserPolicy {
    /// The `--cors-origin` and `--allowed-host` values, checked; `keys`
    /// decides whether `*` is allowed.
    pub fn from_flags(
        cors_origins: &[String],
        allowed_hosts: &[String],
        keys: &Keys,
    ) -> Result<BrowserPolicy, BrowserError> {
        let cors = CorsOrigins::parse(cors_origins, keys)?;
        let hosts = allowed_hosts
            .iter()
            .map(|name| name.trim())
            .filter(|name| !name.is_empty())
            .map(|name| match host_check::parse_host(name) {
                Some((host, None)) => Ok(host),
                _ => Err(BrowserError::BadAllowedHost {
                    name: name.to_owned(),
                }),
            })
            .collect::<Result<_, _>>()?;
        Ok(BrowserPolicy {
            cors,
            hosts: AllowedHosts::new(hosts),
        })
    }

    /// `client` (the client routes), with CORS when an origin is allowed.
    pub fn with_cors(&self, client: Router) -> Router {
        match self.cors.layer() {
            Some(layer) => client.layer(layer),
            None => client,
        }
    }

    /// `app` (every route), refusing foreign hosts when it is served on the
    /// loopback address `http`.
    pub fn with_host_check(&self, app: Router, http: SocketAddr) -> Router {
        if !http.ip().to_canonical().is_loopback() {
            return app;
        }
        app.layer(middleware::from_fn_with_state(
            Arc::new(self.hosts.clone()),
            host_check::refuse_foreign_host,
        ))
    }
}
