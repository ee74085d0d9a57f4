//! Headless Chromium tabs with djust's real client.js in a room while it is handed off
//! (`tests/djust/browser_handoff.py`): the tabs count to a number, the test moves the room, then
//! lets the script check what the tabs show.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::task::JoinHandle;

use super::app::{Stack, python, repo};

/// The whole script's bound (its own is 83 s).
const RUN: Duration = Duration::from_secs(90);

/// `browser_handoff.py` between its `READY` line and its report.
pub struct HandoffTabs {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    stderr: JoinHandle<String>,
    /// The `READY` line: `{"backend": the room's owner, "count": what every tab shows}`.
    pub ready: serde_json::Value,
}

impl Stack {
    /// Opens `tabs` Chromium tabs on `room` and clicks `+1` in turn until they show `count`;
    /// returns once they do, with the script waiting for [`HandoffTabs::finish`].
    pub async fn browser_handoff(&self, room: &str, tabs: usize, count: u64) -> HandoffTabs {
        let mut child = Command::new(python())
            .arg(repo().join("tests/djust/browser_handoff.py"))
            .arg(format!("http://{}", self.proxy.addr))
            .args([room, &tabs.to_string(), &count.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut err = child.stderr.take().unwrap();
        let stderr = tokio::spawn(async move {
            let mut text = String::new();
            let _ = err.read_to_string(&mut text).await;
            text
        });
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut tabs = HandoffTabs { child, stdin, stdout, stderr, ready: serde_json::Value::Null };
        let line = tabs.line().await;
        let ready = line.strip_prefix("READY ").unwrap_or_else(|| panic!("browser_handoff.py: {line}"));
        tabs.ready = serde_json::from_str(ready).unwrap();
        tabs
    }
}

impl HandoffTabs {
    /// The script's next stdout line; panics with its stderr if it ended instead.
    async fn line(&mut self) -> String {
        match tokio::time::timeout(RUN, self.stdout.next_line()).await {
            Ok(Ok(Some(line))) => line,
            Ok(_) => panic!("browser_handoff.py ended early:\n{}", self.failure().await),
            Err(_) => panic!("browser_handoff.py printed nothing for {RUN:?}"),
        }
    }

    async fn failure(&mut self) -> String {
        let status = tokio::time::timeout(RUN, self.child.wait()).await;
        let stderr = tokio::time::timeout(RUN, &mut self.stderr).await;
        format!("{status:?}\n{}", stderr.ok().and_then(Result::ok).unwrap_or_default())
    }

    /// Lets the script go on: every tab must be mounted on another backend; one tab clicks
    /// `+1` and every tab sees it. Returns its report (`before`, `after`, `after_click`: per tab
    /// `backend`, `count`, `members` and `sockets` `{opened, closes}`).
    pub async fn finish(mut self) -> serde_json::Value {
        self.stdin.write_all(b"go\n").await.unwrap();
        self.stdin.flush().await.unwrap();
        let report = self.line().await;
        let status = tokio::time::timeout(RUN, self.child.wait()).await.expect("browser_handoff.py exits").unwrap();
        assert!(status.success(), "browser_handoff.py: {status}\n{report}\n{}", self.failure().await);
        serde_json::from_str(&report).unwrap_or_else(|e| panic!("{e}: {report}"))
    }
}
