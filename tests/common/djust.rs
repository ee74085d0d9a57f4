//! djust sockets against the test backends: routes with a `djust:` source, and a client that
//! opens a page's socket as client.js does. The real djust app (`tests/djust/`) for the end-to-end
//! suite: its processes in `app`, a browser tab speaking its protocol in `tab`, the app's record
//! of room members in `members`, Chromium tabs through a hand-off in `browser`.

pub mod app;
pub mod browser;
pub mod members;
pub mod tab;

use futures_util::SinkExt;
use tokio_tungstenite::tungstenite::Message;

use super::*;

pub const DJUST_ROUTES: &str = r#"
[[routes]]
prefix = "/room/"
mode = "room"
keys = ["path:^/room/(?P<room>[^/]+)/"]
on_missing = "reject"

[[routes]]
prefix = "/ws/live/"
mode = "room"
keys = ["header:X-Room", "djust:^/room/(?P<room>[^/]+)/"]
on_missing = "shared"

[[routes]]
prefix = "/ws/strict/"
mode = "room"
keys = ["djust:^/room/(?P<room>[^/]+)/"]
on_missing = "reject"

[[routes]]
prefix = "/ws/refuse/"
mode = "room"
keys = ["djust:^/room/(?P<room>[^/]+)/"]

[[routes]]
prefix = "/"
mode = "shared"
"#;

pub const EXTRA: &str = "[timeouts]\nfirst_message = \"300ms\"\n[limits]\nmax_first_message = 4096\n";

pub const DJUST: (&str, &str) = ("x-test-djust", "greet");

pub async fn setup(n: usize) -> (Vec<TestBackend>, Proxy) {
    let backends = backends(n).await;
    let proxy = Proxy::start(&config(&backend_list(&backends), DJUST_ROUTES, EXTRA)).await;
    (backends, proxy)
}

pub fn mount(url: &str) -> String {
    format!(
        r#"{{"type":"mount","view":"app.views.RoomView","params":{{}},"url":"{url}","has_prerendered":true,"client_timezone":"UTC"}}"#
    )
}

pub fn live_redirect(url: &str) -> String {
    format!(r#"{{"type":"live_redirect_mount","view":"app.views.RoomView","params":{{}},"url":"{url}"}}"#)
}

/// Opens `/ws/live/`-like `path` as client.js does: waits for the `connect` frame (roomgate's,
/// not the backend's), sends the mount for `page`, and gets it echoed by the backend.
pub async fn open_page(proxy: &Proxy, path: &str, page: &str, headers: &[(&str, &str)]) -> Ws {
    let mut ws = ws_connect(&proxy.ws_url(path), headers).await;
    let hello = next(&mut ws).await.into_text().unwrap();
    assert!(hello.starts_with(r#"{"type":"connect","session_id":""#), "{hello}");
    assert!(!hello.contains("backend-"), "the backend's own greeting reached the client: {hello}");
    ws.send(Message::text(mount(page))).await.unwrap();
    assert_eq!(next(&mut ws).await, Message::text(mount(page)));
    ws
}

/// Opens a socket and returns the close code roomgate sends (the client never gets a mount echo).
pub async fn refused(proxy: &Proxy, path: &str, first: Option<&str>, headers: &[(&str, &str)]) -> Option<u16> {
    let mut ws = ws_connect(&proxy.ws_url(path), headers).await;
    let hello = next(&mut ws).await.into_text().unwrap();
    assert!(hello.contains(r#""type":"connect""#));
    if let Some(first) = first {
        ws.send(Message::text(first.to_owned())).await.unwrap();
    }
    close_code(&mut ws).await
}
