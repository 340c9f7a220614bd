//! Checks of docker-compose.yml, the Dockerfile and ops/ without a Docker engine: every service has
//! an image or a build, every mounted file exists, host ports don't clash, the Dockerfile's paths
//! exist, the tidemark config used inside validates with `tidemark validate`, Prometheus scrapes
//! the port tidemark serves, and every metric named by an alert rule or a dashboard panel is one
//! tidemark exports; the runtime image installs every shared library the binary links. `promtool
//! check` runs too when it is installed.

use serde_yaml::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn root() -> PathBuf {
    PathBuf::from(ROOT)
}

fn yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn compose() -> Value {
    yaml(&root().join("docker-compose.yml"))
}

fn services(c: &Value) -> Vec<(String, Value)> {
    c["services"]
        .as_mapping()
        .expect("services")
        .iter()
        .map(|(k, v)| (k.as_str().unwrap().to_string(), v.clone()))
        .collect()
}

/// Bind mounts of a service: container path → host path (relative to the repository).
fn bind_mounts(service: &Value) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    for v in service["volumes"].as_sequence().into_iter().flatten() {
        let s = v.as_str().expect("short volume syntax");
        let parts: Vec<&str> = s.split(':').collect();
        if parts[0].starts_with("./") || parts[0].starts_with('/') {
            out.insert(parts[1].to_string(), root().join(parts[0]));
        }
    }
    out
}

/// `tidemark_*` metric names in a PromQL expression, without histogram suffixes.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = expr;
    while let Some(i) = rest.find("tidemark_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let mut name = &tail[..end];
        for suffix in ["_bucket", "_count", "_sum"] {
            if let Some(base) = name.strip_suffix(suffix) {
                if tidemark::metrics::ALL.contains(&base) {
                    name = base;
                }
            }
        }
        out.insert(name.to_string());
        rest = &tail[end..];
    }
    out
}

#[test]
fn every_service_has_an_image_or_a_build_and_every_mount_exists() {
    let c = compose();
    let all = services(&c);
    assert!(
        all.len() >= 6,
        "kafka, init, tidemark, produce, prometheus, grafana"
    );
    let names: BTreeSet<String> = all.iter().map(|(n, _)| n.clone()).collect();
    let named_volumes: BTreeSet<String> = c["volumes"]
        .as_mapping()
        .map(|m| m.keys().map(|k| k.as_str().unwrap().to_string()).collect())
        .unwrap_or_default();
    let mut host_ports = BTreeMap::new();
    for (name, s) in &all {
        assert!(
            s["image"].is_string() || !s["build"].is_null(),
            "service {name} has neither image nor build"
        );
        for (container, host) in bind_mounts(s) {
            assert!(
                host.exists(),
                "service {name} mounts {} at {container}, which does not exist",
                host.display()
            );
        }
        for v in s["volumes"].as_sequence().into_iter().flatten() {
            let src = v.as_str().unwrap().split(':').next().unwrap();
            if !src.starts_with("./") && !src.starts_with('/') {
                assert!(
                    named_volumes.contains(src),
                    "volume {src} of {name} is not declared"
                );
            }
        }
        for p in s["ports"].as_sequence().into_iter().flatten() {
            let p = p.as_str().expect("ports as strings");
            let host = p.rsplit_once(':').map(|(h, _)| h).unwrap_or(p);
            if let Some(other) = host_ports.insert(host.to_string(), name.clone()) {
                panic!("host port {host} is used by {other} and {name}");
            }
        }
        let deps: Vec<String> = match &s["depends_on"] {
            Value::Sequence(seq) => seq
                .iter()
                .map(|d| d.as_str().unwrap().to_string())
                .collect(),
            Value::Mapping(m) => m.keys().map(|d| d.as_str().unwrap().to_string()).collect(),
            _ => vec![],
        };
        for d in deps {
            assert!(names.contains(&d), "{name} depends on unknown service {d}");
        }
    }
    // The demo's Kafka is KRaft with single-replica internal topics.
    let kafka = &c["services"]["kafka"]["environment"];
    assert_eq!(
        kafka["KAFKA_PROCESS_ROLES"].as_str(),
        Some("broker,controller")
    );
    assert_eq!(
        kafka["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"].as_i64(),
        Some(1)
    );
    assert_eq!(
        kafka["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"].as_i64(),
        Some(1)
    );
    assert_eq!(
        kafka["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"].as_i64(),
        Some(1)
    );
}

#[test]
fn the_dockerfile_paths_exist_and_it_runs_as_non_root() {
    let c = compose();
    for (name, s) in services(&c) {
        if s["build"].is_null() {
            continue;
        }
        let context = root().join(s["build"]["context"].as_str().unwrap_or("."));
        let dockerfile = context.join(s["build"]["dockerfile"].as_str().unwrap_or("Dockerfile"));
        let text = std::fs::read_to_string(&dockerfile)
            .unwrap_or_else(|e| panic!("{name}: {}: {e}", dockerfile.display()));
        let mut stages = 0;
        let mut user = None;
        for line in text.lines().map(str::trim) {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.first().copied() {
                Some("FROM") => stages += 1,
                Some("USER") => user = words.get(1).map(|u| u.to_string()),
                Some("COPY") if !words.iter().any(|w| w.starts_with("--from")) => {
                    for src in &words[1..words.len() - 1] {
                        assert!(
                            context.join(src).exists(),
                            "{}: COPY source {src} does not exist",
                            dockerfile.display()
                        );
                    }
                }
                _ => {}
            }
        }
        assert!(stages >= 2, "the Dockerfile is multi-stage");
        let user = user.expect("the runtime image sets USER");
        assert!(user != "root" && user != "0", "runs as {user}");
    }
}

/// The Debian packages the runtime stage of the Dockerfile installs, and the release it is based
/// on (`debian:<codename>-slim`).
fn runtime_stage() -> (String, BTreeSet<String>) {
    let text = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let last = text.rsplit("\nFROM ").next().unwrap();
    let image = last.split_whitespace().next().unwrap();
    let codename = image
        .strip_prefix("debian:")
        .and_then(|t| t.strip_suffix("-slim"))
        .unwrap_or_else(|| panic!("the runtime stage is debian:<codename>-slim, not {image}"))
        .to_string();
    let install = last
        .split("apt-get install")
        .nth(1)
        .expect("the runtime stage installs packages");
    let packages = install
        .split("&&")
        .next()
        .unwrap()
        .split_whitespace()
        .filter(|w| !w.starts_with('-') && *w != "\\")
        .map(str::to_string)
        .collect();
    (codename, packages)
}

/// Every shared library the release binary links (as `ldd` resolves them on this machine) comes
/// from a package the runtime image installs or one every Debian image has. Checked where this
/// machine runs the runtime image's Debian release, so the package names are the image's.
#[test]
fn the_runtime_image_installs_every_library_the_binary_links() {
    let (codename, installed) = runtime_stage();
    let release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    if !release
        .lines()
        .any(|l| l == format!("VERSION_CODENAME={codename}"))
    {
        eprintln!(
            "not Debian {codename}: the runtime image's package names cannot be checked here"
        );
        return;
    }
    // In every debian:*-slim image.
    const BASE: [&str; 2] = ["libc6", "libgcc-s1"];
    let ldd = Command::new("ldd")
        .arg(env!("CARGO_BIN_EXE_tidemark"))
        .output()
        .expect("ldd");
    let text = String::from_utf8(ldd.stdout).unwrap();
    let mut missing = Vec::new();
    for line in text.lines() {
        let Some(path) = line
            .split("=>")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
        else {
            continue;
        };
        let candidates = [path.to_string(), format!("/usr{path}")];
        let package = candidates
            .iter()
            .find_map(|p| {
                let out = Command::new("dpkg").args(["-S", p]).output().ok()?;
                let found = String::from_utf8(out.stdout).ok()?;
                Some(found.split(':').next()?.to_string()).filter(|p| !p.is_empty())
            })
            .unwrap_or_else(|| panic!("no package holds {path}"));
        if !BASE.contains(&package.as_str()) && !installed.contains(&package) {
            missing.push(format!("{package} (for {path})"));
        }
    }
    assert!(
        missing.is_empty(),
        "the Dockerfile's runtime stage misses {missing:?}"
    );
}

#[test]
fn the_tidemark_config_used_inside_validates() {
    let c = compose();
    let s = &c["services"]["tidemark"];
    let mounts = bind_mounts(s);
    let config = mounts
        .get("/etc/tidemark/pipeline.toml")
        .expect("tidemark mounts its pipeline at /etc/tidemark/pipeline.toml");
    let command = s["command"][0].as_str().unwrap();
    assert!(
        command.contains("--config /etc/tidemark/pipeline.toml"),
        "{command}"
    );
    let mut validate = Command::new(env!("CARGO_BIN_EXE_tidemark"));
    validate.args(["validate", "--config"]).arg(config);
    for (k, v) in s["environment"].as_mapping().unwrap() {
        let k = k.as_str().unwrap();
        if k.starts_with("TIDEMARK__") {
            validate.env(k, v.as_str().unwrap());
        }
    }
    let out = validate.output().unwrap();
    assert!(
        out.status.success(),
        "tidemark validate failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Prometheus scrapes the port tidemark serves, and the health check probes it.
    let text = std::fs::read_to_string(config).unwrap();
    let port = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("address = \"0.0.0.0:"))
        .and_then(|p| p.trim_end_matches('"').parse::<u64>().ok())
        .expect("[metrics] address on 0.0.0.0");
    let prom = yaml(&root().join("ops/prometheus.yml"));
    let job = &prom["scrape_configs"][0];
    assert_eq!(job["dns_sd_configs"][0]["port"].as_u64(), Some(port));
    assert_eq!(
        job["dns_sd_configs"][0]["names"][0].as_str(),
        Some("tidemark")
    );
    let health = format!("{:?}", s["healthcheck"]["test"]);
    assert!(health.contains(&format!(":{port}/readyz")), "{health}");
}

#[test]
fn prometheus_rules_and_dashboards_name_only_exported_metrics() {
    let c = compose();
    let prom_service = &c["services"]["prometheus"];
    let mounts = bind_mounts(prom_service);
    let prom_config = mounts["/etc/prometheus/prometheus.yml"].clone();
    let prom = yaml(&prom_config);
    let mut rule_files = Vec::new();
    for f in prom["rule_files"].as_sequence().unwrap() {
        let inside = f.as_str().unwrap();
        let host = mounts
            .get(inside)
            .unwrap_or_else(|| panic!("rule file {inside} is not mounted into prometheus"));
        rule_files.push(host.clone());
    }
    assert!(!rule_files.is_empty());

    let mut alerts = BTreeSet::new();
    for f in &rule_files {
        let rules = yaml(f);
        for group in rules["groups"].as_sequence().unwrap() {
            for rule in group["rules"].as_sequence().unwrap() {
                let name = rule["alert"].as_str().expect("alert name").to_string();
                let expr = rule["expr"].as_str().expect("expr");
                assert!(
                    rule["annotations"]["summary"].is_string(),
                    "{name} has no summary"
                );
                for m in metric_names(expr) {
                    assert!(
                        tidemark::metrics::ALL.contains(&m.as_str()),
                        "alert {name} uses {m}, which tidemark does not export"
                    );
                }
                alerts.insert(name);
            }
        }
    }
    // The runbook explains every alert.
    let runbook = std::fs::read_to_string(root().join("ops/README.md")).unwrap();
    for a in &alerts {
        assert!(
            runbook.contains(a.as_str()),
            "ops/README.md does not explain {a}"
        );
    }

    // Grafana: the provisioned datasource points at the prometheus service; every panel's
    // metrics exist.
    let grafana = &c["services"]["grafana"];
    let gm = bind_mounts(grafana);
    let ds = yaml(&gm["/etc/grafana/provisioning"].join("datasources/prometheus.yml"));
    assert_eq!(
        ds["datasources"][0]["url"].as_str(),
        Some("http://prometheus:9090")
    );
    let dash_dir = &gm["/var/lib/grafana/dashboards"];
    let mut panels = 0;
    for entry in std::fs::read_dir(dash_dir).unwrap() {
        let path = entry.unwrap().path();
        let dash: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for panel in dash["panels"].as_array().unwrap() {
            panels += 1;
            for t in panel["targets"].as_array().unwrap() {
                let expr = t["expr"].as_str().unwrap();
                let names = metric_names(expr);
                assert!(
                    !names.is_empty(),
                    "panel {} queries no tidemark metric",
                    panel["title"]
                );
                for m in names {
                    assert!(
                        tidemark::metrics::ALL.contains(&m.as_str()),
                        "panel {} uses {m}, which tidemark does not export",
                        panel["title"]
                    );
                }
            }
        }
    }
    assert!(
        panels >= 7,
        "throughput, watermark lag, lateness, panes, commit latency, state, restores"
    );

    // promtool, when installed, checks the rules and the config for real.
    if Command::new("promtool").arg("--version").output().is_ok() {
        let out = Command::new("promtool")
            .arg("check")
            .arg("rules")
            .args(&rule_files)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        let dir = tempfile::tempdir().unwrap();
        let text = std::fs::read_to_string(&prom_config).unwrap().replace(
            "/etc/prometheus/alerts.yml",
            rule_files[0].to_str().unwrap(),
        );
        std::fs::write(dir.path().join("prometheus.yml"), text).unwrap();
        let out = Command::new("promtool")
            .args(["check", "config"])
            .arg(dir.path().join("prometheus.yml"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}
