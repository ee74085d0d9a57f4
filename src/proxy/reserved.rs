//! The path clients never reach: the hand-off endpoints on the backends (`[handoff] path`, see
//! `docs/handoff.md`). [`is_reserved`] says whether a request target could reach them under any
//! way a backend's server or framework reads a path; `checks::check_head` refuses those with 404.
//!
//! A backend may decode the path once, or more than once when something in front of it decodes
//! too; read `\` as `/`; drop `;` parameters from segments; collapse empty segments; resolve `.`
//! and `..`, or keep them; compare without case; stop at a decoded `?`, `#` or NUL. Rather than
//! guess which, the guard refuses a target when any such reading puts it at the prefix or under
//! it, and errs on the side of refusing: only a client that sends dot segments or encodes the
//! prefix's own characters can see a false 404, and browsers send neither.

use std::borrow::Cow;

/// Percent-decoding rounds tried after the raw path: a prefix encoded three times over (`%25252E`)
/// is still found.
const DECODE_ROUNDS: usize = 3;

/// Whether `target` reaches `prefix` or a path under `prefix/`. `target` is a request target: a
/// path with or without a query (origin-form) or an absolute URI (absolute-form). `prefix` is a
/// validated `[handoff] path`: `/` and segments, none empty, `.` or `..`, none holding `%`, `;`,
/// `\`, `?` or `#`. Comparisons ignore ASCII case.
///
/// The target is read raw, then decoded once, twice and three times (until nothing changes). Each
/// reading is split into segments at `/`, and, each way, at `\` or not and (once decoded) at `?`,
/// `#` and NUL or not; a segment's `;` parameters are dropped. A reading reaches the prefix when:
/// - its segments, empty and `.` ones skipped, start with the prefix's (`..` kept as a name: a
///   backend that does not resolve dot segments routes `/.roomgate/rooms/../x` under the prefix),
/// - or it has a `..` segment and the prefix's segments appear in it in order: some resolution of
///   the dot segments (`/a/../.roomgate/rooms`) may then bring them to its start.
///
/// Every reading that decodes up to three times, takes `\` as `/` or not, drops `;` parameters
/// or not, resolves dot segments or not and ends the path at a decoded `?` or not, is covered:
/// when it puts the target under the prefix, so does one of the above (the tests check it).
pub fn is_reserved(target: &str, prefix: &str) -> bool {
    let path = path_of(target.as_bytes());
    // Every request runs this. Without a `%`, each reading's names are pieces of the path as
    // written, so one that never holds the prefix's first segment reaches nothing.
    if let Some(first) = prefix.split('/').find(|s| !s.is_empty())
        && !path.contains(&b'%')
        && !path.windows(first.len()).any(|w| w.eq_ignore_ascii_case(first.as_bytes()))
    {
        return false;
    }
    any_reading_reaches(path, prefix)
}

/// [`is_reserved`] for the path of a target, every reading tried.
fn any_reading_reaches(path: &[u8], prefix: &str) -> bool {
    let mut text = Cow::Borrowed(path);
    for round in 0..=DECODE_ROUNDS {
        if splits(&text, round > 0).any(|split| reaches(&text, prefix, split)) {
            return true;
        }
        match decode(&text) {
            Some(decoded) if round < DECODE_ROUNDS => text = Cow::Owned(decoded),
            _ => break,
        }
    }
    false
}

/// The path of a request target: an absolute URI's scheme and authority dropped, the query and
/// fragment cut off.
fn path_of(target: &[u8]) -> &[u8] {
    let mut path = target;
    if !target.starts_with(b"/")
        && let Some(colon) = target.windows(3).position(|w| w == b"://")
        && target[..colon].iter().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(b))
    {
        // The authority ends where URL parsers end it; `\` included, as browsers read it.
        let rest = &target[colon + 3..];
        let end = rest.iter().position(|b| b"/\\?#".contains(b)).unwrap_or(rest.len());
        path = &rest[end..];
    }
    let end = path.iter().position(|b| b"?#".contains(b)).unwrap_or(path.len());
    &path[..end]
}

/// One round of percent-decoding; `None` when there is nothing to decode. A `%` not followed by
/// two hex digits stays as it is.
fn decode(text: &[u8]) -> Option<Vec<u8>> {
    let hex = |b: Option<&u8>| b.and_then(|b| (*b as char).to_digit(16));
    let mut out = Vec::with_capacity(text.len());
    let mut changed = false;
    let mut i = 0;
    while i < text.len() {
        match (text[i], hex(text.get(i + 1)), hex(text.get(i + 2))) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                changed = true;
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    changed.then_some(out)
}

/// Where a reading splits the path into segments, besides `/`.
#[derive(Clone, Copy)]
struct Split {
    /// At `\`.
    backslash: bool,
    /// At a decoded `?`, `#` or NUL.
    query: bool,
}

/// The ways to split `text` that can differ: `\` as a separator or not when it has one, and a
/// decoded `?`, `#` or NUL ending the path or not when it has one. A `;` parameter ends at the
/// separators of its reading, so each way has its own names.
fn splits(text: &[u8], decoded: bool) -> impl Iterator<Item = Split> {
    let backslash: &[bool] = if text.contains(&b'\\') { &[true, false] } else { &[true] };
    let query: &[bool] =
        if decoded && text.iter().any(|b| matches!(b, b'?' | b'#' | 0)) { &[true, false] } else { &[false] };
    backslash.iter().flat_map(move |&backslash| query.iter().map(move |&query| Split { backslash, query }))
}

/// The names of a reading's segments, in order, each without its `;` parameters.
fn names(path: &[u8], split: Split) -> impl Iterator<Item = &[u8]> {
    path.split(move |b| *b == b'/' || (split.backslash && *b == b'\\') || (split.query && matches!(b, b'?' | b'#' | 0)))
        .map(|segment| segment.split(|b| *b == b';').next().unwrap_or(segment))
}

/// Whether one reading of the path reaches the prefix (see [`is_reserved`]).
fn reaches(path: &[u8], prefix: &str, split: Split) -> bool {
    let wanted = || prefix.split('/').filter(|s| !s.is_empty()).map(str::as_bytes);
    // Read as written, dot segments kept as names.
    let kept = names(path, split).filter(|n| !n.is_empty() && *n != b".");
    if starts_with(kept, wanted()) {
        return true;
    }
    // Read with dot segments resolved, whichever way: a `..`, and the prefix's segments in order.
    if !names(path, split).any(|n| n == b"..") {
        return false;
    }
    let mut want = wanted().peekable();
    for name in names(path, split) {
        if want.peek().is_some_and(|segment| name.eq_ignore_ascii_case(segment)) {
            want.next();
        }
    }
    want.peek().is_none()
}

/// Whether `names` start with `segments`, ignoring ASCII case.
fn starts_with<'a>(names: impl Iterator<Item = &'a [u8]>, mut segments: impl Iterator<Item = &'a [u8]>) -> bool {
    for name in names {
        match segments.next() {
            None => return true,
            Some(segment) if name.eq_ignore_ascii_case(segment) => {}
            Some(_) => return false,
        }
    }
    segments.next().is_none()
}

#[cfg(test)]
mod tests;
