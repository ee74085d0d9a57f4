//! The dashboard: one page (`GET /`) and its script and style, embedded in the binary and served
//! without the token (they hold no data; every figure they show is fetched with it), under a
//! strict Content-Security-Policy.

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, header};
use http_body_util::Full;

/// What the page may load: its own script and style, its own API, nothing inline, no frames.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const INDEX: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/app.js");
const STYLE: &str = include_str!("dashboard/style.css");

/// The page or one of its assets, if `req` asks for one (`GET` only); `None` for anything else.
pub(super) fn asset<B>(req: &Request<B>) -> Option<Response<Full<Bytes>>> {
    if req.method() != Method::GET {
        return None;
    }
    let (body, content_type) = match req.uri().path() {
        "/" => (INDEX, "text/html; charset=utf-8"),
        "/dashboard/app.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "/dashboard/style.css" => (STYLE, "text/css; charset=utf-8"),
        _ => return None,
    };
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(path: &str) -> Option<Response<Full<Bytes>>> {
        asset(&Request::get(path).body(()).expect("request"))
    }

    #[test]
    fn serves_the_page_and_its_assets_with_the_policy() {
        for (path, ty) in
            [("/", "text/html"), ("/dashboard/app.js", "text/javascript"), ("/dashboard/style.css", "text/css")]
        {
            let r = get(path).expect(path);
            let h = r.headers();
            assert!(h[header::CONTENT_TYPE].to_str().is_ok_and(|v| v.starts_with(ty)), "{path}");
            assert_eq!(h[header::CONTENT_SECURITY_POLICY], CSP, "{path}");
            assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{path}");
        }
        assert!(get("/admin/status").is_none());
        assert!(get("/dashboard/other.js").is_none());
        assert!(asset(&Request::post("/").body(()).expect("request")).is_none());
    }

    #[test]
    fn the_page_has_nothing_inline() {
        assert!(!INDEX.contains("<script>") && !INDEX.contains("style="), "inline script or style");
        assert!(!INDEX.contains("http://") && !INDEX.contains("https://"), "an external resource");
        assert!(!SCRIPT.contains("innerHTML"), "innerHTML");
    }
}
