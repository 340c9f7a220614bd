//! How a command that is not a pipeline member reaches the cluster: `--bootstrap-servers` and,
//! for a secured cluster, `--command-config`, a file of librdkafka properties as Kafka's own
//! command-line tools take.

use crate::config::ClientSettings;
use anyhow::Context;
use clap::Args;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The cluster a command reaches.
#[derive(Debug, Args)]
pub struct Connection {
    /// Bootstrap servers.
    #[arg(long, env = "TIDEMARK_BOOTSTRAP_SERVERS")]
    bootstrap_servers: String,
    /// A file of librdkafka properties (`name=value` lines, `#` comments) for a secured
    /// cluster: security.protocol, sasl.mechanism, sasl.username, sasl.password,
    /// ssl.ca.location and the like. A value may be `${env:NAME}` or `${file:PATH}`.
    #[arg(long, env = "TIDEMARK_COMMAND_CONFIG")]
    command_config: Option<PathBuf>,
}

impl Connection {
    /// The settings: the bootstrap servers with the file's properties, checked.
    pub fn settings(&self) -> anyhow::Result<ClientSettings> {
        let properties = match &self.command_config {
            Some(path) => read_properties(path)?,
            None => BTreeMap::new(),
        };
        Ok(ClientSettings::new(&self.bootstrap_servers, &properties)?)
    }
}

/// Reads a properties file: `name=value` (or `name: value`) per line, blank lines and lines
/// starting with `#` or `!` skipped.
fn read_properties(path: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let Some((name, value)) = line.split_once(['=', ':']) else {
            anyhow::bail!(
                "{}:{}: expected name=value (the value is not shown)",
                path.display(),
                i + 1
            );
        };
        out.insert(name.trim().to_string(), value.trim().to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_properties_file_is_read_and_a_bad_line_named_without_its_value() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("client.properties");
        std::fs::write(
            &path,
            "# secured\nsecurity.protocol=SASL_SSL\n\nsasl.mechanism: SCRAM-SHA-512\n",
        )
        .unwrap();
        let p = read_properties(&path).unwrap();
        assert_eq!(p["security.protocol"], "SASL_SSL");
        assert_eq!(p["sasl.mechanism"], "SCRAM-SHA-512");
        std::fs::write(&path, "sasl.passwordhunter2\n").unwrap();
        let err = read_properties(&path).unwrap_err().to_string();
        assert!(err.contains(":1:") && !err.contains("hunter2"), "{err}");
    }
}
