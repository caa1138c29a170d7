//! Fleet over real loopback QUIC, with small node stubs written on superfluid-link.

use super::*;
use std::{future::Future, time::Duration};
use superfluid_link::quinn::{RecvStream, SendStream};
use superfluid_link::{client_endpoint, connect, quinn, Identity};
use superfluid_link::{read_frame, write_frame};
use superfluid_proto::GenerateEvent;
use superfluid_proto::{
    FinishReason, HeadReply, ModelDescription, NodeHello, Outcome, Sampling, PROTOCOL_VERSION,
};
use tokio::sync::mpsc;

async fn within<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("timed out")
}

struct Head {
    fleet: Fleet,
    listener: LinkListener,
    identity: Identity,
}

async fn head() -> Head {
    let fleet = Fleet::new();
    let (listener, identity) = super::listen::loopback(fleet.clone()).await;
    Head {
        fleet,
        listener,
        identity,
    }
}

fn model(id: &str) -> ModelDescription {
    ModelDescription {
        id: id.into(),
        ctx: 512,
        slots: 2,
        sha256: String::new(),
        ..Default::default()
    }
}

/// What the stub node does with each generation stream.
#[derive(Clone, Copy)]
enum Behaviour {
    /// Sends the prompt back as tokens, then Finished.
    Echo,
    /// Sends one token, then reports on `cancelled` when the head stops the stream.
    Hang,
}

struct StubNode {
    conn: quinn::Connection,
    reply: HeadReply,
    cancelled: mpsc::UnboundedReceiver<()>,
}

async fn stub_node(
    head: &Head,
    name: &str,
    version: u32,
    models: Vec<ModelDescription>,
    behaviour: Behaviour,
) -> StubNode {
    let id = Identity::generate().unwrap();
    let endpoint = client_endpoint(head.listener.addr, &id, head.identity.fingerprint()).unwrap();
    let conn = within(connect(&endpoint, head.listener.addr))
        .await
        .unwrap();
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    write_frame(
        &mut send,
        &NodeHello {
            version,
            name: name.into(),
            models,
            join_token: None,
            hardware: "test machine".into(),
            free_memory: 0,
            on_disk: Vec::new(),
        },
    )
    .await
    .unwrap();
    let reply: HeadReply = within(read_frame(&mut recv)).await.unwrap().unwrap();
    let (tx, cancelled) = mpsc::unbounded_channel();
    let serving = conn.clone();
    tokio::spawn(async move {
        let _control = (send, recv, endpoint);
        while let Ok((send, recv)) = serving.accept_bi().await {
            tokio::spawn(serve(send, recv, behaviour, tx.clone()));
        }
    });
    StubNode {
        conn,
        reply,
        cancelled,
    }
}

async fn serve(
    mut send: SendStream,
    mut recv: RecvStream,
    behaviour: Behaviour,
    cancelled: mpsc::UnboundedSender<()>,
) {
    let Ok(Some(superfluid_proto::HeadStream::Generate(req))) =
        read_frame::<superfluid_proto::HeadStream>(&mut recv).await
    else {
        return;
    };
    match behaviour {
        Behaviour::Echo => {
            write_frame(&mut send, &GenerateEvent::Tokens(req.prompt.clone()))
                .await
                .unwrap();
            let outcome = Outcome {
                finish: FinishReason::Stop,
                prompt_tokens: req.prompt.len() as u32,
                cached_tokens: 0,
                generated_tokens: req.prompt.len() as u32,
            };
            write_frame(&mut send, &GenerateEvent::Finished(outcome))
                .await
                .unwrap();
            send.finish().unwrap();
        }
        Behaviour::Hang => {
            write_frame(&mut send, &GenerateEvent::Tokens(vec![1]))
                .await
                .unwrap();
            if send.stopped().await.is_ok() {
                let _ = cancelled.send(());
            }
        }
    }
}

fn request(model: &str) -> GenerateRequest {
    GenerateRequest {
        model: model.into(),
        prompt: vec![5, 6, 7],
        sampling: Sampling::default(),
        max_tokens: 8,
        slot: None,
        constraint: None,
        logprobs: None,
    }
}

async fn wait_for_nodes(fleet: &Fleet, n: usize) {
    within(async {
        while fleet.nodes().len() != n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn generate_through_the_fleet_gets_tokens_and_finished() {
    let head = head().await;
    let node = stub_node(
        &head,
        "alpha",
        PROTOCOL_VERSION,
        vec![model("m")],
        Behaviour::Echo,
    )
    .await;
    assert!(
        matches!(
            node.reply,
            HeadReply::Welcome {
                version: PROTOCOL_VERSION,
                ..
            }
        ),
        "{:?}",
        node.reply
    );
    wait_for_nodes(&head.fleet, 1).await;
    assert_eq!(head.fleet.context_len("m"), Some(512));

    let mut gen = within(head.fleet.generate(&mut request("m")))
        .await
        .unwrap();
    assert_eq!(gen.node_name, "alpha");
    assert_eq!(
        within(gen.next_event()).await.unwrap(),
        Some(GenerateEvent::Tokens(vec![5, 6, 7]))
    );
    let Some(GenerateEvent::Finished(outcome)) = within(gen.next_event()).await.unwrap() else {
        panic!("no Finished")
    };
    assert_eq!(outcome.finish, FinishReason::Stop);
    assert_eq!(within(gen.next_event()).await.unwrap(), None);

    let nodes = head.fleet.nodes();
    assert_eq!(
        (nodes[0].name.as_str(), nodes[0].served, nodes[0].in_flight),
        ("alpha", 1, 0)
    );
}

#[tokio::test]
async fn dropping_the_remote_generation_cancels_on_the_node() {
    let head = head().await;
    let mut node = stub_node(
        &head,
        "alpha",
        PROTOCOL_VERSION,
        vec![model("m")],
        Behaviour::Hang,
    )
    .await;
    wait_for_nodes(&head.fleet, 1).await;
    let mut gen = within(head.fleet.generate(&mut request("m")))
        .await
        .unwrap();
    assert_eq!(
        within(gen.next_event()).await.unwrap(),
        Some(GenerateEvent::Tokens(vec![1]))
    );
    assert_eq!(head.fleet.nodes()[0].in_flight, 1);
    drop(gen);
    within(node.cancelled.recv()).await.unwrap();
    assert_eq!(head.fleet.nodes()[0].in_flight, 0);
}

#[tokio::test]
async fn a_node_describing_more_slots_than_fit_in_a_count_is_still_welcomed() {
    let head = head().await;
    let huge = |id: &str| ModelDescription {
        slots: u32::MAX,
        ..model(id)
    };
    let node = stub_node(
        &head,
        "big",
        PROTOCOL_VERSION,
        vec![huge("a"), huge("b")],
        Behaviour::Echo,
    )
    .await;
    assert!(
        matches!(node.reply, HeadReply::Welcome { .. }),
        "{:?}",
        node.reply
    );
}

#[tokio::test]
async fn a_node_of_the_previous_protocol_version_is_refused_naming_both() {
    let head = head().await;
    let previous = PROTOCOL_VERSION - 1;
    let node = stub_node(&head, "old", previous, vec![model("m")], Behaviour::Echo).await;
    let HeadReply::Refused { reason } = node.reply else {
        panic!("not refused: {:?}", node.reply)
    };
    assert!(
        reason.contains(&format!("head speaks Link F version {PROTOCOL_VERSION}"))
            && reason.contains(&format!("node speaks version {previous}")),
        "{reason}"
    );
    assert!(head.fleet.nodes().is_empty());
}

#[tokio::test]
async fn a_node_with_another_protocol_version_is_refused_naming_both() {
    let head = head().await;
    let other = PROTOCOL_VERSION + 41;
    let node = stub_node(&head, "old", other, vec![model("m")], Behaviour::Echo).await;
    let HeadReply::Refused { reason } = node.reply else {
        panic!("not refused: {:?}", node.reply)
    };
    assert!(
        reason.contains(&PROTOCOL_VERSION.to_string()) && reason.contains(&other.to_string()),
        "{reason}"
    );
    let closed = within(node.conn.closed()).await;
    let quinn::ConnectionError::ApplicationClosed(close) = closed else {
        panic!("{closed:?}")
    };
    assert_eq!(close.reason.as_ref(), reason.as_bytes());
    assert!(head.fleet.nodes().is_empty());
}

#[tokio::test]
async fn generate_for_a_model_no_node_serves_is_no_node() {
    let head = head().await;
    assert!(matches!(
        head.fleet.generate(&mut request("m")).await,
        Err(FleetError::NoNode { .. })
    ));
    let _node = stub_node(
        &head,
        "alpha",
        PROTOCOL_VERSION,
        vec![model("other")],
        Behaviour::Echo,
    )
    .await;
    wait_for_nodes(&head.fleet, 1).await;
    let result = head.fleet.generate(&mut request("m")).await;
    assert!(matches!(&result, Err(FleetError::NoNode { model }) if model == "m"));
    assert_eq!(head.fleet.context_len("m"), None);
}

#[tokio::test]
async fn generations_go_to_the_least_busy_node_and_nodes_leave_on_disconnect() {
    let head = head().await;
    let a = stub_node(
        &head,
        "a",
        PROTOCOL_VERSION,
        vec![model("m")],
        Behaviour::Hang,
    )
    .await;
    let _b = stub_node(
        &head,
        "b",
        PROTOCOL_VERSION,
        vec![model("m")],
        Behaviour::Hang,
    )
    .await;
    wait_for_nodes(&head.fleet, 2).await;
    let first = within(head.fleet.generate(&mut request("m")))
        .await
        .unwrap();
    let second = within(head.fleet.generate(&mut request("m")))
        .await
        .unwrap();
    assert_ne!(first.node_name, second.node_name);
    a.conn.close(0u32.into(), b"bye");
    wait_for_nodes(&head.fleet, 1).await;
    assert_eq!(head.fleet.nodes()[0].name, "b");
}

#[tokio::test]
async fn generate_skips_a_node_whose_connection_just_died() {
    let head = head().await;
    let _a = stub_node(
        &head,
        "a",
        PROTOCOL_VERSION,
        vec![model("m")],
        Behaviour::Echo,
    )
    .await;
    wait_for_nodes(&head.fleet, 1).await;
    let _b = stub_node(
        &head,
        "b",
        PROTOCOL_VERSION,
        vec![model("m")],
        Behaviour::Echo,
    )
    .await;
    wait_for_nodes(&head.fleet, 2).await;
    // No await between closing and dispatching: "a" is still registered, and picked first.
    head.fleet.registry().close_connection("a");
    let mut gen = within(head.fleet.generate(&mut request("m")))
        .await
        .unwrap();
    assert_eq!(gen.node_name, "b");
    assert_eq!(
        within(gen.next_event()).await.unwrap(),
        Some(GenerateEvent::Tokens(vec![5, 6, 7]))
    );
}

#[tokio::test]
async fn a_generation_sent_beside_another_joins_its_node_though_it_is_busier() {
    let head = head().await;
    let mut nodes = Vec::new();
    for name in ["a", "b"] {
        let node = stub_node(
            &head,
            name,
            PROTOCOL_VERSION,
            vec![model("m")],
            Behaviour::Hang,
        )
        .await;
        nodes.push(node);
    }
    wait_for_nodes(&head.fleet, 2).await;
    let first = within(head.fleet.generate(&mut request("m")))
        .await
        .unwrap();
    // The router alone would pick the idle node (see above).
    let second = within(
        head.fleet
            .generate_beside(&mut request("m"), &first.node_id),
    )
    .await
    .unwrap();
    assert_eq!(second.node_name, first.node_name);
    // A node that is gone: the router picks.
    let third = within(
        head.fleet
            .generate_beside(&mut request("m"), "no-such-node"),
    )
    .await
    .unwrap();
    assert_ne!(third.node_name, first.node_name);
}
