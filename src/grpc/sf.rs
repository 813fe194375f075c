//! Just enough of RFC 9651 (Structured Field Values for HTTP) to write the IETF draft's
//! `RateLimit-Policy` and `RateLimit` fields: Strings and Integers. Nothing here parses.

/// The largest Integer a structured field can carry (15 decimal digits).
pub(super) const MAX_INTEGER: u64 = 999_999_999_999_999;

/// `n` as an Integer, capped at [`MAX_INTEGER`]: a year's window times a large
/// `unit_multiplier` would otherwise make the whole field unparseable.
pub(super) fn integer(n: u64) -> u64 {
    n.min(MAX_INTEGER)
}

/// `text` with every character a String cannot hold (controls, DEL, anything beyond
/// ASCII) replaced by `_`: what [`push_string`] would quote, so that two names can be
/// compared as they will be sent.
pub(super) fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if is_printable(c) { c } else { '_' })
        .collect()
}

/// Appends `text` to `out` as a String: in double quotes, `"` and `\` escaped with `\`,
/// anything else a String cannot hold replaced as by [`printable`]. A name from the config
/// therefore can neither end the field (no CR or LF reaches the header) nor make it
/// unparseable.
pub(super) fn push_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if is_printable(c) => out.push(c),
            _ => out.push('_'),
        }
    }
    out.push('"');
}

/// Whether a String may hold `c` (RFC 9651 §3.3.3: %x20-7E).
fn is_printable(c: char) -> bool {
    matches!(c, ' '..='~')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(text: &str) -> String {
        let mut out = String::new();
        push_string(&mut out, text);
        out
    }

    #[test]
    fn strings_are_quoted_and_escaped() {
        assert_eq!(string("daily"), r#""daily""#);
        assert_eq!(string(""), r#""""#);
        assert_eq!(string(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(string("a, b;q=1"), r#""a, b;q=1""#);
    }

    #[test]
    fn what_a_string_cannot_hold_becomes_an_underscore() {
        assert_eq!(string("x\r\nSet-Cookie: a=b"), r#""x__Set-Cookie: a=b""#);
        assert_eq!(string("caf\u{e9}\t\u{7f}"), r#""caf___""#);
        assert_eq!(printable("caf\u{e9}\n"), "caf__");
        assert_eq!(printable(r#"a"b"#), r#"a"b"#);
    }

    #[test]
    fn integers_are_capped_at_fifteen_digits() {
        assert_eq!(integer(86_400), 86_400);
        assert_eq!(integer(u64::MAX), MAX_INTEGER);
        assert_eq!(MAX_INTEGER.to_string().len(), 15);
    }
}
