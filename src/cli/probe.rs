//! `tidemark probe`: a container health check.

use clap::Args;

/// GET an http:// URL and exit 0 on status 200 (a container health check: the runtime image has
/// no curl).
#[derive(Debug, Args)]
pub struct Probe {
    /// For example `http://127.0.0.1:9464/readyz`.
    #[arg(long)]
    url: String,
}

impl Probe {
    /// Exit status 0 when the URL answers 200, 1 otherwise.
    pub fn execute(self) -> anyhow::Result<i32> {
        match crate::http::request(&self.url, "GET", "", "", "") {
            Ok((200, _)) => Ok(0),
            Ok((code, _)) => {
                eprintln!("{}: status {code}", self.url);
                Ok(1)
            }
            Err(e) => {
                eprintln!("{}: {e}", self.url);
                Ok(1)
            }
        }
    }
}
