#!/usr/bin/env bash
# Lays out meshlimit's image root in DEST from a release BINARY: the one layout both
# ways of building the image use (the Containerfile's last stage copies it; scripts/image.sh
# imports it). Nothing but what the binary needs:
#   /usr/local/bin/meshlimit        the binary, stripped
#   /bin/ratelimit -> meshlimit     the path Envoy Gateway and Envoy AI Gateway run
#   the C libraries it links (ldd)  libc, libm, libgcc_s and the loader
#   /etc/ssl/certs/ca-certificates.crt   roots for rediss:// and PostgreSQL sslmode=require
#   /etc/passwd, /etc/group         nobody (65534) and root, for tools that name users
# Usage: scripts/image-rootfs.sh DEST BINARY
set -euo pipefail
dest=${1:?usage: image-rootfs.sh DEST BINARY}
binary=${2:?usage: image-rootfs.sh DEST BINARY}

rm -rf "$dest"
mkdir -p "$dest/usr/local/bin" "$dest/bin" "$dest/etc/ssl/certs"
install -s -m 0755 "$binary" "$dest/usr/local/bin/meshlimit"
ln -s /usr/local/bin/meshlimit "$dest/bin/ratelimit"

# Every library the dynamic loader resolves for the binary, at the same path.
libs=$(ldd "$binary" | awk '/=>/ { print $3 } !/=>/ && /^\s*\// { print $1 }')
for lib in $libs; do
    mkdir -p "$dest$(dirname "$lib")"
    cp -L "$lib" "$dest$lib"
done
# The loader is named by its absolute path in the binary (/lib64/ld-linux-x86-64.so.2).
loader=$(readelf -l "$binary" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
mkdir -p "$dest$(dirname "$loader")"
cp -L "$loader" "$dest$loader"

cp -L /etc/ssl/certs/ca-certificates.crt "$dest/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/:/sbin/nologin\nnobody:x:65534:65534:nobody:/:/sbin/nologin\n' >"$dest/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$dest/etc/group"
