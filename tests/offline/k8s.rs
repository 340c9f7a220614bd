//! Checks of the Kubernetes manifests in `ops/k8s/` without a cluster: each built-in resource
//! validates against the Kubernetes schema (`kubernetes-validate`, installed into `.venv` by
//! `scripts/install-deps.sh`), and every name, port, probe path, metric name and environment
//! variable agrees with the binary: the pipeline validates with the StatefulSet's environment, the
//! binary started with that environment serves the probe paths on the port the manifests name, the
//! selectors match the pods, and the autoscaler asks for metrics tidemark exports, bounded by the
//! input partition count.

use serde_yaml::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("ops/k8s")
}

fn yaml(name: &str) -> Value {
    let path = dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The resources the kustomization lists, by kind.
fn resources() -> BTreeMap<String, Value> {
    let k = yaml("kustomization.yaml");
    k["resources"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|r| {
            let v = yaml(r.as_str().unwrap());
            (v["kind"].as_str().unwrap().to_string(), v)
        })
        .collect()
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v:?}"))
}

/// The container's environment as the kubelet would set it in pod `pod`: field references resolved
/// (`metadata.name` only) and `$(VAR)` references to earlier variables expanded.
fn container_env(container: &Value, pod: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for e in container["env"].as_sequence().unwrap() {
        let name = s(&e["name"]).to_string();
        let value = if let Some(v) = e["value"].as_str() {
            let mut v = v.to_string();
            for (k, val) in &out {
                v = v.replace(&format!("$({k})"), val);
            }
            v
        } else {
            assert_eq!(
                e["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
                Some("metadata.name"),
                "{name}: only the pod name is resolved here"
            );
            pod.to_string()
        };
        out.push((name, value));
    }
    out
}

fn labels_match(selector: &Value, labels: &Value) -> bool {
    selector
        .as_mapping()
        .unwrap()
        .iter()
        .all(|(k, v)| labels[k.as_str().unwrap()] == *v)
}

#[test]
fn built_in_resources_validate_against_the_kubernetes_schema() {
    let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/kubernetes-validate");
    assert!(
        bin.exists(),
        "{} is missing: run scripts/install-deps.sh",
        bin.display()
    );
    let k = yaml("kustomization.yaml");
    let mut checked = 0;
    for r in k["resources"].as_sequence().unwrap() {
        let v = yaml(s(r));
        // Custom resources (the Prometheus operator's PodMonitor, KEDA's ScaledObject) have no
        // schema in the validator; the cross-checks below cover them.
        if s(&v["apiVersion"]).contains(".k8s.io") || !s(&v["apiVersion"]).contains('.') {
            let out = Command::new(&bin)
                .args(["--strict", "--quiet"])
                .arg(dir().join(s(r)))
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}: {}{}",
                s(r),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            checked += 1;
        }
    }
    assert!(checked >= 3, "StatefulSet, Service and PodDisruptionBudget");
}

#[test]
fn names_ports_paths_metrics_and_environment_agree_with_the_binary() {
    let r = resources();
    let sts = &r["StatefulSet"];
    let pod = &sts["spec"]["template"];
    let pod_labels = &pod["metadata"]["labels"];
    let container = &pod["spec"]["containers"][0];

    // The pipeline comes from the kustomization's ConfigMap, mounted where the args say.
    let k = yaml("kustomization.yaml");
    let generator = &k["configMapGenerator"][0];
    let file = s(&generator["files"][0]);
    let volume = pod["spec"]["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["configMap"]["name"] == generator["name"])
        .expect("a volume of the pipeline's ConfigMap");
    let mount = container["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["name"] == volume["name"])
        .expect("the ConfigMap is mounted");
    let args: Vec<&str> = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(s)
        .collect();
    let config_path = format!("{}/{file}", s(&mount["mountPath"]));
    assert_eq!(args, ["run", "--config", config_path.as_str()]);

    // Every TIDEMARK__ variable is a field the binary accepts: `tidemark validate` with the pod's
    // environment passes, and the instance id is the pod's name.
    let env = container_env(container, "tidemark-3");
    let pipeline = dir().join(file);
    let mut validate = Command::new(env!("CARGO_BIN_EXE_tidemark"));
    validate.args(["validate", "--config"]).arg(&pipeline);
    for (k, v) in &env {
        validate.env(k, v);
    }
    let out = validate.output().unwrap();
    assert!(
        out.status.success(),
        "tidemark validate with the StatefulSet's environment:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let overrides: Vec<(String, String)> = env
        .iter()
        .filter(|(k, _)| k.starts_with("TIDEMARK__"))
        .cloned()
        .collect();
    let text = std::fs::read_to_string(&pipeline).unwrap();
    let (spec, _) = tidemark::config::parse_raw(&text, overrides)
        .unwrap()
        .validate()
        .unwrap();
    let kafka = spec.kafka.as_ref().unwrap();
    assert_eq!(kafka.instance_id, "tidemark-3");
    assert!(!kafka.static_membership, "members are dynamic by default");

    // The state directory lies on the pod's volume, one per pod from the claim template.
    let state_mount = container["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| kafka.state_dir.starts_with(s(&m["mountPath"])))
        .expect("state_dir is on a mounted volume");
    assert_eq!(
        sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"],
        state_mount["name"]
    );

    // SIGTERM commits the open transaction: the grace period outlasts a cycle and the timeout.
    let grace_ms = pod["spec"]["terminationGracePeriodSeconds"]
        .as_i64()
        .unwrap()
        * 1000;
    assert!(grace_ms > kafka.transaction_timeout + kafka.commit_interval);

    // The metrics port: the one the pipeline serves, named by the probes, the Service and the
    // PodMonitor.
    let port = spec.metrics_address.expect("[metrics] address").port();
    let ports = container["ports"].as_sequence().unwrap();
    let named = ports
        .iter()
        .find(|p| p["containerPort"].as_u64() == Some(port as u64))
        .expect("the container exposes the metrics port");
    let port_name = s(&named["name"]);
    let ready = &container["readinessProbe"]["httpGet"];
    let live = &container["livenessProbe"]["httpGet"];
    assert_eq!(s(&ready["port"]), port_name);
    assert_eq!(s(&live["port"]), port_name);
    let svc = &r["Service"];
    assert_eq!(svc["spec"]["clusterIP"].as_str(), Some("None"));
    assert_eq!(sts["spec"]["serviceName"], svc["metadata"]["name"]);
    assert_eq!(s(&svc["spec"]["ports"][0]["targetPort"]), port_name);
    let pm = &r["PodMonitor"];
    let endpoint = &pm["spec"]["podMetricsEndpoints"][0];
    assert_eq!(s(&endpoint["port"]), port_name);

    // Every selector picks the StatefulSet's pods.
    for (what, selector) in [
        ("StatefulSet", &sts["spec"]["selector"]["matchLabels"]),
        ("Service", &svc["spec"]["selector"]),
        (
            "PodDisruptionBudget",
            &r["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"],
        ),
        ("PodMonitor", &pm["spec"]["selector"]["matchLabels"]),
    ] {
        assert!(labels_match(selector, pod_labels), "{what}'s selector");
    }

    // The autoscaler scales this StatefulSet on metrics tidemark exports, never beyond the input
    // partition count, with the pod label the query filters on matching the pod names.
    let so = &r["ScaledObject"];
    assert_eq!(s(&so["spec"]["scaleTargetRef"]["kind"]), "StatefulSet");
    assert_eq!(
        so["spec"]["scaleTargetRef"]["name"],
        sts["metadata"]["name"]
    );
    let partitions: i64 = s(&so["metadata"]["annotations"]["tidemark.io/input-partitions"])
        .parse()
        .unwrap();
    let max = so["spec"]["maxReplicaCount"].as_i64().unwrap();
    assert!((1..=partitions).contains(&max), "maxReplicaCount {max}");
    assert!(so["spec"]["minReplicaCount"].as_i64().unwrap() >= 1);
    let query = s(&so["spec"]["triggers"][0]["metadata"]["query"]);
    let mut named_metrics = 0;
    for word in query.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if word.starts_with("tidemark_") {
            assert!(
                tidemark::metrics::ALL.contains(&word),
                "{word} is not a tidemark metric"
            );
            named_metrics += 1;
        }
    }
    assert!(named_metrics > 0, "{query}");
    assert!(query.contains(tidemark::metrics::RECOMMENDED_MEMBERS));
    assert!(query.contains(&format!("{}-[0-9]+", s(&sts["metadata"]["name"]))));

    // The binary, started with the pod's environment (a broker that does not answer, a local
    // port and state directory), serves the probe paths and the metrics path the manifests name.
    let state = tempfile::tempdir().unwrap();
    let local = common::free_port();
    // The args' config path is the pod's; the binary runs on the repository's copy.
    let mut run = Command::new(env!("CARGO_BIN_EXE_tidemark"));
    run.args(["run", "--config"]).arg(&pipeline);
    for (k, v) in &env {
        run.env(k, v);
    }
    run.env("TIDEMARK__KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")
        .env("TIDEMARK__KAFKA__STATE_DIR", state.path())
        .env("TIDEMARK__METRICS__ADDRESS", format!("127.0.0.1:{local}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = run.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = None;
    while Instant::now() < deadline {
        if let Some(h) = common::http_get(local, s(&live["path"])) {
            got = Some(h);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let served = (
        got.map(|(code, _)| code),
        common::http_get(local, s(&ready["path"])).map(|(code, _)| code),
        common::http_get(local, s(&endpoint["path"])).map(|(code, _)| code),
    );
    child.kill().unwrap();
    child.wait().unwrap();
    // Alive, not ready (no broker), metrics served.
    assert_eq!(served, (Some(200), Some(503), Some(200)));
}
