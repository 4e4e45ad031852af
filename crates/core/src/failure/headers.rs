//! How core reads an answer's headers without an HTTP crate (docs/rules/router.md §3).

/// Header access without an HTTP crate in core. Names are asked for in lower case; an
/// implementation over a case-insensitive map (the adapter's `http::HeaderMap`) answers them
/// as is.
pub trait Headers {
    /// The first value of header `name` (lower case), if present and valid UTF-8.
    fn get(&self, name: &str) -> Option<&str>;
    /// Every header name present (lower case, repeats allowed). Needed for the Codex
    /// model-scoped limit headers `x-codex-<name>-primary-used-percent`, whose `<name>` is not
    /// known in advance (docs/rules/router.md §3). Only read on the failure path.
    fn names(&self) -> Vec<&str>;
}

/// No headers at all (an outcome without headers, tests).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHeaders;

impl Headers for NoHeaders {
    fn get(&self, _name: &str) -> Option<&str> {
        None
    }
    fn names(&self) -> Vec<&str> {
        Vec::new()
    }
}

/// Headers as a borrowed list of `(name, value)` pairs, names matched case-insensitively.
#[derive(Debug, Clone, Copy)]
pub struct HeaderList<'a>(pub &'a [(&'a str, &'a str)]);

impl Headers for HeaderList<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }
    fn names(&self) -> Vec<&str> {
        self.0.iter().map(|(n, _)| *n).collect()
    }
}
