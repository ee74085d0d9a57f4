//! The access log's `complete` says whether the whole response reached the client: a response
//! the backend cuts short, or one the client leaves half way, is logged `complete=false` with
//! why; one that arrives whole, `complete=true`.

#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::UnboundedReceiver;

/// Reads one request head; `None` if the peer closed first.
async fn head(s: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await.ok()? == 0 {
            return None;
        }
        head.push(b[0]);
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}

/// A backend: `/cut` announces 100 bytes, sends 10 and closes; `/big` sends 64 MiB; anything
/// else gets a short 200.
async fn backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                while let Some(h) = head(&mut s).await {
                    match h.split(' ').nth(1).unwrap_or("") {
                        "/cut" => {
                            let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789").await;
                            return;
                        }
                        "/big" => {
                            let total = 64usize << 20;
                            let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {total}\r\n\r\n");
                            if s.write_all(head.as_bytes()).await.is_err() {
                                return;
                            }
                            let piece = vec![0u8; 64 << 10];
                            for _ in 0..total / piece.len() {
                                if s.write_all(&piece).await.is_err() {
                                    return;
                                }
                            }
                        }
                        _ => {
                            if s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    addr
}

/// Waits (bounded) for the access line of `path`.
async fn access_line(log: &mut UnboundedReceiver<String>, path: &str) -> String {
    let needle = format!("path={path} ");
    tokio::time::timeout(LIMIT, async {
        while let Some(line) = log.recv().await {
            if line.contains("roomgate::access") && line.contains(&needle) {
                return line;
            }
        }
        panic!("roomgate exited");
    })
    .await
    .unwrap_or_else(|_| panic!("no access line for {path}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complete_is_true_only_when_the_whole_response_reached_the_client() {
    let addr = backend().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("roomgate.toml");
    let extra = "[server]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n[reload]\nwatch = false\n";
    let text = config(&[("b1", addr)], "[[routes]]\nprefix = \"/\"\nmode = \"shared\"\n", extra)
        .replace("level = \"warn\"", "level = \"info\"")
        .replace("access = false", "access = true");
    std::fs::write(&path, text).unwrap();
    let (_child, proxy, _admin, mut log) = spawn_roomgate_logged(&path).await;

    // Whole.
    let mut s = TcpStream::connect(&proxy).await.unwrap();
    s.write_all(b"GET /whole HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(LIMIT, s.read_to_end(&mut got)).await.unwrap().unwrap();
    assert!(got.ends_with(b"ok"), "{}", String::from_utf8_lossy(&got));
    let line = access_line(&mut log, "/whole").await;
    assert!(line.contains("complete=true"), "{line}");

    // The backend cuts it short: the client gets 10 of 100 bytes, and the line says so.
    let mut s = TcpStream::connect(&proxy).await.unwrap();
    s.write_all(b"GET /cut HTTP/1.1\r\nHost: a\r\n\r\n").await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(LIMIT, s.read_to_end(&mut got)).await.unwrap().unwrap();
    assert!(got.ends_with(b"0123456789"), "{}", String::from_utf8_lossy(&got));
    let line = access_line(&mut log, "/cut").await;
    assert!(line.contains("complete=false") && line.contains("ended the response body early"), "{line}");

    // The client reads the head and leaves.
    let mut s = TcpStream::connect(&proxy).await.unwrap();
    s.write_all(b"GET /big HTTP/1.1\r\nHost: a\r\n\r\n").await.unwrap();
    let mut first = [0u8; 1024];
    let n = tokio::time::timeout(LIMIT, s.read(&mut first)).await.unwrap().unwrap();
    assert!(first[..n].starts_with(b"HTTP/1.1 200 "));
    drop(s);
    let line = access_line(&mut log, "/big").await;
    assert!(line.contains("complete=false") && line.contains("the client went away"), "{line}");
}
