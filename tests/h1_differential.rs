//! Differential test of HTTP/1 request parsing: each raw request goes to hyper's own server (the
//! reference) and, on another connection, through roomgate to a backend that is the same kind of
//! server. roomgate must accept nothing hyper rejects (1), and what its backend gets must be what
//! the reference got (2): method, target, body, and headers, hop-by-hop, framing and forwarding
//! headers aside. `compare.rs` holds the rules and the documented exceptions.

#![allow(clippy::unwrap_used)]

#[path = "h1_differential/capture.rs"]
mod capture;
mod common;
#[path = "h1_differential/compare.rs"]
mod compare;
#[path = "h1_differential/fixed.rs"]
mod fixed;
#[path = "h1_differential/requests.rs"]
mod requests;
#[path = "h1_differential/wire.rs"]
mod wire;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};

use capture::{Capture, MARK, Record};
use common::{LIMIT, Proxy, config};
use compare::{Stats, Verdict};
use wire::{Reply, escape, exchange};

/// How long a side may take to answer a request.
const ANSWER: Duration = Duration::from_secs(3);
/// The same for a request whose body is cut short: both servers are expected to wait for it.
const STALLED: Duration = Duration::from_millis(500);

/// The reference server, roomgate with its backend, and the runtime they run on, once per
/// test binary.
struct World {
    rt: tokio::runtime::Runtime,
    reference: Capture,
    backend: Capture,
    proxy: Proxy,
    next: AtomicU64,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let (reference, backend, proxy) = rt.block_on(async {
            let reference = Capture::start().await;
            let backend = Capture::start().await;
            let routes = "[[routes]]\nprefix = \"/\"\nmode = \"shared\"\n";
            let proxy = Proxy::start(&config(&[("backend", backend.addr)], routes, "")).await;
            (reference, backend, proxy)
        });
        World { rt, reference, backend, proxy, next: AtomicU64::new(0) }
    })
}

/// One side's outcome: its reply, and the record its server made of the request.
#[derive(Debug)]
pub struct Side {
    pub reply: Reply,
    pub record: Option<Record>,
}

impl Side {
    /// A 2xx reached the client and the server recorded the request.
    pub fn accepted(&self) -> bool {
        matches!(self.reply.status, Some(200..=299)) && self.record.is_some()
    }

    fn describe(&self) -> String {
        let status = self.reply.status.map_or("no response".to_owned(), |s| s.to_string());
        format!(
            "{status}, recorded: {}, reply: {:?}",
            self.record.is_some(),
            String::from_utf8_lossy(&self.reply.bytes)
        )
    }
}

/// `raw` with the case mark as its first header line (after the first LF).
fn marked(raw: &[u8], mark: &str) -> Vec<u8> {
    let at = raw.iter().position(|b| *b == b'\n').map_or(raw.len(), |i| i + 1);
    let mut out = raw[..at].to_vec();
    out.extend_from_slice(format!("{MARK}: {mark}\r\n").as_bytes());
    out.extend_from_slice(&raw[at..]);
    out
}

/// Sends `raw` (marked) to the reference and through roomgate at the same time.
fn run(raw: &[u8], limit: Duration) -> (Side, Side, Vec<u8>) {
    let w = world();
    let mark = format!("c{}", w.next.fetch_add(1, Ordering::Relaxed));
    let sent = marked(raw, &mark);
    let head = raw.starts_with(b"HEAD ");
    let (r, g) = w.rt.block_on(async {
        tokio::join!(exchange(w.reference.addr, &sent, head, limit), exchange(w.proxy.addr, &sent, head, limit))
    });
    let side = |capture: &Capture, reply: Reply| {
        let records = capture.take(mark.as_bytes());
        assert!(records.len() <= 1, "two records for one mark: {records:?}");
        Side { reply, record: records.into_iter().next() }
    };
    (side(&w.reference, r), side(&w.backend, g), sent)
}

/// Runs one request and checks both properties; `Err` says what went wrong, with the request.
fn check(raw: &[u8], limit: Duration, stats: &Mutex<Stats>) -> Result<(), String> {
    let (mut reference, mut roomgate, mut sent) = run(raw, limit);
    if roomgate.accepted() && !reference.accepted() && reference.reply.status.is_none() {
        // The reference may just have been slow on a busy machine: once more, with time.
        (reference, roomgate, sent) = run(raw, LIMIT);
    }
    let verdict = compare::judge(&reference, &roomgate, &sent);
    stats.lock().unwrap().count(&reference, &roomgate, &verdict);
    match verdict {
        Verdict::Fail(why) => Err(format!(
            "{why}\nreference: {}\nroomgate:  {}\nrecords:\n  reference {:?}\n  backend   {:?}\nrequest:\n{}",
            reference.describe(),
            roomgate.describe(),
            reference.record,
            roomgate.record,
            escape(&sent)
        )),
        Verdict::Pass(_) => Ok(()),
    }
}

#[test]
fn fixed_cases_hold_both_properties() {
    let started = Instant::now();
    let stats = Mutex::new(Stats::default());
    let mut failures = Vec::new();
    for (name, raw) in fixed::CASES {
        if let Err(why) = check(raw, ANSWER, &stats) {
            failures.push(format!("--- {name}: {why}"));
        }
    }
    println!("fixed cases: {} in {:?}\n{}", fixed::CASES.len(), started.elapsed(), stats.lock().unwrap());
    assert!(failures.is_empty(), "{} fixed cases failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn generated_requests_hold_both_properties() {
    let started = Instant::now();
    let mut config = Config { failure_persistence: None, max_shrink_iters: 200, ..Config::default() };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = 256;
    }
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        config.rng_seed = RngSeed::Fixed(0x6172_6f6f_6d67_6174);
    }
    let stats = Mutex::new(Stats::default());
    let mut runner = TestRunner::new(config);
    let result = runner.run(&requests::case(), |case| {
        let limit = if case.incomplete { STALLED } else { ANSWER };
        check(&case.raw, limit, &stats).map_err(TestCaseError::fail)
    });
    println!("generated cases in {:?}\n{}", started.elapsed(), stats.lock().unwrap());
    if let Err(e) = result {
        panic!("{e}");
    }
}
