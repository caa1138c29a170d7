//! One engine host process: started with its socket on stdin, its output
//! read line by line (forwarded to the node's stderr, the last lines kept
//! for the report of its end), and ended.
//!
//! The host runs in a process group of its own, so a Ctrl-C in the node's
//! terminal reaches only the node, which drains and then closes the
//! sockets; and it ends itself when its socket closes, which the kernel
//! does when the node dies however it dies (`SIGKILL` included). That is
//! why no `PR_SET_PDEATHSIG` is needed: that signal follows the thread
//! that started the child, and tokio ends idle blocking threads.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use superfluid_link::sync::lock;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use super::exits::ExitReason;

/// Lines of a host's output kept for the report of its end.
const TAIL_LINES: usize = 20;

/// How long a host whose socket was closed gets to exit before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(5);

/// How long the last output of an ended host may take to be read.
const OUTPUT_GRACE: Duration = Duration::from_secs(1);

/// How to start a model's engine host.
#[derive(Debug, Clone)]
pub struct HostCommand {
    /// The program: this binary (`/proc/self/exe`, which stays the binary
    /// the node runs even when a newer one replaced it on disk).
    pub program: PathBuf,
    /// Its arguments: `engine-host` and the model's flags.
    pub args: Vec<OsString>,
    /// The id the host must serve the model as.
    pub model_id: String,
}

/// The last lines a host wrote, newest last.
#[derive(Debug, Clone, Default)]
pub struct Tail(Arc<Mutex<VecDeque<String>>>);

impl Tail {
    fn push(&self, line: String) {
        let mut lines = lock(&self.0);
        if lines.len() == TAIL_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    /// The kept lines, joined, or a note that there were none.
    pub fn text(&self) -> String {
        let lines = lock(&self.0);
        if lines.is_empty() {
            return "(it wrote nothing)".into();
        }
        lines.iter().cloned().collect::<Vec<_>>().join("\n")
    }
}

/// A started host.
#[derive(Debug)]
pub struct HostProcess {
    child: tokio::process::Child,
    /// The tasks reading its output; done once it closed both pipes.
    readers: Vec<tokio::task::JoinHandle<()>>,
    /// Its output's last lines.
    pub tail: Tail,
}

impl HostProcess {
    /// Starts `command` with one end of a new socket pair as its stdin;
    /// returns the process and the other end.
    ///
    /// # Errors
    /// When the socket or the process cannot be made.
    pub fn start(command: &HostCommand) -> std::io::Result<(HostProcess, UnixStream)> {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        ours.set_nonblocking(true)?;
        let ours = UnixStream::from_std(ours)?;
        let mut child = tokio::process::Command::new(&command.program)
            .args(&command.args)
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()?;
        let tail = Tail::default();
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            readers.push(tokio::spawn(forward_lines(out, tail.clone())));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(tokio::spawn(forward_lines(err, tail.clone())));
        }
        Ok((
            HostProcess {
                child,
                readers,
                tail,
            },
            ours,
        ))
    }

    /// The process id, while it runs.
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// Waits for the process to exit. Cancel-safe.
    pub async fn exited(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// Ends the process: waits [`EXIT_GRACE`] for it to exit by itself
    /// (its socket is closed), then kills it. Its exit status, if known.
    /// Its last output is in [`HostProcess::tail`] once this returns.
    pub async fn end(&mut self, kill_now: bool) -> Option<ExitStatus> {
        let mut status = None;
        if !kill_now {
            status = tokio::time::timeout(EXIT_GRACE, self.child.wait())
                .await
                .ok()
                .and_then(Result::ok);
        }
        if status.is_none() {
            let _ = self.child.start_kill();
            status = self.child.wait().await.ok();
        }
        for reader in self.readers.drain(..) {
            let _ = tokio::time::timeout(OUTPUT_GRACE, reader).await;
        }
        status
    }
}

/// Why a host with `status` ended, in words and as a label.
pub fn describe(status: Option<ExitStatus>) -> (String, ExitReason) {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) if s.signal().is_some() => {
            let signal = s.signal().unwrap_or_default();
            let name = match signal {
                6 => " (SIGABRT: an abort in llama.cpp)",
                9 => " (SIGKILL: killed, perhaps by the out-of-memory killer)",
                11 => " (SIGSEGV: a crash)",
                15 => " (SIGTERM)",
                _ => "",
            };
            (
                format!("was killed by signal {signal}{name}"),
                ExitReason::Signal,
            )
        }
        Some(s) if s.success() => ("exited with status 0".into(), ExitReason::Exited),
        Some(s) => (
            format!("exited with status {}", s.code().unwrap_or(-1)),
            ExitReason::Failed,
        ),
        None => ("ended in an unknown way".into(), ExitReason::Failed),
    }
}

/// Copies a host's output to the node's stderr line by line (the host
/// logs in the node's format), keeping the last lines in `tail`.
async fn forward_lines(from: impl AsyncRead + Unpin, tail: Tail) {
    let mut lines = BufReader::new(from).split(b'\n');
    let mut stderr = tokio::io::stderr();
    while let Ok(Some(mut line)) = lines.next_segment().await {
        tail.push(String::from_utf8_lossy(&line).into_owned());
        line.push(b'\n');
        let _ = stderr.write_all(&line).await;
    }
}
