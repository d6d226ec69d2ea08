//! Every way of reaching a server, used for real: TLS with a certificate authority made here
//! (and a wrong CA and an expired certificate refused with a clear error), a unix socket, and a
//! password the server refuses, which never appears in any output.

mod common;

use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use common::{PATIENT_NODE_TIMEOUT, cluster};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, date_time_ymd,
};
use redquorum::{Error, Redlock};
use redquorum_nodes::{NodeSpec, Persistence, RedisNode};

/// A certificate authority of our own.
struct Authority {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Authority {
    fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("key");
        Self {
            issuer: CertifiedIssuer::self_signed(params, key).expect("CA certificate"),
        }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server certificate for 127.0.0.1 and its key (PEM), valid now unless `expired`.
    fn server_certificate(&self, expired: bool) -> (String, String) {
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .expect("params");
        params.distinguished_name.push(DnType::CommonName, "redis");
        if expired {
            params.not_before = date_time_ymd(2020, 1, 1);
            params.not_after = date_time_ymd(2021, 1, 1);
        }
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        (cert.pem(), key.serialize_pem())
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A server that also listens with TLS (on the returned port) with `cert` and `key`.
fn tls_node(dir: &Path, cert: &str, key: &str, ca: &str) -> (RedisNode, u16) {
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write PEM");
        path.display().to_string()
    };
    let tls_port = free_port();
    // Durable and marked: trusted at once (the restart quarantine is not what this tests).
    let node = RedisNode::start(
        NodeSpec::new()
            .persistence(Persistence::AofAlways)
            .arg("--tls-port")
            .arg(tls_port.to_string())
            .arg("--tls-cert-file")
            .arg(write("server.pem", cert))
            .arg("--tls-key-file")
            .arg(write("server.key", key))
            .arg("--tls-ca-cert-file")
            .arg(write("ca.pem", ca))
            .arg("--tls-auth-clients")
            .arg("no"),
    )
    .expect("start a TLS node");
    (node, tls_port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_over_tls_with_a_private_certificate_authority() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = Authority::new("redlock test CA");
    let (cert, key) = ca.server_certificate(false);
    let nodes: Vec<(RedisNode, u16)> = (0..3)
        .map(|i| {
            let sub = dir.path().join(i.to_string());
            std::fs::create_dir_all(&sub).expect("dir");
            tls_node(&sub, &cert, &key, &ca.pem())
        })
        .collect();
    let urls: Vec<String> = nodes
        .iter()
        .map(|(_, port)| format!("rediss://127.0.0.1:{port}"))
        .collect();
    // A fresh manager whose single attempt connects (TLS handshakes included): the patient node
    // timeout.
    let redlock = Redlock::builder(urls.clone())
        .node_timeout(PATIENT_NODE_TIMEOUT)
        .tls_root_certificates(ca.pem())
        .build()
        .expect("valid");
    let mut lock = redlock
        .try_acquire("res", Duration::from_secs(5))
        .await
        .expect("locks over TLS");
    assert!(lock.fence().await.ok().is_some());
    lock.extend(Duration::from_secs(5)).await.expect("extends");
    // The won rounds did not wait for the slowest node.
    redlock.settle().await;
    for (node, _) in &nodes {
        assert_eq!(node.cli(&["GET", "res"]).expect("GET"), lock.value());
    }
    assert_eq!(lock.release().await.confirmed, 3);

    // Trusting another CA: refused, and the error says why.
    let other = Authority::new("somebody else's CA");
    let wrong = Redlock::builder(urls.clone())
        .tls_root_certificates(other.pem())
        .build()
        .expect("valid");
    let shown = wrong.connect().await[0].reply.to_string();
    assert!(
        shown.to_lowercase().contains("certificate"),
        "a certificate problem: {shown}"
    );
    let err = wrong
        .try_acquire("res", Duration::from_secs(5))
        .await
        .expect_err("no lock through an unverified server");
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );

    // The system's roots (the default) do not know our CA either.
    let system = Redlock::builder(urls).build().expect("valid");
    let shown = system.connect().await[0].reply.to_string();
    assert!(shown.to_lowercase().contains("certificate"), "{shown}");

    // A PEM with no certificate in it is a configuration error, at build time.
    let err = Redlock::builder(["rediss://127.0.0.1:1"])
        .tls_root_certificates("not a certificate")
        .build()
        .expect_err("refused at build");
    assert!(matches!(err, Error::Config(_)), "{err}");
    assert!(err.to_string().contains("tls_root_certificates"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_server_certificate_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = Authority::new("redlock test CA");
    let (cert, key) = ca.server_certificate(true);
    let (_node, port) = tls_node(dir.path(), &cert, &key, &ca.pem());
    let redlock = Redlock::builder([format!("rediss://127.0.0.1:{port}")])
        .tls_root_certificates(ca.pem())
        .build()
        .expect("valid");
    let shown = redlock.connect().await[0].reply.to_string();
    assert!(
        shown.to_lowercase().contains("expired"),
        "says expired: {shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_over_a_unix_socket_alone_or_mixed_with_tcp() {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("redis.sock");
    let unix = RedisNode::start(
        NodeSpec::new()
            .persistence(Persistence::AofAlways)
            .arg("--unixsocket")
            .arg(socket.display().to_string())
            .arg("--unixsocketperm")
            .arg("700"),
    )
    .expect("start");
    let url = format!("redis+unix://{}", socket.display());
    // Fresh managers whose single attempts connect: the patient node timeout.
    let alone = Redlock::builder([url.clone()])
        .node_timeout(PATIENT_NODE_TIMEOUT)
        .build()
        .expect("valid");
    let mut lock = alone
        .try_acquire("res", Duration::from_secs(5))
        .await
        .expect("locks over the socket");
    lock.extend(Duration::from_secs(5)).await.expect("extends");
    assert_eq!(unix.cli(&["GET", "res"]).expect("GET"), lock.value());
    assert_eq!(lock.release().await.confirmed, 1);

    let tcp = cluster(2);
    let mut urls = tcp.urls();
    urls.push(url);
    let mixed = Redlock::builder(urls)
        .node_timeout(PATIENT_NODE_TIMEOUT)
        .build()
        .expect("valid");
    let lock = mixed
        .try_acquire("mixed", Duration::from_secs(5))
        .await
        .expect("locks on a mixed group");
    // The won round did not wait for the slowest node.
    mixed.settle().await;
    assert_eq!(unix.cli(&["GET", "mixed"]).expect("GET"), lock.value());
    assert_eq!(lock.release().await.confirmed, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_never_appears_in_errors() {
    let node = RedisNode::start(NodeSpec::new().arg("--requirepass").arg("right-pass-5521"))
        .expect("start");
    let secret = "wrong-pass-7319";
    let url = format!("redis://:{secret}@127.0.0.1:{}", node.port());
    let redlock = Redlock::builder([url]).build().expect("valid");
    let replies = redlock.connect().await;
    let err = redlock
        .try_acquire("res", Duration::from_secs(5))
        .await
        .expect_err("not with a wrong password");
    for shown in [
        format!("{err}"),
        format!("{err:?}"),
        format!("{replies:?}"),
        format!("{:?}", redlock.status("res").await),
        format!("{redlock:?}"),
    ] {
        assert!(!shown.contains(secret), "password shown: {shown}");
        assert!(!shown.contains("right-pass"), "{shown}");
    }
    let shown = replies[0].reply.to_string();
    assert!(
        shown.contains("WRONGPASS") || shown.to_lowercase().contains("password"),
        "says the password was refused: {shown}"
    );
}
