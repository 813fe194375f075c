//! The `meshlimit` command line: `serve`, `validate`, `explain`, `bucket` and `db init`,
//! their flags and what each command does. `main` only parses, starts logging and
//! dispatches.
//!
//! Without a command it serves, configured by envoyproxy/ratelimit's environment variables
//! if those are set (see [`crate::gocompat`]), so that it can replace that server as it is
//! deployed. Every default comes from [`crate::defaults`].

mod bucket;
mod explain;
mod go_binary;
mod serve;
mod settings;
mod source;
mod tracing;
mod validate;
mod values;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

pub use bucket::{BucketArgs, BucketCommand};
pub use explain::ExplainArgs;
pub use go_binary::started_as_go_binary;
pub use serve::Serve;
pub use source::{DbArgs, PgArgs, SourceArgs};
pub use validate::{db_init, validate};

/// `meshlimit`: one of its commands.
#[derive(Debug, Parser)]
#[command(
    version,
    about = "Global rate-limit service for Envoy and Istio",
    args_override_self = true
)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands; each variant's comment is its `--help` text.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve envoy.service.ratelimit.v3.RateLimitService.
    Serve(Box<Serve>),
    /// Check a config (descriptor files, PostgreSQL rows, or an xDS control plane's
    /// snapshot) without serving; exits non-zero on any problem.
    Validate(Box<SourceArgs>),
    /// Show how a request would be decided: which rule each descriptor matches and why
    /// (or where the walk stops), its bucket and, with --redis-url, the bucket's state in
    /// Redis. Consumes nothing.
    Explain(Box<ExplainArgs>),
    /// Inspect or reset the buckets of one descriptor on a running server, through its
    /// operator port (GET /bucket, POST /bucket/reset).
    #[command(subcommand)]
    Bucket(BucketCommand),
    /// Set up a PostgreSQL config source.
    #[command(subcommand)]
    Db(DbCommand),
}

/// `meshlimit db`: what it does to PostgreSQL.
#[derive(Debug, Subcommand)]
pub enum DbCommand {
    /// Create the config table and the trigger that notifies meshlimit of every insert,
    /// update and delete, so that a plain UPDATE is enough; safe to run twice.
    Init(DbArgs),
}

impl Cli {
    /// Parses `args` (the program name first) with `go_args`, the Go server's settings as
    /// flags: without a command, `serve` is meant; `go_args` go right after `serve`, so
    /// that the command line's own flags override them. Started as the Go binary
    /// ([`started_as_go_binary`]), arguments it does not know are left out and returned,
    /// each named once, for the startup warning; otherwise they are an error. On an
    /// error or `--help`, prints and exits as clap does.
    pub fn parse_with(
        args: impl IntoIterator<Item = OsString>,
        go_args: &[String],
    ) -> (Self, Vec<String>) {
        let args: Vec<OsString> = args.into_iter().collect();
        let go_binary = started_as_go_binary(args.first().map(OsString::as_os_str));
        let args = arguments(args, go_args);
        let parse = |args: &[OsString]| {
            let matches = Self::command().try_get_matches_from(args)?;
            Self::from_arg_matches(&matches)
        };
        let (parsed, left_out) = if go_binary {
            // The program name, the command and the Go settings are never left out.
            let serve = args.get(1).is_some_and(|a| a == "serve");
            let first = if serve { 2 + go_args.len() } else { 2 };
            go_binary::parse_leaving_out_unknown(args, first, parse)
        } else {
            (parse(&args), Vec::new())
        };
        match parsed {
            Ok(cli) => (cli, left_out),
            Err(e) => e.exit(),
        }
    }
}

/// The command line with `serve` made explicit when no command is named, and the Go
/// server's settings placed right after `serve`, so that the command line's own flags
/// override them.
fn arguments(args: impl IntoIterator<Item = OsString>, go: &[String]) -> Vec<OsString> {
    let mut args: Vec<OsString> = args.into_iter().collect();
    let named = args.get(1).and_then(|a| a.to_str()).is_some_and(|a| {
        Cli::command()
            .get_subcommands()
            .any(|c| c.get_name() == a || a == "help")
            || matches!(a, "-h" | "--help" | "-V" | "--version")
    });
    if !named {
        args.insert(1.min(args.len()), "serve".into());
    }
    if args.get(1).and_then(|a| a.to_str()) == Some("serve") {
        let rest = args.split_off(2);
        args.extend(go.iter().map(Into::into));
        args.extend(rest);
    }
    args
}

/// Writes `text` to stdout. A reader that went away (`meshlimit explain … | head`) is
/// not an error of the command: what it did not read is dropped, where `print!` would
/// panic.
pub(crate) fn out(text: impl std::fmt::Display) {
    use std::io::Write;
    let _ = write!(std::io::stdout().lock(), "{text}");
}

/// Prints `meshlimit: <e>` to stderr; the exit code of a command that failed.
pub fn fail(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("meshlimit: {e}");
    ExitCode::FAILURE
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(argv: &[&str], go: &[&str]) -> Vec<String> {
        let go: Vec<String> = go.iter().map(|a| a.to_string()).collect();
        arguments(argv.iter().map(OsString::from), &go)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn no_command_means_serve_and_the_go_settings_come_first() {
        let go = ["--shadow-mode", "--log", "warn"];
        let expected = [
            "meshlimit",
            "serve",
            "--shadow-mode",
            "--log",
            "warn",
            "--log",
            "debug",
        ];
        for argv in [
            &["meshlimit", "--log", "debug"][..],
            &["meshlimit", "serve", "--log", "debug"],
        ] {
            assert_eq!(args(argv, &go), expected, "{argv:?}");
        }
        assert_eq!(
            args(&["meshlimit"], &go),
            ["meshlimit", "serve", "--shadow-mode", "--log", "warn"]
        );
    }

    fn parse(argv: &[&str], go: &[&str]) -> (Cli, Vec<String>) {
        let go: Vec<String> = go.iter().map(|a| a.to_string()).collect();
        Cli::parse_with(argv.iter().map(OsString::from), &go)
    }

    #[test]
    fn started_as_the_go_binary_unknown_arguments_are_left_out_once() {
        let (cli, left_out) = parse(
            &[
                "/bin/ratelimit",
                "--quotaRateLimitServiceAddr=ai-gateway:8081",
                "--log",
                "debug",
                "--extra",
                "value",
                "--extra",
                "--quotaRateLimitServiceAddr=again",
            ],
            &["--shadow-mode"],
        );
        let Command::Serve(serve) = cli.command else {
            panic!("serve expected")
        };
        assert_eq!(serve.log_filter(), "debug");
        assert!(serve.shadow_mode);
        assert_eq!(
            left_out,
            ["--quotaRateLimitServiceAddr", "--extra", "value"]
        );
        // What it knows still runs as given.
        let (cli, left_out) = parse(&["ratelimit", "validate", "--config", "c.yaml"], &[]);
        assert!(matches!(cli.command, Command::Validate(_)));
        assert!(left_out.is_empty());
    }

    #[test]
    fn as_meshlimit_unknown_arguments_are_errors() {
        let argv = arguments(
            ["meshlimit", "--quotaRateLimitServiceAddr=x"].map(OsString::from),
            &[],
        );
        let error = Cli::command().try_get_matches_from(argv).unwrap_err();
        assert_eq!(error.kind(), clap::error::ErrorKind::UnknownArgument);
    }

    #[test]
    fn other_commands_and_help_are_left_alone() {
        let go = ["--shadow-mode"];
        for argv in [
            &["meshlimit", "validate", "--config", "c.yaml"][..],
            &["meshlimit", "--help"],
            &["meshlimit", "-V"],
            &["meshlimit", "help", "serve"],
        ] {
            assert_eq!(args(argv, &go), argv);
        }
    }
}
