//! The `tidemark` binary.

#![forbid(unsafe_code)]

use clap::Parser;

fn main() {
    let cli = tidemark::cli::Cli::parse();
    tidemark::cli::init_logging(cli.log_format);
    match tidemark::cli::run(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(1);
        }
    }
}
