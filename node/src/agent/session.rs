//! One connection to the head: dial, say hello, then answer the head's
//! generation streams until the connection ends.

use super::drain::{self, Drain};
use super::endpoints::Endpoints;
use super::{control, place, serve, AgentConfig, AgentError};
use crate::{credential::Credential, models::ModelSet};
use std::{net::SocketAddr, sync::Arc};
use superfluid_link::{
    connect,
    control::{version_mismatch_reason, HELLO_TIMEOUT},
    quinn::{self, RecvStream, SendStream},
    read_frame, write_frame, DialError, FrameIoError,
};
use superfluid_proto::{
    ControlMsg, HeadReply, ModelDescription, ModelOffer, NodeHello, PROTOCOL_VERSION,
};

/// Why a session ended.
pub(super) enum Ended {
    /// Welcomed with `join_only` set: the agent's work is done.
    Joined,
    /// The head refused this node, for this reason.
    Refused(String),
    /// The connection could not be made, or was lost.
    Lost(SessionError),
}

/// Why a connection to the head could not be made, or ended.
#[derive(Debug, thiserror::Error)]
pub(super) enum SessionError {
    /// Dialing the head failed.
    #[error(transparent)]
    Dial(#[from] DialError),
    /// No head address is of a family (IPv4, IPv6) this node has an endpoint for.
    #[error("no endpoint for any head address; this is a bug, please report it")]
    NoEndpoint,
    /// The control stream could not be opened.
    #[error("could not open the control stream: {0}; the head may have restarted or the network is down")]
    OpenControl(#[source] quinn::ConnectionError),
    /// The head did not answer the hello in time.
    #[error("the head did not answer the hello within {}s; check that the address is a superfluid head's Link F port", HELLO_TIMEOUT.as_secs())]
    HelloTimeout,
    /// The head ended the control stream without answering the hello.
    #[error(
        "the head ended the control stream without answering the hello; it may be shutting down"
    )]
    NoReply,
    /// A frame of the hello could not be written or read.
    #[error("the hello failed: {0}")]
    Hello(#[source] FrameIoError),
    /// The connection ended after the welcome.
    #[error("connection lost: {0}; the head may have restarted or the network is down")]
    Lost(#[source] quinn::ConnectionError),
}

/// How a session ended, for the reconnect loop.
pub(super) struct SessionEnd {
    /// Whether the head welcomed this node on this connection.
    pub(super) welcomed: bool,
    /// The head address dialled, if one answered.
    pub(super) addr: Option<SocketAddr>,
    pub(super) why: Ended,
}

/// Dials the head addresses in order; the first that completes a handshake.
pub(super) async fn dial(
    config: &AgentConfig,
    endpoints: &Endpoints,
) -> Result<(quinn::Connection, SocketAddr), SessionError> {
    let mut last = None;
    for addr in &config.head_addrs {
        let Some(endpoint) = endpoints.for_addr(addr) else {
            continue;
        };
        match connect(endpoint, *addr).await {
            Ok(conn) => return Ok((conn, *addr)),
            Err(e) => {
                tracing::debug!(head = %addr, error = %e, "could not reach the head at this address");
                last = Some(e);
            }
        }
    }
    Err(last.map_or(SessionError::NoEndpoint, SessionError::Dial))
}

/// One connection: hello, then serve streams until the connection ends.
pub(super) async fn session(
    models: &Arc<ModelSet>,
    config: &AgentConfig,
    endpoints: &Endpoints,
    drain: &Drain,
    join_token: &mut Option<String>,
) -> Result<SessionEnd, AgentError> {
    let (conn, addr) = match dial(config, endpoints).await {
        Ok(found) => found,
        Err(e) => {
            return Ok(SessionEnd {
                welcomed: false,
                addr: None,
                why: Ended::Lost(e),
            })
        }
    };
    let lost = |e| SessionEnd {
        welcomed: false,
        addr: Some(addr),
        why: Ended::Lost(e),
    };
    let hello = hello(
        &conn,
        (models.descriptions(), models.on_disk()),
        config,
        addr,
        join_token.as_deref(),
    )
    .await;
    let (send, recv) = match hello {
        Ok(Ok(welcomed)) => (welcomed.send, welcomed.recv),
        Ok(Err(reason)) => {
            return Ok(SessionEnd {
                welcomed: false,
                addr: Some(addr),
                why: Ended::Refused(reason),
            })
        }
        Err(e) => {
            conn.close(
                superfluid_link::control::CLOSE_PROTOCOL,
                e.to_string().as_bytes(),
            );
            return Ok(lost(e));
        }
    };
    // Enrolled: from now on this node's key is enough.
    if join_token.take().is_some() {
        if let Err(e) = save_credential(config) {
            conn.close(
                superfluid_link::control::CLOSE_NORMAL,
                b"the node cannot save its credential",
            );
            return Err(e);
        }
    }
    if config.join_only {
        endpoints.close(b"joined; the node will run later").await;
        return Ok(SessionEnd {
            welcomed: true,
            addr: Some(addr),
            why: Ended::Joined,
        });
    }
    let (outbox, queued) = tokio::sync::mpsc::channel(64);
    let writer = tokio::spawn(control::write_control(send, models.clone(), queued));
    let placements = Placements {
        models: models.clone(),
        transfers: config.transfer_client(),
        outbox,
    };
    let control = tokio::spawn(control_reader(conn.clone(), recv, Some(placements)));
    let error = loop {
        match conn.accept_bi().await {
            Ok((send, recv)) if drain.is_draining() => drain::refuse(send, recv),
            Ok((send, recv)) => {
                let running = drain.track();
                let models = models.clone();
                tokio::spawn(async move {
                    serve::serve_stream(&models, send, recv).await;
                    drop(running);
                });
            }
            Err(e) => break SessionError::Lost(e),
        }
    };
    writer.abort();
    control.abort();
    Ok(SessionEnd {
        welcomed: true,
        addr: Some(addr),
        why: Ended::Lost(error),
    })
}

/// The control stream of a connection the head welcomed, and the models
/// the head offers.
pub(super) struct Welcomed {
    pub(super) send: SendStream,
    pub(super) recv: RecvStream,
    pub(super) offers: Vec<ModelOffer>,
}

/// Says hello, offering `models`; `Ok(Err(reason))` if the head refused
/// this node.
pub(super) async fn hello(
    conn: &quinn::Connection,
    (models, on_disk): (Vec<ModelDescription>, Vec<String>),
    config: &AgentConfig,
    addr: SocketAddr,
    join_token: Option<&str>,
) -> Result<Result<Welcomed, String>, SessionError> {
    let (mut send, mut recv) = conn.open_bi().await.map_err(SessionError::OpenControl)?;
    let hello = NodeHello {
        version: PROTOCOL_VERSION,
        name: config.name.clone(),
        models,
        join_token: join_token.map(str::to_owned),
        hardware: crate::hardware::describe().to_owned(),
        free_memory: crate::hardware::free_memory(),
        on_disk,
    };
    write_frame(&mut send, &hello)
        .await
        .map_err(SessionError::Hello)?;
    let reply = match tokio::time::timeout(HELLO_TIMEOUT, read_frame::<HeadReply>(&mut recv)).await
    {
        Ok(reply) => reply,
        Err(_) => return Err(SessionError::HelloTimeout),
    };
    match reply {
        // A head that does not check versions itself may welcome a node it
        // cannot talk to; leave it rather than misread its frames.
        Ok(Some(HeadReply::Welcome { version, .. })) if version != PROTOCOL_VERSION => {
            let reason = version_mismatch_reason(version, PROTOCOL_VERSION);
            conn.close(superfluid_link::control::CLOSE_PROTOCOL, reason.as_bytes());
            Ok(Err(reason))
        }
        Ok(Some(HeadReply::Welcome {
            version,
            node_id,
            models: offers,
        })) => {
            let models: Vec<&str> = hello.models.iter().map(|m| m.id.as_str()).collect();
            tracing::info!(head = %addr, %node_id, head_version = version, ?models, "joined the fleet");
            Ok(Ok(Welcomed { send, recv, offers }))
        }
        Ok(Some(HeadReply::Refused { reason })) => {
            conn.close(superfluid_link::control::CLOSE_NORMAL, b"refused");
            Ok(Err(reason))
        }
        // A head that refuses may close before its reply is read; its close reason says why.
        Err(FrameIoError::Read(quinn::ReadError::ConnectionLost(
            quinn::ConnectionError::ApplicationClosed(close),
        ))) if close.error_code == superfluid_link::control::CLOSE_REFUSED => {
            Ok(Err(String::from_utf8_lossy(&close.reason).into_owned()))
        }
        Ok(None) => Err(SessionError::NoReply),
        Err(e) => Err(SessionError::Hello(e)),
    }
}

/// Where the head's placements go: the node's models, and the control
/// stream's queue for reports.
pub(super) struct Placements {
    models: Arc<ModelSet>,
    transfers: Option<superfluid_link::transfer::TransferClient>,
    outbox: tokio::sync::mpsc::Sender<ControlMsg>,
}

/// Reads the head's control messages; a bad one closes the connection.
/// Placements are carried out when `placements` is given (a serving
/// connection), and ignored otherwise.
pub(super) async fn control_reader(
    conn: quinn::Connection,
    mut recv: RecvStream,
    placements: Option<Placements>,
) {
    loop {
        match read_frame::<ControlMsg>(&mut recv).await {
            Ok(Some(ControlMsg::Place(placement))) => {
                if let Some(p) = &placements {
                    tokio::spawn(place::apply(
                        p.models.clone(),
                        conn.clone(),
                        p.transfers.clone(),
                        placement,
                        p.outbox.clone(),
                    ));
                }
            }
            // Cache, load and model reports are the node's to send, and
            // ignored if a head ever sends one.
            Ok(Some(
                ControlMsg::Heartbeat
                | ControlMsg::Kv(_)
                | ControlMsg::Load(_)
                | ControlMsg::Fetching(_)
                | ControlMsg::Models(_),
            )) => {}
            Ok(None) => {
                conn.close(
                    superfluid_link::control::CLOSE_NORMAL,
                    b"the head ended the control stream",
                );
                return;
            }
            Err(FrameIoError::Frame(e)) => {
                let reason = format!("bad control frame from the head: {e}");
                tracing::warn!(%reason);
                conn.close(superfluid_link::control::CLOSE_PROTOCOL, reason.as_bytes());
                return;
            }
            Err(_) => return,
        }
    }
}

/// Writes `node.json` after the first welcome, if a credential dir is set.
pub(super) fn save_credential(config: &AgentConfig) -> Result<(), AgentError> {
    let (Some(dir), Some(text)) = (&config.credential_dir, &config.join_token) else {
        return Ok(());
    };
    let fleet_id = superfluid_link::token::parse(text)
        .map(|c| c.fleet_id)
        .unwrap_or_default();
    let credential = Credential {
        fleet_id,
        head_fingerprint: config.head_fingerprint,
        head_addrs: config.head_addrs.clone(),
        name: config.name.clone(),
    };
    credential.save(dir).map_err(AgentError::Credential)?;
    tracing::info!(dir = %dir.display(), "saved the fleet credential; this node reconnects with its key from now on");
    Ok(())
}
