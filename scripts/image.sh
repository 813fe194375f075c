#!/usr/bin/env bash
# Builds meshlimit's container image without any registry: a release build laid out by
# scripts/image-rootfs.sh (the layout the Containerfile's last stage has) and imported
# with podman, tagged localhost/meshlimit:latest. The tests run this image.
#
#   scripts/image.sh                    cargo build --release, then the image
#   MESHLIMIT_IMAGE_BINARY=PATH scripts/image.sh   the image of a binary already built
#   MESHLIMIT_IMAGE=name:tag scripts/image.sh      another tag
set -euo pipefail
cd "$(dirname "$0")/.."

tag=${MESHLIMIT_IMAGE:-localhost/meshlimit:latest}
binary=${MESHLIMIT_IMAGE_BINARY:-}
if [[ -z $binary ]]; then
    cargo build --release --locked --bin meshlimit
    binary=${CARGO_TARGET_DIR:-target}/release/meshlimit
fi
command -v podman >/dev/null || {
    echo "podman is needed to build the image: apt-get install podman runc" >&2
    exit 1
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
scripts/image-rootfs.sh "$work/rootfs" "$binary"
# Owned by root in the image, as COPY makes them; the server runs as 65534 and only reads.
tar --numeric-owner --owner=0 --group=0 -C "$work/rootfs" -c . |
    podman import --quiet \
        --change 'USER 65534:65534' \
        --change 'EXPOSE 8081' \
        --change 'EXPOSE 8080' \
        --change 'ENTRYPOINT ["/bin/ratelimit"]' \
        - "$tag" >/dev/null
size=$(podman image inspect --format '{{.Size}}' "$tag")
echo "$tag: $((size / 1024 / 1024)) MiB"
