//! The ops stack run for real: `scripts/stack.sh up` starts the topology of docker-compose.yml
//! without Docker (a broker, three members with instance ids, the load generator, Prometheus with
//! ops/prometheus.yml and ops/alerts.yml), and Prometheus' HTTP API must show that every member is
//! scraped, every alert rule loads and evaluates without error, every Grafana dashboard query
//! answers with data, and that killing a member puts the member-down alert into pending or firing.

use crate::common;

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Stops the stack however the test ends.
struct Stack {
    dir: PathBuf,
}

impl Drop for Stack {
    fn drop(&mut self) {
        let _ = Command::new(format!("{ROOT}/scripts/stack.sh"))
            .arg("down")
            .arg(&self.dir)
            .status();
    }
}

/// Percent-encodes a query-string value.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// GETs `path` from Prometheus' API and returns its `data`, or why not.
fn api(port: u16, path: &str) -> Result<Value, String> {
    let (status, body) =
        tidemark::http::request(&format!("http://127.0.0.1:{port}"), "GET", path, "", "")
            .map_err(|e| e.to_string())?;
    let v: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
    if status != 200 || v["status"] != "success" {
        return Err(format!("{path}: {status} {body}"));
    }
    Ok(v["data"].clone())
}

fn query(port: u16, expr: &str) -> Result<Vec<Value>, String> {
    let data = api(port, &format!("/api/v1/query?query={}", encode(expr)))?;
    Ok(data["result"].as_array().cloned().unwrap_or_default())
}

/// Retries `check` until it returns `Ok` or `within` passes; then fails with its last message.
fn eventually<T>(what: &str, within: Duration, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + within;
    loop {
        match check() {
            Ok(v) => return v,
            Err(e) if Instant::now() > deadline => panic!("{what}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

/// Every PromQL expression of the Grafana dashboard.
fn dashboard_queries() -> Vec<String> {
    let text = std::fs::read_to_string(format!("{ROOT}/ops/grafana/dashboards/tidemark.json"))
        .expect("dashboard");
    let d: Value = serde_json::from_str(&text).expect("dashboard JSON");
    let mut out = Vec::new();
    for panel in d["panels"].as_array().expect("panels") {
        for t in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = t["expr"].as_str() {
                out.push(expr.to_string());
            }
        }
    }
    out
}

/// Alert names in ops/alerts.yml.
fn alert_names() -> Vec<String> {
    let text = std::fs::read_to_string(format!("{ROOT}/ops/alerts.yml")).expect("alerts");
    let v: serde_yaml::Value = serde_yaml::from_str(&text).expect("alerts YAML");
    let mut out = Vec::new();
    for g in v["groups"].as_sequence().expect("groups") {
        for r in g["rules"].as_sequence().expect("rules") {
            out.push(r["alert"].as_str().expect("alert name").to_string());
        }
    }
    out
}

#[test]
fn the_stack_is_scraped_its_rules_and_dashboard_work_and_a_killed_member_alerts() {
    let dir = tempfile::tempdir().unwrap();
    let prom = common::free_port();
    let members = [
        common::free_port(),
        common::free_port(),
        common::free_port(),
    ];
    let ports = members.map(|p| p.to_string()).join(" ");
    let _stack = Stack {
        dir: dir.path().to_path_buf(),
    };
    let up = Command::new(format!("{ROOT}/scripts/stack.sh"))
        .arg("up")
        .arg(dir.path())
        .env("TIDEMARK_BIN", env!("CARGO_BIN_EXE_tidemark"))
        .env("STACK_PROMETHEUS_PORT", prom.to_string())
        .env("STACK_METRICS_PORTS", &ports)
        .env("STACK_SCRAPE_INTERVAL", "1s")
        .env("STACK_EVALUATION_INTERVAL", "1s")
        .output()
        .expect("run scripts/stack.sh");
    assert!(
        up.status.success(),
        "stack.sh up failed:\n{}\n{}",
        String::from_utf8_lossy(&up.stdout),
        String::from_utf8_lossy(&up.stderr)
    );

    // 1. All three members are scraped.
    eventually("three members up", Duration::from_secs(60), || {
        let data = api(prom, "/api/v1/targets")?;
        let targets = data["activeTargets"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let up: Vec<String> = targets
            .iter()
            .filter(|t| t["labels"]["job"] == "tidemark" && t["health"] == "up")
            .map(|t| t["labels"]["instance"].as_str().unwrap_or("").to_string())
            .collect();
        let want: Vec<String> = members.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        if want.iter().all(|w| up.contains(w)) && targets.len() == 3 {
            Ok(())
        } else {
            Err(format!("targets: {targets:?}"))
        }
    });

    // 2. Every alert rule is loaded and evaluates without error.
    let names = alert_names();
    assert!(names.contains(&"TidemarkDown".to_string()));
    eventually("rules loaded and healthy", Duration::from_secs(30), || {
        let data = api(prom, "/api/v1/rules")?;
        let rules: Vec<Value> = data["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect();
        let loaded: Vec<&str> = rules.iter().filter_map(|r| r["name"].as_str()).collect();
        let bad: Vec<&Value> = rules
            .iter()
            .filter(|r| {
                r["health"] != "ok" || r["lastError"].as_str().is_some_and(|e| !e.is_empty())
            })
            .collect();
        if names.iter().all(|n| loaded.contains(&n.as_str())) && bad.is_empty() {
            Ok(())
        } else {
            Err(format!("loaded {loaded:?}, unhealthy {bad:?}"))
        }
    });

    // 3. The watermark-lag and records series exist, and every dashboard query answers with data.
    let mut queries = vec![
        "tidemark_watermark_lag_seconds".to_string(),
        "tidemark_records_in_total".to_string(),
    ];
    queries.extend(dashboard_queries());
    assert!(queries.len() > 10, "the dashboard has its panels");
    eventually(
        "every dashboard query answers",
        Duration::from_secs(120),
        || {
            let mut empty = Vec::new();
            for q in &queries {
                // An error (bad PromQL) fails at once: no wait makes it right.
                let result = query(prom, q).unwrap_or_else(|e| panic!("query {q}: {e}"));
                if result.is_empty() {
                    empty.push(q.as_str());
                }
            }
            if empty.is_empty() {
                Ok(())
            } else {
                Err(format!("no data yet for {empty:?}"))
            }
        },
    );

    // 4. Killing a member makes its member-down alert pending (then firing after `for`).
    let pid = std::fs::read_to_string(dir.path().join("member-1.pid")).unwrap();
    let killed = Command::new("kill")
        .args(["-9", pid.trim()])
        .status()
        .unwrap();
    assert!(killed.success());
    let instance = format!("127.0.0.1:{}", members[0]);
    let state = eventually(
        "TidemarkDown for the killed member",
        Duration::from_secs(60),
        || {
            let data = api(prom, "/api/v1/alerts")?;
            data["alerts"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|a| {
                    a["labels"]["alertname"] == "TidemarkDown"
                        && a["labels"]["instance"] == instance.as_str()
                })
                .and_then(|a| a["state"].as_str().map(str::to_string))
                .filter(|s| s == "pending" || s == "firing")
                .ok_or_else(|| format!("alerts: {data}"))
        },
    );
    eprintln!("TidemarkDown for {instance}: {state}");
    // The members still running are not alerted on.
    let data = api(prom, "/api/v1/alerts").unwrap();
    for a in data["alerts"].as_array().into_iter().flatten() {
        if a["labels"]["alertname"] == "TidemarkDown" {
            assert_eq!(a["labels"]["instance"], instance.as_str(), "{a}");
        }
    }
}
