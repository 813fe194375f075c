//! The Go binary's command line: envoyproxy/ratelimit reads no arguments at all, so the
//! deployments that run it pass some it never looks at (Envoy AI Gateway adds
//! `--quotaRateLimitServiceAddr=…`). Started under its name, meshlimit takes what it
//! knows and leaves out the rest, so that those deployments run it unchanged.

use std::ffi::{OsStr, OsString};
use std::path::Path;

use clap::error::{ContextKind, ContextValue, ErrorKind};

/// The Go binary's name, which its image runs as `/bin/ratelimit`.
const GO_BINARY: &str = "ratelimit";

/// Whether `argv0` names the Go binary (`ratelimit`, `/bin/ratelimit`, …).
pub fn started_as_go_binary(argv0: Option<&OsStr>) -> bool {
    argv0
        .and_then(|a| Path::new(a).file_name())
        .is_some_and(|name| name == GO_BINARY)
}

/// Parses `args` with `parse`, leaving out each argument `parse` does not know until it
/// succeeds or fails otherwise; returns its result and what was left out, each named
/// once (a flag without its `=value`). Only arguments after `first` (the program name and
/// the command) are left out.
pub(super) fn parse_leaving_out_unknown<T>(
    mut args: Vec<OsString>,
    first: usize,
    parse: impl Fn(&[OsString]) -> Result<T, clap::Error>,
) -> (Result<T, clap::Error>, Vec<String>) {
    let mut left_out: Vec<String> = Vec::new();
    loop {
        let error = match parse(&args) {
            Ok(parsed) => return (Ok(parsed), left_out),
            Err(e) => e,
        };
        let Some(at) = unknown_position(&error, &args, first) else {
            return (Err(error), left_out);
        };
        let name = args.remove(at).to_string_lossy().into_owned();
        let name = match name.split_once('=') {
            Some((flag, _)) if flag.starts_with('-') => flag.to_string(),
            _ => name,
        };
        if !left_out.contains(&name) {
            left_out.push(name);
        }
    }
}

/// Where in `args` (at `first` or after) the argument lies that `error` says is unknown.
fn unknown_position(error: &clap::Error, args: &[OsString], first: usize) -> Option<usize> {
    if error.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(unknown)) = error.get(ContextKind::InvalidArg) else {
        return None;
    };
    let with_value = format!("{unknown}=");
    args.iter().enumerate().skip(first).find_map(|(at, arg)| {
        let arg = arg.to_str()?;
        (arg == unknown || arg.starts_with(&with_value)).then_some(at)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_go_binary_name_counts() {
        for (argv0, expected) in [
            ("/bin/ratelimit", true),
            ("ratelimit", true),
            ("./target/release/ratelimit", true),
            ("/usr/local/bin/meshlimit", false),
            ("ratelimit-server", false),
        ] {
            assert_eq!(
                started_as_go_binary(Some(OsStr::new(argv0))),
                expected,
                "{argv0}"
            );
        }
        assert!(!started_as_go_binary(None));
    }
}
