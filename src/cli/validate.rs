//! `meshlimit validate`: load a config as `serve` would, and say what is wrong; and
//! `meshlimit db init`, which prepares a PostgreSQL source.

use std::process::ExitCode;

use super::source::{DbArgs, SourceArgs};
use super::{fail, out};
use crate::source::postgres;

/// Loads the config `args` name; prints a one-line summary, or every problem and their
/// count to stderr (then exits non-zero).
pub async fn validate(args: &SourceArgs) -> ExitCode {
    let Some(source) = args.source() else {
        return fail("validate needs --config PATH_OR_URL or --xds-server ADDRESS");
    };
    let name = source.describe();
    match source.load().await {
        Ok(loaded) => {
            let rules = loaded.config.rules().len();
            out(format_args!(
                "{name}: OK ({} domains, {rules} rules)\n",
                loaded.config.domains().len()
            ));
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for e in &errors {
                eprintln!("{e}");
            }
            eprintln!("{name}: {} problem(s)", errors.len());
            ExitCode::FAILURE
        }
    }
}

/// Creates the PostgreSQL table and trigger `args` name (see [`postgres::init`]).
pub async fn db_init(args: &DbArgs) -> ExitCode {
    let options = args.pg.options(&args.config);
    match postgres::init(&options).await {
        Ok(()) => {
            out(format_args!(
                "{}: table {} and its NOTIFY trigger on channel {} are ready\n",
                options.describe(),
                options.table,
                options.channel
            ));
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}
