//! Which certificate a server name gets: exact names first, then a wildcard for the name's
//! parent (`*.example.com` covers exactly one more label), else the default. Pure.

use std::collections::HashMap;

/// Names to certificates; `T` is what is served (a rustls `CertifiedKey` in roomgate).
#[derive(Debug)]
pub struct Names<T> {
    exact: HashMap<Box<str>, T>,
    /// `*.example.com` is kept under `example.com`.
    wildcard: HashMap<Box<str>, T>,
    default: Option<T>,
}

impl<T: Clone> Names<T> {
    /// Builds the table from certificates in config order, each with its names. The first
    /// certificate is the default; a name claimed twice goes to the first that claims it.
    pub fn build<'a>(certs: impl IntoIterator<Item = (T, &'a [String])>) -> Names<T> {
        let mut table = Names { exact: HashMap::new(), wildcard: HashMap::new(), default: None };
        for (served, names) in certs {
            if table.default.is_none() {
                table.default = Some(served.clone());
            }
            for name in names {
                let name = normalize(name);
                let (map, key) = match name.strip_prefix("*.") {
                    Some(parent) => (&mut table.wildcard, parent),
                    None => (&mut table.exact, name.as_ref()),
                };
                map.entry(key.into()).or_insert_with(|| served.clone());
            }
        }
        table
    }

    /// The certificate for a client's SNI name (`None`: the client sent none).
    pub fn find(&self, sni: Option<&str>) -> Option<&T> {
        let found = sni.and_then(|sni| {
            let name = normalize(sni);
            self.exact.get(name.as_ref()).or_else(|| {
                let (_, parent) = name.split_once('.')?;
                self.wildcard.get(parent)
            })
        });
        found.or(self.default.as_ref())
    }
}

/// DNS names compare without case and without a trailing dot.
fn normalize(name: &str) -> std::borrow::Cow<'_, str> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        std::borrow::Cow::Owned(name.to_ascii_lowercase())
    } else {
        std::borrow::Cow::Borrowed(name)
    }
}

#[cfg(test)]
mod tests {
    use super::Names;

    fn table() -> Names<&'static str> {
        let a = vec!["a.test".to_owned(), "www.a.test".to_owned()];
        let b = vec!["*.b.test".to_owned(), "b.test".to_owned(), "a.test".to_owned()];
        let c = vec!["Exact.B.Test".to_owned()];
        Names::build([("A", a.as_slice()), ("B", b.as_slice()), ("C", c.as_slice())])
    }

    #[test]
    fn exact_names_then_wildcards_then_the_default() {
        let t = table();
        assert_eq!(t.find(Some("a.test")), Some(&"A"), "first certificate claiming a name wins");
        assert_eq!(t.find(Some("www.a.test")), Some(&"A"));
        assert_eq!(t.find(Some("b.test")), Some(&"B"));
        assert_eq!(t.find(Some("x.b.test")), Some(&"B"), "wildcard covers one label");
        assert_eq!(t.find(Some("exact.b.test")), Some(&"C"), "an exact name beats a wildcard");
        assert_eq!(t.find(Some("y.x.b.test")), Some(&"A"), "a wildcard covers exactly one label");
        assert_eq!(t.find(Some("unknown.test")), Some(&"A"), "unknown names get the default");
        assert_eq!(t.find(None), Some(&"A"), "no SNI gets the default");
    }

    #[test]
    fn names_compare_without_case_or_trailing_dot() {
        let t = table();
        assert_eq!(t.find(Some("B.TEST.")), Some(&"B"));
        assert_eq!(t.find(Some("Q.b.Test")), Some(&"B"));
    }

    #[test]
    fn an_empty_table_serves_nothing() {
        let t: Names<&str> = Names::build([]);
        assert_eq!(t.find(Some("a.test")), None);
    }
}
