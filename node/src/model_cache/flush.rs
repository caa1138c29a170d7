//! Writing a download's bytes to disk while the rest still comes.
//!
//! A verified file is fsynced before it is renamed into place. Left to the
//! end, that fsync waits for every byte of the file at once (20 ms of a
//! 120 ms transfer of the default model here, minutes for a large model
//! on a slow disk). A thread beside the download asks the disk to take
//! what was written so far every [`FLUSH_EVERY`] bytes, so the last fsync
//! waits only for the tail.

use std::fs::File;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};

/// Bytes written between two early flushes.
const FLUSH_EVERY: u64 = 16 << 20;

/// The flushing thread of one download; it ends when this is dropped.
#[derive(Debug)]
pub(super) struct EarlyFlush {
    wake: Option<SyncSender<()>>,
    since: u64,
}

impl EarlyFlush {
    /// A flusher for `file` (a second handle to the partial file), or one
    /// that never flushes early if no thread can be started.
    pub(super) fn new(file: File) -> Self {
        let (wake, woken) = sync_channel::<()>(1);
        let started = std::thread::Builder::new()
            .name("model-flush".into())
            .spawn(move || {
                while woken.recv().is_ok() {
                    // An error here shows again in the final fsync, which
                    // reports it.
                    let _ = file.sync_data();
                }
            });
        Self {
            wake: started.is_ok().then_some(wake),
            since: 0,
        }
    }

    /// Counts `n` more bytes written, and wakes the thread once enough have
    /// gathered (unless it is still flushing the last ones).
    pub(super) fn wrote(&mut self, n: u64) {
        self.since += n;
        if self.since < FLUSH_EVERY {
            return;
        }
        if let Some(wake) = &self.wake {
            match wake.try_send(()) {
                Ok(()) => self.since = 0,
                Err(TrySendError::Full(())) => {}
                Err(TrySendError::Disconnected(())) => self.wake = None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_written_reach_the_disk_before_the_end_and_the_thread_ends_with_the_flusher() {
        let dir = std::env::temp_dir().join(format!("superfluid-flush-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("partial");
        let mut file = File::create(&path).unwrap();
        let mut flush = EarlyFlush::new(file.try_clone().unwrap());
        assert!(flush.wake.is_some());
        std::io::Write::write_all(&mut file, &[7u8; 1024]).unwrap();
        flush.wrote(FLUSH_EVERY - 1);
        assert_eq!(
            flush.since,
            FLUSH_EVERY - 1,
            "no flush before FLUSH_EVERY bytes"
        );
        flush.wrote(1);
        assert_eq!(flush.since, 0, "a flush was asked for");
        drop(flush);
        assert_eq!(std::fs::read(&path).unwrap().len(), 1024);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
