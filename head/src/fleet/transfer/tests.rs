use super::FetchBoard;
use crate::fleet::model_store::{ModelFile, ModelStore};
use superfluid_proto::FetchProgress;

fn progress(done: u64, total: u64) -> FetchProgress {
    FetchProgress {
        model: "m".into(),
        done,
        total,
    }
}

#[test]
fn a_nodes_download_shows_until_it_completes() {
    let board = FetchBoard::default();
    board.report("n1", progress(43, 100));
    assert_eq!(board.progress("n1").map(|p| p.percent()), Some(43));
    assert_eq!(board.progress("n2"), None);
    board.report("n1", progress(100, 100));
    assert_eq!(
        board.progress("n1"),
        None,
        "a finished download is off the board"
    );
}

#[test]
fn a_node_that_leaves_is_forgotten() {
    let board = FetchBoard::default();
    board.report("n1", progress(1, 100));
    board.forget("n1");
    assert_eq!(board.progress("n1"), None);
}

#[test]
fn files_are_found_by_hash_only() {
    let store = ModelStore::new(vec![ModelFile {
        id: "m".into(),
        sha256: "ab".repeat(32),
        size: 7,
        path: "/models/m.gguf".into(),
    }]);
    assert!(store.by_sha256(&"ab".repeat(32)).is_some());
    assert!(store.by_sha256("/models/m.gguf").is_none());
    assert!(store.by_sha256("m").is_none());
    let offers = store.offers();
    assert_eq!(offers.len(), 1);
    assert_eq!((offers[0].id.as_str(), offers[0].size), ("m", 7));
}

mod over_link {
    use crate::fleet::model_store::{ModelFile, ModelStore};
    use crate::fleet::Fleet;
    use crate::metrics::{TransferOutcome, Transport};
    use sha2::{Digest as _, Sha256};
    use std::time::Duration;
    use superfluid_link::transfer::{read_frame_from, write_frame_to, TransferClient};
    use superfluid_link::{
        client_endpoint, connect, quinn, read_frame, write_frame, Fingerprint, Identity,
    };
    use superfluid_proto::{
        ControlMsg, FetchProgress, FetchReply, FetchRequest, HeadReply, NodeHello, NodeStream,
        PROTOCOL_VERSION,
    };
    use tokio::io::AsyncReadExt as _;

    const CONTENT: &[u8] = b"the head's pretend model file, a few dozen bytes long";

    async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(10), f)
            .await
            .expect("timed out")
    }

    /// A head serving one model file, and a node welcomed by it, holding
    /// its control stream.
    struct Linked {
        fleet: Fleet,
        conn: quinn::Connection,
        control: quinn::SendStream,
        node_id: String,
        sha256: String,
        /// The node's client for the head's transfer port.
        transfers: TransferClient,
        head: Fingerprint,
        _endpoint: quinn::Endpoint,
        dir: std::path::PathBuf,
    }

    impl Drop for Linked {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    async fn linked(tag: &str) -> Linked {
        let dir = std::env::temp_dir().join(format!("sf-transfer-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.gguf");
        std::fs::write(&path, CONTENT).unwrap();
        let sha256 = hex::encode(Sha256::digest(CONTENT));
        let fleet = Fleet::new().with_model_store(ModelStore::new(vec![ModelFile {
            id: "m".into(),
            sha256: sha256.clone(),
            size: CONTENT.len() as u64,
            path,
        }]));
        let (listener, identity) = crate::fleet::listen::loopback(fleet.clone()).await;
        let node = Identity::generate().unwrap();
        let endpoint = client_endpoint(listener.addr, &node, identity.fingerprint()).unwrap();
        let conn = within(connect(&endpoint, listener.addr)).await.unwrap();
        let (mut control, mut recv) = conn.open_bi().await.unwrap();
        let hello = NodeHello {
            version: PROTOCOL_VERSION,
            name: "bare".into(),
            models: Vec::new(),
            join_token: None,
            hardware: "test machine".into(),
            free_memory: 0,
            on_disk: Vec::new(),
        };
        write_frame(&mut control, &hello).await.unwrap();
        let HeadReply::Welcome {
            node_id, models, ..
        } = within(read_frame(&mut recv)).await.unwrap().unwrap()
        else {
            panic!("the node should be welcomed");
        };
        assert_eq!(models.len(), 1, "the welcome offers the head's model");
        assert_eq!(models[0].sha256, sha256);
        assert_eq!(models[0].size, CONTENT.len() as u64);
        // Keep reading so the head's heartbeats never fill the window.
        tokio::spawn(async move {
            while let Ok(Some(_)) = read_frame::<ControlMsg>(&mut recv).await {}
        });
        Linked {
            fleet,
            conn,
            control,
            node_id,
            sha256,
            transfers: TransferClient::new(&node, identity.fingerprint()).unwrap(),
            head: identity.fingerprint(),
            _endpoint: endpoint,
            dir,
        }
    }

    /// Asks for `sha256` from `offset`; the reply and the bytes after it.
    async fn fetch(conn: &quinn::Connection, sha256: &str, offset: u64) -> (FetchReply, Vec<u8>) {
        let (mut send, mut recv) = conn.open_bi().await.unwrap();
        let request = NodeStream::Fetch(FetchRequest {
            sha256: sha256.into(),
            offset,
        });
        write_frame(&mut send, &request).await.unwrap();
        let reply = within(read_frame::<FetchReply>(&mut recv))
            .await
            .unwrap()
            .unwrap();
        let rest = within(recv.read_to_end(1 << 20)).await.unwrap();
        (reply, rest)
    }

    /// The same as [`fetch`], over the head's transfer port (TLS on TCP).
    async fn fetch_tcp(
        client: &TransferClient,
        conn: &quinn::Connection,
        sha256: &str,
        offset: u64,
    ) -> (FetchReply, Vec<u8>) {
        let mut tls = within(client.connect(conn.remote_address()))
            .await
            .expect("the head's transfer port answers on its Link F port number");
        let request = NodeStream::Fetch(FetchRequest {
            sha256: sha256.into(),
            offset,
        });
        write_frame_to(&mut tls, &request).await.unwrap();
        let reply = within(read_frame_from::<FetchReply, _>(&mut tls))
            .await
            .unwrap()
            .unwrap();
        let mut rest = Vec::new();
        within(tls.read_to_end(&mut rest)).await.unwrap();
        (reply, rest)
    }

    /// Both ways a node fetches: a QUIC stream, and the transfer port.
    async fn fetch_both(linked: &Linked, sha256: &str, offset: u64) -> [(FetchReply, Vec<u8>); 2] {
        [
            fetch(&linked.conn, sha256, offset).await,
            fetch_tcp(&linked.transfers, &linked.conn, sha256, offset).await,
        ]
    }

    #[tokio::test]
    async fn a_welcomed_node_gets_the_file_from_its_offset() {
        let linked = linked("offset").await;
        for (reply, bytes) in fetch_both(&linked, &linked.sha256, 10).await {
            assert_eq!(
                reply,
                FetchReply::Sending {
                    size: CONTENT.len() as u64
                }
            );
            assert_eq!(bytes, &CONTENT[10..]);
        }
        for (_, whole) in fetch_both(&linked, &linked.sha256, 0).await {
            assert_eq!(whole, CONTENT);
        }
        // Both ways are counted: two transfers each, the bytes of both.
        let counted = &linked.fleet.metrics().transfer;
        let bytes = (CONTENT.len() - 10 + CONTENT.len()) as u64;
        for over in [Transport::Quic, Transport::Tcp] {
            assert_eq!(
                counted.transfers(over, TransferOutcome::Sent),
                2,
                "{over:?}"
            );
            assert_eq!(counted.bytes("m", over), bytes, "{over:?}");
            assert_eq!(counted.transfers(over, TransferOutcome::Refused), 0);
        }
    }

    #[tokio::test]
    async fn files_are_refused_by_path_unknown_hash_or_offset_past_the_end() {
        let linked = linked("refused").await;
        for (name, offset) in [
            ("m.gguf".to_owned(), 0),
            ("/etc/passwd".to_owned(), 0),
            ("00".repeat(32), 0),
            (linked.sha256.clone(), CONTENT.len() as u64 + 1),
        ] {
            for (reply, bytes) in fetch_both(&linked, &name, offset).await {
                assert!(
                    matches!(reply, FetchReply::Refused { .. }),
                    "{name} from {offset}: {reply:?}"
                );
                assert!(bytes.is_empty(), "nothing follows a refusal");
            }
        }
        let counted = &linked.fleet.metrics().transfer;
        for over in [Transport::Quic, Transport::Tcp] {
            assert_eq!(
                counted.transfers(over, TransferOutcome::Refused),
                4,
                "{over:?}"
            );
            assert_eq!(counted.transfers(over, TransferOutcome::Sent), 0);
            assert_eq!(counted.bytes("m", over), 0);
        }
    }

    #[tokio::test]
    async fn the_transfer_port_serves_only_a_key_with_a_link_f_connection() {
        let linked = linked("stranger").await;
        // A key the handshake lets through but that never joined.
        let stranger = TransferClient::new(&Identity::generate().unwrap(), linked.head).unwrap();
        let (reply, bytes) = fetch_tcp(&stranger, &linked.conn, &linked.sha256, 0).await;
        let FetchReply::Refused { reason } = reply else {
            panic!("a key without a Link F connection got {reply:?}");
        };
        assert!(reason.contains("no Link F connection"), "{reason}");
        assert!(bytes.is_empty());
        // The member's key, once its connection is gone, is refused too.
        linked.conn.close(0u32.into(), b"leaving");
        let fleet = linked.fleet.clone();
        within(async move {
            while !fleet.nodes().is_empty() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        let (reply, _) = fetch_tcp(&linked.transfers, &linked.conn, &linked.sha256, 0).await;
        assert!(matches!(reply, FetchReply::Refused { .. }), "{reply:?}");
    }

    #[tokio::test]
    async fn a_node_pinning_another_head_key_gets_no_transfer() {
        let linked = linked("pinned").await;
        let wrong = TransferClient::new(
            &Identity::generate().unwrap(),
            Identity::generate().unwrap().fingerprint(),
        )
        .unwrap();
        assert!(
            within(wrong.connect(linked.conn.remote_address()))
                .await
                .is_err(),
            "the handshake checks the pinned head key"
        );
    }

    #[tokio::test]
    async fn a_nodes_progress_reports_show_in_the_fleet() {
        let mut linked = linked("progress").await;
        let progress = FetchProgress {
            model: "m".into(),
            done: 43,
            total: 100,
        };
        write_frame(&mut linked.control, &ControlMsg::Fetching(progress.clone()))
            .await
            .unwrap();
        let fleet = linked.fleet.clone();
        let node_id = linked.node_id.clone();
        let shown = within(async move {
            loop {
                if let Some(shown) = fleet.fetching(&node_id) {
                    return shown;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert_eq!(shown, progress);
    }
}
