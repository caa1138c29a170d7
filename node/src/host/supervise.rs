//! Keeping a model's host alive: start it and wait for its hello, serve it
//! until it ends (its socket closes, it exits, it sends a bad frame, or it
//! stalls), report why, and start the next one after a backoff. A model
//! whose hosts keep dying is given up on.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot};

use super::exits::{self, ExitReason};
use super::process::{describe, HostCommand, HostProcess};
use super::shared::Shared;
use super::wire::{self, FrameSource, FromHost, WireError, HOST_PROTOCOL_VERSION};
use std::sync::Arc;
use superfluid_proto::ModelDescription;

/// When to restart a host and when to give up on its model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    /// The wait before the first restart; it doubles with each death in a row.
    pub first_backoff: Duration,
    /// The longest wait between restarts.
    pub max_backoff: Duration,
    /// Deaths within [`RestartPolicy::window`] after which the model is given up on.
    pub max_deaths: usize,
    /// See [`RestartPolicy::max_deaths`]; a host that ran this long also
    /// resets the backoff.
    pub window: Duration,
    /// How long a host may take to load its model and say it is ready.
    pub ready_timeout: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        Self {
            first_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(30),
            max_deaths: 5,
            window: Duration::from_secs(300),
            ready_timeout: Duration::from_secs(600),
        }
    }
}

/// A host that said it is ready.
pub struct Started {
    pub process: HostProcess,
    /// The socket's halves: frames the host sent after its hello may
    /// already wait in `source`.
    pub source: FrameSource<OwnedReadHalf>,
    pub write: OwnedWriteHalf,
    pub model: ModelDescription,
}

/// Why a host could not be started.
pub struct StartFailed {
    pub message: String,
    pub reason: ExitReason,
}

/// Starts a host and waits for its hello.
pub async fn start(command: &HostCommand, timeout: Duration) -> Result<Started, StartFailed> {
    let failed = |message: String, reason| StartFailed { message, reason };
    let (mut process, socket) = HostProcess::start(command).map_err(|e| {
        failed(
            format!("could not start {}: {e}", command.program.display()),
            ExitReason::LoadFailed,
        )
    })?;
    let (read, write) = socket.into_split();
    let mut source = FrameSource::new(read);
    let hello = tokio::time::timeout(timeout, source.next::<FromHost>()).await;
    let why = match hello {
        Ok(Ok(Some(FromHost::Ready { version, model }))) => {
            if version != HOST_PROTOCOL_VERSION {
                format!("it speaks host protocol {version}, the node {HOST_PROTOCOL_VERSION}; restart the node so that both run the same binary")
            } else if model.id != command.model_id {
                format!("it serves model {:?}, not {:?}", model.id, command.model_id)
            } else {
                return Ok(Started {
                    process,
                    source,
                    write,
                    model,
                });
            }
        }
        Ok(Ok(Some(FromHost::LoadFailed { message }))) => message,
        Ok(Ok(Some(_))) => "it sent something before saying it was ready".into(),
        Ok(Ok(None)) | Ok(Err(WireError::Io(_))) => {
            let (status, _) = describe(process.end(false).await);
            format!("it {status} before it was ready")
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("it was not ready after {} s", timeout.as_secs()),
    };
    process.end(true).await;
    Err(failed(
        format!("{why}; its last output:\n{}", process.tail.text()),
        ExitReason::LoadFailed,
    ))
}

/// How one host's service ended.
enum End {
    /// The engine was dropped: the node no longer wants the model.
    Stopped,
    /// The host went away or was ended, for this reason.
    Lost(ExitReason, String),
}

/// Serves `started` and every host after it until `stop` fires (the
/// engine was dropped) or the model is given up on.
pub async fn supervise(
    shared: Arc<Shared>,
    command: HostCommand,
    policy: RestartPolicy,
    mut started: Started,
    mut stop: oneshot::Receiver<()>,
) {
    let mut deaths: VecDeque<Instant> = VecDeque::new();
    let mut backoff = policy.first_backoff;
    loop {
        let up = Instant::now();
        let mut process = started.process;
        let end = serve(
            &shared,
            &mut process,
            started.source,
            started.write,
            &mut stop,
        )
        .await;
        let (reason, why) = match end {
            End::Stopped => {
                process.end(false).await;
                return;
            }
            End::Lost(reason, why) => (reason, why),
        };
        let status = process
            .end(matches!(reason, ExitReason::BadFrame | ExitReason::Stalled))
            .await;
        let (status, by_status) = describe(status);
        let reason = if matches!(reason, ExitReason::Exited) {
            by_status
        } else {
            reason
        };
        let model = shared.model().to_owned();
        tracing::warn!(
            %model,
            reason = reason.as_str(),
            "the engine host of model {model} ended: {why}; it {status}; its last output:\n{}",
            process.tail.text()
        );
        exits::record(&model, reason);
        shared.host_lost(&format!("ended ({why}; it {status})"));
        if up.elapsed() >= policy.window {
            backoff = policy.first_backoff;
        }
        loop {
            let now = Instant::now();
            deaths.push_back(now);
            while deaths
                .front()
                .is_some_and(|&t| now.duration_since(t) > policy.window)
            {
                deaths.pop_front();
            }
            if deaths.len() >= policy.max_deaths {
                let why = format!(
                    "the engine host of model {model} died {} times within {} s (last: {why}); the node gave up on the model",
                    deaths.len(),
                    policy.window.as_secs()
                );
                tracing::error!(%model, "{why}");
                shared.give_up(why);
                return;
            }
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                _ = &mut stop => return,
            }
            backoff = (backoff * 2).min(policy.max_backoff);
            let next = tokio::select! {
                next = start(&command, policy.ready_timeout) => next,
                _ = &mut stop => return,
            };
            match next {
                Ok(next) => {
                    tracing::info!(%model, pid = next.process.id(), "restarted the engine host of model {model}");
                    started = next;
                    break;
                }
                Err(failed) => {
                    tracing::warn!(%model, "could not restart the engine host of model {model}: {}", failed.message);
                    exits::record(&model, failed.reason);
                }
            }
        }
    }
}

/// How often a host with requests in flight is checked for progress.
const STALL_CHECK: Duration = Duration::from_secs(1);

/// Serves one host until it ends or `stop` fires.
async fn serve(
    shared: &Shared,
    process: &mut HostProcess,
    mut source: FrameSource<OwnedReadHalf>,
    write: OwnedWriteHalf,
    stop: &mut oneshot::Receiver<()>,
) -> End {
    let (link, outbox) = mpsc::unbounded_channel();
    shared.attach(link, process.id());
    let writer = wire::write_all(write, outbox);
    tokio::pin!(writer);
    let reader = async {
        loop {
            match source.next::<FromHost>().await {
                Ok(Some(message)) => {
                    if let Err(why) = shared.deliver(message) {
                        return End::Lost(ExitReason::BadFrame, why);
                    }
                }
                Ok(None) => return End::Lost(ExitReason::Exited, "its socket closed".into()),
                Err(WireError::Frame(e)) => {
                    return End::Lost(ExitReason::BadFrame, format!("it sent a bad frame: {e}"))
                }
                Err(e) => return End::Lost(ExitReason::Exited, e.to_string()),
            }
        }
    };
    let watchdog = async {
        let mut check = tokio::time::interval(STALL_CHECK);
        loop {
            check.tick().await;
            if shared.stalled(Instant::now()) {
                return End::Lost(
                    ExitReason::Stalled,
                    "it made no progress on its generations for longer than the watchdog allows"
                        .into(),
                );
            }
        }
    };
    tokio::select! {
        end = reader => end,
        end = watchdog => end,
        _ = process.exited() => End::Lost(ExitReason::Exited, "it exited".into()),
        written = &mut writer => match written {
            Ok(()) => End::Stopped,
            Err(e) => End::Lost(ExitReason::Exited, e.to_string()),
        },
        _ = stop => End::Stopped,
    }
}
