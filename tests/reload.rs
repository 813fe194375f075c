//! Live reload through the real watcher: good edits, broken edits, symlink swaps.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use arc_swap::ArcSwap;
use meshlimit::bucket_key::KeyWriter;
use meshlimit::clock::{Clock, ManualClock};
use meshlimit::config;
use meshlimit::config::{SharedConfig, SharedDomains};
use meshlimit::error::ConfigErrorKind as Kind;
use meshlimit::request::{Descriptor, Request};
use meshlimit::rules::Algorithm;
use meshlimit::service::Service;
use meshlimit::source::{self, ConfigSource, History, Loaded, Outcome};
use meshlimit::store::{MemoryStore, Store};
use tokio::task::JoinSet;

const DEBOUNCE: Duration = Duration::from_millis(50);

/// Follows the files at `path` into `config`, as `serve` does after the first load: the
/// follower's task (aborted when dropped) and the history it records in.
fn watch(
    path: impl Into<std::path::PathBuf>,
    config: &SharedConfig,
) -> (JoinSet<()>, Arc<History>) {
    let source = ConfigSource::File {
        path: path.into(),
        domains: SharedDomains::Refused,
    };
    let history = history();
    let follower = source
        .follow(config.clone(), history.clone(), DEBOUNCE)
        .expect("watching");
    let mut task = JoinSet::new();
    task.spawn(follower);
    (task, history)
}

/// Loads the files at `path` into `config` once, as the follower does after an event.
fn reload_once(path: &Path, config: &SharedConfig) -> Outcome {
    source::apply(
        config::load(path).map(Loaded::unversioned),
        config,
        &history(),
    )
}

/// The history of a source whose first config (the one `service_for` loads) is in force:
/// counted as one load.
fn history() -> Arc<History> {
    let history = History::new("file", "test".into());
    history.record_first("first".into());
    Arc::new(history)
}

fn rule(domain: &str, per_minute: u32) -> String {
    format!(
        "domain: {domain}\ndescriptors:\n  - key: k\n    rate_limit: {{unit: minute, requests_per_unit: {per_minute}}}\n"
    )
}

fn service_for(path: &Path) -> (Service, SharedConfig) {
    let loaded = config::load(path).expect("initial config is valid");
    let shared: SharedConfig = Arc::new(ArcSwap::from_pointee(loaded));
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(support::START));
    let store = Store::Memory(MemoryStore::new(10_000, clock.clone()));
    let service = support::counting(Service::new(
        shared.clone(),
        store,
        clock,
        Algorithm::TokenBucket,
    ));
    (service, shared)
}

/// The `requests_per_unit` that `(k, v)` in `domain` gets, or None without a limit.
async fn limit_of(service: &Service, domain: &str) -> Option<u32> {
    let answer = service
        .should_rate_limit(Request::new(domain, &[Descriptor::new(&[("k", "v")])], 0))
        .await
        .expect("valid request");
    answer.statuses[0]
        .current_limit
        .as_ref()
        .map(|l| l.requests_per_unit)
}

fn limit_now(config: &SharedConfig, domain: &str) -> Option<u32> {
    let current = config.load();
    let tree = current.domain(domain)?;
    let mut key = String::new();
    tree.find(
        [("k", "v")],
        &mut KeyWriter::new(&mut key, domain),
        &mut String::new(),
    )?
    .limits
    .first()
    .map(|l| l.requests_per_unit)
}

#[tokio::test]
async fn a_good_edit_is_live_and_keeps_counters() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), rule("a", 10)).unwrap();
    let (service, config) = service_for(dir.path());
    let (_follower, history) = watch(dir.path().to_path_buf(), &config);

    for _ in 0..4 {
        limit_of(&service, "a").await;
    }
    std::fs::write(dir.path().join("a.yaml"), rule("a", 20)).unwrap();
    support::eventually(10, "edit applied", || {
        history.applied.load(Ordering::SeqCst) == 2
    })
    .await;
    assert_eq!(limit_now(&config, "a"), Some(20));

    // The bucket survived: 4 taken before, 1 now, from a capacity of 20.
    let answer = service
        .should_rate_limit(Request::new("a", &[Descriptor::new(&[("k", "v")])], 0))
        .await
        .unwrap();
    assert_eq!(answer.statuses[0].remaining, 15);

    // A new file adds a domain; removing it drops the domain again.
    std::fs::write(dir.path().join("b.yml"), rule("b", 3)).unwrap();
    support::eventually(10, "new file applied", || {
        limit_now(&config, "b") == Some(3)
    })
    .await;
    std::fs::remove_file(dir.path().join("b.yml")).unwrap();
    support::eventually(10, "removal applied", || {
        config.load().domain("b").is_none()
    })
    .await;
    assert_eq!(limit_of(&service, "b").await, None);
}

#[tokio::test]
async fn a_broken_edit_is_rejected_and_the_running_config_stays() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.yaml");
    std::fs::write(&file, rule("a", 10)).unwrap();
    let (service, config) = service_for(dir.path());
    let (_follower, history) = watch(dir.path().to_path_buf(), &config);

    std::fs::write(
        &file,
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n",
    )
    .unwrap();
    support::eventually(10, "broken edit seen", || {
        history.rejected.load(Ordering::SeqCst) >= 1
    })
    .await;
    let error = history.last_error.lock().clone().unwrap();
    // The reload reports exactly the problems a load of the files finds: one, the unit.
    let problems = config::load(dir.path()).expect_err("the broken edit does not load");
    let found: Vec<(Kind, Option<u32>)> = problems.iter().map(|e| (e.kind, e.line)).collect();
    assert_eq!(found, [(Kind::BadUnit, Some(4))], "{problems:#?}");
    assert_eq!(problems[0].file, file);
    assert_eq!(error, config::render_errors(&problems));
    assert_eq!(
        limit_of(&service, "a").await,
        Some(10),
        "old config still in force"
    );

    std::fs::write(&file, rule("a", 30)).unwrap();
    // The config is swapped before the follower records the outcome: wait for both.
    support::eventually(10, "fix applied and the error cleared", || {
        limit_now(&config, "a") == Some(30) && history.last_error.lock().is_none()
    })
    .await;
}

#[tokio::test]
async fn reload_once_reports_unchanged_applied_and_rejected() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), rule("a", 10)).unwrap();
    let (_service, config) = service_for(dir.path());
    assert_eq!(reload_once(dir.path(), &config), Outcome::Unchanged);
    std::fs::write(dir.path().join("a.yaml"), rule("a", 11)).unwrap();
    assert_eq!(reload_once(dir.path(), &config), Outcome::Applied);
    std::fs::write(dir.path().join("z.yaml"), "domain: a\n").unwrap();
    let problems = config::load(dir.path()).expect_err("two files define domain a");
    let found: Vec<(Kind, &Path)> = problems
        .iter()
        .map(|e| (e.kind, e.file.as_path()))
        .collect();
    assert_eq!(
        found,
        [(Kind::DuplicateDomain, dir.path().join("z.yaml").as_path())]
    );
    assert_eq!(
        reload_once(dir.path(), &config),
        Outcome::Rejected(config::render_errors(&problems))
    );
    assert_eq!(limit_now(&config, "a"), Some(11));
}

/// Kubernetes mounts a ConfigMap as `..data -> ..<timestamp>/` with `name.yaml ->
/// ..data/name.yaml` links, and updates it by swapping `..data` atomically.
#[tokio::test]
#[cfg(unix)]
async fn a_configmap_style_swap_is_picked_up() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir(root.join("..2026_01_01_v1")).unwrap();
    std::fs::write(root.join("..2026_01_01_v1/rules.yaml"), rule("cm", 5)).unwrap();
    symlink("..2026_01_01_v1", root.join("..data")).unwrap();
    symlink("..data/rules.yaml", root.join("rules.yaml")).unwrap();

    let (service, config) = service_for(root);
    assert_eq!(limit_of(&service, "cm").await, Some(5));
    let _follower = watch(root.to_path_buf(), &config);

    std::fs::create_dir(root.join("..2026_01_02_v2")).unwrap();
    std::fs::write(root.join("..2026_01_02_v2/rules.yaml"), rule("cm", 7)).unwrap();
    symlink("..2026_01_02_v2", root.join("..data_tmp")).unwrap();
    std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
    std::fs::remove_dir_all(root.join("..2026_01_01_v1")).unwrap();

    support::eventually(10, "ConfigMap swap applied", || {
        limit_now(&config, "cm") == Some(7)
    })
    .await;
}

/// The Go server's runtime layout: the config path is itself a link that is swapped to a
/// new directory. Edits inside the new target must be seen afterwards.
#[tokio::test]
#[cfg(unix)]
async fn a_swapped_directory_link_is_followed() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for (version, limit) in [("v1", 1), ("v2", 2)] {
        std::fs::create_dir(root.join(version)).unwrap();
        std::fs::write(root.join(version).join("r.yaml"), rule("link", limit)).unwrap();
    }
    symlink("v1", root.join("current")).unwrap();
    let path = root.join("current");
    let (_service, config) = service_for(&path);
    let _follower = watch(path.clone(), &config);

    symlink("v2", root.join("next")).unwrap();
    std::fs::rename(root.join("next"), &path).unwrap();
    support::eventually(10, "link swap applied", || {
        limit_now(&config, "link") == Some(2)
    })
    .await;

    std::fs::write(root.join("v2/r.yaml"), rule("link", 22)).unwrap();
    support::eventually(10, "edit in new target applied", || {
        limit_now(&config, "link") == Some(22)
    })
    .await;
}

#[tokio::test]
async fn a_single_file_path_is_watched() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("only.yaml");
    std::fs::write(&file, rule("one", 1)).unwrap();
    let (_service, config) = service_for(&file);
    let _follower = watch(file.clone(), &config);
    // Editors often write a temporary file and rename it over the original.
    let tmp = dir.path().join(".only.yaml.swp");
    std::fs::write(&tmp, rule("one", 9)).unwrap();
    std::fs::rename(&tmp, &file).unwrap();
    support::eventually(10, "rename-over applied", || {
        limit_now(&config, "one") == Some(9)
    })
    .await;
}

/// The error of a rejected reload describes files as they were; once the files load again
/// (even as exactly the running config, which is then not swapped) it is gone.
#[tokio::test]
async fn a_fixed_or_removed_broken_file_clears_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let good = rule("a", 10);
    std::fs::write(dir.path().join("a.yaml"), &good).unwrap();
    let (_service, config) = service_for(dir.path());
    let (_follower, history) = watch(dir.path().to_path_buf(), &config);

    // A broken file added, then removed: the files are the running config again.
    std::fs::write(dir.path().join("b.yaml"), "domain: b\ndescriptors: 7\n").unwrap();
    support::eventually(10, "broken file rejected", || {
        history.last_error.lock().is_some()
    })
    .await;
    std::fs::remove_file(dir.path().join("b.yaml")).unwrap();
    support::eventually(10, "error cleared by the removal", || {
        history.last_error.lock().is_none()
    })
    .await;

    // The running file broken, then put back as it was.
    std::fs::write(dir.path().join("a.yaml"), "domain: a\ndescriptors: 7\n").unwrap();
    support::eventually(10, "broken edit rejected", || {
        history.last_error.lock().is_some()
    })
    .await;
    std::fs::write(dir.path().join("a.yaml"), &good).unwrap();
    support::eventually(10, "error cleared by the fix", || {
        history.last_error.lock().is_none()
    })
    .await;
    assert_eq!(
        history.applied.load(Ordering::SeqCst),
        1,
        "nothing swapped after the first load"
    );
    assert_eq!(limit_now(&config, "a"), Some(10));
}

#[tokio::test]
#[cfg(unix)]
async fn a_symlink_loop_error_goes_with_its_files() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), rule("a", 10)).unwrap();
    let (_service, config) = service_for(dir.path());
    let (_follower, history) = watch(dir.path().to_path_buf(), &config);

    symlink("y.yaml", dir.path().join("x.yaml")).unwrap();
    symlink("x.yaml", dir.path().join("y.yaml")).unwrap();
    support::eventually(10, "the loop rejected", || {
        history.last_error.lock().is_some()
    })
    .await;
    std::fs::remove_file(dir.path().join("x.yaml")).unwrap();
    std::fs::remove_file(dir.path().join("y.yaml")).unwrap();
    support::eventually(10, "error cleared with the loop", || {
        history.last_error.lock().is_none()
    })
    .await;
}

/// The directory above the config is watched for link swaps; other files there (the
/// server's own log, say) are no reason to read the config again.
#[tokio::test]
async fn writes_to_other_files_next_to_the_config_do_not_reload() {
    let root = tempfile::tempdir().unwrap();
    let config_dir = root.path().join("config");
    std::fs::create_dir(&config_dir).unwrap();
    std::fs::write(config_dir.join("a.yaml"), rule("a", 10)).unwrap();
    let (_service, config) = service_for(&config_dir);
    let (_follower, history) = watch(config_dir.clone(), &config);

    let log = root.path().join("meshlimit.log");
    for i in 0..20 {
        std::fs::write(&log, format!("line {i}\n")).unwrap();
        tokio::time::sleep(DEBOUNCE / 2).await;
    }
    // Well past the debounce of the last write, nothing was attempted; then a real edit
    // shows that the watcher was listening all along. (Counted before the edit: on a
    // loaded machine one edit can arrive as two events, truncation and write.)
    tokio::time::sleep(DEBOUNCE * 4).await;
    assert_eq!(
        history.attempts.load(Ordering::SeqCst),
        0,
        "the log file's writes caused reloads"
    );
    std::fs::write(config_dir.join("a.yaml"), rule("a", 20)).unwrap();
    support::eventually(10, "edit applied", || limit_now(&config, "a") == Some(20)).await;
}
