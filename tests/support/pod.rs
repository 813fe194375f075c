//! A Deployment's pod run as the kubelet runs it, under podman, for the tests that check
//! meshlimit's image where Kubernetes runs it (no cluster can run on these machines).
//!
//! From the Deployment's first container the [`Kubelet`] takes the image, `command` and
//! `args`, the environment (values, and keys of the Secrets and ConfigMaps it was given),
//! the volume mounts (Secrets and ConfigMaps laid out as the kubelet's atomic writer does:
//! a timestamped directory, `..data` pointing at it, each key a link through `..data`),
//! and the securityContext (user and group, read-only root filesystem with no tmpfs,
//! dropped capabilities, no privilege escalation). Like the kubelet, podman writes no
//! `/etc/passwd` into the container. The pod lives in a [`Netns`](super::netns::Netns),
//! with `hosts` standing in for the cluster's DNS names of its neighbours.
//!
//! A [`Pod`] is probed as the kubelet probes it (`httpGet` and `tcpSocket`, each with its
//! `timeoutSeconds`, `failureThreshold` and `periodSeconds`), can have a ConfigMap swapped
//! under it, and is stopped as the kubelet stops it: SIGTERM, then SIGKILL after
//! `terminationGracePeriodSeconds`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use base64::Engine;
use serde_json::Value;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

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
        let path =
            std::env::temp_dir().join(format!("meshlimit-containers-{}.conf", std::process::id()));
        std::fs::write(&path, "[containers]\ndefault_sysctls = []\n").unwrap();
        path
    });
    Command::new("podman")
        .env("CONTAINERS_CONF", conf)
        .args(["--runtime", "runc", "--cgroup-manager", "cgroupfs"])
        .args(args)
        .output()
        .expect("podman is needed to run the image: apt-get install podman runc")
}

/// What a pod is given besides its Deployment: the Secrets and ConfigMaps it names, and
/// the addresses of the names it looks up.
pub struct Kubelet {
    netns: String,
    secrets: BTreeMap<String, Files>,
    config_maps: BTreeMap<String, Files>,
    hosts: Vec<(String, String)>,
    image: Option<String>,
}

impl Kubelet {
    /// A kubelet running pods in the network namespace at `netns` (a path).
    pub fn new(netns: String) -> Kubelet {
        Kubelet {
            netns,
            secrets: BTreeMap::new(),
            config_maps: BTreeMap::new(),
            hosts: Vec::new(),
            image: None,
        }
    }

    /// The Secret `name` holds `files`.
    pub fn secret(&mut self, name: &str, files: &[(&str, &[u8])]) -> &mut Self {
        self.secrets.insert(name.into(), to_files(files));
        self
    }

    /// The ConfigMap `name` holds `files`.
    pub fn config_map(&mut self, name: &str, files: &[(&str, &[u8])]) -> &mut Self {
        self.config_maps.insert(name.into(), to_files(files));
        self
    }

    /// Every Secret and ConfigMap among `objects` (`data` base64-decoded, `stringData`).
    pub fn objects(&mut self, objects: &[Value]) -> &mut Self {
        for object in objects {
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let mut files = Files::new();
            for (key, value) in object["data"].as_object().into_iter().flatten() {
                let text = value.as_str().unwrap_or_default();
                let bytes = match object["kind"].as_str() {
                    Some("Secret") => base64::engine::general_purpose::STANDARD
                        .decode(text)
                        .unwrap_or_else(|e| panic!("Secret {name} key {key}: {e}")),
                    _ => text.as_bytes().to_vec(),
                };
                files.insert(key.clone(), bytes);
            }
            for (key, value) in object["stringData"].as_object().into_iter().flatten() {
                files.insert(key.clone(), value.as_str().unwrap_or_default().into());
            }
            match object["kind"].as_str() {
                Some("Secret") => self.secrets.insert(name, files),
                Some("ConfigMap") => self.config_maps.insert(name, files),
                _ => None,
            };
        }
        self
    }

    /// `name` resolves to `ip` in the pod, as a Service's DNS name would.
    pub fn host(&mut self, name: &str, ip: &str) -> &mut Self {
        self.hosts.push((name.into(), ip.into()));
        self
    }

    /// Runs `image` in place of the container's own (Envoy Gateway's Deployment names
    /// the Go server's image; the swap is the one change its users make).
    pub fn image(&mut self, image: &str) -> &mut Self {
        self.image = Some(image.into());
        self
    }

    /// Starts the pod of `deployment` (its first container) and returns at once, as the
    /// kubelet does: probing is the caller's.
    pub fn run(&self, deployment: &Value) -> Pod {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let spec = &deployment["spec"]["template"]["spec"];
        let container = spec["containers"][0].clone();
        let image = self
            .image
            .clone()
            .or_else(|| container["image"].as_str().map(String::from))
            .expect("the container names an image");
        require_image(&image);
        let name = format!(
            "meshlimit-pod-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let volumes = tempfile::Builder::new()
            .prefix("meshlimit-pod-")
            .tempdir()
            .expect("a directory for the pod's volumes");
        let mut args: Vec<String> = ["run", "--detach", "--name", &name]
            .map(String::from)
            .to_vec();
        args.extend(
            [
                &format!("--network=ns:{}", self.netns),
                // podman's defaults are refused here: the test's own limit, as a
                // container runtime passes on its own.
                &format!("--ulimit=nofile={0}:{0}", open_files_limit()),
                "--ulimit=nproc=4096:4096",
                // The kubelet writes no /etc/passwd or /etc/group into the container.
                "--passwd=false",
            ]
            .map(String::from),
        );
        for (host, ip) in &self.hosts {
            args.push(format!("--add-host={host}:{ip}"));
        }
        args.extend(security(
            &container["securityContext"],
            &spec["securityContext"],
        ));
        for (name, value) in self.environment(&container) {
            args.push(format!("--env={name}={value}"));
        }
        let mut mounted = BTreeMap::new();
        for mount in container["volumeMounts"].as_array().into_iter().flatten() {
            let (arg, source) = self.mount(mount, spec, volumes.path());
            args.push(arg);
            if let Some(source) = source {
                mounted.insert(source.0, source.1);
            }
        }
        if let Some(command) = container["command"].as_array() {
            args.push(format!("--entrypoint={}", Value::Array(command.clone())));
        }
        args.push(image);
        for arg in container["args"].as_array().into_iter().flatten() {
            args.push(arg.as_str().expect("args are strings").to_string());
        }
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = podman(&argv);
        assert!(
            out.status.success(),
            "podman {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let grace = spec["terminationGracePeriodSeconds"].as_u64().unwrap_or(30);
        Pod {
            name,
            container,
            grace: Duration::from_secs(grace),
            mounted,
            _volumes: volumes,
            args,
        }
    }

    /// The container's environment, as the kubelet resolves it.
    fn environment(&self, container: &Value) -> Vec<(String, String)> {
        let mut env = Vec::new();
        for var in container["env"].as_array().into_iter().flatten() {
            let name = var["name"].as_str().expect("env names").to_string();
            if let Some(value) = var.get("value") {
                env.push((name, value.as_str().unwrap_or_default().to_string()));
                continue;
            }
            let from = &var["valueFrom"];
            let (store, reference) = if from["secretKeyRef"].is_object() {
                (&self.secrets, &from["secretKeyRef"])
            } else if from["configMapKeyRef"].is_object() {
                (&self.config_maps, &from["configMapKeyRef"])
            } else if let Some(path) = from["fieldRef"]["fieldPath"].as_str() {
                env.push((name, field(path)));
                continue;
            } else {
                panic!("env {name}: unsupported source {from}");
            };
            let object = reference["name"].as_str().unwrap_or_default();
            let key = reference["key"].as_str().unwrap_or_default();
            match store.get(object).and_then(|files| files.get(key)) {
                Some(bytes) => env.push((name, String::from_utf8_lossy(bytes).into_owned())),
                None if reference["optional"] == true => {}
                None => panic!("env {name}: {object}/{key} was not given to the kubelet"),
            }
        }
        for from in container["envFrom"].as_array().into_iter().flatten() {
            let prefix = from["prefix"].as_str().unwrap_or_default();
            let (store, reference) = if from["secretRef"].is_object() {
                (&self.secrets, &from["secretRef"])
            } else {
                (&self.config_maps, &from["configMapRef"])
            };
            let object = reference["name"].as_str().unwrap_or_default();
            for (key, bytes) in store.get(object).into_iter().flatten() {
                env.push((
                    format!("{prefix}{key}"),
                    String::from_utf8_lossy(bytes).into_owned(),
                ));
            }
        }
        env
    }

    /// The `--volume` argument of `mount`, and for a Secret or ConfigMap volume the
    /// directory laid out for it (to swap later) with the object's name.
    fn mount(
        &self,
        mount: &Value,
        spec: &Value,
        root: &Path,
    ) -> (String, Option<(String, PathBuf)>) {
        let name = mount["name"].as_str().expect("volume mounts name a volume");
        let volume = spec["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no volume {name} in {spec}"));
        let host = root.join(name);
        std::fs::create_dir_all(&host).unwrap();
        set_mode(&host, 0o755);
        let mut source = None;
        for (kind, store, field) in [
            ("secret", &self.secrets, "secretName"),
            ("configMap", &self.config_maps, "name"),
        ] {
            if !volume[kind].is_object() {
                continue;
            }
            let object = volume[kind][field].as_str().expect("a named object");
            let files = match store.get(object) {
                Some(files) => files.clone(),
                None if volume[kind]["optional"] == true => Files::new(),
                None => panic!("volume {name}: {kind} {object} was not given to the kubelet"),
            };
            let mode = volume[kind]["defaultMode"].as_u64().unwrap_or(0o644) as u32;
            atomic_write(&host, &files, mode);
            source = Some((object.to_string(), host.clone()));
        }
        if !volume["emptyDir"].is_object() && source.is_none() {
            panic!("volume {name}: only secret, configMap and emptyDir volumes are emulated");
        }
        if volume["emptyDir"].is_object() {
            set_mode(&host, 0o777);
        }
        let path = mount["mountPath"].as_str().expect("a mount path");
        let mut arg = match mount["subPath"].as_str() {
            Some(sub) => format!("--volume={}:{path}", host.join(sub).display()),
            None => format!("--volume={}:{path}", host.display()),
        };
        if mount["readOnly"] == true {
            arg.push_str(":ro");
        }
        (arg, source)
    }
}

/// This process's hard limit on open files.
fn open_files_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    assert_eq!(got, 0, "getrlimit: {}", std::io::Error::last_os_error());
    limit.rlim_max
}

/// `fieldRef` values of a pod with no cluster around it.
fn field(path: &str) -> String {
    match path {
        "metadata.name" => "meshlimit-pod".into(),
        "metadata.namespace" => "default".into(),
        "status.podIP" | "status.hostIP" => "127.0.0.1".into(),
        other => panic!("fieldRef {other} is not emulated"),
    }
}

/// podman options for the container's and the pod's securityContext.
fn security(container: &Value, pod: &Value) -> Vec<String> {
    let pick = |key: &str| {
        let own = &container[key];
        if own.is_null() {
            pod[key].clone()
        } else {
            own.clone()
        }
    };
    let mut args = Vec::new();
    let user = pick("runAsUser");
    let group = pick("runAsGroup");
    if let Some(user) = user.as_u64() {
        match group.as_u64() {
            Some(group) => args.push(format!("--user={user}:{group}")),
            None => args.push(format!("--user={user}")),
        }
    }
    if pick("runAsNonRoot") == true {
        assert!(
            user.as_u64().is_some_and(|u| u != 0),
            "runAsNonRoot without a non-zero runAsUser: the kubelet would check the image's USER"
        );
    }
    if container["readOnlyRootFilesystem"] == true {
        // Kubernetes mounts no tmpfs on /tmp.
        args.push("--read-only".into());
        args.push("--read-only-tmpfs=false".into());
    }
    for cap in container["capabilities"]["drop"]
        .as_array()
        .into_iter()
        .flatten()
    {
        args.push(format!("--cap-drop={}", cap.as_str().unwrap_or_default()));
    }
    for cap in container["capabilities"]["add"]
        .as_array()
        .into_iter()
        .flatten()
    {
        args.push(format!("--cap-add={}", cap.as_str().unwrap_or_default()));
    }
    if container["allowPrivilegeEscalation"] == false {
        args.push("--security-opt=no-new-privileges".into());
    }
    if container["privileged"] == true {
        args.push("--privileged".into());
    }
    args
}

/// Lays out `files` in `dir` as the kubelet's atomic writer does, replacing what was
/// there in one rename: `..<timestamp>/` holds the files, `..data` links to it, each key
/// is a link `key -> ..data/key`.
pub fn atomic_write(dir: &Path, files: &Files, mode: u32) {
    static VERSION: AtomicU32 = AtomicU32::new(0);
    // The kubelet names it after the time; any name unique in the directory will do.
    let version = format!("..version_{}", VERSION.fetch_add(1, Ordering::Relaxed));
    let new = dir.join(&version);
    std::fs::create_dir(&new).unwrap();
    set_mode(&new, 0o755);
    for (key, bytes) in files {
        let path = new.join(key);
        std::fs::write(&path, bytes).unwrap();
        set_mode(&path, mode);
    }
    let old = std::fs::read_link(dir.join("..data")).ok();
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&version, &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
    for key in files.keys() {
        let link = dir.join(key);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new("..data").join(key), &link).unwrap();
        }
    }
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("..") && !files.contains_key(&name) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    if let Some(old) = old {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn to_files(files: &[(&str, &[u8])]) -> Files {
    files
        .iter()
        .map(|&(key, bytes)| (key.to_string(), bytes.to_vec()))
        .collect()
}

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
    name: String,
    container: Value,
    grace: Duration,
    /// Each Secret's or ConfigMap's volume directory, by the object's name.
    mounted: BTreeMap<String, PathBuf>,
    _volumes: TempDir,
    args: Vec<String>,
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
