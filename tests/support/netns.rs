//! A network namespace of a test's own, as a Kubernetes pod has: its own loopback, so
//! that what runs in it can listen on the fixed ports a Deployment names (8080, 8081,
//! 19001, 6379, 18001) without meeting anything else on the machine, and reach its
//! neighbours at `127.0.0.1`.
//!
//! [`Netns::run`] runs a test body on a thread of its own that has entered the namespace,
//! on a current-thread runtime: every socket the body opens and every process it starts
//! (Redis, Envoy, podman with `--network ns:…`) lives in the namespace. Removed on drop.

use std::future::Future;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// A named network namespace (`ip netns`), with its loopback up.
pub struct Netns {
    name: String,
}

impl Netns {
    /// A new namespace `meshlimit-<pid>-<n>`. Fails the test if `ip netns` cannot make
    /// one (it needs root and iproute2).
    pub fn new() -> Netns {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "meshlimit-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        ip(&["netns", "add", &name]);
        let netns = Netns { name };
        ip(&["-n", &netns.name, "link", "set", "lo", "up"]);
        netns
    }

    /// Its path, for `podman run --network ns:<path>`.
    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }

    /// Runs `body` to its end inside the namespace (see the module's comment); a panic in
    /// it fails the caller with the same message.
    pub fn run<F: Future<Output = ()>>(&self, body: impl FnOnce() -> F + Send) {
        let path = self.path();
        std::thread::scope(|scope| {
            let thread = scope.spawn(move || {
                let file =
                    std::fs::File::open(&path).unwrap_or_else(|e| panic!("opening {path}: {e}"));
                // SAFETY: setns on a descriptor we own, for this thread only.
                let entered = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(
                    entered,
                    0,
                    "setns {path}: {}",
                    std::io::Error::last_os_error()
                );
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime")
                    .block_on(body());
            });
            if let Err(panic) = thread.join() {
                std::panic::resume_unwind(panic);
            }
        });
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.name])
            .status();
    }
}

/// Runs `ip args…`; fails the test if it fails or is missing.
fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("ip (iproute2) is needed for network namespaces: apt-get install iproute2");
    assert!(
        out.status.success(),
        "ip {args:?}: {} (network namespaces need root)",
        String::from_utf8_lossy(&out.stderr)
    );
}
