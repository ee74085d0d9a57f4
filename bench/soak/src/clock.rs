//! Wall-clock microseconds: the one time base shared by the soak and its backend processes, so
//! that the judge can line up what each of them saw.

use std::time::{SystemTime, UNIX_EPOCH};

pub fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}
