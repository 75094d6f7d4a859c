#!/usr/bin/env bash
# Builds the slurm-bridge container image as an OCI image archive without a Docker daemon or a
# registry: from scratch, one layer holding the binary, exactly the shared libraries it needs (from
# ldd, the dynamic loader included), /etc/passwd and /etc/group with the user nonroot (65532),
# /etc/nsswitch.conf, /tmp (1777) and the host's CA bundle when it has one. The image runs as
# 65532:65532 with the entrypoint /slurm-bridge, like the Dockerfile's runtime stage.
#
#   hack/build-image.sh [--binary PATH] [--output FILE] [--tag NAME:TAG] [--no-strip]
#
#   --binary PATH   the slurm-bridge binary (default target/release/slurm-bridge, built with
#                   `cargo build --release -p slurm-bridge` when missing; CARGO_BUILD_JOBS applies)
#   --output FILE   the archive to write (default target/slurm-bridge-image.tar)
#   --tag NAME:TAG  the image's name (default slurm-bridge:<the binary's version>)
#   --no-strip      keep the binary's symbols (by default a stripped copy goes into the image)
#
# The output is deterministic: the same binary and host libraries give the same bytes (sorted
# entries, uid/gid 0, mtimes from SOURCE_DATE_EPOCH, default 0). Load it with
#   skopeo copy oci-archive:target/slurm-bridge-image.tar containers-storage:slurm-bridge:0.1.0
#   podman load -i target/slurm-bridge-image.tar
#   ctr -n k8s.io images import target/slurm-bridge-image.tar   (containerd, as the kubelet's
#                   runtime: named docker.io/library/slurm-bridge:0.1.0, what the kubelet looks up)
# Needs only bash, coreutils, tar, gzip, ldd (and binutils' strip unless --no-strip).
set -euo pipefail
umask 022
export LC_ALL=C

root="$(cd "$(dirname "$0")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
binary=""
output=""
tag=""
strip=1

die() {
  echo "build-image.sh: $*" >&2
  exit 1
}
usage() {
  sed -n '/^#   hack/,/^#   --no-strip/p' "$0" | sed 's/^# \{0,1\}//'
}

while [ $# -gt 0 ]; do
  case "$1" in
    --binary) [ $# -ge 2 ] || die "--binary needs a path"; binary="$2"; shift 2 ;;
    --binary=*) binary="${1#*=}"; shift ;;
    --output) [ $# -ge 2 ] || die "--output needs a file"; output="$2"; shift 2 ;;
    --output=*) output="${1#*=}"; shift ;;
    --tag) [ $# -ge 2 ] || die "--tag needs NAME:TAG"; tag="$2"; shift 2 ;;
    --tag=*) tag="${1#*=}"; shift ;;
    --no-strip) strip=0; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done

for tool in tar gzip sha256sum ldd stat; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is required"
done

if [ -z "$binary" ]; then
  binary="$target_dir/release/slurm-bridge"
  if [ ! -x "$binary" ]; then
    echo "==> $binary is missing: cargo build --release -p slurm-bridge" >&2
    (cd "$root" && cargo build --release -p slurm-bridge --bin slurm-bridge)
  fi
fi
[ -f "$binary" ] && [ -x "$binary" ] || die "no executable binary at $binary"
[ -n "$output" ] || output="$target_dir/slurm-bridge-image.tar"

version_line="$("$binary" --version 2>/dev/null)" || die "$binary --version failed"
version="${version_line##* }"
[[ "$version" =~ ^[0-9A-Za-z.+-]+$ ]] || die "unexpected version line from $binary: $version_line"
[ -n "$tag" ] || tag="slurm-bridge:$version"
# NAME[:TAG]; written verbatim into JSON, so only reference characters are accepted.
[[ "$tag" =~ ^[a-z0-9]([a-z0-9._/:-]*[a-z0-9_])?$ ]] || die "invalid --tag: $tag"
[[ "${tag##*/}" == *:* ]] || tag="$tag:latest"

case "$(uname -m)" in
  x86_64 | amd64) arch=amd64; variant="" ;;
  aarch64 | arm64) arch=arm64; variant=v8 ;;
  armv7l | armv7*) arch=arm; variant=v7 ;;
  armv6l) arch=arm; variant=v6 ;;
  i386 | i486 | i586 | i686) arch=386; variant="" ;;
  ppc64le) arch=ppc64le; variant="" ;;
  s390x) arch=s390x; variant="" ;;
  riscv64) arch=riscv64; variant="" ;;
  loongarch64) arch=loong64; variant="" ;;
  *) die "unsupported machine $(uname -m)" ;;
esac

epoch="${SOURCE_DATE_EPOCH:-0}"
[[ "$epoch" =~ ^[0-9]+$ ]] || die "SOURCE_DATE_EPOCH must be seconds since 1970"
created="$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)"

work="$(mktemp -d "${TMPDIR:-/tmp}/slurm-bridge-image.XXXXXX")"
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"
layout="$work/layout"
mkdir -p "$rootfs" "$layout/blobs/sha256"

# --- the root file system -------------------------------------------------------------------
if [ "$strip" = 1 ] && command -v strip >/dev/null 2>&1; then
  strip -o "$rootfs/slurm-bridge" "$binary" || die "strip $binary failed (try --no-strip)"
else
  cp "$binary" "$rootfs/slurm-bridge"
fi
chmod 0755 "$rootfs/slurm-bridge"

# Shared libraries and the loader, each at the path ldd resolved it to (the loader's is the
# binary's PT_INTERP, so it must be exactly there).
if ldd_out="$(ldd "$binary" 2>&1)"; then
  libs=()
  while read -r line; do
    case "$line" in
      linux-vdso* | linux-gate*) continue ;;
      *"not found"*) die "$binary needs a library the host lacks: $line" ;;
      *" => "*) path="${line#* => }"; path="${path%% (*}" ;;
      /*) path="${line%% (*}" ;;
      *) continue ;;
    esac
    [ -n "$path" ] || continue
    case "$path" in /*) ;; *) die "ldd gave a relative path: $line" ;; esac
    libs+=("$path")
  done <<<"$ldd_out"
  [ "${#libs[@]}" -gt 0 ] || die "ldd listed no libraries for a dynamic binary: $ldd_out"
  for lib in "${libs[@]}"; do
    mkdir -p "$rootfs$(dirname "$lib")"
    cp -L "$lib" "$rootfs$lib"
  done
elif [[ "$ldd_out" == *"not a dynamic executable"* || "$ldd_out" == *"statically linked"* ]]; then
  libs=()
else
  die "ldd $binary failed: $ldd_out"
fi

mkdir -p "$rootfs/etc/ssl/certs" "$rootfs/tmp"
chmod 1777 "$rootfs/tmp"
cat >"$rootfs/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin
EOF
cat >"$rootfs/etc/group" <<'EOF'
root:x:0:
nonroot:x:65532:
EOF
printf 'hosts: files dns\n' >"$rootfs/etc/nsswitch.conf"
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  cp -L /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
  chmod 0644 "$rootfs/etc/ssl/certs/ca-certificates.crt"
else
  echo "build-image.sh: warning: no /etc/ssl/certs/ca-certificates.crt on this host; the image has no CA bundle" >&2
fi
find "$rootfs" -type d ! -path "$rootfs/tmp" -exec chmod 0755 {} +

# --- the layer: one tar, sorted, fixed mtime, owned by 0:0 -----------------------------------
deterministic_tar() { # DIR OUTPUT ENTRIES...
  local dir="$1" out="$2"
  shift 2
  tar --create --file "$out" --directory "$dir" --format=ustar --sort=name \
    --mtime="@$epoch" --owner=0 --group=0 --numeric-owner --no-acls --no-xattrs --no-selinux \
    "$@"
}
mapfile -t top < <(find "$rootfs" -mindepth 1 -maxdepth 1 -printf '%P\n' | sort)
deterministic_tar "$rootfs" "$work/layer.tar" "${top[@]}"
diff_id="$(sha256sum "$work/layer.tar" | cut -d' ' -f1)"
gzip -n -6 -c "$work/layer.tar" >"$work/layer.tar.gz"
rm -f "$work/layer.tar"
layer_digest="$(sha256sum "$work/layer.tar.gz" | cut -d' ' -f1)"
layer_size="$(stat -c %s "$work/layer.tar.gz")"
mv "$work/layer.tar.gz" "$layout/blobs/sha256/$layer_digest"

# --- config, manifest, index ----------------------------------------------------------------
add_blob() { # FILE -> prints "DIGEST SIZE", moves it into the layout
  local digest size
  digest="$(sha256sum "$1" | cut -d' ' -f1)"
  size="$(stat -c %s "$1")"
  mv "$1" "$layout/blobs/sha256/$digest"
  echo "$digest $size"
}

variant_field=""
[ -z "$variant" ] || variant_field=",\"variant\":\"$variant\""
printf '%s' \
  "{\"created\":\"$created\",\"architecture\":\"$arch\"$variant_field,\"os\":\"linux\"," \
  "\"config\":{\"User\":\"65532:65532\"," \
  "\"Env\":[\"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\"]," \
  "\"Entrypoint\":[\"/slurm-bridge\"],\"Cmd\":[\"--help\"],\"WorkingDir\":\"/\"," \
  "\"Labels\":{\"org.opencontainers.image.title\":\"slurm-bridge\",\"org.opencontainers.image.version\":\"$version\"}}," \
  "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:$diff_id\"]}," \
  "\"history\":[{\"created\":\"$created\",\"created_by\":\"hack/build-image.sh\"}]}" \
  >"$work/config.json"
read -r config_digest config_size < <(add_blob "$work/config.json")

printf '%s' \
  "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\"," \
  "\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"sha256:$config_digest\",\"size\":$config_size}," \
  "\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\",\"digest\":\"sha256:$layer_digest\",\"size\":$layer_size}]," \
  "\"annotations\":{\"org.opencontainers.image.title\":\"slurm-bridge\",\"org.opencontainers.image.version\":\"$version\",\"org.opencontainers.image.created\":\"$created\"}}" \
  >"$work/manifest.json"
read -r manifest_digest manifest_size < <(add_blob "$work/manifest.json")

# The full name the tag stands for (as Docker and the kubelet read a familiar name such as
# slurm-bridge:0.1.0: docker.io/library/slurm-bridge:0.1.0), for containerd's import (`ctr images
# import`, which takes the OCI ref.name verbatim, so the kubelet would never find the image).
case "${tag%%/*}" in
  "$tag") full_name="docker.io/library/$tag" ;;
  *.* | *:* | localhost) full_name="$tag" ;;
  *) full_name="docker.io/$tag" ;;
esac

printf '%s' \
  "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\"," \
  "\"manifests\":[{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"sha256:$manifest_digest\",\"size\":$manifest_size," \
  "\"platform\":{\"architecture\":\"$arch\",\"os\":\"linux\"$variant_field}," \
  "\"annotations\":{\"io.containerd.image.name\":\"$full_name\",\"org.opencontainers.image.ref.name\":\"$tag\"}}]}" \
  >"$layout/index.json"
printf '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"

# --- the archive ----------------------------------------------------------------------------
mkdir -p "$(dirname "$output")"
deterministic_tar "$layout" "$work/image.tar" oci-layout index.json blobs
mv -f "$work/image.tar" "$output"

echo "wrote $output ($(stat -c %s "$output") bytes): $tag ($arch), manifest sha256:$manifest_digest, layer $layer_size bytes gzip" >&2
echo "  libraries: ${libs[*]:-none (static binary)}" >&2
echo "  load it: skopeo copy oci-archive:$output containers-storage:$tag   or   podman load -i $output" >&2
