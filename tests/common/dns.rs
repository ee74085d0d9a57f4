//! A test DNS server on 127.0.0.1:0 over UDP, as a Kubernetes headless Service looks to roomgate:
//! the SRV name it is given answers with one TTL-0 SRV record per target and the targets' A
//! records in the additional section; A queries for the targets are answered too. The test
//! changes the answer while it runs, or makes it empty, NXDOMAIN or silent, or stops the server.
//! Messages are encoded and decoded with hickory-proto (name compression and all).

#![allow(dead_code, clippy::unwrap_used)]

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use hickory_resolver::proto::op::{Message, ResponseCode};
use hickory_resolver::proto::rr::rdata::{A, SRV};
use hickory_resolver::proto::rr::{Name, RData, Record, RecordType};
use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

/// How the server answers the SRV name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The targets set with [`TestDns::set`].
    Answer,
    /// NOERROR with no records.
    Empty,
    NxDomain,
    /// Reads queries and answers none (a server that is down but not refusing).
    Silent,
}

struct State {
    srv: Name,
    /// Target name, port, address.
    targets: Vec<(Name, u16, IpAddr)>,
    mode: Mode,
    /// Send the targets' addresses in the additional section.
    additional: bool,
}

pub struct TestDns {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: JoinHandle<()>,
}

fn fqdn(name: &str) -> Name {
    Name::from_ascii(format!("{}.", name.trim_end_matches('.'))).unwrap()
}

impl TestDns {
    /// Starts a server for the SRV name `srv`, answering with no targets yet.
    pub async fn start(srv: &str) -> TestDns {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let state =
            Arc::new(Mutex::new(State { srv: fqdn(srv), targets: Vec::new(), mode: Mode::Answer, additional: true }));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            loop {
                let Ok((n, peer)) = socket.recv_from(&mut buf).await else { continue };
                let Ok(query) = Message::from_vec(&buf[..n]) else { continue };
                let reply = answer(&shared.lock().unwrap(), &query);
                if let Some(reply) = reply {
                    let _ = socket.send_to(&reply.to_vec().unwrap(), peer).await;
                }
            }
        });
        TestDns { addr, state, task }
    }

    /// The SRV answer from now on: one record per `(target, address)`, the SRV port being the
    /// address's port.
    pub fn set(&self, targets: &[(&str, SocketAddr)]) {
        let mut s = self.state.lock().unwrap();
        s.targets = targets.iter().map(|(t, a)| (fqdn(t), a.port(), a.ip())).collect();
        s.mode = Mode::Answer;
    }

    pub fn mode(&self, mode: Mode) {
        self.state.lock().unwrap().mode = mode;
    }

    /// Whether SRV answers carry the targets' addresses (else the resolver asks for them).
    pub fn additional(&self, on: bool) {
        self.state.lock().unwrap().additional = on;
    }

    /// Stops the server: its port is closed.
    pub fn stop(self) {
        self.task.abort();
    }
}

fn address(name: &Name, ip: IpAddr) -> Option<Record> {
    match ip {
        IpAddr::V4(v4) => Some(Record::from_rdata(name.clone(), 0, RData::A(A(v4)))),
        IpAddr::V6(_) => None,
    }
}

fn answer(state: &State, query: &Message) -> Option<Message> {
    let q = query.queries.first()?;
    let mut reply = Message::response(query.metadata.id, query.metadata.op_code);
    reply.add_query(q.clone());
    reply.metadata.authoritative = true;
    reply.metadata.recursion_desired = query.metadata.recursion_desired;
    reply.metadata.recursion_available = true;
    if q.name() == &state.srv && q.query_type() == RecordType::SRV {
        match state.mode {
            Mode::Silent => return None,
            Mode::NxDomain => reply.metadata.response_code = ResponseCode::NXDomain,
            Mode::Empty => {}
            Mode::Answer => {
                for (target, port, ip) in &state.targets {
                    let srv = SRV::new(0, 10, *port, target.clone());
                    reply.add_answer(Record::from_rdata(state.srv.clone(), 0, RData::SRV(srv)));
                    if state.additional
                        && let Some(a) = address(target, *ip)
                    {
                        reply.add_additional(a);
                    }
                }
            }
        }
        return Some(reply);
    }
    if state.mode == Mode::Silent {
        return None;
    }
    let found = state.targets.iter().find(|(t, _, _)| t == q.name());
    match (found, q.query_type()) {
        (Some((target, _, ip)), RecordType::A) => {
            if let Some(a) = address(target, *ip) {
                reply.add_answer(a);
            }
        }
        (Some(_), _) => {}
        (None, _) => reply.metadata.response_code = ResponseCode::NXDomain,
    }
    Some(reply)
}
