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
