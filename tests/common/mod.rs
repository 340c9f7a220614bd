//! Test support: a real Kafka-protocol broker (Tansu, installed by `scripts/install-broker.sh`)
//! started on a free loopback port for the life of a test run, and Kafka helpers.

#![allow(dead_code)]

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::ClientConfig;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running broker; stopped when dropped.
pub struct Broker {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

impl Broker {
    /// Starts Tansu with memory storage on a free port and waits until it accepts connections.
    pub fn start() -> Broker {
        let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/tansu");
        assert!(
            bin.exists(),
            "{} is missing: run scripts/install-deps.sh (scripts/test.sh does)",
            bin.display()
        );
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let url = format!("tcp://{addr}");
        let child = Command::new(bin)
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ])
            .args(["--storage-engine", "memory://tansu/"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tansu");
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "broker did not start on {addr}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Broker { child, addr }
    }

    /// Creates a topic explicitly (auto-created topics lose writes on this broker).
    pub fn create_topic(&self, name: &str, partitions: i32) {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.addr)
            .create()
            .unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
        let res = rt
            .block_on(admin.create_topics(
                [&topic],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
            ))
            .unwrap();
        for r in res {
            r.unwrap_or_else(|(t, e)| panic!("create topic {t}: {e:?}"));
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
