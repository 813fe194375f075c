//! Glob mappings, matched as statsd_exporter's FSM matches them.
//!
//! A glob is dot-separated components, each a literal or `*`; `*` stands for exactly one
//! component of the stat's name (any text without a dot, empty included). The globs are
//! merged into one tree per stat kind (counter, gauge, observer; a glob without
//! `match_metric_type` goes into all three), and a stat is walked down its kind's tree:
//! - literal components before `*`, every path tried, a branch cut where the components
//!   left cannot fit the globs below it;
//! - by default the match is the glob first in the file among those that match (its
//!   *priority*); with `glob_disable_ordering`, the first found (literals first);
//! - as in statsd_exporter, a tree node belongs to the first glob that made it: a later
//!   glob ending on a node an earlier, longer glob passed through (`a.b` after `a.b.c`) or
//!   on the same node as an earlier glob (a duplicate) never matches there, and a duplicate
//!   gives that node its own, later priority.

use std::collections::HashMap;

use super::StatKind;

/// One node of a tree: its children by component, what fits below it, its glob.
#[derive(Debug, Default)]
struct Node {
    /// Children by their component (`*` included), as indexes into [`Globs::nodes`].
    next: HashMap<Box<str>, usize>,
    /// Fewest components any glob through here still has below this node.
    min_left: usize,
    /// Most components any glob through here still has below this node.
    max_left: usize,
    /// The mapping that ends here (an index into the caller's list), if any.
    rule: Option<usize>,
    /// The order of the glob that last ended here: lower wins.
    priority: usize,
}

/// The globs of a mapping file, one tree per [`StatKind`].
#[derive(Debug)]
pub(crate) struct Globs {
    /// Every node; the first three are the roots of counters, gauges and observers.
    nodes: Vec<Node>,
    /// Globs added so far: the next one's priority.
    added: usize,
    /// `glob_disable_ordering`: the first match found, not the first in the file.
    unordered: bool,
}

/// A glob's match: the mapping and the components its `*`s stood for.
pub(crate) type GlobMatch<'s> = (usize, Vec<&'s str>);

impl Globs {
    /// No globs yet.
    pub(crate) fn new(unordered: bool) -> Globs {
        let nodes = (0..3).map(|_| Node::default()).collect();
        Globs {
            nodes,
            added: 0,
            unordered,
        }
    }

    /// Adds `glob` for stats of `kind` (all kinds for `None`), ending on mapping `rule`.
    /// Returns the glob's count of `*`.
    pub(crate) fn add(&mut self, glob: &str, kind: Option<StatKind>, rule: usize) -> usize {
        let fields: Vec<&str> = glob.split('.').collect();
        let roots = match kind {
            Some(kind) => vec![root(kind)],
            None => vec![0, 1, 2],
        };
        for root in roots {
            let mut at = root;
            for (i, field) in fields.iter().enumerate() {
                let left = fields.len() - i - 1;
                at = match self.nodes[at].next.get(*field) {
                    Some(&child) => {
                        let node = &mut self.nodes[child];
                        node.min_left = node.min_left.min(left);
                        node.max_left = node.max_left.max(left);
                        child
                    }
                    None => {
                        let child = self.nodes.len();
                        self.nodes.push(Node {
                            min_left: left,
                            max_left: left,
                            rule: (left == 0).then_some(rule),
                            ..Node::default()
                        });
                        self.nodes[at].next.insert((*field).into(), child);
                        child
                    }
                };
            }
            self.nodes[at].priority = self.added;
        }
        self.added += 1;
        fields.iter().filter(|f| **f == "*").count()
    }

    /// The glob `stat` of `kind` matches, if any.
    pub(crate) fn find<'s>(&self, stat: &'s str, kind: StatKind) -> Option<GlobMatch<'s>> {
        let fields: Vec<&'s str> = stat.split('.').collect();
        let mut search = Search {
            globs: self,
            fields: &fields,
            captures: Vec::new(),
            best: None,
        };
        search.walk(root(kind), 0);
        search.best.map(|(_, rule, captures)| (rule, captures))
    }
}

/// The root of `kind`'s tree.
fn root(kind: StatKind) -> usize {
    match kind {
        StatKind::Counter => 0,
        StatKind::Gauge => 1,
        StatKind::Observer => 2,
    }
}

/// One stat's walk down a tree.
struct Search<'g, 's> {
    /// The tree.
    globs: &'g Globs,
    /// The stat's components.
    fields: &'g [&'s str],
    /// The components the `*`s on the way down stood for.
    captures: Vec<&'s str>,
    /// The match so far: its priority, its mapping, its captures.
    best: Option<(usize, usize, Vec<&'s str>)>,
}

impl Search<'_, '_> {
    /// Walks from node `at`, which stands for the components before `i`; returns true to
    /// stop (an unordered match was found).
    fn walk(&mut self, at: usize, i: usize) -> bool {
        let field = self.fields[i];
        let left = self.fields.len() - i - 1;
        let node = &self.globs.nodes[at];
        let literal = node.next.get(field).copied();
        let star = node.next.get("*").copied();
        for (child, captured) in [(literal, false), (star, true)] {
            let Some(child) = child else { continue };
            let next = &self.globs.nodes[child];
            if left < next.min_left || left > next.max_left {
                continue;
            }
            if captured {
                self.captures.push(field);
            }
            let stop = if left == 0 {
                self.ended(next)
            } else {
                self.walk(child, i + 1)
            };
            if captured {
                self.captures.pop();
            }
            if stop {
                return true;
            }
        }
        false
    }

    /// The walk reached `node` with every component used; returns true to stop.
    fn ended(&mut self, node: &Node) -> bool {
        let Some(rule) = node.rule else { return false };
        if self.best.as_ref().is_none_or(|(p, ..)| node.priority < *p) {
            self.best = Some((node.priority, rule, self.captures.clone()));
        }
        self.globs.unordered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn globs(patterns: &[&str], unordered: bool) -> Globs {
        let mut globs = Globs::new(unordered);
        for (rule, pattern) in patterns.iter().enumerate() {
            globs.add(pattern, None, rule);
        }
        globs
    }

    fn find(globs: &Globs, stat: &str) -> Option<(usize, Vec<String>)> {
        globs
            .find(stat, StatKind::Counter)
            .map(|(rule, c)| (rule, c.into_iter().map(String::from).collect()))
    }

    fn hit(rule: usize, captures: &[&str]) -> Option<(usize, Vec<String>)> {
        Some((rule, captures.iter().map(|c| c.to_string()).collect()))
    }

    #[test]
    fn a_star_is_one_whole_component() {
        let g = globs(&["a.*.c"], false);
        assert_eq!(find(&g, "a.b.c"), hit(0, &["b"]));
        assert_eq!(find(&g, "a..c"), hit(0, &[""]));
        assert_eq!(find(&g, "a.b.x.c"), None);
        assert_eq!(find(&g, "a.c"), None);
        assert_eq!(find(&g, "a.b.c.d"), None);
    }

    #[test]
    fn the_first_glob_in_the_file_wins_whatever_the_literals() {
        let g = globs(&["a.*.c", "a.b.c", "*.b.*"], false);
        assert_eq!(find(&g, "a.b.c"), hit(0, &["b"]));
        assert_eq!(find(&g, "x.b.c"), hit(2, &["x", "c"]));
        let g = globs(&["a.b.c", "a.*.c"], false);
        assert_eq!(find(&g, "a.b.c"), hit(0, &[]));
        // Backtracking: the literal branch `a.b.x` dead-ends, the `*` branch matches.
        let g = globs(&["a.b.x", "a.*.y"], false);
        assert_eq!(find(&g, "a.b.y"), hit(1, &["b"]));
    }

    #[test]
    fn without_ordering_the_first_match_found_wins_literals_first() {
        let g = globs(&["a.*.c", "a.b.c"], true);
        assert_eq!(find(&g, "a.b.c"), hit(1, &[]));
        assert_eq!(find(&g, "a.x.c"), hit(0, &["x"]));
    }

    #[test]
    fn a_node_belongs_to_the_first_glob_that_made_it_as_in_statsd_exporter() {
        // `a.b` ends on a node `a.b.c` made: it never matches.
        let g = globs(&["a.b.c", "a.b"], false);
        assert_eq!(find(&g, "a.b"), None);
        assert_eq!(find(&g, "a.b.c"), hit(0, &[]));
        // A duplicate keeps the first mapping but takes the node's priority later than
        // a glob between them.
        let g = globs(&["a.*", "*.b", "a.*"], false);
        assert_eq!(find(&g, "a.b"), hit(1, &["a"]));
        assert_eq!(find(&g, "a.x"), hit(0, &["x"]));
    }

    #[test]
    fn a_glob_for_one_kind_leaves_the_others_alone() {
        let mut g = Globs::new(false);
        g.add("a.*", Some(StatKind::Observer), 0);
        assert_eq!(g.find("a.b", StatKind::Counter), None);
        assert_eq!(g.find("a.b", StatKind::Observer), Some((0, vec!["b"])));
    }
}
