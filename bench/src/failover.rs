//! `failover`: the pause a client sees when the node giving its answer is
//! lost mid-stream, from the dead node's last token to the next node's
//! first, over many losses: the node process SIGKILLed, and its link cut
//! (the veth of its network namespace set down: packets dropped, nothing
//! closed; needs root, otherwise skipped and said so).
//!
//! Each round: the victim is the only node up and streams a long greedy
//! answer; a spare node joins; the victim is lost; the stream goes on at
//! the spare. The spare then leaves (SIGTERM) and the victim comes back,
//! for the next round. Nodes run the fake engine, so the gap is the
//! fleet's own: detection plus the move, not a model's prefill.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::{json, Value};

use crate::fleet::{FakeNode, Head, Place, Proc};
use crate::netns::{self, NetnsPair};
use crate::stats::percentile;

/// Tokens each answer asks for: at the fake engine's 165 a second, about
/// 12 s, longer than a round's wait for the spare and the detection.
const ANSWER_TOKENS: u32 = 2000;

/// Text events read before the victim is lost, and after the gap.
const EVENTS_BEFORE: usize = 20;
const EVENTS_AFTER: usize = 20;

/// What one way of losing a node gave.
#[derive(Debug, Serialize)]
pub struct Mode {
    /// `sigkill` or `cut_link`.
    pub mode: &'static str,
    /// Why it was not measured, if it was not.
    pub skipped: Option<String>,
    /// Losses measured.
    pub kills: usize,
    pub gap_p50_s: f64,
    pub gap_max_s: f64,
    /// Each loss's gap, in order.
    pub gaps_s: Vec<f64>,
    /// From the loss to the head no longer listing the node up, median
    /// (as seen by polling `fleet nodes`, about every 50 ms).
    pub dropped_p50_s: f64,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub answer_tokens: u32,
    pub modes: Vec<Mode>,
}

/// Runs `kills` losses of each kind with `bin` serving `model`.
pub fn run(bin: &Path, model: &Path, kills: usize) -> Result<Report> {
    let sigkill = measure(bin, model, kills, None).context("failover by SIGKILL")?;
    let cut = match netns::unavailable() {
        Some(why) => skipped("cut_link", format!("no network namespaces here ({why})")),
        None => {
            let pair = NetnsPair::create().context("making the namespaces")?;
            measure(bin, model, kills, Some(&pair)).context("failover by a cut link")?
        }
    };
    Ok(Report {
        answer_tokens: ANSWER_TOKENS,
        modes: vec![sigkill, cut],
    })
}

fn skipped(mode: &'static str, why: String) -> Mode {
    Mode {
        mode,
        skipped: Some(why),
        kills: 0,
        gap_p50_s: 0.0,
        gap_max_s: 0.0,
        gaps_s: Vec::new(),
        dropped_p50_s: 0.0,
    }
}

/// One mode: SIGKILL on the host without `pair`, a cut link with it (the
/// head and the spare in `a`, the victim in `b`).
fn measure(bin: &Path, model: &Path, kills: usize, pair: Option<&NetnsPair>) -> Result<Mode> {
    let (head_place, victim_place, link_ip) = match pair {
        None => (Place::Host, Place::Host, "127.0.0.1".to_owned()),
        Some(p) => (p.place_a(), p.place_b(), p.addr_a.to_string()),
    };
    let head = Head::start(bin, model, head_place.clone(), &link_ip)?;
    let mut victim = head.join(&victim_place, "victim", 2)?;
    let mut spare = head.join(&head_place, "spare", 2)?;
    let (mut gaps, mut dropped) = (Vec::new(), Vec::new());
    for round in 0..kills {
        victim.start(&head)?;
        let (gap, drop) = one_loss(&head, &mut victim, &mut spare, pair, round)?;
        eprintln!(
            "failover {}: loss {}/{kills}: gap {:.2} s, dropped after {:.2} s",
            if pair.is_some() {
                "cut link"
            } else {
                "SIGKILL"
            },
            round + 1,
            gap.as_secs_f64(),
            drop.as_secs_f64()
        );
        gaps.push(gap.as_secs_f64());
        dropped.push(drop.as_secs_f64());
    }
    let gaps_s = gaps.clone();
    Ok(Mode {
        mode: if pair.is_some() {
            "cut_link"
        } else {
            "sigkill"
        },
        skipped: None,
        kills: gaps.len(),
        gap_p50_s: percentile(&mut gaps, 0.5),
        gap_max_s: gaps_s.iter().copied().fold(0.0, f64::max),
        gaps_s,
        dropped_p50_s: percentile(&mut dropped, 0.5),
    })
}

/// One round: the gap the client saw and when the head dropped the victim.
fn one_loss(
    head: &Head,
    victim: &mut FakeNode,
    spare: &mut FakeNode,
    pair: Option<&NetnsPair>,
    round: usize,
) -> Result<(Duration, Duration)> {
    let mut stream = Stream::start(head, round)?;
    stream.wait_events(EVENTS_BEFORE, Duration::from_secs(60))?;
    spare.start(head)?;
    let lost = Instant::now();
    match pair {
        None => victim.proc.as_mut().context("the victim runs")?.kill(),
        Some(pair) => pair.link_b(false)?,
    }
    let drop = head.wait_state(&victim.name, Duration::from_secs(30), |s| s != Some("up"))?;
    stream.wait_after(lost, EVENTS_AFTER, Duration::from_secs(60))?;
    let before = stream.events.iter().filter(|t| **t <= lost).count();
    // The largest pause from the last event before the loss on: tokens
    // come every few milliseconds, the move's gap takes seconds.
    let gap = stream.events[before.saturating_sub(1)..]
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default();
    drop_stream(stream);
    // Back to one node: the spare leaves at once, the victim restarts.
    if let Some(p) = spare.proc.as_mut() {
        p.terminate(Duration::from_secs(10));
    }
    head.wait_state(&spare.name, Duration::from_secs(30), |s| s != Some("up"))?;
    if let Some(p) = victim.proc.as_mut() {
        p.kill();
    }
    if let Some(pair) = pair {
        pair.link_b(true)?;
    }
    Ok((gap, drop))
}

fn drop_stream(mut stream: Stream) {
    stream.curl.kill();
}

/// A streamed completion read by `curl` at the head's place, with the
/// arrival time of each event that carries text.
struct Stream {
    curl: Proc,
    arrivals: mpsc::Receiver<Result<Instant, String>>,
    events: Vec<Instant>,
}

impl Stream {
    fn start(head: &Head, round: usize) -> Result<Stream> {
        let body = json!({
            "model": superfluid_proto::model_id_from_path(&head.model),
            // Words whose tokens all lie in the fake engine's vocabulary.
            "prompt": format!("Client {round} asks for a long answer about failover."),
            "max_tokens": ANSWER_TOKENS,
            "temperature": 0,
            "stream": true,
        });
        let mut cmd = head.place.command("curl");
        cmd.args([
            "-sN",
            "--max-time",
            "120",
            "-H",
            "content-type: application/json",
        ])
        .arg("-d")
        .arg(body.to_string())
        .arg(format!("{}/v1/completions", head.base()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
        let mut child = cmd.spawn().context("starting curl")?;
        let out = child.stdout.take().context("curl's stdout")?;
        let (tx, arrivals) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let now = Instant::now();
                let Some(data) = line.strip_prefix("data: ") else {
                    continue;
                };
                let Ok(event) = serde_json::from_str::<Value>(data) else {
                    continue;
                };
                let sent = if event.get("error").is_some() {
                    tx.send(Err(format!("error event: {event}")))
                } else if event["choices"][0]["text"]
                    .as_str()
                    .is_some_and(|t| !t.is_empty())
                {
                    tx.send(Ok(now))
                } else {
                    continue;
                };
                if sent.is_err() {
                    return;
                }
            }
        });
        Ok(Stream {
            curl: Proc(child),
            arrivals,
            events: Vec::new(),
        })
    }

    /// Waits until `n` text events have come in all.
    fn wait_events(&mut self, n: usize, within: Duration) -> Result<()> {
        self.wait_for(|events| events.len() >= n, within)
    }

    /// Waits until `n` text events have come after `since`.
    fn wait_after(&mut self, since: Instant, n: usize, within: Duration) -> Result<()> {
        self.wait_for(
            |events| events.iter().filter(|t| **t > since).count() >= n,
            within,
        )
    }

    fn wait_for(&mut self, done: impl Fn(&[Instant]) -> bool, within: Duration) -> Result<()> {
        let deadline = Instant::now() + within;
        while !done(&self.events) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.arrivals.recv_timeout(left) {
                Ok(Ok(at)) => self.events.push(at),
                Ok(Err(e)) => bail!("the stream failed: {e}"),
                Err(_) => bail!(
                    "the stream gave only {} text events within {within:?}",
                    self.events.len()
                ),
            }
        }
        Ok(())
    }
}

/// Prints the report as a table.
pub fn print_table(report: &Report) {
    println!(
        "failover: pause from the lost node's last token to the next node's first ({} tokens asked)",
        report.answer_tokens
    );
    println!(
        "{:<10} {:>6} {:>10} {:>10} {:>12}",
        "loss", "kills", "gap p50", "gap max", "dropped p50"
    );
    for m in &report.modes {
        match &m.skipped {
            Some(why) => println!("{:<10} skipped: {why}", m.mode),
            None => println!(
                "{:<10} {:>6} {:>9.2}s {:>9.2}s {:>11.2}s",
                m.mode, m.kills, m.gap_p50_s, m.gap_max_s, m.dropped_p50_s
            ),
        }
    }
}
