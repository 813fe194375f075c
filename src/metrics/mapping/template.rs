//! A glob mapping's `name` and label values: text with `$n` or `${n}`, the `n`th `*` of the
//! match, as statsd_exporter's glob formatter reads them.
//!
//! A reference is `$`, an optional `{`, the longest run of ASCII letters, digits, `_` and
//! `$`, and an optional `}`. A run that is a number from 1 to the match's count of `*`
//! is that capture; any other (`$0`, `$4` of a two-`*` match, `$1_x`, a name) is replaced
//! by nothing. (Regex mappings expand their own way, as Go's `Regexp.Expand`: see
//! [`super::Rule`].)

/// One part of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    /// Text written as is.
    Text(String),
    /// The capture at this index (0 for `$1`).
    Capture(usize),
}

/// A template parsed once, at load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Template(Vec<Part>);

impl Template {
    /// `text` as a template over `captures` captures.
    pub(crate) fn parse(text: &str, captures: usize) -> Template {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(at) = rest.find('$') {
            literal.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            let body = after.strip_prefix('{').unwrap_or(after);
            let run = body
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$'))
                .unwrap_or(body.len());
            if run == 0 {
                // Not a reference: the `$` is text.
                literal.push('$');
                rest = after;
                continue;
            }
            let name = &body[..run];
            let tail = &body[run..];
            rest = tail.strip_prefix('}').unwrap_or(tail);
            if let Some(index) = capture_index(name, captures) {
                if !literal.is_empty() {
                    parts.push(Part::Text(std::mem::take(&mut literal)));
                }
                parts.push(Part::Capture(index));
            }
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        Template(parts)
    }

    /// The text with `captures` put in.
    pub(crate) fn format(&self, captures: &[&str]) -> String {
        let mut out = String::new();
        for part in &self.0 {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Capture(index) => out.push_str(captures.get(*index).copied().unwrap_or("")),
            }
        }
        out
    }
}

/// The capture a reference's `name` stands for: a decimal number from 1 to `captures`.
fn capture_index(name: &str, captures: usize) -> Option<usize> {
    if !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: usize = name.parse().ok()?;
    (1..=captures).contains(&n).then(|| n - 1)
}

#[cfg(test)]
mod tests {
    use super::Template;

    fn format(template: &str, captures: &[&str]) -> String {
        Template::parse(template, captures.len()).format(captures)
    }

    #[test]
    fn references_are_replaced_by_their_capture_or_by_nothing() {
        let c = ["a", "b"];
        assert_eq!(format("x_${1}_y", &c), "x_a_y");
        // The run takes `_` too: `$1_y` is the run `1_y`, not a number.
        assert_eq!(format("x_$1_y", &c), "x_");
        assert_eq!(format("${2}${1}", &c), "ba");
        assert_eq!(format("$1.$1", &c), "a.a");
        assert_eq!(format("$0|$3|$1x|$name", &c), "|||");
        assert_eq!(format("${1}x", &c), "ax");
        assert_eq!(format("$01", &c), "a");
        assert_eq!(format("plain", &c), "plain");
        assert_eq!(format("cost $", &c), "cost $");
        assert_eq!(format("a$-b", &c), "a$-b");
        // The run takes `$` too: `$$1` is the run `$1`, not a number.
        assert_eq!(format("$$1", &c), "");
        assert_eq!(format("$1", &[]), "");
    }
}
