//! A Deployment's pod run as the kubelet runs it, under podman, for the tests that check
//! meshlimit's image where Kubernetes runs it (no cluster can run on these machines).
//!
//! From the Deployment's first container the [`Kubelet`] takes the image, `command` and
//! `args`, the environment (values, and keys of the Secrets and ConfigMaps it was given),
//! the volume mounts (Secrets and ConfigMaps laid out as the kubelet's atomic writer does:
//! a version directory, `..data` pointing at it, each key a link through `..data`),
//! and the securityContext (user and group, read-only root filesystem with no tmpfs,
//! dropped capabilities, no privilege escalation). Like the kubelet, podman writes no
//! `/etc/passwd` into the container. The pod lives in a [`Netns`](super::netns::Netns),
//! with `hosts` standing in for the cluster's DNS names of its neighbours.
//!
//! A [`Pod`] is probed as the kubelet probes it (`httpGet` and `tcpSocket`, each with its
//! `timeoutSeconds`, `failureThreshold` and `periodSeconds`), can have a ConfigMap swapped
//! under it, and is stopped as the kubelet stops it: SIGTERM, then SIGKILL after
//! `terminationGracePeriodSeconds`.

mod kubelet;
mod running;
mod volume;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

// Each test binary uses a different subset.
#[allow(unused_imports)]
pub use kubelet::Kubelet;
#[allow(unused_imports)]
pub use running::{Pod, Probe};
#[allow(unused_imports)]
pub use volume::atomic_write;

/// The image the tests run: what `scripts/image.sh` builds.
pub const IMAGE: &str = "localhost/meshlimit:latest";

/// Files of a Secret or a ConfigMap, by key.
pub type Files = BTreeMap<String, Vec<u8>>;

/// Every object of `manifests` (a multi-document YAML stream, as `helm template` writes
/// it), as JSON values; empty documents left out.
pub fn objects(manifests: &str) -> Vec<Value> {
    let documents: Vec<Value> = serde_saphyr::from_multiple(manifests)
        .unwrap_or_else(|e| panic!("manifests that do not parse: {e}\n{manifests}"));
    documents.into_iter().filter(|d| d.is_object()).collect()
}

/// The one object of `kind` in `objects`.
pub fn only<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = objects.iter().filter(|o| o["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind} expected in {objects:#?}");
    found[0]
}

/// Fails the test unless `image` is in podman's store, saying how to build it.
pub fn require_image(image: &str) {
    let out = podman(&["image", "exists", image]);
    assert!(
        out.status.success(),
        "the image {image} is not built: run scripts/image.sh (it needs podman and runc: apt-get install podman runc)"
    );
}

/// `podman args…` with the options these machines need (crun fails on their cgroup
/// layout); fails the test if podman is missing.
///
/// podman runs from the test's namespace, which the container joins: runc then takes
/// it for the host's and refuses podman's default sysctl (`net.ipv4.ping_group_range`,
/// which the kubelet does not set either), so a config of ours sets none.
pub fn podman(args: &[&str]) -> Output {
    static CONF: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let conf = CONF.get_or_init(|| {
        // One file for every test process (the same text), replaced in one rename so
        // that no process reads it half written; none is left behind per run.
        let path = std::env::temp_dir().join("meshlimit-test-containers.conf");
        let own = path.with_extension(format!("{}", std::process::id()));
        std::fs::write(&own, "[containers]\ndefault_sysctls = []\n").unwrap();
        std::fs::rename(&own, &path).unwrap();
        path
    });
    Command::new("podman")
        .env("CONTAINERS_CONF", conf)
        .args(["--runtime", "runc", "--cgroup-manager", "cgroupfs"])
        .args(args)
        .output()
        .expect("podman is needed to run the image: apt-get install podman runc")
}
