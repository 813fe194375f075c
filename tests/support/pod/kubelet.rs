//! The [`Kubelet`]: a Deployment's first container started under podman as the kubelet
//! starts it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use base64::Engine;
use serde_json::Value;

use super::volume::{atomic_write, set_mode, to_files};
use super::{Files, Pod, podman, require_image};

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
        if !out.status.success() {
            // A container podman created but could not start would stay behind.
            let _ = podman(&["rm", "--force", "--time", "0", &name]);
            panic!("podman {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
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
