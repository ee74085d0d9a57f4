//! Human durations in the config file: `"500ms"`, `"60s"`, `"5m"`, `"1h"`, `"off"`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, de};

/// A duration written as a number and a unit, as the config file spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct HumanDuration(pub Duration);

/// An optional duration: `"off"` (or `"0s"`) turns the timer off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct OptionalDuration(pub Option<Duration>);

/// Why a duration did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {text:?}: {why} (write a number and a unit: \"500ms\", \"30s\", \"5m\", \"1h\")")]
pub struct DurationError {
    text: String,
    why: &'static str,
}

pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let err = |why| DurationError { text: text.to_owned(), why };
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).ok_or_else(|| err("missing unit"))?;
    let (digits, unit) = t.split_at(split);
    if digits.is_empty() {
        return Err(err("missing number"));
    }
    let n: u64 = digits.parse().map_err(|_| err("number too large"))?;
    let per_unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(err("unknown unit (use ms, s, m or h)")),
    };
    let ms = n.checked_mul(per_unit_ms).ok_or_else(|| err("number too large"))?;
    Ok(Duration::from_millis(ms))
}

// === impl HumanDuration ===

impl FromStr for HumanDuration {
    type Err = DurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_duration(s).map(HumanDuration)
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(de::Error::custom)
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_duration(self.0, f)
    }
}

// === impl OptionalDuration ===

impl<'de> Deserialize<'de> for OptionalDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        if text.trim() == "off" {
            return Ok(OptionalDuration(None));
        }
        let dur = parse_duration(&text).map_err(de::Error::custom)?;
        Ok(OptionalDuration((!dur.is_zero()).then_some(dur)))
    }
}

pub fn fmt_duration(d: Duration, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let ms = d.as_millis();
    if ms == 0 {
        write!(f, "0s")
    } else if ms.is_multiple_of(3_600_000) {
        write!(f, "{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) {
        write!(f, "{}m", ms / 60_000)
    } else if ms.is_multiple_of(1_000) {
        write!(f, "{}s", ms / 1_000)
    } else {
        write!(f, "{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("60s").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration(" 3s ").unwrap(), Duration::from_secs(3));
    }

    #[test]
    fn rejects_bad_text() {
        for bad in ["", "s", "10", "10 s", "1.5s", "-1s", "10d", "99999999999999999999s", "18446744073709551615h"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn off_disables() {
        #[derive(Deserialize)]
        struct T {
            a: OptionalDuration,
            b: OptionalDuration,
        }
        let t: T = toml::from_str("a = \"off\"\nb = \"2s\"").unwrap();
        assert_eq!(t.a.0, None);
        assert_eq!(t.b.0, Some(Duration::from_secs(2)));
    }
}
