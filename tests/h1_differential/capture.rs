//! The capture server: hyper's HTTP/1 server on 127.0.0.1:0 that records every request it reads
//! (method, target, headers in order, the whole body and its trailers) and answers 200 `ok`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// The header the harness puts in every raw request, to tell its record from late ones.
pub const MARK: &str = "x-case";

pub type Fields = Vec<(String, Vec<u8>)>;

/// A request as hyper's server parsed it.
#[derive(Clone, PartialEq, Eq)]
pub struct Record {
    pub method: String,
    pub target: String,
    pub version: String,
    /// Lower-case names, raw value bytes, in the order hyper's `HeaderMap` yields them.
    pub headers: Fields,
    pub body: Vec<u8>,
    pub trailers: Fields,
}

impl Record {
    /// The value of the harness's case mark, if the request carried one.
    pub fn mark(&self) -> Option<&[u8]> {
        self.headers.iter().find(|(n, _)| n == MARK).map(|(_, v)| v.as_slice())
    }
}

/// Header fields as `name: "value"` lines, values escaped.
pub fn show(fields: &Fields) -> String {
    fields.iter().map(|(n, v)| format!("{n}: {:?}", String::from_utf8_lossy(v))).collect::<Vec<_>>().join(" | ")
}

impl std::fmt::Debug for Record {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let body = String::from_utf8_lossy(&self.body);
        write!(
            f,
            "{} {:?} {}; headers [{}]; body {body:?}",
            self.method,
            self.target,
            self.version,
            show(&self.headers)
        )?;
        if !self.trailers.is_empty() {
            write!(f, "; trailers [{}]", show(&self.trailers))?;
        }
        Ok(())
    }
}

pub struct Capture {
    pub addr: SocketAddr,
    pub records: Arc<Mutex<Vec<Record>>>,
}

impl Capture {
    /// Starts a capture server on the current runtime.
    pub async fn start() -> Capture {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let records: Arc<Mutex<Vec<Record>>> = Arc::default();
        let shared = records.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let records = shared.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| handle(records.clone(), req));
                    let _ =
                        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        Capture { addr, records }
    }

    /// The records carrying mark `mark`.
    pub fn take(&self, mark: &[u8]) -> Vec<Record> {
        let records = self.records.lock().unwrap();
        records.iter().filter(|r| r.mark() == Some(mark)).cloned().collect()
    }
}

fn fields(map: &HeaderMap) -> Fields {
    map.iter().map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec())).collect()
}

/// Records the request once its body is read whole; a body that fails gets 400 and no record.
async fn handle(records: Arc<Mutex<Vec<Record>>>, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let collected = match body.collect().await {
        Ok(c) => c,
        Err(_) => {
            let mut resp = Response::new(Full::new(Bytes::from_static(b"bad body")));
            *resp.status_mut() = StatusCode::BAD_REQUEST;
            return Ok(resp);
        }
    };
    let trailers = collected.trailers().map(fields).unwrap_or_default();
    let record = Record {
        method: parts.method.as_str().to_owned(),
        target: parts.uri.to_string(),
        version: format!("{:?}", parts.version),
        headers: fields(&parts.headers),
        body: collected.to_bytes().to_vec(),
        trailers,
    };
    records.lock().unwrap().push(record);
    Ok(Response::new(Full::new(Bytes::from_static(b"ok"))))
}
