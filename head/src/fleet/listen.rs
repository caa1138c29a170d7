//! The Link F listener: accepts nodes, runs the hello handshake, holds each
//! node's membership while its connection lives.

use super::{
    join_limit::JoinLimit,
    registry::{Joining, NodeEntry},
    Fleet,
};
use crate::membership::{now_unix, Refusal};
use crate::metrics::LinkRefusal;
use std::{net::SocketAddr, time::Duration};
use superfluid_link::{
    control::{
        version_mismatch_reason, CLOSE_NORMAL, CLOSE_PROTOCOL, CLOSE_REFUSED, HELLO_TIMEOUT,
    },
    peer_fingerprint,
    quinn::{self, RecvStream, SendStream},
    read_frame, read_frame_body, server_endpoint, write_frame, Authorizer, EndpointError, Identity,
};
use superfluid_proto::{ControlMsg, HeadReply, NodeHello, PROTOCOL_VERSION};
use tokio::task::JoinHandle;

/// How to listen for nodes.
#[derive(Clone)]
pub struct LinkListenConfig {
    /// UDP address to listen on; port 0 picks a free port.
    pub addr: SocketAddr,
    /// The head's identity; nodes pin its fingerprint.
    pub identity: Identity,
    /// Which node keys may pass the TLS handshake. With membership (see
    /// [`Fleet::with_membership`]) use [`superfluid_link::allow_any`]: the
    /// hello decides.
    pub authorizer: Authorizer,
}

impl std::fmt::Debug for LinkListenConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkListenConfig")
            .field("addr", &self.addr)
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

/// How long [`LinkListener::closed`] waits for the nodes to be told.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// A running listener.
#[derive(Debug)]
pub struct LinkListener {
    /// The address actually bound (useful with port 0).
    pub addr: SocketAddr,
    /// The QUIC endpoint.
    pub endpoint: quinn::Endpoint,
    /// The accept loop; it ends when the endpoint is closed.
    pub task: JoinHandle<()>,
}

impl LinkListener {
    /// Closes every node connection with a reason and stops accepting.
    pub fn close(&self) {
        self.endpoint
            .close(CLOSE_NORMAL, b"the head is shutting down");
    }

    /// Waits ([`CLOSE_WAIT`] at most) until the nodes have been told of a
    /// [`LinkListener::close`]; a process that exits sooner may leave them
    /// to find out by Link F's idle timeout.
    pub async fn closed(&self) {
        let _ = tokio::time::timeout(CLOSE_WAIT, self.endpoint.wait_idle()).await;
    }
}

/// Binds the Link F endpoint and accepts nodes into `fleet` in the background.
pub async fn listen(fleet: Fleet, config: LinkListenConfig) -> Result<LinkListener, EndpointError> {
    let transfers =
        superfluid_link::transfer::acceptor(&config.identity, config.authorizer.clone())?;
    let endpoint = server_endpoint(config.addr, &config.identity, config.authorizer)?;
    let addr = endpoint
        .local_addr()
        .map_err(|source| EndpointError::Bind {
            addr: config.addr,
            source,
        })?;
    tracing::info!(%addr, fingerprint = %config.identity.fingerprint(), "listening for nodes (Link F over QUIC)");
    let transfer_port = super::transfer::tcp::serve(fleet.clone(), addr, transfers).await;
    let accepting = endpoint.clone();
    let joins = JoinLimit::default();
    let task = tokio::spawn(async move {
        while let Some(incoming) = accepting.accept().await {
            tokio::spawn(serve_node(fleet.clone(), joins.clone(), incoming));
        }
        // The endpoint closed: the transfer port closes with it.
        if let Some(port) = transfer_port {
            port.abort();
        }
    });
    Ok(LinkListener {
        addr,
        endpoint,
        task,
    })
}

/// One node's connection, from handshake to disconnect.
async fn serve_node(fleet: Fleet, joins: JoinLimit, incoming: quinn::Incoming) {
    let from = incoming.remote_address();
    let conn = match incoming.await {
        Ok(conn) => conn,
        Err(e) => {
            tracing::info!(%from, error = %e, "a node could not connect (TLS handshake failed; is its key authorized?)");
            fleet.metrics().record_link_refusal(LinkRefusal::Handshake);
            return;
        }
    };
    let (joining, mut send, recv, placements) = match hello(&fleet, &joins, &conn).await {
        Ok(Some(parts)) => parts,
        Ok(None) => return,
        Err(reason) => {
            tracing::warn!(%from, %reason, "closing a node connection during the hello");
            fleet.metrics().record_link_refusal(LinkRefusal::Hello);
            conn.close(CLOSE_PROTOCOL, reason.as_bytes());
            return;
        }
    };
    let name = joining.name.clone();
    let fingerprint = joining.fingerprint;
    let models: Vec<String> = joining
        .models
        .iter()
        .map(|m| format!("{} (ctx {}, {} slots)", m.id, m.ctx, m.slots))
        .collect();
    // From here until `member` is dropped, on whatever path this returns,
    // the node is in the registry and the router.
    let member = match fleet.join(joining) {
        Ok(member) => member,
        Err(taken) => {
            let refusal = Refusal::Duplicate {
                fingerprint,
                node_id: taken.node_id,
                name: taken.name,
            };
            if let Some(m) = fleet.membership() {
                m.record_refusal(&refusal);
            }
            tracing::warn!(node = %name, %fingerprint, %from, reason = refusal.label(), %refusal, "refused a node");
            refuse(&conn, send, refusal.to_string()).await;
            return;
        }
    };
    let entry = member.entry();
    let node_id = entry.node_id.clone();
    let welcome = HeadReply::Welcome {
        version: PROTOCOL_VERSION,
        node_id: node_id.clone(),
        models: fleet.store.offers(),
    };
    if let Err(e) = write_frame(&mut send, &welcome).await {
        tracing::warn!(%from, error = %e, "could not welcome a node");
        return;
    }
    if let Some(reason) = &entry.serving().ineligible {
        tracing::warn!(node = %name, %node_id, %reason, "node joined but gets no work for some models");
    }
    tracing::info!(node = %name, %node_id, %from, ?models, "node joined");
    let heartbeat = tokio::spawn(super::placement::write_control(send, placements));
    let streams = tokio::spawn(super::transfer::serve_node_streams(
        fleet.clone(),
        conn.clone(),
    ));
    let reason = control_loop(&fleet, &conn, recv, entry).await;
    heartbeat.abort();
    streams.abort();
    fleet.fetches.forget(&node_id);
    drop(member);
    tracing::info!(node = %name, %node_id, %reason, "node left");
}

type Hello = (
    Joining,
    SendStream,
    RecvStream,
    tokio::sync::mpsc::UnboundedReceiver<ControlMsg>,
);

/// Reads the node's hello. `Ok(None)`: refused and closed; `Err`: protocol violation to close with.
async fn hello(
    fleet: &Fleet,
    joins: &JoinLimit,
    conn: &quinn::Connection,
) -> Result<Option<Hello>, String> {
    let fingerprint = peer_fingerprint(conn).map_err(|e| e.to_string())?;
    let (send, mut recv) = tokio::time::timeout(HELLO_TIMEOUT, conn.accept_bi())
        .await
        .map_err(|_| "no control stream within the hello timeout".to_owned())?
        .map_err(|e| e.to_string())?;
    let body = match tokio::time::timeout(HELLO_TIMEOUT, read_frame_body(&mut recv)).await {
        Err(_) => return Err("no hello within the hello timeout".into()),
        Ok(Ok(Some(body))) => body,
        Ok(Ok(None)) => return Err("the control stream ended before the hello".into()),
        Ok(Err(e)) => return Err(format!("bad hello: {e}")),
    };
    // Another version may lay its hello out differently: look at the
    // version it starts with before decoding the rest.
    let version = superfluid_proto::frame::hello_version(&body);
    if let Some(version) = version.filter(|v| *v != PROTOCOL_VERSION) {
        let reason = version_mismatch_reason(PROTOCOL_VERSION, version);
        tracing::warn!(%fingerprint, %reason, "refused a node");
        fleet.metrics().record_link_refusal(LinkRefusal::Version);
        refuse(conn, send, reason).await;
        return Ok(None);
    }
    let hello: NodeHello = match superfluid_proto::decode(&body) {
        Ok(hello) => hello,
        Err(e) => return Err(format!("bad hello: {e}")),
    };
    let labels = match fleet.membership() {
        None => Vec::new(),
        Some(membership) => {
            if hello.join_token.is_some() {
                let from = conn.remote_address().ip();
                if let Err(limited) = joins.attempt(from, std::time::Instant::now()) {
                    tracing::warn!(node = %hello.name, %fingerprint, %from, reason = %limited, "refused a join attempt");
                    refuse(conn, send, limited.to_string()).await;
                    return Ok(None);
                }
            }
            let admitted = membership.admit(
                &fingerprint,
                &hello.name,
                hello.join_token.as_deref(),
                now_unix(),
            );
            match admitted {
                Ok(enrolment) => enrolment.labels,
                Err(refusal) => {
                    refuse(conn, send, refusal.to_string()).await;
                    return Ok(None);
                }
            }
        }
    };
    let (placements, queued) = tokio::sync::mpsc::unbounded_channel();
    let joining = Joining {
        name: hello.name,
        fingerprint,
        models: hello.models,
        hardware: superfluid_proto::hardware::bounded(&hello.hardware),
        free_memory: hello.free_memory,
        on_disk: hello
            .on_disk
            .into_iter()
            .take(superfluid_proto::placement::MAX_ON_DISK)
            .collect(),
        connection: conn.clone(),
        labels,
        placements,
    };
    Ok(Some((joining, send, recv, queued)))
}

/// Sends `Refused`, gives it a moment to arrive, and closes with the same reason.
async fn refuse(conn: &quinn::Connection, mut send: SendStream, reason: String) {
    if write_frame(
        &mut send,
        &HeadReply::Refused {
            reason: reason.clone(),
        },
    )
    .await
    .is_ok()
        && send.finish().is_ok()
    {
        let _ = tokio::time::timeout(Duration::from_secs(2), send.stopped()).await;
    }
    conn.close(CLOSE_REFUSED, reason.as_bytes());
}

/// Reads control messages until the connection ends; returns why it ended.
/// Cache events and load reports go to the router as they arrive.
async fn control_loop(
    fleet: &Fleet,
    conn: &quinn::Connection,
    mut recv: RecvStream,
    entry: &NodeEntry,
) -> String {
    loop {
        match read_frame::<ControlMsg>(&mut recv).await {
            Ok(Some(ControlMsg::Heartbeat)) => entry.heartbeat(),
            Ok(Some(ControlMsg::Kv(update))) => {
                fleet.router().lock().apply_kv(entry.key, &update);
            }
            Ok(Some(ControlMsg::Load(report))) => {
                entry.heartbeat();
                fleet.router().lock().apply_load(entry.key, &report);
            }
            Ok(Some(ControlMsg::Fetching(progress))) => {
                entry.heartbeat();
                fleet.fetches.report(&entry.node_id, progress);
            }
            Ok(Some(ControlMsg::Models(report))) => {
                entry.heartbeat();
                fleet.models_changed(entry, report);
            }
            // Placements are the head's to send; ignored if a node sends one.
            Ok(Some(ControlMsg::Place(_))) => {}
            Ok(None) => {
                conn.close(CLOSE_NORMAL, b"the node ended its control stream");
                return "the node ended its control stream".into();
            }
            Err(e) => {
                if let Some(lost) = e.connection_lost() {
                    return lost.to_string();
                }
                let reason = format!("control stream failed: {e}");
                conn.close(CLOSE_PROTOCOL, reason.as_bytes());
                return reason;
            }
        }
    }
}

/// A listener for `fleet` on a free loopback port with a new identity,
/// admitting every node: the head of the fleet's tests.
#[cfg(test)]
pub(crate) async fn loopback(fleet: Fleet) -> (LinkListener, Identity) {
    let identity = Identity::generate().expect("a new identity");
    let config = LinkListenConfig {
        addr: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        identity: identity.clone(),
        authorizer: std::sync::Arc::new(|_| true),
    };
    let listener = listen(fleet, config).await.expect("listening on loopback");
    (listener, identity)
}
