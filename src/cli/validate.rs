//! `meshlimit validate`: load descriptor files as `serve` would, and say what is wrong.

use std::path::Path;
use std::process::ExitCode;

use crate::config;

/// Loads `path`; prints a one-line summary, or every problem and their count to stderr
/// (then exits non-zero).
pub fn validate(path: &Path) -> ExitCode {
    match config::load(path) {
        Ok(config) => {
            let rules = config.rules().len();
            println!(
                "{}: OK ({} domains, {rules} rules)",
                path.display(),
                config.domains().len()
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for e in &errors {
                eprintln!("{e}");
            }
            eprintln!("{}: {} problem(s)", path.display(), errors.len());
            ExitCode::FAILURE
        }
    }
}
