//! Starting a head: load the model codecs, listen for nodes on Link F, and
//! serve HTTP.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use llama_cpp_2::llama_backend::LlamaBackend;
use superfluid_link::{Authorizer, Fingerprint, Identity, LinkError};
use tokio::task::JoinHandle;

use crate::api::{router, AppState};
use crate::codec::{Catalog, CodecError};
use crate::fleet::Fleet;
use crate::fleet::{listen, LinkListenConfig, LinkListener};

/// What a head needs to start.
pub struct HeadConfig {
    /// Where the HTTP API listens; port 0 picks a free port.
    pub http: SocketAddr,
    /// Where Link F listens (UDP); port 0 picks a free port.
    pub link: SocketAddr,
    /// The GGUF files of the models the fleet serves.
    pub models: Vec<PathBuf>,
    /// The head's key; nodes pin its fingerprint.
    pub identity: Identity,
    /// Which node keys may connect.
    pub authorizer: Authorizer,
}

/// Why a head could not start.
#[derive(Debug, thiserror::Error)]
pub enum HeadError {
    /// A model's tokenizer or chat template could not be loaded.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// The Link F endpoint could not be set up.
    #[error(transparent)]
    Link(#[from] LinkError),
    /// The HTTP address could not be bound.
    #[error("could not listen for HTTP on {addr}: {source}; is another server using that port? pass --http with another address")]
    Http {
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
    /// Where Link F listens.
    pub link_addr: SocketAddr,
    /// The head key's fingerprint, for nodes to pin.
    pub fingerprint: Fingerprint,
    /// The ids of the models served.
    pub model_ids: Vec<String>,
    /// The connected nodes.
    pub fleet: Fleet,
    /// The HTTP server; it runs until the process ends.
    pub http: JoinHandle<std::io::Result<()>>,
    link: LinkListener,
}

impl RunningHead {
    /// Closes every node connection and stops accepting nodes.
    pub fn close_link(&self) {
        self.link.close();
    }
}

/// Loads the codecs, binds Link F and HTTP, and serves in the background.
pub async fn start(backend: &LlamaBackend, config: HeadConfig) -> Result<RunningHead, HeadError> {
    let catalog = Arc::new(Catalog::load(backend, config.models)?);
    let fleet = Fleet::new();
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
    let app = router(AppState {
        catalog,
        fleet: fleet.clone(),
    });
    let http = tokio::spawn(async move { axum::serve(http, app).await });
    Ok(RunningHead {
        http_addr,
        link_addr: link.addr,
        fingerprint,
        model_ids,
        fleet,
        http,
        link,
    })
}
