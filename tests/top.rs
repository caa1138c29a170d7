//! `superfluid top` in a real terminal (tmux): against a real head with a
//! joined node it draws the node's row, and `q` ends it with the terminal
//! restored.

use std::process::Command;
use std::time::Duration;

use crate::fleet_support::{bin, serial, token, wait_until, Head, Node, TempDir};

fn tmux(args: &[&str]) -> String {
    let out = Command::new("tmux")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running tmux {args:?}: {e}"));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A tmux server of its own, killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> String {
        let mut all = vec!["-L", self.socket.as_str()];
        all.extend_from_slice(args);
        tmux(&all)
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "top"])
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.run(&["kill-server"]);
    }
}

#[tokio::test]
async fn top_draws_the_nodes_and_quits_on_q() {
    if Command::new("tmux").arg("-V").output().is_err() {
        eprintln!(
            "SKIPPED: tmux is not installed (scripts/setup installs it: apt-get install tmux)"
        );
        return;
    }
    let _serial = serial().await;
    let head_dir = TempDir::new("top");
    let head = Head::start(head_dir.path(), &[]).expect("starting superfluid head");
    let tok = token(&head, &[]).expect("minting a token");
    let node_dir = TempDir::new("top-node");
    let mut node = Node::join(&tok, node_dir.path(), "top-node", &[]).expect("starting fleet join");
    node.wait_up(&head, Duration::from_secs(60))
        .expect("the node joins");
    let (status, _, _) = head.chat("Say hello.", 4).await.expect("a chat");
    assert_eq!(status, 200);

    let tmux = Tmux {
        socket: format!("superfluid-top-{}", std::process::id()),
    };
    // The shell stays after `top` ends, so that the pane shows what it left.
    let command = format!("{} top --url {}; echo top-exited-$?", bin(), head.base());
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "120",
        "-y",
        "40",
        "sh",
        "-c",
        &format!("{command}; sleep 60"),
    ]);
    let drawn = wait_until(
        || {
            let screen = tmux.screen();
            screen.contains("top-node") && screen.contains("/v1/chat/completions")
        },
        Duration::from_secs(20),
    );
    let screen = tmux.screen();
    assert!(
        drawn,
        "top did not draw the node and the request:\n{screen}"
    );
    assert!(screen.contains("1/1 nodes up"), "{screen}");

    tmux.run(&["send-keys", "-t", "top", "q"]);
    let exited = wait_until(
        || tmux.screen().contains("top-exited-0"),
        Duration::from_secs(10),
    );
    let screen = tmux.screen();
    assert!(exited, "top did not exit 0 on q:\n{screen}");
    // The alternate screen is gone: the table is no longer on the terminal.
    assert!(!screen.contains("PREFILL/s"), "{screen}");
}
