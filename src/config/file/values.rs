//! The values of the config file that are parsed by hand: key sources (their regexes compiled
//! while the file is read), trusted proxies, count limits and `listen` lists.

use std::str::FromStr;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer, de};

use crate::room_key::KeySource;

/// A key source, parsed (and its regex compiled) while the file is read.
pub struct ParsedSource(pub KeySource);

/// A trusted proxy: a CIDR block or a single address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrustedNet(pub IpNet);

/// A count limit: a number, `"off"` (no limit) or `"auto"` (derived at start-up, where the key
/// allows it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    Off,
    Auto,
    Max(usize),
}

/// `listen = "addr"` or `listen = ["addr", ...]`.
pub struct OneOrMany<T>(pub Vec<T>);

impl<'de> Deserialize<'de> for ParsedSource {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        KeySource::from_str(&text).map(ParsedSource).map_err(de::Error::custom)
    }
}

impl FromStr for TrustedNet {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Ok(net) = s.parse::<IpNet>() {
            return Ok(TrustedNet(net.trunc()));
        }
        s.parse::<std::net::IpAddr>()
            .map(|ip| TrustedNet(IpNet::from(ip)))
            .map_err(|_| format!("invalid trusted proxy {s:?}: expected a CIDR such as \"10.0.0.0/8\" or an address"))
    }
}

impl<'de> Deserialize<'de> for TrustedNet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match toml::Value::deserialize(d)? {
            toml::Value::Integer(n) => usize::try_from(n)
                .ok()
                .filter(|n| *n > 0)
                .map(Count::Max)
                .ok_or_else(|| de::Error::custom(format!("{n}: expected a number of at least 1, or \"off\""))),
            toml::Value::String(s) if s == "off" => Ok(Count::Off),
            toml::Value::String(s) if s == "auto" => Ok(Count::Auto),
            other => Err(de::Error::custom(format!("{other}: expected a number, \"off\" or \"auto\""))),
        }
    }
}

impl<'de, T: serde::de::DeserializeOwned> Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match toml::Value::deserialize(d)? {
            value @ toml::Value::Array(_) => Vec::<T>::deserialize(value).map(OneOrMany),
            value => T::deserialize(value).map(|t| OneOrMany(vec![t])),
        }
        .map_err(de::Error::custom)
    }
}
