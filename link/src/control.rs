//! Shared Link F conventions: heartbeat timing, handshake wording, and the
//! application error codes used to close connections and reset streams.

use quinn::VarInt;
use std::time::Duration;

/// How often each side sends [`superfluid_proto::ControlMsg::Heartbeat`].
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(3);

/// How long the head waits for a node's hello after the TLS handshake.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// Normal close: the side is shutting down.
pub const CLOSE_NORMAL: VarInt = VarInt::from_u32(0);
/// The head refused the node (see the reason); the node retries later.
pub const CLOSE_REFUSED: VarInt = VarInt::from_u32(1);
/// The peer broke the protocol (bad frame, unexpected message).
pub const CLOSE_PROTOCOL: VarInt = VarInt::from_u32(2);

/// Stream reset/stop code: the head cancelled the generation.
pub const STREAM_CANCELLED: VarInt = VarInt::from_u32(1);
/// Stream reset/stop code: a frame on this stream was bad.
pub const STREAM_BAD_FRAME: VarInt = VarInt::from_u32(2);
/// Stream reset/stop code: the node is stopping and takes no new
/// generation; the head sends it to another node.
pub const STREAM_NODE_STOPPING: VarInt = VarInt::from_u32(3);

/// Sends a heartbeat every [`HEARTBEAT_INTERVAL`] on a control stream until
/// the stream fails (the connection is gone).
pub async fn send_heartbeats(mut send: quinn::SendStream) {
    let mut tick = tokio::time::interval(HEARTBEAT_INTERVAL);
    loop {
        tick.tick().await;
        if crate::write_frame(&mut send, &superfluid_proto::ControlMsg::Heartbeat)
            .await
            .is_err()
        {
            return;
        }
    }
}

/// The reason a head gives a node whose protocol version differs from its own.
pub fn version_mismatch_reason(head_version: u32, node_version: u32) -> String {
    format!(
        "protocol version mismatch: this head speaks Link F version {head_version}, the node speaks version {node_version}; \
         run the same superfluid release on the head and the node"
    )
}
