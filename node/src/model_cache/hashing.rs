//! A download's sha256, computed on its own thread while the bytes are
//! written: hashing costs about as much as everything else the node does
//! with a chunk, so the two run side by side instead of one after the other.

use sha2::{Digest as _, Sha256};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::thread::JoinHandle;

/// Chunks waiting for the hashing thread, at most; the writer waits beyond.
const QUEUE: usize = 8;

/// The hash of the bytes given so far.
#[derive(Debug)]
pub(super) enum Hashing {
    /// On its own thread.
    Thread {
        /// Where the chunks go, in order.
        chunks: SyncSender<Vec<u8>>,
        /// The thread; it ends with the hash when `chunks` is dropped.
        hashed: JoinHandle<Sha256>,
    },
    /// On the caller's thread, where no thread could be started.
    Inline(Sha256),
}

impl Hashing {
    /// Goes on from `hasher` (which may hold a partial file's bytes).
    pub(super) fn start(hasher: Sha256) -> Self {
        let (chunks, queued) = sync_channel::<Vec<u8>>(QUEUE);
        // A copy goes to the thread; this one stays for when none starts.
        let mut on_thread = hasher.clone();
        let spawned = std::thread::Builder::new()
            .name("model-hash".into())
            .spawn(move || {
                while let Ok(chunk) = queued.recv() {
                    on_thread.update(&chunk);
                }
                on_thread
            });
        match spawned {
            Ok(hashed) => Self::Thread { chunks, hashed },
            Err(e) => {
                tracing::warn!(error = %e, "no thread for hashing; hashing as the file is written");
                Self::Inline(hasher)
            }
        }
    }

    /// Adds the next bytes.
    pub(super) fn update(&mut self, chunk: Vec<u8>) {
        match self {
            Self::Thread { chunks, .. } => {
                if let Err(lost) = chunks.send(chunk) {
                    // The thread is gone (it cannot fail but by a bug): the
                    // hash will not match, and the file is fetched again.
                    drop(lost);
                }
            }
            Self::Inline(hasher) => hasher.update(&chunk),
        }
    }

    /// The sha256 of every byte given, as lowercase hex; empty (matching no
    /// model) if the hashing thread died.
    pub(super) fn finish(self) -> String {
        match self {
            Self::Thread { chunks, hashed } => {
                drop(chunks);
                hashed
                    .join()
                    .map(|h| hex::encode(h.finalize()))
                    .unwrap_or_default()
            }
            Self::Inline(hasher) => hex::encode(hasher.finalize()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_on_a_thread_is_the_hash_of_the_bytes_in_order_after_a_prefix() {
        let mut prefix = Sha256::new();
        prefix.update(b"abc");
        let mut hashing = Hashing::start(prefix);
        assert!(matches!(hashing, Hashing::Thread { .. }));
        for chunk in [b"def".to_vec(), Vec::new(), vec![b'g'; 100_000]] {
            hashing.update(chunk);
        }
        let mut whole = b"abcdef".to_vec();
        whole.extend(vec![b'g'; 100_000]);
        assert_eq!(hashing.finish(), hex::encode(Sha256::digest(&whole)));
    }
}
