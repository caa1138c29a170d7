//! Starting a head: load the model codecs, listen for nodes on Link F, and
//! serve HTTP ([`connections`] bounds how many clients are connected at once).

pub mod connections;
mod ollama_listener;

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;

use axum::serve::{Listener, ListenerExt};
use llama_cpp_2::llama_backend::LlamaBackend;
use superfluid_link::{allow_any, Authorizer, EndpointError, Fingerprint, Identity};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::api::admin::{self, AdminState};
use crate::api::browser::BrowserPolicy;
use crate::api::{count_requests, router_with_access, AppState, MetricsKey};
use crate::codec::{Catalog, CodecError};
use crate::fleet::model_store::ModelStore;
use crate::fleet::placement::PlacementConfig;
use crate::fleet::Fleet;
use crate::fleet::{listen, LinkListenConfig, LinkListener};
use crate::keys::Keys;
use crate::membership::Membership;
use crate::routing::RoutePolicy;
use crate::sessions::SessionStore;

/// What a head needs to start.
pub struct HeadConfig {
    /// Where the HTTP API listens; port 0 picks a free port.
    pub http: SocketAddr,
    /// Where Link F listens (UDP); port 0 picks a free port.
    pub link: SocketAddr,
    /// The GGUF files of the models the fleet serves.
    pub models: Vec<PathBuf>,
    /// The head's key; nodes pin its fingerprint. With membership this must
    /// be [`Membership::identity`] (see [`HeadConfig::with_membership`]).
    pub identity: Identity,
    /// Which node keys pass the TLS handshake ([`superfluid_link::allow_any`]
    /// with membership: the hello decides).
    pub authorizer: Authorizer,
    /// Join tokens, enrolled and revoked keys; `None` for `superfluid serve`,
    /// whose one node is authorized by key alone.
    pub membership: Option<Membership>,
    /// How generations are routed to nodes.
    pub route_policy: RoutePolicy,
    /// The client APIs' keys; with none, the client APIs are open.
    pub keys: Keys,
    /// The CORS origins and the hosts a loopback head answers to.
    pub browser: BrowserPolicy,
    /// The key `GET /metrics` needs; `None` leaves it open.
    pub metrics_key: Option<String>,
    /// HTTP connections held open at once; more wait until one closes.
    pub max_connections: NonZeroUsize,
    /// Generations each node may queue beyond its slots; more are refused
    /// with 429 (`None`: two per slot).
    pub max_queue: Option<u32>,
    /// A second port for the same API, on the HTTP address's IP, for tools
    /// that assume Ollama's (11434); `None` for none.
    pub ollama_port: Option<u16>,
    /// The session store (`/v1/sessions`); `None` answers those routes with
    /// a 404 that says how to turn them on.
    pub sessions: Option<SessionStore>,
    /// How long a request waits for its model to load on a node, and when
    /// an idle model is unloaded.
    pub placement: PlacementConfig,
}

impl HeadConfig {
    /// A head of the fleet in `membership`: its fleet key is the Link F key,
    /// any node key passes TLS, and the hello admits or refuses.
    pub fn with_membership(
        http: SocketAddr,
        link: SocketAddr,
        models: Vec<PathBuf>,
        membership: Membership,
    ) -> HeadConfig {
        HeadConfig {
            http,
            link,
            models,
            identity: membership.identity(),
            authorizer: allow_any(),
            membership: Some(membership),
            route_policy: RoutePolicy::default(),
            keys: Keys::default(),
            browser: BrowserPolicy::default(),
            metrics_key: None,
            max_connections: connections::DEFAULT_MAX_CONNECTIONS,
            max_queue: None,
            ollama_port: None,
            sessions: None,
            placement: PlacementConfig::default(),
        }
    }
}

/// Why a head could not start.
#[derive(Debug, thiserror::Error)]
pub enum HeadError {
    /// A model's tokenizer or chat template could not be loaded.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// The Link F endpoint could not be set up.
    #[error(transparent)]
    Link(#[from] EndpointError),
    /// A model file could not be read to compute its sha256.
    #[error(
        "could not read model file {path} to hash it: {source}; check the path and its permissions"
    )]
    ModelHash {
        /// The model file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP address could not be bound.
    #[error("could not listen for HTTP on {addr}: {source}; is another server using that port? pass --http with another address")]
    Http {
        /// The address asked for.
        addr: SocketAddr,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The `--ollama-port` address could not be bound.
    #[error("could not listen for the Ollama API on {addr}: {source}; is Ollama itself running there? stop it, or pass --ollama-port with another port")]
    OllamaPort {
        /// The address asked for.
        addr: SocketAddr,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
}

/// A running head.
#[derive(Debug)]
pub struct RunningHead {
    /// Where the HTTP API listens.
    pub http_addr: SocketAddr,
    /// Where the same API listens on `--ollama-port`, if it does.
    pub ollama_addr: Option<SocketAddr>,
    /// Where Link F listens.
    pub link_addr: SocketAddr,
    /// Addresses nodes can reach Link F at (written into join tokens).
    pub link_addrs: Vec<SocketAddr>,
    /// The head key's fingerprint, for nodes to pin.
    pub fingerprint: Fingerprint,
    /// The ids of the models served.
    pub model_ids: Vec<String>,
    /// The connected nodes.
    pub fleet: Fleet,
    /// The client APIs' keys; [`Keys::flush`] saves their usage.
    pub keys: Keys,
    /// The HTTP server; it runs until the process ends, or after
    /// [`RunningHead::stop_http`] until its open requests are answered.
    pub http: JoinHandle<std::io::Result<()>>,
    http_stop: watch::Sender<bool>,
    link: LinkListener,
}

impl RunningHead {
    /// Stops accepting HTTP connections and closes idle ones; requests
    /// already received are answered, streams to their end, and then the
    /// [`RunningHead::http`] task ends.
    pub fn stop_http(&self) {
        self.http_stop.send_replace(true);
    }

    /// Closes every node connection with a reason and stops accepting
    /// nodes.
    pub fn close_link(&self) {
        self.link.close();
    }

    /// [`RunningHead::close_link`], then waits (2 s at most) until the
    /// nodes have been told.
    pub async fn close_link_and_wait(&self) {
        self.link.close();
        self.link.closed().await;
    }
}

/// Loads the codecs, binds Link F and HTTP, and serves in the background.
pub async fn start(backend: &LlamaBackend, config: HeadConfig) -> Result<RunningHead, HeadError> {
    let data_dir = config.membership.as_ref().map(|m| m.dir().to_owned());
    let store = hash_models(config.models.clone(), data_dir).await?;
    let catalog = Arc::new(Catalog::load(backend, config.models)?);
    let mut fleet = Fleet::new()
        .with_model_store(store)
        .with_policy(config.route_policy)
        .with_max_queue(config.max_queue)
        .with_placement(config.placement);
    tokio::spawn(fleet.clone().unload_idle_forever());
    if let Some(membership) = config.membership {
        fleet = fleet.with_membership(membership);
    }
    let fingerprint = config.identity.fingerprint();
    let link = listen(
        fleet.clone(),
        LinkListenConfig {
            addr: config.link,
            identity: config.identity,
            authorizer: config.authorizer,
        },
    )
    .await?;
    let http = tokio::net::TcpListener::bind(config.http)
        .await
        .map_err(|source| HeadError::Http {
            addr: config.http,
            source,
        })?;
    let http_addr = http.local_addr().map_err(|source| HeadError::Http {
        addr: config.http,
        source,
    })?;
    let model_ids = catalog.ids();
    let app = router_with_access(
        AppState {
            catalog,
            fleet: fleet.clone(),
            sessions: config.sessions,
        },
        config.keys.clone(),
        MetricsKey::new(config.metrics_key.as_deref()),
    );
    let app = config.browser.with_cors(app);
    let link_addrs = reachable_addrs(link.addr);
    let app = app.merge(admin::router(AdminState {
        fleet: fleet.clone(),
        link_addrs: link_addrs.clone(),
        keys: config.keys.clone(),
    }));
    let app = config.browser.with_host_check(app, http_addr);
    // Outside the Host check, so that refused hosts are counted too.
    let app = count_requests(app, fleet.metrics().clone());
    let app = crate::api::request_log::log_requests(app);
    // The task ends with the runtime; the last usage is saved by the
    // shutdown's own flush.
    drop(config.keys.spawn_flusher());
    let http = connections::ConnectionLimit::new(without_nagle(http), config.max_connections);
    let (http_stop, mut stopping) = watch::channel(false);
    let ollama_addr = match config.ollama_port {
        Some(port) => Some(
            ollama_listener::serve(
                SocketAddr::new(http_addr.ip(), port),
                app.clone(),
                config.max_connections,
                stopping.clone(),
            )
            .await?,
        ),
        None => None,
    };
    let stopped = async move {
        // Without a sender the server runs until the process ends.
        if stopping.wait_for(|stop| *stop).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let http =
        tokio::spawn(async move { axum::serve(http, app).with_graceful_shutdown(stopped).await });
    Ok(RunningHead {
        link_addrs,
        http_addr,
        ollama_addr,
        link_addr: link.addr,
        fingerprint,
        model_ids,
        fleet,
        keys: config.keys,
        http,
        http_stop,
        link,
    })
}

/// `listener`, with TCP_NODELAY on every connection it accepts. Tokens go
/// out as small writes a few milliseconds apart: without it, Nagle's
/// algorithm holds each one until the client acknowledges the last, which
/// it may delay by 40 ms.
fn without_nagle(
    listener: tokio::net::TcpListener,
) -> impl Listener<Io = tokio::net::TcpStream, Addr = SocketAddr> {
    listener.tap_io(|stream| {
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY on a client connection");
        }
    })
}

/// The head's model files, hashed (or their recorded hashes read) off the
/// async threads. New hashes go beside each file, or into the head's data
/// dir where a file's directory is read-only.
async fn hash_models(
    paths: Vec<PathBuf>,
    data_dir: Option<PathBuf>,
) -> Result<ModelStore, HeadError> {
    let hashed = tokio::task::spawn_blocking(move || {
        let fallback = data_dir.map(|d| d.join("model-hashes"));
        ModelStore::hash(&paths, fallback.as_deref())
            .map_err(|(path, source)| HeadError::ModelHash { path, source })
    })
    .await;
    hashed.map_err(|e| HeadError::ModelHash {
        path: PathBuf::new(),
        source: std::io::Error::other(e.to_string()),
    })?
}

/// The addresses a node can dial to reach a Link F endpoint bound to `bound`:
/// itself, or for a wildcard bind every interface's address (other
/// machines' reachable ones first, loopback last).
pub fn reachable_addrs(bound: SocketAddr) -> Vec<SocketAddr> {
    if !bound.ip().is_unspecified() {
        return vec![bound];
    }
    let want_v4 = bound.is_ipv4();
    let mut addrs: Vec<SocketAddr> = if_addrs::get_if_addrs()
        .unwrap_or_default()
        .into_iter()
        .map(|i| i.ip())
        .filter(|ip| ip.is_ipv4() == want_v4 && !ip.is_unspecified() && !ip.is_multicast())
        .filter(|ip| match ip {
            std::net::IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) != 0xfe80,
            std::net::IpAddr::V4(_) => true,
        })
        .map(|ip| SocketAddr::new(ip, bound.port()))
        .collect();
    addrs.sort_by_key(|a| a.ip().is_loopback());
    addrs.dedup();
    if addrs.is_empty() {
        addrs.push(SocketAddr::new(
            std::net::Ipv4Addr::LOCALHOST.into(),
            bound.port(),
        ));
    }
    addrs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn http_connections_send_small_writes_at_once() {
        let bound = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding loopback");
        let addr = bound.local_addr().expect("a bound address");
        let mut listener = without_nagle(bound);
        let client = tokio::net::TcpStream::connect(addr);
        let ((accepted, _), client) = tokio::join!(listener.accept(), client);
        let _client = client.expect("connecting");
        assert!(
            accepted.nodelay().expect("reading TCP_NODELAY"),
            "the head's side of an HTTP connection must have TCP_NODELAY set"
        );
    }
}
