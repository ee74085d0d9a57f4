//! The values of the config file that are parsed by hand: key sources (their regexes compiled
//! while the file is read), trusted proxies, count limits, byte sizes and `listen` lists.

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

/// A size in bytes: an integer, or a string of digits and a unit (`"16MiB"`, `"512KB"`, `"100B"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteSize(pub u64);

/// A size in bytes, or `"auto"` (derived at start-up).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AutoSize {
    Auto,
    Size(ByteSize),
}

impl<'de> Deserialize<'de> for AutoSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match toml::Value::deserialize(d)? {
            toml::Value::String(s) if s == "auto" => Ok(AutoSize::Auto),
            other => ByteSize::deserialize(other).map(AutoSize::Size).map_err(de::Error::custom),
        }
    }
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

impl FromStr for ByteSize {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let err = |why: &str| {
            format!("invalid size {text:?}: {why} (write a number and a unit: \"512KiB\", \"16MiB\", \"1GB\")")
        };
        let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(|| err("missing unit"))?;
        let (digits, unit) = text.split_at(split);
        if digits.is_empty() {
            return Err(err("missing number"));
        }
        let per_unit: u64 = match unit {
            "B" => 1,
            "KiB" => 1 << 10,
            "MiB" => 1 << 20,
            "GiB" => 1 << 30,
            "KB" => 1_000,
            "MB" => 1_000_000,
            "GB" => 1_000_000_000,
            _ => return Err(err("unknown unit (use B, KiB, MiB, GiB, KB, MB or GB)")),
        };
        let n: u64 = digits.parse().map_err(|_| err("number too large"))?;
        n.checked_mul(per_unit).map(ByteSize).ok_or_else(|| err("number too large"))
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match toml::Value::deserialize(d)? {
            toml::Value::Integer(n) => u64::try_from(n)
                .map(ByteSize)
                .map_err(|_| de::Error::custom(format!("{n}: expected a size in bytes, not a negative number"))),
            toml::Value::String(s) => s.parse().map_err(de::Error::custom),
            other => Err(de::Error::custom(format!("{other}: expected a number of bytes or a size such as \"16MiB\""))),
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
