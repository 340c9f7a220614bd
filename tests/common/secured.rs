//! A secured test bed: neither test broker authenticates as shipped here (Tansu's TLS listener
//! answered plaintext, its SASL handshake refused the mechanism it listed), so a plaintext Tansu
//! is put behind two fronts, and every byte a client sends goes through both:
//!
//! ```text
//! client --TLS--> stunnel (addr, the port the broker advertises)
//!        --plain--> SASL front (this file: SaslHandshake + SaslAuthenticate, then a pipe)
//!        --plain--> Tansu
//! ```
//!
//! stunnel (Debian's stunnel4) terminates TLS with a certificate signed by a CA made for the
//! bed; the front answers the SASL exchange itself, SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN for
//! one user ([`USER`]), with the server side of `tidemark::kafka::secure::scram`, and pipes the
//! connection to the broker once the client is authenticated. librdkafka's own SCRAM client
//! authenticates against it, which checks the front's side independently of tidemark's.
//!
//! Clients find the bed's settings by its address ([`brokers`], [`client_config`],
//! [`properties_toml`]), so that the helpers written for a plain broker serve it unchanged.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, RequestHeader, ResponseHeader, SaslAuthenticateRequest,
    SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tidemark::kafka::secure::{scram, Brokers, Mechanism, Security};

/// The one user the front knows.
pub const USER: &str = "tidemark-test";
/// Kafka's SASL_AUTHENTICATION_FAILED.
const AUTHENTICATION_FAILED: i16 = 58;
/// Kafka's UNSUPPORTED_SASL_MECHANISM.
const UNSUPPORTED_MECHANISM: i16 = 33;

/// The secured beds running in this process, by the address clients use: their client
/// properties (the password as `${file:...}`, so no file or command line holds it).
static BEDS: Mutex<BTreeMap<String, BTreeMap<String, String>>> = Mutex::new(BTreeMap::new());

/// The client properties of the bed at `addr` (none for a plain broker).
pub fn properties(addr: &str) -> BTreeMap<String, String> {
    BEDS.lock().unwrap().get(addr).cloned().unwrap_or_default()
}

/// The brokers at `addr` as tidemark reaches them: secured as the bed says, plaintext otherwise.
pub fn brokers(addr: &str) -> Brokers {
    let props = properties(addr);
    if props.is_empty() {
        return Brokers::plaintext(addr);
    }
    let settings = tidemark::config::ClientSettings::new(addr, &props).expect("bed settings");
    settings.brokers
}

/// A librdkafka configuration for the brokers at `addr`.
pub fn client_config(addr: &str) -> rdkafka::ClientConfig {
    let props = properties(addr);
    if props.is_empty() {
        let mut c = rdkafka::ClientConfig::new();
        c.set("bootstrap.servers", addr);
        return c;
    }
    let settings = tidemark::config::ClientSettings::new(addr, &props).expect("bed settings");
    tidemark::clients::command_config(&settings)
}

/// Lines for a pipeline's `[kafka.properties]` that reach the brokers at `addr`.
pub fn properties_toml(addr: &str) -> String {
    properties(addr)
        .iter()
        .map(|(k, v)| format!("{k:?} = {v:?}\n"))
        .collect()
}

/// stunnel on a loopback port, terminating TLS with the certificate and key
/// [`make_certificates`] made, before a plaintext server; stopped when dropped.
pub struct TlsFront {
    child: Child,
    /// The TLS port.
    pub port: u16,
}

impl TlsFront {
    /// Starts stunnel on `port` before `upstream` (host:port), with the certificate in `certs`.
    pub fn start(upstream: &str, port: u16, certs: &Path) -> TlsFront {
        TlsFront::start_with(upstream, port, certs, false)
    }

    /// [`TlsFront::start`], refusing a client without a certificate the test CA signed when
    /// `verify_clients` (mutual TLS).
    pub fn start_with(upstream: &str, port: u16, certs: &Path, verify_clients: bool) -> TlsFront {
        let conf = certs.join(format!("stunnel-{port}.conf"));
        let verify = if verify_clients {
            format!("verify = 2\nCAfile = {}\n", certs.join("ca.pem").display())
        } else {
            String::new()
        };
        std::fs::write(
            &conf,
            format!(
                "foreground = yes\npid =\nsyslog = no\ndebug = 3\n[front]\naccept = 127.0.0.1:{port}\nconnect = {upstream}\ncert = {}\nkey = {}\n{verify}",
                certs.join("server.pem").display(),
                certs.join("server.key").display()
            ),
        )
        .unwrap();
        let child = Command::new(stunnel_bin())
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start stunnel (scripts/install-deps.sh installs stunnel4)");
        super::wait_for_port(&format!("127.0.0.1:{port}"));
        TlsFront { child, port }
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The bed's fronts and files; stopped when dropped.
pub struct Bed {
    stunnel: TlsFront,
    front: Option<Front>,
    /// Certificates, keys, the password file and stunnel's configuration.
    pub dir: tempfile::TempDir,
    /// The password of [`USER`].
    pub password: String,
    addr: String,
}

impl Bed {
    /// Puts stunnel on `tls_port` and the front before the plaintext broker at `upstream`;
    /// registers the bed's client properties under `127.0.0.1:tls_port`.
    pub fn start(upstream: &str, tls_port: u16) -> Bed {
        let dir = tempfile::tempdir().unwrap();
        make_certificates(dir.path());
        let password = format!("pw-{:016x}-secret", rand_u64());
        std::fs::write(dir.path().join("password"), &password).unwrap();
        let front = Front::start(upstream, &password);
        let stunnel = TlsFront::start(&format!("127.0.0.1:{}", front.port), tls_port, dir.path());
        let addr = format!("127.0.0.1:{tls_port}");
        let props = BTreeMap::from([
            ("security.protocol".to_string(), "SASL_SSL".to_string()),
            ("sasl.mechanism".to_string(), "SCRAM-SHA-512".to_string()),
            ("sasl.username".to_string(), USER.to_string()),
            (
                "sasl.password".to_string(),
                format!("${{file:{}}}", dir.path().join("password").display()),
            ),
            (
                "ssl.ca.location".to_string(),
                dir.path().join("ca.pem").display().to_string(),
            ),
        ]);
        BEDS.lock().unwrap().insert(addr.clone(), props);
        Bed {
            stunnel,
            front: Some(front),
            dir,
            password,
            addr,
        }
    }

    /// Puts stunnel on `tls_port` before the plaintext broker at `upstream`, admitting only
    /// clients with a certificate the test CA signed (mutual TLS, no SASL); registers the
    /// bed's client properties (`SSL`, the CA, the client's certificate and key).
    pub fn start_mtls(upstream: &str, tls_port: u16) -> Bed {
        let dir = tempfile::tempdir().unwrap();
        make_certificates(dir.path());
        let stunnel = TlsFront::start_with(upstream, tls_port, dir.path(), true);
        let addr = format!("127.0.0.1:{tls_port}");
        let file = |f: &str| dir.path().join(f).display().to_string();
        let props = BTreeMap::from([
            ("security.protocol".to_string(), "SSL".to_string()),
            ("ssl.ca.location".to_string(), file("ca.pem")),
            ("ssl.certificate.location".to_string(), file("client.pem")),
            ("ssl.key.location".to_string(), file("client.key")),
        ]);
        BEDS.lock().unwrap().insert(addr.clone(), props);
        Bed {
            stunnel,
            front: None,
            dir,
            password: String::new(),
            addr,
        }
    }

    /// A CA file that did not sign the bed's certificate.
    pub fn other_ca(&self) -> PathBuf {
        self.dir.path().join("other-ca.pem")
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        BEDS.lock().unwrap().remove(&self.addr);
        if let Some(front) = &self.front {
            front.stop.store(true, Ordering::Relaxed);
        }
    }
}

fn stunnel_bin() -> &'static str {
    if Path::new("/usr/bin/stunnel4").exists() {
        "/usr/bin/stunnel4"
    } else {
        "stunnel"
    }
}

fn rand_u64() -> u64 {
    let mut b = [0u8; 8];
    openssl::rand::rand_bytes(&mut b).unwrap();
    u64::from_le_bytes(b)
}

/// A CA (`ca.pem`), a server certificate it signs for `IP:127.0.0.1` (`server.pem`,
/// `server.key`), a client certificate it signs (`client.pem`, `client.key`), and another CA
/// (`other-ca.pem`), made in `dir` with the openssl command.
pub fn make_certificates(dir: &Path) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    for (name, cn) in [("ca", "tidemark test CA"), ("other-ca", "another CA")] {
        let key = format!("{name}.key");
        let pem = format!("{name}.pem");
        let subj = format!("/CN={cn}");
        let mut args = vec!["req", "-x509"];
        args.extend(ec);
        args.extend(["-keyout", &key, "-out", &pem, "-days", "2", "-subj", &subj]);
        run(&args);
    }
    let mut args = vec!["req"];
    args.extend(ec);
    args.extend([
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    run(&args);
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "san.ext",
    ]);
    // A client certificate the CA signs, for mutual TLS.
    let mut args = vec!["req"];
    args.extend(ec);
    args.extend([
        "-keyout",
        "client.key",
        "-out",
        "client.csr",
        "-subj",
        "/CN=tidemark-client",
    ]);
    run(&args);
    run(&[
        "x509",
        "-req",
        "-in",
        "client.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-out",
        "client.pem",
        "-days",
        "2",
    ]);
}

/// The SASL front: a listener that authenticates each connection, then pipes it to the broker.
struct Front {
    port: u16,
    stop: Arc<AtomicBool>,
}

/// What the front knows of its one user, per SCRAM mechanism: salt, iterations and keys.
struct User {
    password: String,
    scram: BTreeMap<&'static str, (Vec<u8>, u32, scram::Keys)>,
}

impl Front {
    fn start(upstream: &str, password: &str) -> Front {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let mut scram_keys = BTreeMap::new();
        for mech in [Mechanism::ScramSha256, Mechanism::ScramSha512] {
            let salt = rand_u64().to_le_bytes().to_vec();
            let keys = scram::keys(mech, password, &salt, 4096);
            scram_keys.insert(mech.name(), (salt, 4096, keys));
        }
        let user = Arc::new(User {
            password: password.to_string(),
            scram: scram_keys,
        });
        let upstream = upstream.to_string();
        let s = stop.clone();
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let (user, upstream) = (user.clone(), upstream.clone());
                        std::thread::spawn(move || {
                            let _ = client.set_nonblocking(false);
                            let _ = serve(client, &upstream, &user);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Front { port, stop }
    }
}

fn read_frame(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let n = i32::from_be_bytes(len);
    if !(0..=100 << 20).contains(&n) {
        return Err(std::io::Error::other("bad frame length"));
    }
    let mut body = vec![0u8; n as usize];
    s.read_exact(&mut body)?;
    Ok(body)
}

fn write_frame(s: &mut TcpStream, body: &[u8]) -> std::io::Result<()> {
    let mut f = Vec::with_capacity(body.len() + 4);
    f.extend_from_slice(&(body.len() as i32).to_be_bytes());
    f.extend_from_slice(body);
    s.write_all(&f)
}

/// A response frame: the header (the request's correlation id) and `body` encoded at `version`.
fn response<R: Encodable>(key: ApiKey, version: i16, correlation: i32, body: &R) -> Vec<u8> {
    let mut out = BytesMut::new();
    ResponseHeader::default()
        .with_correlation_id(correlation)
        .encode(&mut out, key.response_header_version(version))
        .unwrap();
    body.encode(&mut out, version).unwrap();
    out.to_vec()
}

/// One connection: the SASL exchange, then a pipe to the broker.
fn serve(mut client: TcpStream, upstream: &str, user: &User) -> std::io::Result<()> {
    let mut up = TcpStream::connect(upstream)?;
    let mut mechanism: Option<&'static str> = None;
    let mut exchange: Option<scram::Server> = None;
    loop {
        let frame = read_frame(&mut client)?;
        let mut buf = Bytes::from(frame.clone());
        if buf.len() < 8 {
            return Ok(());
        }
        let key = i16::from_be_bytes([frame[0], frame[1]]);
        let version = i16::from_be_bytes([frame[2], frame[3]]);
        let Ok(api) = ApiKey::try_from(key) else {
            return Ok(());
        };
        let header = RequestHeader::decode(&mut buf, api.request_header_version(version))
            .map_err(std::io::Error::other)?;
        let correlation = header.correlation_id;
        match api {
            ApiKey::ApiVersions => {
                // The broker's versions, with the SASL requests added where it lacks them.
                write_frame(&mut up, &frame)?;
                let answer = read_frame(&mut up)?;
                let mut b = Bytes::from(answer.clone());
                let hv = api.response_header_version(version);
                let decoded = ResponseHeader::decode(&mut b, hv)
                    .and_then(|_| ApiVersionsResponse::decode(&mut b, version));
                match decoded {
                    Ok(mut v) if v.error_code == 0 => {
                        for (k, max) in [(ApiKey::SaslHandshake, 1), (ApiKey::SaslAuthenticate, 2)]
                        {
                            if !v.api_keys.iter().any(|a| a.api_key == k as i16) {
                                v.api_keys.push(
                                    ApiVersion::default()
                                        .with_api_key(k as i16)
                                        .with_min_version(0)
                                        .with_max_version(max),
                                );
                            }
                        }
                        write_frame(&mut client, &response(api, version, correlation, &v))?;
                    }
                    _ => write_frame(&mut client, &answer)?,
                }
            }
            ApiKey::SaslHandshake => {
                let req = SaslHandshakeRequest::decode(&mut buf, version)
                    .map_err(std::io::Error::other)?;
                let offered = ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"];
                let wanted = offered.iter().find(|m| **m == req.mechanism.as_str());
                let answer = SaslHandshakeResponse::default()
                    .with_error_code(if wanted.is_some() {
                        0
                    } else {
                        UNSUPPORTED_MECHANISM
                    })
                    .with_mechanisms(
                        offered
                            .iter()
                            .map(|m| StrBytes::from_static_str(m))
                            .collect(),
                    );
                mechanism = wanted.copied();
                write_frame(&mut client, &response(api, version, correlation, &answer))?;
                if version == 0 {
                    // Raw SASL tokens would follow (no SaslAuthenticate): not supported here.
                    return Ok(());
                }
            }
            ApiKey::SaslAuthenticate => {
                let req = SaslAuthenticateRequest::decode(&mut buf, version)
                    .map_err(std::io::Error::other)?;
                let token = String::from_utf8_lossy(&req.auth_bytes).into_owned();
                let step = authenticate_step(mechanism, user, &mut exchange, &token);
                let (code, message, bytes, done) = match step {
                    Ok((bytes, done)) => (0, None, bytes, done),
                    Err(why) => {
                        (
                            {
                                eprintln!("sasl front: {mechanism:?} refused {:?}: {why} (token {token:?})", header.client_id);
                                AUTHENTICATION_FAILED
                            },
                            Some(format!(
                                "Authentication failed during authentication due to invalid \
                             credentials with SASL mechanism {}",
                                mechanism.unwrap_or("none")
                            )),
                            Vec::new(),
                            false,
                        )
                    }
                };
                let answer = SaslAuthenticateResponse::default()
                    .with_error_code(code)
                    .with_error_message(message.map(StrBytes::from_string))
                    .with_auth_bytes(Bytes::from(bytes));
                write_frame(&mut client, &response(api, version, correlation, &answer))?;
                if code != 0 {
                    std::thread::sleep(Duration::from_millis(50));
                    return Ok(());
                }
                if done {
                    break;
                }
            }
            // Kafka closes a connection that sends anything else before authenticating.
            _ => return Ok(()),
        }
    }
    pipe(client, up)
}

/// One `SaslAuthenticate` step of `mechanism`: the bytes to answer and whether the client is
/// now authenticated.
fn authenticate_step(
    mechanism: Option<&'static str>,
    user: &User,
    exchange: &mut Option<scram::Server>,
    token: &str,
) -> Result<(Vec<u8>, bool), String> {
    match mechanism {
        Some("PLAIN") => {
            let mut parts = token.split('\0');
            let (_authz, name, password) = (parts.next(), parts.next(), parts.next());
            if name == Some(USER) && password == Some(user.password.as_str()) {
                Ok((Vec::new(), true))
            } else {
                Err("wrong user or password".to_string())
            }
        }
        Some(m @ ("SCRAM-SHA-512" | "SCRAM-SHA-256")) => {
            let mech = Mechanism::parse(m).unwrap();
            match exchange.take() {
                None => {
                    let (server, first) = scram::Server::start(mech, token, |name| {
                        (name == USER).then(|| user.scram[m].clone())
                    })?;
                    *exchange = Some(server);
                    Ok((first.into_bytes(), false))
                }
                Some(server) => Ok((server.finish(token)?.into_bytes(), true)),
            }
        }
        _ => Err("no mechanism chosen".to_string()),
    }
}

/// Copies bytes both ways until either side closes.
fn pipe(client: TcpStream, up: TcpStream) -> std::io::Result<()> {
    let (mut c_read, mut u_write) = (client.try_clone()?, up.try_clone()?);
    let (mut u_read, mut c_write) = (up, client);
    let forward = std::thread::spawn(move || {
        let _ = std::io::copy(&mut c_read, &mut u_write);
        let _ = u_write.shutdown(std::net::Shutdown::Both);
    });
    let _ = std::io::copy(&mut u_read, &mut c_write);
    let _ = c_write.shutdown(std::net::Shutdown::Both);
    let _ = forward.join();
    Ok(())
}

/// Security settings for a client of the bed at `addr`, with `change` applied to its
/// properties (a wrong password, another CA).
pub fn security_with(addr: &str, change: impl FnOnce(&mut BTreeMap<String, String>)) -> Security {
    let mut props = properties(addr);
    change(&mut props);
    tidemark::config::ClientSettings::new(addr, &props)
        .expect("bed settings")
        .brokers
        .security()
        .clone()
}
