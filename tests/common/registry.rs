//! A small Confluent-compatible Schema Registry served by the tests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

/// A Confluent-compatible registry: GET /subjects, GET /schemas/ids/{id}, POST
/// /subjects/{s}/versions (same schema text → same id).
pub struct FakeRegistry {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Registered schema texts; id = index + 1.
    pub schemas: Arc<Mutex<Vec<String>>>,
    /// When set, connections are closed without an answer.
    pub down: Arc<std::sync::atomic::AtomicBool>,
}

impl FakeRegistry {
    /// Starts serving; `initial` schemas get ids 1, 2, ...
    pub fn start(initial: Vec<String>) -> FakeRegistry {
        FakeRegistry::start_with(initial, None)
    }

    /// Starts serving, answering 401 to a request without the basic authentication of `auth`
    /// (user, password).
    pub fn start_with(initial: Vec<String>, auth: Option<(&str, &str)>) -> FakeRegistry {
        let wanted = auth.map(|(u, p)| {
            format!(
                "authorization: basic {}",
                openssl::base64::encode_block(format!("{u}:{p}").as_bytes())
            )
            .to_ascii_lowercase()
        });
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let schemas = Arc::new(Mutex::new(initial));
        let shared = schemas.clone();
        let down = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let is_down = down.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                if is_down.load(std::sync::atomic::Ordering::SeqCst) {
                    continue;
                }
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let mut len = 0;
                let mut authorized = wanted.is_none();
                loop {
                    let mut h = String::new();
                    reader.read_line(&mut h).unwrap();
                    if h.trim().is_empty() {
                        break;
                    }
                    if wanted.as_deref() == Some(h.trim().to_ascii_lowercase().as_str()) {
                        authorized = true;
                    }
                    if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap();
                    }
                }
                let mut body = vec![0; len];
                reader.read_exact(&mut body).unwrap();
                let parts: Vec<&str> = line.split_whitespace().collect();
                let (code, out) = match (parts[0], parts[1]) {
                    _ if !authorized => (401, r#"{"error_code":401}"#.to_string()),
                    ("GET", "/subjects") => (200, "[]".to_string()),
                    ("GET", p) if p.starts_with("/schemas/ids/") => {
                        let id: usize = p["/schemas/ids/".len()..].parse().unwrap();
                        match shared.lock().unwrap().get(id.wrapping_sub(1)) {
                            Some(s) => (200, serde_json::json!({ "schema": s }).to_string()),
                            None => (404, r#"{"error_code":40403}"#.to_string()),
                        }
                    }
                    ("POST", p) if p.starts_with("/subjects/") => {
                        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                        let s = v["schema"].as_str().unwrap().to_string();
                        let mut all = shared.lock().unwrap();
                        let id = match all.iter().position(|x| *x == s) {
                            Some(i) => i + 1,
                            None => {
                                all.push(s);
                                all.len()
                            }
                        };
                        (200, format!("{{\"id\":{id}}}"))
                    }
                    _ => (404, "{}".to_string()),
                };
                let mut w = stream;
                let _ = write!(
                    w,
                    "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{out}",
                    out.len()
                );
            }
        });
        FakeRegistry { url, schemas, down }
    }
}
