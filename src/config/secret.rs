//! Secrets read from files, as a Kubernetes Secret mounts them: the admin token in `[admin]
//! token_file` (shared by the server's config and the `roomgate drain`/`undrain` client), and the
//! Redis password in `[directory] password_file`.

use std::path::Path;

/// The shortest admin token accepted, from the config text or from a file.
pub const MIN_TOKEN_LEN: usize = 16;

/// Reads a token file. Trailing whitespace is dropped, since `echo TOKEN > file` and most secret
/// stores end the value with a newline and a header value cannot end in a space anyway; what is
/// left must be one line of visible ASCII, at least [`MIN_TOKEN_LEN`] characters long. The error
/// says why without quoting the file's content.
pub fn read_token_file(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
    let token = text.trim_end();
    if token.is_empty() {
        return Err("the file is empty".into());
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("the token must be one line of visible ASCII characters, without spaces".into());
    }
    if token.len() < MIN_TOKEN_LEN {
        return Err(format!("the token in it is too short: use at least {MIN_TOKEN_LEN} characters"));
    }
    Ok(token.to_owned())
}

/// Reads a secret file (a password): trailing whitespace dropped, one line of visible ASCII left.
/// The error says why without quoting the file's content.
pub fn read_secret_file(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
    let secret = text.trim_end();
    if secret.is_empty() {
        return Err("the file is empty".into());
    }
    if !secret.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("the secret must be one line of visible ASCII characters, without spaces".into());
    }
    Ok(secret.to_owned())
}
