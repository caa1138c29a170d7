//! Drawing one frame of `superfluid top`: a summary line, the nodes and
//! the last requests. Pure: the same [`Screen`] draws the same frame.

use std::time::{SystemTime, UNIX_EPOCH};

use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Style, Stylize};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table};
use ratatui::Frame;
use superfluid_head::api::fleet_view::{FleetView, NodeView};
use superfluid_head::api::recent::RecentRequest;

use super::Screen;

/// Draws `screen` on the whole of `frame`.
pub fn screen(frame: &mut Frame, screen: &Screen) {
    let nodes = screen.view.as_ref().map_or(0, |v| v.nodes.len());
    let [top, error, middle, bottom] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Length(u16::try_from(nodes).unwrap_or(u16::MAX).saturating_add(3)),
        Constraint::Min(4),
    ])
    .areas(frame.area());
    frame.render_widget(Paragraph::new(summary(screen)), top);
    if let Some(why) = &screen.error {
        frame.render_widget(Paragraph::new(why.as_str().red()), error);
    }
    let Some(view) = &screen.view else {
        return;
    };
    frame.render_widget(nodes_table(view), middle);
    frame.render_widget(recent_table(&view.recent), bottom);
}

fn summary(screen: &Screen) -> Line<'static> {
    let Some(view) = &screen.view else {
        return Line::from(format!(
            "superfluid top · {} · waiting for the head",
            screen.url
        ));
    };
    let up = view.nodes.iter().filter(|n| n.state == "up").count();
    let updated = screen.fetched.map_or_else(|| "-".into(), clock);
    Line::from(format!(
        "superfluid {} · {} · {up}/{} nodes up · routing {} · updated {updated} · q quits",
        view.version,
        screen.url,
        view.nodes.len(),
        view.policy
    ))
    .bold()
}

const NODE_COLUMNS: [(&str, u16); 10] = [
    ("NODE", 16),
    ("STATE", 9),
    ("MODELS", 28),
    ("SLOTS", 7),
    ("RUN", 4),
    ("QUEUE", 6),
    ("KV", 13),
    ("PREFILL/s", 10),
    ("DECODE/s", 9),
    ("SERVED", 7),
];

fn nodes_table(view: &FleetView) -> Table<'static> {
    let rows = view.nodes.iter().map(|n| {
        Row::new(vec![
            n.name.clone(),
            n.state.clone(),
            models_cell(n),
            format!("{}/{}", n.slots_busy, n.slots),
            n.in_flight.to_string(),
            n.queued.to_string(),
            format!("{}/{}", n.kv_cells_used, n.kv_cells),
            rate(n.prefill_tokens_per_sec),
            rate(n.decode_tokens_per_sec),
            n.served.to_string(),
        ])
        .style(Style::new().fg(state_color(n)))
    });
    table(rows, &NODE_COLUMNS, "Nodes")
}

/// The node's models, each with its KV cache's type and size when the node
/// reported them (`smollm2 q8_0 24M`).
fn models_cell(node: &NodeView) -> String {
    let described: Vec<String> = node
        .models
        .iter()
        .map(|id| match node.model_memory.iter().find(|m| &m.id == id) {
            Some(m) if !m.kv_cache_type.is_empty() => {
                format!("{id} {} {}M", m.kv_cache_type, m.kv_bytes.div_ceil(1 << 20))
            }
            _ => id.clone(),
        })
        .collect();
    described.join(",")
}

const RECENT_COLUMNS: [(&str, u16); 9] = [
    ("AGO", 6),
    ("ENDPOINT", 22),
    ("MODEL", 24),
    ("STATUS", 6),
    ("NODE", 16),
    ("PROMPT", 7),
    ("CACHED", 7),
    ("GEN", 6),
    ("TTFT ms", 8),
];

fn recent_table(recent: &[RecentRequest]) -> Table<'static> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let rows = recent.iter().map(|r| {
        let ago = now.saturating_sub(u128::from(r.unix_ms)) / 1000;
        let style = match r.status {
            200..=299 => Style::new(),
            400..=499 => Style::new().fg(Color::Yellow),
            _ => Style::new().fg(Color::Red),
        };
        Row::new(vec![
            format!("{ago}s"),
            r.endpoint.clone(),
            dash(&r.model),
            r.status.to_string(),
            dash(&r.node),
            r.prompt_tokens.to_string(),
            r.cached_tokens.to_string(),
            r.completion_tokens.to_string(),
            r.ttft_ms.map_or_else(|| "-".into(), |t| format!("{t:.0}")),
        ])
        .style(style)
    });
    table(rows, &RECENT_COLUMNS, "Recent requests")
}

fn table<'a>(
    rows: impl IntoIterator<Item = Row<'a>>,
    columns: &[(&'static str, u16)],
    title: &'static str,
) -> Table<'a> {
    let header = Row::new(columns.iter().map(|(name, _)| *name)).bold();
    let widths = columns.iter().map(|(_, width)| Constraint::Length(*width));
    Table::new(rows, widths)
        .header(header)
        .block(Block::bordered().title(title))
}

fn state_color(node: &NodeView) -> Color {
    match node.state.as_str() {
        "up" => Color::Reset,
        "draining" => Color::Yellow,
        _ => Color::Red,
    }
}

fn rate(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |r| format!("{r:.0}"))
}

fn dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_owned()
    }
}

/// `HH:MM:SS` (UTC) of `at`.
fn clock(at: SystemTime) -> String {
    let secs = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    format!(
        "{:02}:{:02}:{:02} UTC",
        secs / 3600 % 24,
        secs / 60 % 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;
    use superfluid_head::api::fleet_view::ModelMemory;

    fn node(name: &str) -> NodeView {
        NodeView {
            id: "n1".into(),
            name: name.into(),
            state: "up".into(),
            models: vec!["smollm2".into()],
            model_memory: vec![ModelMemory {
                id: "smollm2".into(),
                kv_cache_type: "q8_0".into(),
                kv_bytes: 25_067_520,
            }],
            hardware: "Test CPU, 4 cores, 8 GiB RAM".into(),
            slots_busy: 1,
            slots: 4,
            in_flight: 1,
            queued: 2,
            queued_prompt_tokens: 0,
            kv_cells_used: 64,
            kv_cells: 4096,
            prefill_tokens_per_sec: Some(812.4),
            decode_tokens_per_sec: None,
            served: 9,
            connected_secs: 5,
        }
    }

    #[test]
    fn a_frame_shows_each_node_and_its_load() {
        let screen = Screen {
            url: "http://127.0.0.1:7700".into(),
            view: Some(FleetView {
                version: "0.1.0".into(),
                policy: "least-ttft".into(),
                models: vec!["smollm2".into()],
                nodes: vec![node("gpu-box")],
                recent: vec![RecentRequest {
                    endpoint: "/v1/chat/completions".into(),
                    status: 200,
                    node: "gpu-box".into(),
                    ..RecentRequest::default()
                }],
            }),
            fetched: None,
            error: None,
        };
        let mut terminal = Terminal::new(TestBackend::new(120, 20)).expect("a test terminal");
        terminal
            .draw(|frame| super::screen(frame, &screen))
            .expect("drawing");
        let text: String = terminal
            .backend()
            .buffer()
            .content
            .iter()
            .map(|cell| cell.symbol())
            .collect();
        assert!(text.contains("gpu-box"), "{text}");
        assert!(text.contains("1/4"), "{text}");
        assert!(text.contains("64/4096"), "{text}");
        assert!(text.contains("smollm2 q8_0 24M"), "{text}");
        assert!(text.contains("/v1/chat/completions"), "{text}");
        assert!(text.contains("1/1 nodes up"), "{text}");
    }
}
