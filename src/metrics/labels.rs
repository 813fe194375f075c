//! The names of the per-rule series: the labels `domain`, `key1` and `key2`, and the levels
//! below them, sanitised as the Go server names its stats.

/// The name of a per-rule series: its Prometheus labels and its whole path, the Go
/// server's stat name for statsd; `key1` is `None` only for limits sent in requests.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct Labels {
    /// The `domain` label: the config domain, sanitised.
    domain: String,
    /// The `key1` label: the first level, sanitised.
    key1: Option<String>,
    /// The `key2` label: the second level, sanitised; `None` for a one-level rule and for
    /// limits sent in requests.
    key2: Option<String>,
    /// The levels below the second, sanitised: not labels (Prometheus sums the series that
    /// differ only there), but part of the statsd name, so rules that differ only there
    /// keep series of their own.
    deeper: Box<[String]>,
}

impl Labels {
    /// The labels of a rule in `domain` whose levels (composite keys) are `levels`.
    pub(super) fn of_levels(domain: &str, levels: &[&str]) -> Labels {
        Labels {
            domain: sanitize(domain),
            key1: levels.first().map(|l| sanitize(l)),
            key2: levels.get(1).map(|l| sanitize(l)),
            deeper: levels.iter().skip(2).map(|l| sanitize(l)).collect(),
        }
    }

    /// The labels of a series whose levels are named `names`.
    pub(super) fn of_names<S: AsRef<str>>(
        domain: &str,
        mut names: impl Iterator<Item = S>,
    ) -> Labels {
        Labels {
            domain: sanitize(domain),
            key1: names.next().map(|n| sanitize(n.as_ref())),
            key2: names.next().map(|n| sanitize(n.as_ref())),
            deeper: names.map(|n| sanitize(n.as_ref())).collect(),
        }
    }

    /// A detailed-metric rule's labels: the request's `key_value` at each level (`key`
    /// where the value is empty).
    pub(super) fn of_request<'e>(
        domain: &str,
        mut entries: impl Iterator<Item = (&'e str, &'e str)>,
    ) -> Labels {
        let mut level = || {
            entries.next().map(|(key, value)| {
                if value.is_empty() {
                    sanitize(key)
                } else {
                    sanitize(&format!("{key}_{value}"))
                }
            })
        };
        Labels {
            domain: sanitize(domain),
            key1: level(),
            key2: level(),
            deeper: std::iter::from_fn(level).collect(),
        }
    }

    /// The series of limits sent in requests to `domain`.
    pub(super) fn of_domain(domain: &str) -> Labels {
        Labels {
            domain: sanitize(domain),
            key1: None,
            key2: None,
            deeper: Box::default(),
        }
    }

    /// The Prometheus labels alone: the series of rules that differ only below their
    /// second level share them, and are summed under them.
    pub(super) fn labelled(&self) -> Labels {
        Labels {
            deeper: Box::default(),
            ..self.clone()
        }
    }

    /// Appends the Go server's stat path, `<domain>.<level>.<level>…`, to `out`. Each
    /// part is sanitised on its own, where the Go server sanitises the joined path: they
    /// differ only where an IPv4-shaped run spans two levels (a level ending in digits
    /// followed by one starting `d.d.d`), which keys do not do.
    pub(super) fn stat_path(&self, out: &mut String) {
        out.push_str(&self.domain);
        let levels = [&self.key1, &self.key2].into_iter().flatten();
        for level in levels.chain(self.deeper.iter()) {
            out.push('.');
            out.push_str(level);
        }
    }

    pub(super) fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        [
            Some(("domain", self.domain.as_str())),
            self.key1.as_deref().map(|k| ("key1", k)),
            self.key2.as_deref().map(|k| ("key2", k)),
        ]
        .into_iter()
        .flatten()
    }
}

/// The Go server's stat-name sanitising: `:` and `|` become `_`, and so do the dots of
/// anything shaped like an IPv4 address (`\d{1,3}(\.\d{1,3}){3}`, leftmost first).
pub(super) fn sanitize(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut ip_dots = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match ipv4_end(bytes, at) {
            Some(end) => {
                ip_dots.extend((at..end).filter(|&i| bytes[i] == b'.'));
                at = end;
            }
            None => at += 1,
        }
    }
    // Both in increasing order: a cursor, not a search per dot (values can be long).
    let mut ip_dots = ip_dots.into_iter().peekable();
    text.char_indices()
        .map(|(i, c)| match c {
            ':' | '|' => '_',
            '.' if ip_dots.next_if_eq(&i).is_some() => '_',
            c => c,
        })
        .collect()
}

/// The end of an IPv4-shaped run starting at `start`: four groups of one to three ASCII
/// digits joined by dots (the last group as long as it goes, up to three).
fn ipv4_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut at = start;
    for group in 0..4 {
        let digits = bytes[at..]
            .iter()
            .take(3)
            .take_while(|b| b.is_ascii_digit())
            .count();
        if digits == 0 {
            return None;
        }
        at += digits;
        if group < 3 {
            if bytes.get(at) != Some(&b'.') {
                return None;
            }
            at += 1;
        }
    }
    Some(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_names_are_sanitised_like_the_go_server() {
        let cases = [
            ("remote_address_10.0.0.1", "remote_address_10_0_0_1"),
            ("a:b|c", "a_b_c"),
            ("1234.5.6.7", "1234_5_6_7"),
            ("1.2.3.4567", "1_2_3_4567"),
            ("1.2.3", "1.2.3"),
            ("v1.2.3.x", "v1.2.3.x"),
            ("ip_1.2.3.4.5.6.7.8", "ip_1_2_3_4.5_6_7_8"),
            ("ünï.1.2.3.4", "ünï.1_2_3_4"),
            ("path_/a.b", "path_/a.b"),
        ];
        for (raw, clean) in cases {
            assert_eq!(sanitize(raw), clean, "{raw}");
        }
    }

    fn triple(l: &Labels) -> (&str, Option<&str>, Option<&str>) {
        (l.domain.as_str(), l.key1.as_deref(), l.key2.as_deref())
    }

    fn path(l: &Labels) -> String {
        let mut out = String::new();
        l.stat_path(&mut out);
        out
    }

    #[test]
    fn labels_are_the_first_two_levels() {
        let l = Labels::of_levels("d", &["k1_v"]);
        assert_eq!(triple(&l), ("d", Some("k1_v"), None));
        let l = Labels::of_levels("d", &["a", "b_x"]);
        assert_eq!(triple(&l), ("d", Some("a"), Some("b_x")));
        let l = Labels::of_levels("d.e", &["a", "m_/p.S/M", "c", "e"]);
        assert_eq!(triple(&l), ("d.e", Some("a"), Some("m_/p.S/M")));
        let entries = [("ip", "10.1.2.3"), ("path", ""), ("x", "y")];
        let l = Labels::of_request("d:x", entries.into_iter());
        assert_eq!(triple(&l), ("d_x", Some("ip_10_1_2_3"), Some("path")));
        assert_eq!(path(&l), "d_x.ip_10_1_2_3.path.x_y");
    }

    #[test]
    fn the_stat_path_has_every_level_and_the_labels_the_first_two() {
        let l = Labels::of_levels("d.e", &["a", "m_/p.S/M", "c", "e_1.2.3.4"]);
        assert_eq!(path(&l), "d.e.a.m_/p.S/M.c.e_1_2_3_4");
        assert_eq!(path(&l.labelled()), "d.e.a.m_/p.S/M");
        assert_eq!(
            l.labelled(),
            Labels::of_levels("d.e", &["a", "m_/p.S/M", "x"]).labelled()
        );
        assert_eq!(path(&Labels::of_names("d", ["k", "l"].iter())), "d.k.l");
        assert_eq!(path(&Labels::of_domain("d")), "d");
    }
}
