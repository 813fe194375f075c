//! Which directories the files follower watches for one config path, and which of the events in
//! them concern the config.
//!
//! Swapped links must be seen, so the directories holding the links on the way to the
//! config are watched; but those directories hold other files too (the server's own log,
//! say), and a write to one of them is no reason to read the config again. So the watch
//! is wide and the interest narrow: the config path, every link met while resolving it,
//! what it resolves to, and, for a directory config, the entries of that directory.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

/// Links followed while resolving a path before giving up (a loop): Linux's own bound.
const MAX_LINK_HOPS: usize = 40;

/// What the files follower watches and cares about, for one config path as it resolves now.
/// Every path is named as file events name them: the resolved directory joined with the
/// entry's own name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Interest {
    /// Directories to watch, non-recursively.
    pub(super) dirs: Vec<PathBuf>,
    /// Entries whose changes concern the config: each link met while resolving the config
    /// path, and the path it resolves to.
    entries: Vec<PathBuf>,
    /// Directories every entry of which concerns the config: the config directory.
    contents: Vec<PathBuf>,
}

impl Interest {
    /// The interest for `path` as the file system resolves it now.
    pub(super) fn of(path: &Path) -> Interest {
        let mut entries = resolution(path);
        let target = entries
            .last()
            .cloned()
            .unwrap_or_else(|| path.to_path_buf());
        let mut dirs: Vec<PathBuf> = entries
            .iter()
            .filter_map(|e| e.parent().map(Path::to_path_buf))
            .collect();
        let mut contents = Vec::new();
        if target.is_dir() {
            dirs.push(target.clone());
            contents.push(target);
        }
        dirs.sort();
        dirs.dedup();
        entries.sort();
        entries.dedup();
        Interest {
            dirs,
            entries,
            contents,
        }
    }

    /// Whether an event on `path` (as the watcher names it) concerns the config.
    pub(super) fn concerns(&self, path: &Path) -> bool {
        self.entries.iter().any(|e| e == path)
            || path
                .parent()
                .is_some_and(|dir| self.contents.iter().any(|c| c == dir))
    }
}

/// Every link met while resolving `path`, component by component, then the path it
/// resolves to (which may not exist). A loop stops after [`MAX_LINK_HOPS`] links.
fn resolution(path: &Path) -> Vec<PathBuf> {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut pending: VecDeque<OsString> = VecDeque::new();
    let mut resolved = PathBuf::from("/");
    let mut met = Vec::new();
    push_components(&mut pending, &absolute, &mut resolved);
    let mut hops = 0;
    while let Some(name) = pending.pop_front() {
        if name == ".." {
            resolved.pop();
            continue;
        }
        let here = resolved.join(&name);
        match std::fs::read_link(&here) {
            Ok(target) if hops < MAX_LINK_HOPS => {
                hops += 1;
                met.push(here);
                let mut next = VecDeque::new();
                push_components(&mut next, &target, &mut resolved);
                next.extend(pending);
                pending = next;
            }
            _ => resolved = here,
        }
    }
    met.push(resolved);
    met
}

/// Queues the names of `path`'s components; an absolute path restarts from the root.
fn push_components(queue: &mut VecDeque<OsString>, path: &Path, resolved: &mut PathBuf) {
    for component in path.components() {
        match component {
            Component::RootDir => *resolved = PathBuf::from("/"),
            Component::Normal(name) => queue.push_back(name.to_os_string()),
            Component::ParentDir => queue.push_back("..".into()),
            Component::CurDir | Component::Prefix(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_on_the_way_and_the_target_concern_the_config_and_neighbours_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        // runtime/current -> v1 (a directory holding config.yaml), as the Go server's
        // RUNTIME_ROOT is deployed.
        std::fs::create_dir_all(root.join("runtime/v1")).unwrap();
        std::fs::write(root.join("runtime/v1/config.yaml"), "").unwrap();
        std::os::unix::fs::symlink("v1", root.join("runtime/current")).unwrap();
        let interest = Interest::of(&root.join("runtime/current/config.yaml"));
        assert!(interest.concerns(&root.join("runtime/current")));
        assert!(interest.concerns(&root.join("runtime/v1/config.yaml")));
        assert!(!interest.concerns(&root.join("runtime/meshlimit.log")));
        assert!(!interest.concerns(&root.join("runtime/v1/other.yaml")));
        assert!(interest.dirs.contains(&root.join("runtime")));
        assert!(interest.dirs.contains(&root.join("runtime/v1")));

        // A directory config: its entries concern it, its neighbours do not.
        let interest = Interest::of(&root.join("runtime/current"));
        assert!(interest.concerns(&root.join("runtime/v1/other.yaml")));
        assert!(interest.concerns(&root.join("runtime/current")));
        assert!(!interest.concerns(&root.join("runtime/meshlimit.log")));
    }

    #[test]
    fn a_link_loop_ends() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::os::unix::fs::symlink("b", root.join("a")).unwrap();
        std::os::unix::fs::symlink("a", root.join("b")).unwrap();
        let interest = Interest::of(&root.join("a"));
        assert!(interest.concerns(&root.join("a")));
        assert!(interest.concerns(&root.join("b")));
        assert!(!interest.concerns(&root.join("c")));
    }
}
