//! A running [`Pod`]: probed, changed and stopped as the kubelet does.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use super::podman;
use super::volume::{atomic_write, to_files};

/// The kubelet's probes of a container.
#[derive(Debug, Clone, Copy)]
pub enum Probe {
    Startup,
    Readiness,
    Liveness,
}

impl Probe {
    fn field(self) -> &'static str {
        match self {
            Probe::Startup => "startupProbe",
            Probe::Readiness => "readinessProbe",
            Probe::Liveness => "livenessProbe",
        }
    }
}

/// A running pod; removed (`podman rm -f`) when dropped, its log printed if the test failed.
pub struct Pod {
    /// The podman container's name.
    pub(super) name: String,
    /// The Deployment's container, for its probes and ports.
    pub(super) container: Value,
    /// `terminationGracePeriodSeconds`.
    pub(super) grace: Duration,
    /// Each Secret's or ConfigMap's volume directory, by the object's name.
    pub(super) mounted: BTreeMap<String, PathBuf>,
    /// Holds every volume's directory; removed with the pod.
    pub(super) _volumes: TempDir,
    /// The `podman` arguments it was started with, printed if the test fails.
    pub(super) args: Vec<String>,
}

impl Pod {
    /// One probe of `probe`, as the kubelet makes it: `Ok` on success (an HTTP status
    /// from 200 to 399, or a TCP connection), else what was seen. A container without
    /// that probe passes it.
    pub async fn probe_once(&self, probe: Probe) -> Result<(), String> {
        let spec = &self.container[probe.field()];
        if spec.is_null() {
            return Ok(());
        }
        let timeout = Duration::from_secs(spec["timeoutSeconds"].as_u64().unwrap_or(1));
        let outcome = tokio::time::timeout(timeout, self.attempt(spec)).await;
        outcome.unwrap_or_else(|_| Err(format!("no answer within {timeout:?}")))
    }

    async fn attempt(&self, spec: &Value) -> Result<(), String> {
        let (handler, port) = if spec["httpGet"].is_object() {
            ("httpGet", &spec["httpGet"]["port"])
        } else if spec["tcpSocket"].is_object() {
            ("tcpSocket", &spec["tcpSocket"]["port"])
        } else {
            panic!("only httpGet and tcpSocket probes are emulated: {spec}");
        };
        let port = self.port(port);
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| format!("connecting to port {port}: {e}"))?;
        if handler == "tcpSocket" {
            return Ok(());
        }
        assert_ne!(
            spec["httpGet"]["scheme"], "HTTPS",
            "HTTPS probes are not emulated"
        );
        let path = spec["httpGet"]["path"].as_str().unwrap_or("/");
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: kube-probe/1.30\r\nConnection: close\r\n\r\n"
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        stream
            .read_to_end(&mut answer)
            .await
            .map_err(|e| e.to_string())?;
        let answer = String::from_utf8_lossy(&answer);
        let status: u16 = answer
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("not HTTP: {answer:?}"))?;
        if (200..400).contains(&status) {
            Ok(())
        } else {
            Err(format!("HTTP {status}: {answer}"))
        }
    }

    /// A probe's port: a number, or the name of one of the container's ports.
    fn port(&self, port: &Value) -> u16 {
        if let Some(number) = port.as_u64() {
            return number as u16;
        }
        let name = port.as_str().expect("a port number or name");
        self.container["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == name)
            .and_then(|p| p["containerPort"].as_u64())
            .unwrap_or_else(|| panic!("no container port named {name}")) as u16
    }

    /// Probes `probe` until it succeeds, failing the test (with the log) once the kubelet
    /// would have given up: `failureThreshold` failed probes `periodSeconds` apart. Probes
    /// come faster than the kubelet's period; the deadline is the kubelet's.
    pub async fn wait_for(&self, probe: Probe) -> Duration {
        let spec = &self.container[probe.field()];
        let period = spec["periodSeconds"].as_u64().unwrap_or(10);
        let failures = spec["failureThreshold"].as_u64().unwrap_or(3);
        let deadline = Duration::from_secs(period * failures);
        let start = Instant::now();
        loop {
            let outcome = self.probe_once(probe).await;
            if outcome.is_ok() {
                return start.elapsed();
            }
            assert!(
                self.is_running(),
                "the pod exited while waiting for its {probe:?} probe; its log:\n{}",
                self.logs()
            );
            assert!(
                start.elapsed() < deadline,
                "the {probe:?} probe still fails after {deadline:?} (the kubelet's limit): {outcome:?}; the pod's log:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Starts as the kubelet sees a pod start: its startup probe passes, then readiness
    /// and liveness each pass once.
    pub async fn started(&self) {
        self.wait_for(Probe::Startup).await;
        for probe in [Probe::Readiness, Probe::Liveness] {
            if let Err(e) = self.probe_once(probe).await {
                panic!(
                    "the {probe:?} probe fails after startup: {e}; the pod's log:\n{}",
                    self.logs()
                );
            }
        }
    }

    /// Swaps the files of ConfigMap (or Secret) `name` under the running pod, as the
    /// kubelet does when the object changes: one rename of `..data`.
    pub fn update(&self, name: &str, files: &[(&str, &[u8])]) {
        let dir = self
            .mounted
            .get(name)
            .unwrap_or_else(|| panic!("the pod mounts no {name}"));
        atomic_write(dir, &to_files(files), 0o644);
    }

    /// Whether the container still runs.
    pub fn is_running(&self) -> bool {
        let out = podman(&["inspect", "--format", "{{.State.Running}}", &self.name]);
        String::from_utf8_lossy(&out.stdout).trim() == "true"
    }

    /// What the container wrote (stdout and stderr, as `kubectl logs` shows it).
    pub fn logs(&self) -> String {
        let out = podman(&["logs", &self.name]);
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    /// Stops the pod as the kubelet does (SIGTERM, SIGKILL after the grace period);
    /// returns how long it took and the exit code (137: killed at the end of the grace).
    pub fn terminate(&self) -> (Duration, i64) {
        let since = self.sigterm();
        self.stopped(since)
    }

    /// Sends SIGTERM, as the kubelet does first when it stops a pod; when it was sent.
    pub fn sigterm(&self) -> Instant {
        let sent = Instant::now();
        let out = podman(&["kill", "--signal", "TERM", &self.name]);
        assert!(
            out.status.success(),
            "podman kill: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        sent
    }

    /// Waits for the container to end after the SIGTERM sent at `since`, killing it
    /// once the grace period is over, as the kubelet does; how long it took from the
    /// SIGTERM and the exit code.
    pub fn stopped(&self, since: Instant) -> (Duration, i64) {
        let left = self.grace.saturating_sub(since.elapsed());
        // podman stop waits up to `left` for the end (a TERM again changes nothing for a
        // process already draining), then kills.
        let out = podman(&["stop", "--time", &left.as_secs().to_string(), &self.name]);
        assert!(
            out.status.success(),
            "podman stop: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let took = since.elapsed();
        let out = podman(&["inspect", "--format", "{{.State.ExitCode}}", &self.name]);
        let code = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("an exit code");
        (took, code)
    }

    /// The grace period the Deployment gives.
    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// The `podman` arguments the pod was started with.
    pub fn podman_args(&self) -> &[String] {
        &self.args
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- podman {} ---\n--- log of pod {} ---\n{}",
                self.args.join(" "),
                self.name,
                self.logs()
            );
        }
        let _ = podman(&["rm", "--force", "--time", "0", &self.name]);
    }
}
