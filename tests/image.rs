//! The container image `scripts/image.sh` builds (`localhost/meshlimit:latest`): the Go
//! server's contract (ENTRYPOINT `/bin/ratelimit` with no arguments, user 65534), the
//! binary at both paths, small, and runnable read-only with every capability dropped.
//! The same layout as the Containerfile's, whose last stage is checked against it.

mod support;

use support::pod::{IMAGE, podman, require_image};

/// Bound on the image's size (the issue's): distroless-sized.
const MAX_BYTES: u64 = 40 * 1024 * 1024;

fn inspect(format: &str) -> String {
    let out = podman(&["image", "inspect", "--format", format, IMAGE]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn the_image_is_the_go_servers_contract_and_small() {
    require_image(IMAGE);
    assert_eq!(inspect("{{.Config.User}}"), "65534:65534");
    assert_eq!(
        inspect("{{json .Config.Entrypoint}}"),
        r#"["/bin/ratelimit"]"#
    );
    assert!(
        matches!(inspect("{{json .Config.Cmd}}").as_str(), "null" | "[]"),
        "no CMD: the Go drop-in takes no arguments"
    );
    let size: u64 = inspect("{{.Size}}").parse().unwrap();
    assert!(size <= MAX_BYTES, "{IMAGE} is {size} bytes");
}

#[test]
fn both_paths_run_read_only_as_nobody_without_capabilities() {
    require_image(IMAGE);
    for path in ["/usr/local/bin/meshlimit", "/bin/ratelimit"] {
        let out = podman(&[
            "run",
            "--rm",
            "--network=none",
            "--read-only",
            "--read-only-tmpfs=false",
            "--passwd=false",
            "--user=65534:65534",
            "--cap-drop=ALL",
            "--security-opt=no-new-privileges",
            "--ulimit=nofile=1024:1024",
            "--ulimit=nproc=1024:1024",
            &format!("--entrypoint={path}"),
            IMAGE,
            "--version",
        ]);
        assert!(
            out.status.success(),
            "{path} --version: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("meshlimit {}", env!("CARGO_PKG_VERSION")),
            "{path}"
        );
    }
}

/// The Containerfile ends as `scripts/image.sh` makes the image: the same root, user
/// and ENTRYPOINT (it cannot be built here: no registry serves its builder).
#[test]
fn the_containerfile_makes_the_same_image() {
    let containerfile = include_str!("../Containerfile");
    let image_sh = include_str!("../scripts/image.sh");
    let last_stage = containerfile
        .rsplit_once("\nFROM ")
        .map(|(_, stage)| stage)
        .expect("stages");
    assert!(last_stage.starts_with("scratch\n"), "{last_stage}");
    for line in [
        "COPY --from=build /rootfs/ /",
        "USER 65534:65534",
        "ENTRYPOINT [\"/bin/ratelimit\"]",
    ] {
        assert!(
            last_stage.contains(line),
            "Containerfile's last stage lacks {line}"
        );
    }
    assert!(containerfile.contains("scripts/image-rootfs.sh /rootfs target/release/meshlimit"));
    for change in ["'USER 65534:65534'", "'ENTRYPOINT [\"/bin/ratelimit\"]'"] {
        assert!(image_sh.contains(change), "scripts/image.sh lacks {change}");
    }
    assert!(image_sh.contains("scripts/image-rootfs.sh"));
}
