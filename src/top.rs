//! `superfluid top`: the fleet in a terminal, as the status page shows it
//! in a browser. Polls the head's `GET /v1/fleet` every second and redraws
//! in place (`top/draw.rs`); `q`, Esc or Ctrl-C leave and restore the
//! terminal.

mod draw;

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use superfluid_head::api::fleet_view::FleetView;
use tokio::runtime::Handle;

use crate::cli::TopFlags;

/// What the screen shows: the last view fetched, and why the latest fetch
/// failed if it did.
pub struct Screen {
    /// The head's address, as given.
    pub url: String,
    /// The last view the head answered.
    pub view: Option<FleetView>,
    /// When it answered.
    pub fetched: Option<std::time::SystemTime>,
    /// Why the latest fetch failed; `None` if it did not.
    pub error: Option<String>,
}

/// Runs the view until the user quits.
pub async fn run(flags: TopFlags) -> Result<()> {
    let handle = Handle::current();
    tokio::task::spawn_blocking(move || watch(&flags, &handle))
        .await
        .context("the terminal view stopped")?
}

fn watch(flags: &TopFlags, handle: &Handle) -> Result<()> {
    let url = flags.url.trim_end_matches('/').to_owned();
    let client = Fetcher::new(&url, flags.api_key.clone())?;
    // A head that cannot be reached or refuses the key is told at once,
    // on the plain terminal, rather than drawn as an empty screen.
    let first = handle.block_on(client.fetch())?;
    let mut screen = Screen {
        url,
        view: Some(first),
        fetched: Some(std::time::SystemTime::now()),
        error: None,
    };
    let every = Duration::from_millis(flags.interval_ms.max(100));
    let mut terminal = ratatui::init();
    let ended = refresh_until_quit(&mut terminal, &mut screen, &client, handle, every);
    ratatui::restore();
    ended
}

/// Draws `screen` and fetches it again every `every` until a key asks to
/// quit.
fn refresh_until_quit(
    terminal: &mut ratatui::DefaultTerminal,
    screen: &mut Screen,
    client: &Fetcher,
    handle: &Handle,
    every: Duration,
) -> Result<()> {
    loop {
        terminal.draw(|frame| draw::screen(frame, screen))?;
        if quit_within(every)? {
            return Ok(());
        }
        match handle.block_on(client.fetch()) {
            Ok(view) => {
                screen.view = Some(view);
                screen.fetched = Some(std::time::SystemTime::now());
                screen.error = None;
            }
            Err(err) => screen.error = Some(format!("{err:#}")),
        }
    }
}

/// Waits `wait` for keys; whether one of them asked to quit.
fn quit_within(wait: Duration) -> Result<bool> {
    let until = Instant::now() + wait;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || !event::poll(left)? {
            return Ok(false);
        }
        if let Event::Key(key) = event::read()? {
            let ctrl_c =
                key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL);
            let quit = matches!(key.code, KeyCode::Char('q') | KeyCode::Esc) || ctrl_c;
            if key.kind == KeyEventKind::Press && quit {
                return Ok(true);
            }
        }
    }
}

/// `GET /v1/fleet` of one head, with the client key if given.
struct Fetcher {
    url: String,
    key: Option<String>,
    http: reqwest::Client,
}

impl Fetcher {
    fn new(url: &str, key: Option<String>) -> Result<Fetcher> {
        Ok(Fetcher {
            url: format!("{url}/v1/fleet"),
            key,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(3))
                .build()?,
        })
    }

    async fn fetch(&self) -> Result<FleetView> {
        let mut request = self.http.get(&self.url);
        if let Some(key) = &self.key {
            request = request.bearer_auth(key);
        }
        let answer = request.send().await.with_context(|| {
            format!(
                "could not reach the head at {}; start it, or pass --url (SUPERFLUID_URL) with its HTTP address",
                self.url
            )
        })?;
        match answer.status().as_u16() {
            200 => answer
                .json()
                .await
                .with_context(|| format!("{} answered something other than the fleet view; is it a superfluid head of this version?", self.url)),
            401 => bail!(
                "the head needs an API key: pass --api-key KEY (or SUPERFLUID_API_KEY); `superfluid keys create NAME` on the head makes one"
            ),
            403 => bail!("the head refused this API key for the fleet view"),
            status => bail!("{} answered {status}; is it a superfluid head of this version?", self.url),
        }
    }
}
