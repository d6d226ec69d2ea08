//! What the URLs of the nodes made of several servers (`redis+cluster://`,
//! `redis+sentinel://`, `redis+replicated://`) have in common: their credentials, their list of
//! addresses, and a client for one of the servers they name.

/// The URL prefix among `schemes` (each with the scheme of its servers, `redis` or `rediss`)
/// that `url` starts with, as written.
pub(crate) fn scheme_of(
    url: &str,
    schemes: &'static [(&'static str, &'static str)],
) -> Option<(&'static str, &'static str)> {
    schemes
        .iter()
        .copied()
        .find(|(prefix, _)| url.starts_with(prefix))
}

/// `authority` (`[user:password@]hosts`) taken apart: the credentials as they go back into a
/// server's URL (`user:password@`, or empty), and the hosts.
pub(crate) fn userinfo_and_hosts(authority: &str) -> (String, &str) {
    match authority.rfind('@') {
        Some(at) => (format!("{}@", &authority[..at]), &authority[at + 1..]),
        None => (String::new(), authority),
    }
}

/// The `host:port` of each address in the comma-separated `hosts`, `default_port` for one given
/// without a port; empty entries are left out.
pub(crate) fn addresses(hosts: &str, default_port: u16) -> Vec<String> {
    hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|h| {
            if h.ends_with(']') || !h.contains(':') {
                format!("{h}:{default_port}")
            } else {
                h.to_owned()
            }
        })
        .collect()
}

/// A client for the server at `url`, whose certificate must chain to `tls_roots` (PEM) when
/// they are given and `scheme` is `rediss`.
pub(crate) fn client(
    url: &str,
    scheme: &str,
    tls_roots: Option<&[u8]>,
) -> redis::RedisResult<redis::Client> {
    match tls_roots {
        Some(roots) if scheme == "rediss" => redis::Client::build_with_tls(
            url,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(roots.to_vec()),
            },
        ),
        _ => redis::Client::open(url),
    }
}
