//! The `[handoff]` section checked: the endpoints' path, the step timeout, the largest state, the
//! token, the concurrency and what a failed step does. Also the path clients never reach, which
//! has a value when the section is absent too.

use toml::Spanned;

use super::{Config, ConfigError, Handoff, OnHandoffFailure, Validator, file};

/// `[handoff] path` when the section sets none. Clients never reach it, even with hand-off off.
pub const DEFAULT_HANDOFF_PATH: &str = "/.roomgate/rooms";

/// The largest `[handoff] max_bytes`: 1 GiB.
pub const MAX_HANDOFF_BYTES: u64 = 1 << 30;

impl Config {
    /// The prefix clients never reach: `[handoff] path`, or [`DEFAULT_HANDOFF_PATH`] when
    /// hand-off is off (an app may serve the endpoints before roomgate's hand-off is turned on).
    pub fn handoff_path(&self) -> &str {
        self.handoff.as_ref().map_or(DEFAULT_HANDOFF_PATH, |h| h.path.as_str())
    }
}

impl Validator<'_> {
    pub(super) fn handoff(
        &self,
        section: Option<Spanned<file::HandoffSection>>,
    ) -> Result<Option<Handoff>, ConfigError> {
        let Some(section) = section else { return Ok(None) };
        let h = section.into_inner();
        if let Err(why) = check_path(h.path.get_ref()) {
            return Err(self.err(&h.path, format!("handoff.path = {:?}: {why}", h.path.get_ref())));
        }
        let timeout = h.timeout.get_ref().0;
        if timeout.is_zero() {
            return Err(self.err(&h.timeout, "handoff.timeout must be more than 0".into()));
        }
        let bytes = h.max_bytes.get_ref().0;
        if bytes == 0 || bytes > MAX_HANDOFF_BYTES {
            return Err(self.err(&h.max_bytes, format!("handoff.max_bytes = {bytes}: expected 1 byte to 1GiB")));
        }
        let token = self.token("handoff", &h.token, &h.token_file)?;
        // A token from the text is sent in a header: it must be one (a file's token already is).
        if let (Some(t), Some(spanned)) = (&token, &h.token)
            && !t.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(self.err(spanned, "handoff.token: expected visible ASCII characters, no spaces".into()));
        }
        let concurrency = *h.concurrency.get_ref();
        if !(1..=1024).contains(&concurrency) {
            return Err(self.err(&h.concurrency, format!("handoff.concurrency = {concurrency}: expected 1 to 1024")));
        }
        let on_failure = match h.on_failure.get_ref().as_str() {
            "restart" => OnHandoffFailure::Restart,
            "stay" => OnHandoffFailure::Stay,
            other => {
                return Err(self
                    .err(&h.on_failure, format!("handoff.on_failure = {other:?}: expected \"restart\" or \"stay\"")));
            }
        };
        Ok(Some(Handoff {
            path: h.path.into_inner(),
            timeout,
            max_bytes: usize::try_from(bytes).unwrap_or(usize::MAX),
            token,
            concurrency,
            on_failure,
        }))
    }
}

/// A path roomgate can append `/{key}` to and that its client guard reads as written: `/` and
/// one or more segments of visible ASCII, with no empty, `.` or `..` segment, no trailing `/`,
/// and none of `?`, `#` or `%` (no query, fragment or encoding), `;` (segment parameters) or `\`.
fn check_path(path: &str) -> Result<(), &'static str> {
    let Some(rest) = path.strip_prefix('/') else { return Err("must start with '/'") };
    if !path.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("expected visible ASCII characters, no spaces");
    }
    if let Some(bad) = path.bytes().find(|b| b"?#%;\\".contains(b)) {
        return Err(match bad {
            b'?' | b'#' => "a path has no query ('?') and no fragment ('#')",
            b'%' => "write the path without percent-encoding ('%')",
            _ => "a path has no ';' parameters and no '\\'",
        });
    }
    if rest.is_empty() || rest.ends_with('/') {
        return Err("must not end with '/' (and cannot be \"/\": clients could not reach any path)");
    }
    for segment in rest.split('/') {
        match segment {
            "" => return Err("has an empty segment ('//')"),
            "." | ".." => return Err("has a dot segment ('.' or '..')"),
            _ => {}
        }
    }
    Ok(())
}
