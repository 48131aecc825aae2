//! TLS on the wire port (`--tls-mode`, docs/TLS.md), through the official
//! driver with `tls=true`, and through a bare rustls client where the
//! test needs to see the certificate the server presents. Certificates
//! are made here: a CA, a server certificate for localhost and
//! 127.0.0.1, client certificates from that CA and from another one.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use compat_tests::{
    bson::{doc, Document},
    expect_command_error,
    mongodb::{
        error::ErrorKind,
        options::{AuthMechanism, ClientOptions, Credential, Tls, TlsOptions},
        Client,
    },
    server_binary, wire, TestServer,
};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls_pki_types::pem::PemObject;
use tokio::net::TcpStream;
use tokio_rustls::rustls::{self, pki_types::ServerName};

/// A certificate authority that signs the others.
struct Authority {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl Authority {
    fn new(name: &str) -> Authority {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.distinguished_name.push(DnType::CommonName, name);
        let pem = params.self_signed(&key).unwrap().pem();
        Authority {
            issuer: Issuer::new(params, key),
            pem,
        }
    }

    /// A certificate it signs: PEM of certificate and key together (as
    /// mongod's `--tlsCertificateKeyFile` and the driver take them), and
    /// the certificate's DER.
    fn sign(
        &self,
        names: &[&str],
        subject: &[(DnType, &str)],
        usage: ExtendedKeyUsagePurpose,
    ) -> (String, Vec<u8>) {
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        // In the order given (rcgen's default name holds a CN first).
        params.distinguished_name = DistinguishedName::new();
        for (kind, value) in subject {
            params.distinguished_name.push(kind.clone(), *value);
        }
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (
            format!("{}{}", cert.pem(), key.serialize_pem()),
            cert.der().to_vec(),
        )
    }
}

/// The files a test's server and clients use.
struct Pki {
    dir: tempfile::TempDir,
    ca: Authority,
    server_der: Vec<u8>,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let ca = Authority::new("Shardgate Test CA");
        let other = Authority::new("Some Other CA");
        let (server, server_der) = ca.sign(
            &["localhost", "127.0.0.1"],
            &[(DnType::CommonName, "localhost")],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let client_subject = [
            (DnType::CountryName, "US"),
            (DnType::OrganizationName, "Shardgate Tests"),
            (DnType::OrganizationalUnitName, "drivers"),
            (DnType::CommonName, "test client"),
        ];
        let (client, _) = ca.sign(&[], &client_subject, ExtendedKeyUsagePurpose::ClientAuth);
        let (nobody, _) = ca.sign(
            &[],
            &[(DnType::CommonName, "nobody")],
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        let (stranger, _) = other.sign(
            &[],
            &[(DnType::CommonName, "stranger")],
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        std::fs::write(dir.path().join("ca.pem"), &ca.pem).unwrap();
        std::fs::write(dir.path().join("server.pem"), server).unwrap();
        std::fs::write(dir.path().join("client.pem"), client).unwrap();
        std::fs::write(dir.path().join("nobody.pem"), nobody).unwrap();
        std::fs::write(dir.path().join("stranger.pem"), stranger).unwrap();
        Pki {
            dir,
            ca,
            server_der,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn arg(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
}

/// The subject of `client.pem`, as mongod writes it (RFC 2253).
const CLIENT_SUBJECT: &str = "CN=test client,OU=drivers,O=Shardgate Tests,C=US";

/// A driver client over TLS trusting `ca`, presenting `cert` if given;
/// it gives up on selecting the server after `wait`.
async fn tls_client(addr: SocketAddr, ca: &Path, cert: Option<&Path>, wait: Duration) -> Client {
    tls_client_with(addr, ca, cert, wait, None).await
}

/// [`tls_client`] logging in with `credential`.
async fn tls_client_with(
    addr: SocketAddr,
    ca: &Path,
    cert: Option<&Path>,
    wait: Duration,
    credential: Option<Credential>,
) -> Client {
    let mut opts = ClientOptions::parse(format!("mongodb://{addr}/?directConnection=true"))
        .await
        .unwrap();
    opts.server_selection_timeout = Some(wait);
    opts.connect_timeout = Some(wait);
    opts.tls = Some(Tls::Enabled(
        TlsOptions::builder()
            .ca_file_path(ca.to_path_buf())
            .cert_key_file_path(cert.map(Path::to_path_buf))
            .build(),
    ));
    opts.credential = credential;
    Client::with_options(opts).unwrap()
}

/// A MONGODB-X509 credential, naming the user when `user` is given.
fn x509(user: Option<&str>) -> Credential {
    Credential::builder()
        .mechanism(AuthMechanism::MongoDbX509)
        .username(user.map(str::to_string))
        .build()
}

/// A plain driver client that gives up after `wait`.
async fn plain_client(addr: SocketAddr, wait: Duration) -> Client {
    let mut opts = ClientOptions::parse(format!("mongodb://{addr}/?directConnection=true"))
        .await
        .unwrap();
    opts.server_selection_timeout = Some(wait);
    opts.connect_timeout = Some(wait);
    Client::with_options(opts).unwrap()
}

async fn ping(client: &Client) -> Result<Document, String> {
    client
        .database("admin")
        .run_command(doc! {"ping": 1})
        .await
        .map_err(|e| e.to_string())
}

/// Inserts, reads, updates and deletes through `client`.
async fn crud(client: &Client) {
    let coll = client.database("tls").collection::<Document>("docs");
    coll.insert_many(vec![doc! {"_id": 1, "n": 1}, doc! {"_id": 2, "n": 2}])
        .await
        .unwrap();
    coll.update_one(doc! {"_id": 1}, doc! {"$set": {"n": 10}})
        .await
        .unwrap();
    let one = coll.find_one(doc! {"_id": 1}).await.unwrap().unwrap();
    assert_eq!(one.get_i32("n"), Ok(10));
    coll.delete_one(doc! {"_id": 2}).await.unwrap();
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 1);
    coll.drop().await.unwrap();
}

/// The certificate the server at `addr` presents, as DER, through a
/// rustls client trusting `ca_pem`.
async fn presented_certificate(addr: SocketAddr, ca_pem: &str) -> Result<Vec<u8>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let name = ServerName::try_from("localhost").unwrap();
    let tls = tokio::time::timeout(Duration::from_secs(5), connector.connect(name, tcp))
        .await
        .map_err(|_| "handshake timed out".to_string())?
        .map_err(|e| e.to_string())?;
    let chain = tls
        .get_ref()
        .1
        .peer_certificates()
        .ok_or("no certificate")?;
    Ok(chain[0].to_vec())
}

/// A server process started by the test itself, for modes the harness
/// cannot reach in plain text (`requireTLS`); killed on drop.
struct OwnServer {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl OwnServer {
    fn start(args: &[String]) -> OwnServer {
        let dir = tempfile::tempdir().unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", compat_tests::free_port())
            .parse()
            .unwrap();
        let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
        let child = Command::new(server_binary())
            .args(["--bind", &addr.to_string(), "--backend", "memory"])
            .args(["--http-bind", "off"])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        OwnServer {
            child,
            addr,
            _dir: dir,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn allow_tls_serves_tls_and_plain_drivers_on_one_port() {
    let pki = Pki::new();
    let srv = TestServer::start_with_args(&[
        "--tls-mode",
        "allowTLS",
        "--tls-cert-file",
        &pki.arg("server.pem"),
    ])
    .await;
    let tls = tls_client(srv.addr, &pki.path("ca.pem"), None, Duration::from_secs(10)).await;
    crud(&tls).await;
    // The harness's own client speaks plain text on the same port.
    crud(&srv.client).await;
    let presented = presented_certificate(srv.addr, &pki.ca.pem).await.unwrap();
    assert_eq!(presented, pki.server_der);
    assert!(srv.log().contains("tls=true"), "{}", srv.log());
    // Hanging up without TLS's close_notify, as drivers do, is a close.
    tls.shutdown().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!srv.log().contains("bad message"), "{}", srv.log());
}

#[tokio::test]
async fn require_tls_refuses_plain_clients_and_serves_tls_ones() {
    let pki = Pki::new();
    let srv = OwnServer::start(&[
        "--tls-mode".into(),
        "requireTLS".into(),
        "--tls-cert-file".into(),
        pki.arg("server.pem"),
    ]);
    let tls = tls_client(srv.addr, &pki.path("ca.pem"), None, Duration::from_secs(10)).await;
    crud(&tls).await;

    let plain = plain_client(srv.addr, Duration::from_secs(2)).await;
    let refused = ping(&plain).await.expect_err("a plain driver got in");
    eprintln!("plain driver: {refused}");
    // A raw plain message is not answered: the connection is closed.
    let mut raw = TcpStream::connect(srv.addr).await.unwrap();
    assert!(
        wire::send(
            &mut raw,
            &wire::op_msg(1, &doc! {"ping": 1, "$db": "admin"})
        )
        .await
    );
    let outcome = wire::read_reply(&mut raw, Duration::from_secs(5)).await;
    assert!(matches!(outcome, wire::Outcome::Closed), "{outcome:?}");
    assert!(
        srv.log().contains("plain connection refused"),
        "{}",
        srv.log()
    );
    // TLS clients are still served.
    assert!(ping(&tls).await.is_ok());
}

#[tokio::test]
async fn a_tls_handshake_on_a_plain_port_is_closed_at_once() {
    let pki = Pki::new();
    let srv = TestServer::start().await;
    let started = Instant::now();
    let failed = presented_certificate(srv.addr, &pki.ca.pem)
        .await
        .expect_err("a plain port finished a TLS handshake");
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "closed after {took:?}: {failed}"
    );
    eprintln!("TLS client on a plain port: {failed} after {took:?}");
    // The same with a bare ClientHello's first bytes on a raw socket.
    let mut raw = TcpStream::connect(srv.addr).await.unwrap();
    let hello = [
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
    ];
    let started = Instant::now();
    assert!(wire::send(&mut raw, &hello).await);
    let outcome = wire::read_reply(&mut raw, Duration::from_secs(5)).await;
    assert!(matches!(outcome, wire::Outcome::Closed), "{outcome:?}");
    assert!(started.elapsed() < Duration::from_secs(1));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        srv.log().contains("TLS handshake on a port without TLS"),
        "{}",
        srv.log()
    );
    assert!(ping(&srv.client).await.is_ok());
}

#[tokio::test]
async fn client_certificates_are_verified_against_the_ca_file() {
    let pki = Pki::new();
    let srv = TestServer::start_with_args(&[
        "--tls-mode",
        "allowTLS",
        "--tls-cert-file",
        &pki.arg("server.pem"),
        "--tls-ca-file",
        &pki.arg("ca.pem"),
    ])
    .await;
    let ca = pki.path("ca.pem");
    let wait = Duration::from_secs(3);
    let client = tls_client(srv.addr, &ca, Some(&pki.path("client.pem")), wait).await;
    crud(&client).await;
    // Its subject, as mongod writes it, is the connection's.
    assert!(
        srv.log()
            .contains("CN=test client,OU=drivers,O=Shardgate Tests,C=US"),
        "{}",
        srv.log()
    );
    let without = tls_client(srv.addr, &ca, None, wait).await;
    assert!(
        ping(&without).await.is_err(),
        "a client without a certificate got in"
    );
    let stranger = tls_client(srv.addr, &ca, Some(&pki.path("stranger.pem")), wait).await;
    assert!(ping(&stranger).await.is_err(), "another CA's client got in");
    assert!(srv.log().contains("TLS handshake failed"), "{}", srv.log());
    assert!(ping(&client).await.is_ok());
}

#[tokio::test]
async fn x509_logins_map_the_certificate_subject_to_an_external_user() {
    let pki = Pki::new();
    // Failed logins are not slowed down here: the test makes many.
    let srv = TestServer::start_with_args(&[
        "--auth",
        "--auth-failures-per-second",
        "0",
        "--tls-mode",
        "allowTLS",
        "--tls-cert-file",
        &pki.arg("server.pem"),
        "--tls-ca-file",
        &pki.arg("ca.pem"),
        "--tls-allow-connections-without-certificates",
    ])
    .await;
    // The first user over the localhost exception, then the certificate's
    // user on $external, with no password.
    srv.db("admin")
        .run_command(doc! {"createUser": "boss", "pwd": "boss-pw", "roles": ["root"]})
        .await
        .unwrap();
    let root = srv
        .client_with(|o| {
            o.credential = Some(
                Credential::builder()
                    .username("boss".to_string())
                    .password("boss-pw".to_string())
                    .source("admin".to_string())
                    .build(),
            );
        })
        .await;
    let external = root.database("$external");
    expect_command_error(
        &external,
        doc! {"createUser": CLIENT_SUBJECT, "pwd": "x", "roles": []},
        2,
        "BadValue",
    )
    .await;
    external
        .run_command(
            doc! {"createUser": CLIENT_SUBJECT, "roles": [{"role": "readWrite", "db": "certs"}]},
        )
        .await
        .unwrap();
    let info = external
        .run_command(doc! {"usersInfo": CLIENT_SUBJECT})
        .await
        .unwrap();
    let user = info.get_array("users").unwrap()[0].as_document().unwrap();
    assert_eq!(user.get_str("db"), Ok("$external"));
    assert_eq!(
        user.get_array("mechanisms").unwrap(),
        &vec![compat_tests::bson::Bson::from("external")]
    );

    let ca = pki.path("ca.pem");
    let cert = pki.path("client.pem");
    let wait = Duration::from_secs(3);
    // Logged in by the certificate, the user named or not.
    for named in [None, Some(CLIENT_SUBJECT)] {
        let client = tls_client_with(srv.addr, &ca, Some(&cert), wait, Some(x509(named))).await;
        let docs = client.database("certs").collection::<Document>("docs");
        docs.insert_one(doc! {"by": "certificate"})
            .await
            .unwrap_or_else(|e| panic!("{named:?}: {e}\n{}", srv.log()));
        assert_eq!(docs.count_documents(doc! {}).await.unwrap(), 1);
        docs.delete_many(doc! {}).await.unwrap();
        let status = client
            .database("admin")
            .run_command(doc! {"connectionStatus": 1})
            .await
            .unwrap();
        let users = status
            .get_document("authInfo")
            .unwrap()
            .get_array("authenticatedUsers")
            .unwrap()
            .clone();
        assert_eq!(
            users,
            vec![doc! {"user": CLIENT_SUBJECT, "db": "$external"}.into()]
        );
        // Its roles hold: readWrite on certs and nothing else.
        let elsewhere = client
            .database("other")
            .collection::<Document>("docs")
            .insert_one(doc! {})
            .await
            .unwrap_err();
        assert_eq!(compat_tests::failure(&elsewhere).map(|f| f.code), Some(13));
    }

    // Refused: a certificate no user matches, no certificate at all, and
    // a plain connection. The driver reports its own authentication
    // error for MONGODB-X509; the server's code shows by hand (18).
    let nobody = tls_client_with(
        srv.addr,
        &ca,
        Some(&pki.path("nobody.pem")),
        wait,
        Some(x509(None)),
    )
    .await;
    let without = tls_client_with(srv.addr, &ca, None, wait, Some(x509(None))).await;
    let plain = srv.client_with(|o| o.credential = Some(x509(None))).await;
    for (what, client) in [
        ("unknown subject", nobody),
        ("no certificate", without),
        ("plain connection", plain),
    ] {
        let e = client
            .database("admin")
            .run_command(doc! {"ping": 1})
            .await
            .expect_err(what);
        assert!(
            matches!(*e.kind, ErrorKind::Authentication { .. }),
            "{what}: {e:?}"
        );
    }
    let by_hand = doc! {"authenticate": 1, "mechanism": "MONGODB-X509"};
    for client in [
        tls_client(srv.addr, &ca, Some(&pki.path("nobody.pem")), wait).await,
        tls_client(srv.addr, &ca, None, wait).await,
        srv.client.clone(),
    ] {
        expect_command_error(
            &client.database("$external"),
            by_hand.clone(),
            18,
            "AuthenticationFailed",
        )
        .await;
    }

    // By hand: `authenticate` answers the user, and only on $external.
    let bare = tls_client(srv.addr, &ca, Some(&cert), wait).await;
    let f = expect_command_error(
        &bare.database("admin"),
        doc! {"authenticate": 1, "mechanism": "MONGODB-X509"},
        17,
        "ProtocolError",
    )
    .await;
    assert!(f.message.contains("$external"), "{f:?}");
    let answer = bare
        .database("$external")
        .run_command(doc! {"authenticate": 1, "mechanism": "MONGODB-X509"})
        .await
        .unwrap();
    assert_eq!(answer.get_str("user"), Ok(CLIENT_SUBJECT));
    assert_eq!(answer.get_str("dbname"), Ok("$external"));
    // A user named must be the certificate's subject.
    let named = bare
        .database("$external")
        .run_command(doc! {"authenticate": 1, "mechanism": "MONGODB-X509", "user": CLIENT_SUBJECT})
        .await
        .unwrap();
    assert_eq!(named.get_str("user"), Ok(CLIENT_SUBJECT));
    expect_command_error(
        &bare.database("$external"),
        doc! {"authenticate": 1, "mechanism": "MONGODB-X509", "user": "CN=someone else"},
        18,
        "AuthenticationFailed",
    )
    .await;
    expect_command_error(
        &bare.database("$external"),
        doc! {"authenticate": 1, "mechanism": "PLAIN"},
        334,
        "MechanismUnavailable",
    )
    .await;
}

#[tokio::test]
async fn connections_without_certificates_may_be_allowed() {
    let pki = Pki::new();
    let srv = TestServer::start_with_args(&[
        "--tls-mode",
        "preferTLS",
        "--tls-cert-file",
        &pki.arg("server.pem"),
        "--tls-ca-file",
        &pki.arg("ca.pem"),
        "--tls-allow-connections-without-certificates",
    ])
    .await;
    let ca = pki.path("ca.pem");
    let wait = Duration::from_secs(3);
    let without = tls_client(srv.addr, &ca, None, wait).await;
    crud(&without).await;
    let client = tls_client(srv.addr, &ca, Some(&pki.path("client.pem")), wait).await;
    assert!(ping(&client).await.is_ok());
    // A certificate that is presented must still verify.
    let stranger = tls_client(srv.addr, &ca, Some(&pki.path("stranger.pem")), wait).await;
    assert!(ping(&stranger).await.is_err(), "another CA's client got in");
}

/// Waits up to 5 s for `line` in the server's log.
async fn wait_for_log(srv: &TestServer, line: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !srv.log().contains(line) {
        assert!(Instant::now() < deadline, "no {line:?} in\n{}", srv.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn sighup_reloads_the_certificate_for_new_connections() {
    let pki = Pki::new();
    let srv = TestServer::start_with_args(&[
        "--tls-mode",
        "allowTLS",
        "--tls-cert-file",
        &pki.arg("server.pem"),
    ])
    .await;
    let old = tls_client(srv.addr, &pki.path("ca.pem"), None, Duration::from_secs(10)).await;
    assert!(ping(&old).await.is_ok());
    assert_eq!(
        presented_certificate(srv.addr, &pki.ca.pem).await.unwrap(),
        pki.server_der
    );
    let hangup = || {
        let pid = srv.pid().unwrap().to_string();
        assert!(Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success());
    };

    // A renewed certificate, with a subject of its own.
    let (renewed, renewed_der) = pki.ca.sign(
        &["localhost", "127.0.0.1"],
        &[
            (DnType::CommonName, "localhost"),
            (DnType::OrganizationName, "renewed"),
        ],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    std::fs::write(pki.path("server.pem"), renewed).unwrap();
    hangup();
    wait_for_log(&srv, "TLS certificate reloaded").await;
    assert_eq!(
        presented_certificate(srv.addr, &pki.ca.pem).await.unwrap(),
        renewed_der
    );
    // Connections made before the reload go on.
    assert!(ping(&old).await.is_ok());

    // A broken file is refused and the renewed certificate stays.
    std::fs::write(pki.path("server.pem"), "not a certificate").unwrap();
    hangup();
    wait_for_log(&srv, "TLS certificate not reloaded").await;
    assert_eq!(
        presented_certificate(srv.addr, &pki.ca.pem).await.unwrap(),
        renewed_der
    );
    let fresh = tls_client(srv.addr, &pki.path("ca.pem"), None, Duration::from_secs(10)).await;
    crud(&fresh).await;
}

#[tokio::test]
async fn tls_flags_that_cannot_work_stop_the_server_at_start() {
    let pki = Pki::new();
    let (server, ca) = (pki.arg("server.pem"), pki.arg("ca.pem"));
    let cases: [(Vec<&str>, &str); 3] = [
        (vec!["--tls-mode", "requireTLS"], "needs --tls-cert-file"),
        (vec!["--tls-cert-file", &server], "need --tls-mode"),
        (
            vec!["--tls-mode", "allowTLS", "--tls-cert-file", &ca],
            "private key",
        ),
    ];
    for (args, says) in cases {
        let out = Command::new(server_binary())
            .args(["--backend", "memory", "--http-bind", "off"])
            .args([
                "--bind",
                &format!("127.0.0.1:{}", compat_tests::free_port()),
            ])
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} started");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
