//! `models`: how fast a model file moves from the head to a node over
//! Link F, against a plain copy of the same file over a loopback TCP
//! socket in the same run.
//!
//! Link F's side is the real path: a head's listener serving its model
//! store, a node welcomed by it, and the node's model cache fetching,
//! hashing and writing the file, then verifying and renaming it; over the
//! head's transfer port (TLS on TCP) as nodes fetch, and over a QUIC
//! stream, the fallback. The TCP side reads the file and writes what
//! arrives to another file, nothing more: the floor a transfer cannot beat
//! on this machine.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::Serialize;
use superfluid_head::fleet::model_store::ModelStore;
use superfluid_head::fleet::{listen, Fleet, LinkListenConfig};
use superfluid_link::transfer::TransferClient;
use superfluid_link::{client_endpoint, connect, quinn, read_frame, write_frame, Identity};
use superfluid_node::model_cache::{fetch, ModelCache};
use superfluid_proto::{HeadReply, NodeHello, PROTOCOL_VERSION};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// What `scripts/bench models --json` prints.
#[derive(Debug, Serialize)]
pub struct ModelsReport {
    /// The file moved.
    pub model: String,
    /// Its length in bytes.
    pub bytes: u64,
    /// Rounds; each moves the file once each way, in turn.
    pub rounds: u32,
    /// Link F, head to node, into the node's cache (verified), over the
    /// head's transfer port (TLS over TCP), as nodes fetch: median MB/s.
    pub link_f_mb_per_s: f64,
    /// The same over a QUIC stream, as a node fetches where the transfer
    /// port does not answer: median MB/s.
    pub link_f_quic_mb_per_s: f64,
    /// The same bytes over loopback TCP into a file: median MB/s.
    pub tcp_copy_mb_per_s: f64,
    /// Link F over the TCP copy, round by round (each round moves the file
    /// each way back to back): the median; the aim is at least 0.8.
    pub ratio: f64,
    /// The lower and upper quartile of those ratios.
    pub ratio_spread: (f64, f64),
    /// `fleet join` on a bare machine to the first token, with `--superfluid`.
    pub bare_join: Option<crate::bare_join::BareJoin>,
}

/// Moves `model` `rounds` times each way and reports the medians.
pub async fn run(model: &Path, rounds: u32) -> Result<ModelsReport> {
    let scratch =
        std::env::temp_dir().join(format!("superfluid-bench-models-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let store = ModelStore::hash(&[model.to_owned()], None)
        .map_err(|(path, e)| anyhow::anyhow!("hashing {}: {e}", path.display()))?;
    let offer = store.offers().into_iter().next().context("no model")?;
    let (conn, _endpoint, transfers) = welcomed_node(store).await?;
    let mut link_f = Vec::new();
    let mut quic = Vec::new();
    let mut tcp = Vec::new();
    for round in 0..rounds {
        // Every other round the TCP copy goes first, so that neither side
        // always follows the other's disk writes.
        if round % 2 == 1 {
            tcp.push(timed_tcp_copy(model, &scratch.join("tcp"), offer.size).await?);
        }
        for (over, speeds) in [(Some(&transfers), &mut link_f), (None, &mut quic)] {
            let cache = ModelCache::new(scratch.join(format!("cache-{round}")));
            let started = Instant::now();
            fetch(&conn, over, &cache, &offer, |_| {}).await?;
            speeds.push(mb_per_s(offer.size, started.elapsed().as_secs_f64()));
            std::fs::remove_dir_all(cache.dir())?;
        }
        if round % 2 == 0 {
            tcp.push(timed_tcp_copy(model, &scratch.join("tcp"), offer.size).await?);
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let mut ratios: Vec<f64> = link_f.iter().zip(&tcp).map(|(l, t)| l / t).collect();
    let ratio = median(&mut ratios);
    let ratio_spread = (quantile(&ratios, 0.25), quantile(&ratios, 0.75));
    let (link_f, quic, tcp) = (median(&mut link_f), median(&mut quic), median(&mut tcp));
    Ok(ModelsReport {
        model: offer.id,
        bytes: offer.size,
        rounds,
        link_f_mb_per_s: link_f,
        link_f_quic_mb_per_s: quic,
        tcp_copy_mb_per_s: tcp,
        ratio,
        ratio_spread,
        bare_join: None,
    })
}

fn mb_per_s(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / 1e6 / secs.max(1e-9)
}

/// Copies `model` over loopback TCP into `to`, then removes it: MB/s.
async fn timed_tcp_copy(model: &Path, to: &PathBuf, size: u64) -> Result<f64> {
    let started = Instant::now();
    let copied = tcp_copy(model, to).await?;
    let speed = mb_per_s(copied, started.elapsed().as_secs_f64());
    std::fs::remove_file(to)?;
    if copied != size {
        bail!("the TCP copy moved {copied} of {size} bytes");
    }
    Ok(speed)
}

/// The `q` quantile of sorted `values` (nearest rank).
fn quantile(values: &[f64], q: f64) -> f64 {
    let last = values.len().saturating_sub(1);
    let at = ((last as f64) * q).round() as usize;
    values.get(at.min(last)).copied().unwrap_or(0.0)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// A head serving `store` on loopback, and a connection of a node it
/// welcomed (offering no model, as a bare node does), with the node's
/// client for the head's transfer port.
async fn welcomed_node(
    store: ModelStore,
) -> Result<(quinn::Connection, quinn::Endpoint, TransferClient)> {
    let head = Identity::generate()?;
    let listener = listen(
        Fleet::new().with_model_store(store),
        LinkListenConfig {
            addr: "127.0.0.1:0".parse()?,
            identity: head.clone(),
            authorizer: Arc::new(|_| true),
        },
    )
    .await?;
    let node = Identity::generate()?;
    let endpoint = client_endpoint(listener.addr, &node, head.fingerprint())?;
    let conn = connect(&endpoint, listener.addr).await?;
    let (mut send, mut recv) = conn.open_bi().await?;
    let hello = NodeHello {
        version: PROTOCOL_VERSION,
        name: "bench".into(),
        models: Vec::new(),
        join_token: None,
        hardware: "bench machine".into(),
        free_memory: 0,
        on_disk: Vec::new(),
    };
    write_frame(&mut send, &hello).await?;
    match read_frame::<HeadReply>(&mut recv).await? {
        Some(HeadReply::Welcome { .. }) => {}
        other => bail!("the head did not welcome the bench's node: {other:?}"),
    }
    // The listener lives as long as the process; the control stream too.
    std::mem::forget(listener);
    tokio::spawn(async move {
        let _send = send;
        while let Ok(Some(_)) = read_frame::<superfluid_proto::ControlMsg>(&mut recv).await {}
    });
    let transfers = TransferClient::new(&node, head.fingerprint())?;
    Ok((conn, endpoint, transfers))
}

/// Sends `from` over a loopback TCP connection into the file `to`; the
/// bytes moved.
async fn tcp_copy(from: &Path, to: &PathBuf) -> Result<u64> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let source = from.to_owned();
    let sender = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await?;
        let mut file = tokio::fs::File::open(source).await?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = file.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            socket.write_all(&buf[..n]).await?;
        }
        socket.shutdown().await?;
        anyhow::Ok(())
    });
    let mut socket = tokio::net::TcpStream::connect(addr).await?;
    let mut file = tokio::fs::File::create(to).await?;
    let mut buf = vec![0u8; 1 << 20];
    let mut moved = 0u64;
    loop {
        let n = socket.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        file.write_all(&buf[..n]).await?;
        moved += n as u64;
    }
    file.sync_all().await?;
    sender.await??;
    Ok(moved)
}

/// The report as a table.
pub fn print_table(r: &ModelsReport) {
    println!(
        "model {} ({} bytes), median of {} rounds",
        r.model, r.bytes, r.rounds
    );
    println!("{:<34} {:>10}", "transfer", "MB/s");
    println!(
        "{:<34} {:>10.1}",
        "Link F head -> node (verified)", r.link_f_mb_per_s
    );
    println!(
        "{:<34} {:>10.1}",
        "  the same over QUIC (fallback)", r.link_f_quic_mb_per_s
    );
    println!(
        "{:<34} {:>10.1}",
        "plain TCP copy on loopback", r.tcp_copy_mb_per_s
    );
    println!(
        "{:<34} {:>10.2}  (quartiles {:.2}-{:.2})",
        "ratio, paired (aim >= 0.80)", r.ratio, r.ratio_spread.0, r.ratio_spread.1
    );
    if let Some(b) = &r.bare_join {
        println!("fleet join on a bare machine to the first token (s):");
        for (phase, secs) in [
            ("join (token, welcome)", b.join_secs),
            ("transfer (fetch, verify)", b.transfer_secs),
            ("load (and serve)", b.load_secs),
            ("first token", b.first_token_secs),
            ("total", b.total_secs),
        ] {
            println!("  {phase:<32} {secs:>10.2}");
        }
    }
}
