//! `superfluid head`: the head of a fleet, with membership and mDNS.

use anyhow::{Context, Result};
use superfluid_head::keys::{self, Keys};
use superfluid_head::membership::Membership;
use superfluid_head::server::HeadConfig;

use crate::cli::HeadFlags;
use crate::engine::{self, model_path};
use crate::runtime::until_shutdown;

pub async fn run(flags: HeadFlags) -> Result<()> {
    let models = if flags.models.is_empty() {
        vec![model_path(None)?]
    } else {
        let mut files = Vec::new();
        for given in flags.models {
            files.extend(engine::model_files(given)?);
        }
        files
    };
    let data_dir = flags
        .data_dir
        .unwrap_or_else(|| engine::home().join("head"));
    let membership = Membership::open(&data_dir)
        .with_context(|| format!("opening the head's data dir {}", data_dir.display()))?;
    let keys = Keys::open(&data_dir, &flags.access.api_keys)
        .with_context(|| format!("opening the API keys in {}", data_dir.display()))?;
    keys::check_bind(flags.http, &keys, flags.access.insecure_no_auth)?;
    let sessions = crate::serve::open_sessions(&data_dir, flags.session_limits.limits()).await?;
    let browser = flags.browser.policy(&keys)?;
    let fleet_id = membership.fleet_id();
    let backend = engine::backend()?;
    let head = superfluid_head::server::start(
        &backend,
        HeadConfig {
            route_policy: flags.route_policy,
            keys,
            browser,
            metrics_key: flags.access.metrics_key,
            max_connections: flags.max_connections,
            max_queue: flags.max_queue,
            ollama_port: flags.ollama_port,
            sessions: Some(sessions),
            placement: flags.placement.config(),
            ..HeadConfig::with_membership(flags.http, flags.link, models, membership)
        },
    )
    .await?;
    let _advertisement = if flags.no_mdns {
        None
    } else {
        // A head bound to one address announces only that one.
        let only = (!head.link_addr.ip().is_unspecified()).then(|| vec![head.link_addr.ip()]);
        match superfluid_link::advertise(&fleet_id, &head.fingerprint, head.link_addr.port(), only)
        {
            Ok(ad) => Some(ad),
            Err(e) => {
                tracing::warn!(error = %e, "could not advertise the head by mDNS; nodes will use their tokens' addresses");
                None
            }
        }
    };
    tracing::info!(
        "head of fleet {fleet_id} serving {} on http://{} (Link F on {}); data dir {}",
        head.model_ids.join(", "),
        head.http_addr,
        head.link_addr,
        data_dir.display()
    );
    if let Some(addr) = head.ollama_addr {
        tracing::info!("the Ollama API also on port {} ({addr})", addr.port());
    }
    tracing::info!("add a node: run `superfluid fleet token` here, then `superfluid fleet join TOKEN` on the node");
    until_shutdown::<std::convert::Infallible>(head, None).await
}
