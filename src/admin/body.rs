//! Admin request bodies: read under a size cap and a deadline, parsed into strict serde structs
//! (unknown fields are refused, as in the config file), with errors that name the problem.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode, header};
use http_body::Body;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::Deserialize;
use serde::de::DeserializeOwned;

/// The largest admin request body.
pub(super) const MAX_BODY: usize = 64 * 1024;

/// `POST /admin/backends/{id}/drain`: an empty body, or `{"deadline": "30s", "handoff": true}`
/// (either key may be left out).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DrainBody {
    /// `None` (or `null`): the config's `[drain] deadline`.
    pub deadline: Option<String>,
    /// Move every live room now, with its state (needs `[handoff]`).
    #[serde(default)]
    pub handoff: bool,
}

/// `POST /admin/rebalance`: an empty body or `{"max_moves": 100}`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RebalanceBody {
    pub max_moves: Option<usize>,
}

/// The body of an endpoint that takes no parameters: empty, or `{}`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NoFields {}

/// A failed body: the status and the message for `{"error": ...}`.
pub(super) type BodyError = (StatusCode, String);

/// Reads the body of `req` (at most [`MAX_BODY`] bytes, within `timeout`) and parses it as `T`.
/// An empty body (or only whitespace) is `T::default()`.
pub(super) async fn json<T, B>(req: Request<B>, timeout: Duration) -> Result<T, BodyError>
where
    T: DeserializeOwned + Default,
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let bytes = read(req, timeout).await?;
    parse(&bytes)
}

async fn read<B>(req: Request<B>, timeout: Duration) -> Result<Bytes, BodyError>
where
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let announced = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if announced.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(too_large());
    }
    match tokio::time::timeout(timeout, Limited::new(req.into_body(), MAX_BODY).collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<LengthLimitError>() => Err(too_large()),
        Ok(Err(e)) => Err((StatusCode::BAD_REQUEST, format!("cannot read the body: {e}"))),
        Err(_) => {
            Err((StatusCode::REQUEST_TIMEOUT, format!("the body was not received within {}s", timeout.as_secs_f64())))
        }
    }
}

fn too_large() -> BodyError {
    (StatusCode::PAYLOAD_TOO_LARGE, format!("the body is larger than {MAX_BODY} bytes"))
}

fn parse<T: DeserializeOwned + Default>(bytes: &[u8]) -> Result<T, BodyError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(bytes).map_err(|e| {
        let what = match e.classify() {
            serde_json::error::Category::Data => "the body does not fit this endpoint",
            _ => "the body is not JSON",
        };
        (StatusCode::BAD_REQUEST, format!("{what}: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(body: &str) -> Result<DrainBody, BodyError> {
        parse(body.as_bytes())
    }

    #[test]
    fn drain_bodies() {
        assert_eq!(drain("").unwrap().deadline, None);
        assert_eq!(drain(" \n").unwrap().deadline, None);
        assert_eq!(drain("{}").unwrap().deadline, None);
        assert_eq!(drain(r#"{"deadline": null}"#).unwrap().deadline, None);
        assert_eq!(drain(r#"{"deadline": "30s"}"#).unwrap().deadline.as_deref(), Some("30s"));
    }

    #[test]
    fn unknown_fields_wrong_types_and_non_json_are_named() {
        let (status, msg) = drain(r#"{"deadlne": "30s"}"#).unwrap_err();
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(msg.contains("unknown field `deadlne`"), "{msg}");
        let (_, msg) = drain(r#"{"deadline": 30}"#).unwrap_err();
        assert!(msg.contains("invalid type: integer `30`, expected a string"), "{msg}");
        let (_, msg) = drain("[]").unwrap_err();
        assert!(msg.starts_with("the body does not fit this endpoint"), "{msg}");
        let (_, msg) = drain("deadline=30s").unwrap_err();
        assert!(msg.starts_with("the body is not JSON"), "{msg}");
        let (_, msg) = drain(r#"{"deadline": "30s""#).unwrap_err();
        assert!(msg.starts_with("the body is not JSON"), "{msg}");
        let (_, msg) = drain(r#"{"deadline": "30s", "deadline": "1s"}"#).unwrap_err();
        assert!(msg.contains("duplicate field `deadline`"), "{msg}");
    }

    #[tokio::test]
    async fn bodies_are_capped_as_they_are_read() {
        use http_body_util::{Full, StreamBody};
        let chunks =
            (0..20).map(|_| Ok::<_, std::convert::Infallible>(http_body::Frame::data(Bytes::from(vec![b' '; 4096]))));
        let unannounced = Request::new(StreamBody::new(futures_util::stream::iter(chunks)));
        let (status, msg) = json::<DrainBody, _>(unannounced, Duration::from_secs(10)).await.unwrap_err();
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{msg}");
        let at_cap = Request::new(Full::new(Bytes::from(vec![b' '; MAX_BODY])));
        assert!(json::<DrainBody, _>(at_cap, Duration::from_secs(10)).await.is_ok());
    }

    #[test]
    fn endpoints_without_parameters_take_nothing_or_an_empty_object() {
        assert!(parse::<NoFields>(b"").is_ok());
        assert!(parse::<NoFields>(b"{}").is_ok());
        let (status, msg) = parse::<NoFields>(br#"{"force": true}"#).unwrap_err();
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(msg.contains("unknown field `force`"), "{msg}");
    }
}
