//! A browser tab that speaks djust's protocol as client.js does: page GET with cookies;
//! `/ws/live/` with Origin and cookies; wait for `connect`; `mount`; events, live navigation and
//! reconnects.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use futures_util::SinkExt;
use http::header::HeaderValue;
use tokio::net::TcpSocket;
use tokio_tungstenite::MaybeTlsStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use super::super::{Ws, get, http_client, recv};
use super::app::WAIT;

/// client.js's shortest wait before it reconnects a closed socket (`minReconnectDelay`).
const CLIENT_JS_FIRST_RETRY: Duration = Duration::from_millis(500);

/// One browser tab: a cookie jar, a source address and (once open) a socket mounted on a page.
pub struct Tab {
    proxy: SocketAddr,
    from: Ipv4Addr,
    jar: BTreeMap<String, String>,
    page: String,
    pub ws: Option<Ws>,
    next_ref: u64,
    /// Backend id shown by the last mount, and the last count seen.
    pub backend: String,
    pub count: u64,
}

/// The text of a text message.
pub fn text_of(msg: &Message) -> Option<&str> {
    match msg {
        Message::Text(t) => Some(t.as_str()),
        _ => None,
    }
}

/// The `n=<count>` in a server message (mount html or a SetText patch), if any.
fn count_in(text: &str) -> Option<u64> {
    let at = text.find("n=")?;
    let digits: String = text[at + 2..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The backend id in a mount's html: `id="backend">game-0<`, JSON-escaped.
pub fn backend_in(text: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let html = v["html"].as_str()?;
    let at = html.find(r#"id="backend">"#)? + r#"id="backend">"#.len();
    Some(html[at..].split('<').next()?.to_owned())
}

impl Tab {
    pub fn new(proxy: SocketAddr, from: Ipv4Addr) -> Tab {
        Tab {
            proxy,
            from,
            jar: BTreeMap::new(),
            page: String::new(),
            ws: None,
            next_ref: 1,
            backend: String::new(),
            count: 0,
        }
    }

    /// A tab of the same browser: same cookie jar and address.
    pub fn sibling(&self) -> Tab {
        let mut t = Tab::new(self.proxy, self.from);
        t.jar = self.jar.clone();
        t
    }

    fn cookie_header(&self) -> String {
        self.jar.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ")
    }

    /// Loads `/room/<room>/` (HTTP, keeping cookies); returns the backend that served the page.
    pub async fn load(&mut self, room: &str) -> String {
        self.page = format!("/room/{room}/");
        let url = format!("http://{}{}", self.proxy, self.page);
        let cookie = self.cookie_header();
        let mut headers = vec![];
        if !cookie.is_empty() {
            headers.push(("cookie", cookie.as_str()));
        }
        let (status, h, body) = get(&http_client(), &url, &headers).await;
        assert!(status.is_success(), "GET {url}: {status} {body}");
        for v in h.get_all("set-cookie") {
            let pair = v.to_str().unwrap().split(';').next().unwrap();
            let (k, v) = pair.split_once('=').unwrap();
            self.jar.insert(k.trim().to_owned(), v.trim().to_owned());
        }
        let at = body.find(r#"id="backend">"#).expect("page shows its backend") + r#"id="backend">"#.len();
        body[at..].split('<').next().unwrap().to_owned()
    }

    /// Opens `/ws/live/` from this tab's address with Origin and cookies, waits for `connect`,
    /// mounts the current page and waits for the mount. Returns the close code instead when the
    /// socket is closed before it is mounted.
    pub async fn connect(&mut self) -> Result<(), Option<u16>> {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::new(IpAddr::V4(self.from), 0)).unwrap();
        let stream = tokio::time::timeout(WAIT, socket.connect(self.proxy)).await.unwrap().unwrap();
        let mut req = format!("ws://{}/ws/live/", self.proxy).into_client_request().unwrap();
        let h = req.headers_mut();
        h.insert("origin", HeaderValue::from_str(&format!("http://{}", self.proxy)).unwrap());
        h.insert("cookie", HeaderValue::from_str(&self.cookie_header()).unwrap());
        let client = tokio_tungstenite::client_async(req, MaybeTlsStream::Plain(stream));
        let (mut ws, _) = tokio::time::timeout(WAIT, client).await.unwrap().unwrap();
        let first = recv(&mut ws, WAIT).await?;
        // roomgate's greeting is compact; djust's own (direct connections) is `json.dumps` spaced.
        let greeting = text_of(&first).map(|t| t.replace(' ', ""));
        assert!(greeting.is_some_and(|t| t.starts_with(r#"{"type":"connect""#)), "{first:?}");
        let mount = serde_json::json!({
            "type": "mount", "view": "rooms.views.RoomView", "params": {}, "url": self.page,
            "has_prerendered": true, "client_timezone": "UTC",
        });
        ws.send(Message::text(mount.to_string())).await.map_err(|_| None)?;
        loop {
            let msg = recv(&mut ws, WAIT).await?;
            let Some(text) = text_of(&msg) else { continue };
            if text.starts_with(r#"{"type": "mount""#) {
                self.backend = backend_in(text).expect("mount html shows the backend");
                self.count = count_in(text).expect("mount html shows the count");
                break;
            }
        }
        self.ws = Some(ws);
        Ok(())
    }

    /// Loads the page and mounts it; panics if the socket is refused.
    pub async fn open(&mut self, room: &str) {
        self.load(room).await;
        if let Err(code) = self.connect().await {
            panic!("socket for room {room} refused with {code:?}");
        }
    }

    /// Reconnects as client.js does after a close: a new socket mounting the current page, with
    /// a short backoff between tries. Returns the number of tries.
    pub async fn reconnect(&mut self) -> u32 {
        self.ws = None;
        for attempt in 1..=40 {
            if self.connect().await.is_ok() {
                return attempt;
            }
            tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt.min(10)))).await;
        }
        panic!("{} did not remount", self.page);
    }

    /// Reconnects after the first delay client.js waits after a close (500 ms, its minimum;
    /// client.js draws it between 500 ms and 1 s), as a browser tab does by itself. `reconnect`
    /// tries at once.
    pub async fn reconnect_like_client_js(&mut self) -> u32 {
        self.ws = None;
        tokio::time::sleep(CLIENT_JS_FIRST_RETRY).await;
        self.reconnect().await
    }

    /// Clicks `+1`: sends the event and waits for its reply; returns the count it shows.
    pub async fn increment(&mut self) -> u64 {
        let r = self.next_ref;
        self.next_ref += 1;
        let event = format!(r#"{{"type":"event","event":"increment","params":{{}},"ref":{r}}}"#);
        let ws = self.ws.as_mut().unwrap();
        ws.send(Message::text(event)).await.unwrap();
        let want = format!(r#""ref": {r}"#);
        loop {
            let msg = recv(ws, WAIT).await.unwrap_or_else(|code| panic!("closed ({code:?}) waiting for ref {r}"));
            let text = text_of(&msg).unwrap_or_default();
            if let Some(n) = count_in(text) {
                self.count = self.count.max(n);
            }
            if text.contains(&want) {
                return self.count;
            }
        }
    }

    /// Waits until the tab shows at least `n` (from replies or broadcasts).
    pub async fn wait_count(&mut self, n: u64) {
        let ws = self.ws.as_mut().unwrap();
        while self.count < n {
            let msg = recv(ws, WAIT).await.unwrap_or_else(|code| panic!("closed ({code:?}) waiting for n={n}"));
            if let Some(c) = text_of(&msg).and_then(count_in) {
                self.count = self.count.max(c);
            }
        }
    }

    /// Sends a live navigation to `page`, as a click on a `dj-navigate` link does.
    pub async fn navigate(&mut self, page: &str) {
        self.page = page.to_owned();
        let msg = format!(
            r#"{{"type":"live_redirect_mount","view":"rooms.views.RoomView","params":{{}},"url":"{}"}}"#,
            self.page
        );
        self.ws.as_mut().unwrap().send(Message::text(msg)).await.unwrap();
    }

    /// Waits for the socket to end; returns its close code (None: no close frame).
    pub async fn closed(&mut self) -> Option<u16> {
        let ws = self.ws.as_mut().unwrap();
        loop {
            match recv(ws, WAIT).await {
                Ok(_) => continue,
                Err(code) => return code,
            }
        }
    }
}
