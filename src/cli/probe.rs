//! `tidemark probe`: a container health check, or a pipeline's access to its cluster checked
//! before a run.

use crate::kafka::access::{self, Operation, Verdict};
use crate::kafka::raw_log::RawClient;
use clap::Args;
use std::path::PathBuf;

/// GET an http:// URL and exit 0 on status 200 (a container health check: the runtime image has
/// no curl); or, with `--config`, check that a pipeline can reach its cluster (TLS, SASL) and
/// may do what it needs on each topic and its group, as far as the brokers report.
#[derive(Debug, Args)]
pub struct Probe {
    /// For example `http://127.0.0.1:9464/readyz`.
    #[arg(long, required_unless_present = "config", conflicts_with = "config")]
    url: Option<String>,
    /// A pipeline file (TOML) whose cluster and permissions to check.
    #[arg(long)]
    config: Option<PathBuf>,
}

impl Probe {
    /// Exit status 0 when the URL answers 200 or every check passes, 1 otherwise.
    pub fn execute(self) -> anyhow::Result<i32> {
        match (self.url, self.config) {
            (Some(url), _) => Ok(health(&url)),
            (None, Some(config)) => access_of(&config),
            (None, None) => unreachable!("clap requires --url or --config"),
        }
    }
}

/// The health check.
fn health(url: &str) -> i32 {
    match crate::http::request(url, "GET", "", "", "") {
        Ok((200, _)) => 0,
        Ok((code, _)) => {
            eprintln!("{url}: status {code}");
            1
        }
        Err(e) => {
            eprintln!("{url}: {e}");
            1
        }
    }
}

/// Connects as the pipeline's members would, then prints the verdict on each resource.
fn access_of(config: &std::path::Path) -> anyhow::Result<i32> {
    let (spec, _) = crate::config::load(config, &crate::sink::sections())
        .map_err(|e| anyhow::anyhow!("{}: {e}", config.display()))?;
    let k = spec
        .kafka
        .ok_or_else(|| anyhow::anyhow!("{}: no [kafka] section", config.display()))?;
    let security = k.brokers.security();
    if let Err(e) = RawClient::bootstrap(&k.brokers) {
        println!("connect {}: FAILED: {e}", k.brokers);
        return Ok(1);
    }
    let who = security
        .sasl
        .as_ref()
        .map(|s| format!(" as {} ({})", s.username, s.mechanism.name()))
        .unwrap_or_default();
    println!("connect {}: ok, {}{who}", k.brokers, security.protocol);
    use Operation::*;
    let mut topics: Vec<(String, Vec<Operation>)> = k
        .input_topics
        .iter()
        .map(|t| (t.clone(), vec![Describe, Read]))
        .collect();
    for t in [&k.output_topic, &k.dead_letter_topic] {
        topics.push((t.clone(), vec![Describe, Write]));
    }
    let mut own = vec![&k.changelog_topic, &k.claims_topic];
    if k.repartition {
        own.extend([&k.repartition_topic, &k.offsets_topic]);
    }
    for t in own {
        let mut needed = vec![Describe, Read, Write];
        if *t == k.repartition_topic {
            needed.push(Delete);
        }
        topics.push((t.clone(), needed));
    }
    let verdicts = access::topics(&k.brokers, &topics)?;
    let mut failed = false;
    for ((name, needed), verdict) in topics.iter().zip(&verdicts) {
        if *verdict == Verdict::Absent && k.input_topics.contains(name) {
            println!("topic {name}: MISSING: an input topic must exist");
            failed = true;
            continue;
        }
        failed |= report(&format!("topic {name}"), needed, verdict);
    }
    let needed = [Describe, Read];
    let group = format!("group {}", k.application_id);
    match access::group(&k.brokers, &k.application_id, &needed) {
        Ok(verdict) => failed |= report(&group, &needed, &verdict),
        Err(e) => println!("{group}: could not be described ({e})"),
    }
    println!(
        "transactional ids {}-*: not checked (only a transaction shows it): grant DESCRIBE and \
         WRITE by prefix",
        k.application_id
    );
    Ok(i32::from(failed))
}

/// Prints one resource's verdict; whether it fails the probe.
fn report(what: &str, needed: &[Operation], verdict: &Verdict) -> bool {
    let names = |ops: &[Operation]| ops.iter().map(|o| o.name()).collect::<Vec<_>>().join(", ");
    match verdict {
        Verdict::Allowed => {
            println!("{what}: ok ({})", names(needed));
            false
        }
        Verdict::Missing(ops) => {
            println!("{what}: MISSING {}", names(ops));
            true
        }
        Verdict::Denied => {
            println!("{what}: DENIED (not even DESCRIBE)");
            true
        }
        Verdict::Absent => {
            println!("{what}: does not exist yet (creating it needs CREATE)");
            false
        }
        Verdict::NotReported => {
            println!(
                "{what}: the broker does not report permissions (needs {})",
                names(needed)
            );
            false
        }
    }
}
