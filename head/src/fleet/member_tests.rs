//! A node's membership: joining enters it in the registry and the router,
//! dropping the membership takes it out of both, and the one in-flight count
//! is the router's.

use super::*;
use std::time::{Duration, Instant};
use superfluid_link::{allow_any, client_endpoint, connect, quinn, server_endpoint, Identity};
use superfluid_proto::Sampling;

/// A live Link F connection as the head holds it, and what keeps it open.
struct Connected {
    head_side: quinn::Connection,
    _node_side: quinn::Connection,
    _endpoints: (quinn::Endpoint, quinn::Endpoint),
}

/// Connects a node with `node` as its key to a fresh head endpoint.
async fn connected(node: &Identity) -> Connected {
    let head = Identity::generate().unwrap();
    let server = server_endpoint("127.0.0.1:0".parse().unwrap(), &head, allow_any()).unwrap();
    let addr = server.local_addr().unwrap();
    let client = client_endpoint(addr, node, head.fingerprint()).unwrap();
    let accepting = async { server.accept().await.unwrap().await.unwrap() };
    let within = |d| tokio::time::timeout(Duration::from_secs(10), d);
    let (node_side, head_side) = within(async { tokio::join!(connect(&client, addr), accepting) })
        .await
        .expect("timed out connecting");
    Connected {
        head_side,
        _node_side: node_side.unwrap(),
        _endpoints: (server, client),
    }
}

fn joining(name: &str, node: &Identity, connected: &Connected) -> Joining {
    Joining {
        name: name.to_owned(),
        fingerprint: node.fingerprint(),
        models: vec![ModelDescription {
            id: "m".into(),
            ctx: 512,
            slots: 2,
            sha256: String::new(),
            ..Default::default()
        }],
        hardware: String::new(),
        free_memory: 0,
        on_disk: Vec::new(),
        connection: connected.head_side.clone(),
        labels: Vec::new(),
        placements: tokio::sync::mpsc::unbounded_channel().0,
    }
}

fn request() -> GenerateRequest {
    GenerateRequest {
        model: "m".into(),
        prompt: vec![5, 6, 7],
        sampling: Sampling::default(),
        max_tokens: 8,
        slot: None,
        constraint: None,
        logprobs: None,
    }
}

#[tokio::test]
async fn dropping_the_membership_takes_the_node_out_of_the_registry_and_the_router() {
    let fleet = Fleet::new();
    let id = Identity::generate().unwrap();
    let link = connected(&id).await;
    let member = fleet.join(joining("alpha", &id, &link)).unwrap();
    let key = member.entry().key;
    let names: Vec<String> = fleet.nodes().into_iter().map(|n| n.name).collect();
    assert_eq!(names, ["alpha"]);
    assert_eq!(fleet.context_len("m"), Some(512));
    let routed = fleet
        .router()
        .lock()
        .route("m", &[1, 2, 3], &[key], Instant::now());
    assert_eq!(routed.map(|r| r.node), Some(key));

    drop(member);
    assert!(fleet.nodes().is_empty());
    assert_eq!(fleet.context_len("m"), None);
    {
        let mut router = fleet.router().lock();
        assert!(router.nodes().is_empty());
        let again = router.route("m", &[1, 2, 3], &[key], Instant::now());
        assert!(again.is_none());
    }
    assert!(matches!(
        fleet.generate(&mut request()).await,
        Err(FleetError::NoNode { .. })
    ));
}

#[tokio::test]
async fn in_flight_in_a_snapshot_is_the_routers_open_tickets() {
    let fleet = Fleet::new();
    let id = Identity::generate().unwrap();
    let link = connected(&id).await;
    let member = fleet.join(joining("alpha", &id, &link)).unwrap();
    let key = member.entry().key;
    let shown = || fleet.nodes()[0].in_flight;
    let open = || fleet.router().lock().in_flight(key);
    assert_eq!((shown(), open()), (0, 0));

    let first = fleet.generate(&mut request()).await.unwrap();
    let second = fleet.generate(&mut request()).await.unwrap();
    assert_eq!((shown(), open()), (2, 2));
    assert_eq!(fleet.drain("alpha").unwrap().in_flight, 2);

    // A ticket taken from the router directly counts the same.
    let ticket = {
        let mut router = fleet.router().lock();
        router
            .route("m", &[1], &[key], Instant::now())
            .unwrap()
            .ticket
    };
    assert_eq!((shown(), open()), (3, 3));
    fleet
        .router()
        .lock()
        .finished(ticket, false, Instant::now());
    drop(first);
    assert_eq!((shown(), open()), (1, 1));
    drop(second);
    assert_eq!((shown(), open()), (0, 0));
}

#[tokio::test]
async fn a_node_whose_key_is_taken_is_in_neither_the_registry_nor_the_router() {
    let (registry, router) = (
        Arc::new(Registry::default()),
        SharedRouter::new(Router::new(RoutePolicy::default(), 1)),
    );
    let id = Identity::generate().unwrap();
    let (first, second) = (connected(&id).await, connected(&id).await);
    let join = |link: &Connected| {
        Member::join(
            registry.clone(),
            router.clone(),
            joining("alpha", &id, link),
            &[],
            true,
        )
    };
    let member = join(&first).unwrap();
    let taken = join(&second).unwrap_err();
    assert_eq!(taken.node_id, member.entry().node_id);
    assert_eq!(registry.entries().len(), 1);
    let keys: Vec<_> = router.lock().nodes().iter().map(|l| l.key).collect();
    assert_eq!(keys, [member.entry().key]);
}
