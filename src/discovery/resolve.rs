//! Asking DNS: one hickory resolver per `[[discovery]]` entry, its cache off so that every round
//! reaches the server, turned into an [`Answer`].

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolveHosts, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::{DnsError, NetError};
use hickory_resolver::proto::rr::{Name, RData};
use hickory_resolver::{Resolver, TokioResolver};

use super::srv::{Answer, Failure, SrvRecord, backend_set, normalize};
use crate::config::{BackendSpec, Discovery};

/// Resolves one entry's SRV name into a backend set.
pub struct SrvResolver {
    inner: TokioResolver,
}

impl SrvResolver {
    /// A resolver for `entry`: its `resolver` (UDP, and TCP when an answer is truncated), else
    /// the system's (`/etc/resolv.conf`, with its search domains and `ndots`).
    pub fn new(entry: &Discovery) -> Result<SrvResolver, Failure> {
        let mut builder = match entry.resolver {
            Some(addr) => {
                let mut udp = ConnectionConfig::udp();
                udp.port = addr.port();
                let mut tcp = ConnectionConfig::tcp();
                tcp.port = addr.port();
                let server = NameServerConfig::new(addr.ip(), true, vec![udp, tcp]);
                Resolver::builder_with_config(
                    ResolverConfig::from_name_servers(vec![server]),
                    TokioRuntimeProvider::default(),
                )
            }
            None => Resolver::builder_tokio()
                .map_err(|e| Failure::Resolve(format!("cannot read the system resolver config: {e}")))?,
        };
        let opts = builder.options_mut();
        // Every round must ask the server: a cached answer would hide a pod that came or went.
        opts.cache_size = 0;
        opts.positive_max_ttl = Some(Duration::ZERO);
        opts.negative_max_ttl = Some(Duration::ZERO);
        // The round as a whole is bounded by `entry.timeout`; one try per server fits in it.
        opts.timeout = entry.timeout;
        opts.attempts = 1;
        if entry.resolver.is_some() {
            opts.use_hosts_file = ResolveHosts::Never;
        }
        let inner = builder.build().map_err(|e| Failure::Resolve(format!("cannot build the resolver: {e}")))?;
        Ok(SrvResolver { inner })
    }

    /// One resolution of `entry`, within `entry.timeout`.
    pub async fn resolve(&self, entry: &Discovery) -> Result<Vec<BackendSpec>, Failure> {
        self.inner.clear_cache();
        match tokio::time::timeout(entry.timeout, self.answer(entry)).await {
            Ok(Ok(answer)) => backend_set(&entry.srv, &answer),
            Ok(Err(failure)) => Err(failure),
            Err(_) => Err(Failure::Timeout(entry.timeout)),
        }
    }

    /// The SRV records of `srv` and their targets' addresses: from the additional section when
    /// the server sent them (CoreDNS does for headless Services), else looked up.
    async fn answer(&self, entry: &Discovery) -> Result<Answer, Failure> {
        let lookup = self.inner.srv_lookup(entry.srv.as_str()).await.map_err(|e| failure(e, entry.timeout))?;
        let mut targets: HashMap<String, Name> = HashMap::new();
        let mut answer = Answer::default();
        for record in lookup.answers() {
            if let RData::SRV(s) = &record.data {
                let target = normalize(&s.target.to_string());
                answer.records.push(SrvRecord { target: target.clone(), port: s.port });
                targets.insert(target, s.target.clone());
            }
        }
        for record in lookup.additionals() {
            let ip = match &record.data {
                RData::A(a) => IpAddr::V4(a.0),
                RData::AAAA(a) => IpAddr::V6(a.0),
                _ => continue,
            };
            answer.addresses.entry(normalize(&record.name.to_string())).or_default().push(ip);
        }
        let missing: Vec<(String, Name)> =
            targets.into_iter().filter(|(t, _)| !t.is_empty() && !answer.addresses.contains_key(t)).collect();
        let looked_up = futures_util::future::join_all(missing.into_iter().map(|(target, name)| async move {
            let ips = self.inner.lookup_ip(name).await.map(|l| l.iter().collect::<Vec<IpAddr>>());
            (target, ips)
        }))
        .await;
        for (target, ips) in looked_up {
            match ips {
                Ok(ips) if !ips.is_empty() => {
                    answer.addresses.insert(target, ips);
                }
                Ok(_) | Err(_) => return Err(Failure::NoAddress(target)),
            }
        }
        Ok(answer)
    }
}

fn failure(e: NetError, timeout: Duration) -> Failure {
    match e {
        NetError::Dns(DnsError::NoRecordsFound(_)) => Failure::Empty,
        NetError::Timeout => Failure::Timeout(timeout),
        other => Failure::Resolve(other.to_string()),
    }
}
