//! The container image built without a Docker daemon: `hack/build-image.sh` packs the (debug)
//! binary into an OCI image archive; this test checks the archive's layout (index → manifest →
//! config, every digest and size against its content, the layer's diff_id), that the build is
//! reproducible, then unpacks the layer into a root file system and runs the image's entrypoint
//! `/slurm-bridge --version` in it with `chroot` as the image's user, 65532:65532.
//!
//! It needs root (for chroot) and fails, not skips, without it.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::SystemTime;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_slurm-bridge");
const VERSION: &str = env!("CARGO_PKG_VERSION");
const PATH_ENV: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A temporary folder removed when dropped, also when the test panics.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "sb-image-test-{tag}-{}-{}",
            std::process::id(),
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn effective_uid() -> u32 {
    let status = fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .expect("Uid: line in /proc/self/status");
    line.split_whitespace()
        .nth(2)
        .and_then(|euid| euid.parse().ok())
        .expect("effective uid in /proc/self/status")
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(cmd: &mut Command) -> String {
    String::from_utf8(run(cmd).stdout).expect("utf-8 output")
}

fn sha256(path: &Path) -> String {
    let out = stdout(Command::new("sha256sum").arg(path));
    out.split_whitespace()
        .next()
        .expect("sha256sum output")
        .to_string()
}

fn build_image(output: &Path) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hack/build-image.sh");
    run(Command::new("bash")
        .arg(&script)
        .arg("--binary")
        .arg(BIN)
        .arg("--output")
        .arg(output)
        .env_remove("SOURCE_DATE_EPOCH"));
}

/// The blob a descriptor points at, after checking its media type, digest and size.
fn blob(layout: &Path, descriptor: &Value, media_type: &str) -> PathBuf {
    assert_eq!(descriptor["mediaType"], media_type, "{descriptor}");
    let digest = descriptor["digest"].as_str().expect("digest");
    let hex = digest
        .strip_prefix("sha256:")
        .unwrap_or_else(|| panic!("digest is not sha256: {digest}"));
    let path = layout.join("blobs/sha256").join(hex);
    assert!(path.is_file(), "blob {digest} missing from the archive");
    assert_eq!(
        sha256(&path),
        hex,
        "blob {digest}: content does not match its digest"
    );
    let size = fs::metadata(&path).unwrap().len();
    assert_eq!(
        descriptor["size"].as_u64(),
        Some(size),
        "blob {digest}: size in its descriptor"
    );
    path
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&fs::read(path).unwrap())
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        "loongarch64" => "loong64",
        other => other,
    }
}

#[test]
fn image_archive_runs_slurm_bridge_version_as_nonroot() {
    assert_eq!(
        effective_uid(),
        0,
        "the image test unpacks the image and runs its binary with chroot, which needs root: \
         run it as root (e.g. `sudo -E cargo test -p slurm-bridge --test image`)"
    );
    let tmp = TempDir::new("build");
    let archive = tmp.0.join("slurm-bridge-image.tar");
    build_image(&archive);

    // The same binary gives the same bytes.
    let again = tmp.0.join("again.tar");
    build_image(&again);
    assert!(
        fs::read(&archive).unwrap() == fs::read(&again).unwrap(),
        "two builds of the same binary differ: the image is not reproducible"
    );
    fs::remove_file(&again).unwrap();

    // The OCI image layout.
    let layout = tmp.0.join("layout");
    fs::create_dir(&layout).unwrap();
    let mut entries: Vec<String> = stdout(Command::new("tar").arg("-tf").arg(&archive))
        .lines()
        .map(str::to_string)
        .collect();
    run(Command::new("tar")
        .arg("-xf")
        .arg(&archive)
        .arg("-C")
        .arg(&layout));
    fs::remove_file(&archive).unwrap();
    entries.retain(|e| !e.starts_with("blobs/"));
    assert_eq!(entries, ["oci-layout", "index.json"], "archive top level");
    assert_eq!(
        json(&layout.join("oci-layout"))["imageLayoutVersion"],
        "1.0.0"
    );

    let index = json(&layout.join("index.json"));
    assert_eq!(index["schemaVersion"], 2);
    let manifests = index["manifests"].as_array().expect("index manifests");
    assert_eq!(manifests.len(), 1, "{index}");
    assert_eq!(
        manifests[0]["annotations"]["org.opencontainers.image.ref.name"],
        format!("slurm-bridge:{VERSION}")
    );
    // containerd's import names the image by this (the kubelet looks up the full name).
    assert_eq!(
        manifests[0]["annotations"]["io.containerd.image.name"],
        format!("docker.io/library/slurm-bridge:{VERSION}")
    );
    assert_eq!(manifests[0]["platform"]["os"], "linux");
    assert_eq!(manifests[0]["platform"]["architecture"], oci_arch());

    let manifest = json(&blob(
        &layout,
        &manifests[0],
        "application/vnd.oci.image.manifest.v1+json",
    ));
    assert_eq!(manifest["schemaVersion"], 2);
    let config = json(&blob(
        &layout,
        &manifest["config"],
        "application/vnd.oci.image.config.v1+json",
    ));
    assert_eq!(config["os"], "linux");
    assert_eq!(config["architecture"], oci_arch());
    assert_eq!(config["config"]["User"], "65532:65532");
    let entrypoint: Vec<&str> = config["config"]["Entrypoint"]
        .as_array()
        .expect("Entrypoint")
        .iter()
        .map(|a| a.as_str().expect("Entrypoint string"))
        .collect();
    assert_eq!(entrypoint, ["/slurm-bridge"]);
    assert_eq!(config["rootfs"]["type"], "layers");

    let layers = manifest["layers"].as_array().expect("manifest layers");
    let diff_ids = config["rootfs"]["diff_ids"].as_array().expect("diff_ids");
    assert_eq!(layers.len(), 1, "{manifest}");
    assert_eq!(diff_ids.len(), 1, "{config}");
    let layer_gz = blob(
        &layout,
        &layers[0],
        "application/vnd.oci.image.layer.v1.tar+gzip",
    );
    let layer = tmp.0.join("layer.tar");
    run(Command::new("gzip")
        .arg("-dc")
        .arg(&layer_gz)
        .stdout(Stdio::from(fs::File::create(&layer).unwrap())));
    assert_eq!(
        diff_ids[0],
        format!("sha256:{}", sha256(&layer)),
        "diff_id is the uncompressed layer's digest"
    );
    fs::remove_dir_all(&layout).unwrap();

    // The layer: owned by root, fixed mtimes, only the binary, libraries and a few /etc files.
    let listing = stdout(
        Command::new("tar")
            .args(["--numeric-owner", "--full-time", "-tvf"])
            .arg(&layer)
            .env("TZ", "UTC"),
    );
    let mut names = Vec::new();
    for line in listing.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert!(fields.len() >= 6, "unexpected tar listing line: {line}");
        assert_eq!(fields[1], "0/0", "not owned by 0:0: {line}");
        assert_eq!(fields[3], "1970-01-01", "mtime not fixed: {line}");
        let name = fields[5..].join(" ");
        if fields[0].starts_with('-') {
            assert!(
                name == "slurm-bridge"
                    || ["etc/passwd", "etc/group", "etc/nsswitch.conf"].contains(&name.as_str())
                    || name == "etc/ssl/certs/ca-certificates.crt"
                    || (name.starts_with("lib") || name.starts_with("usr/lib"))
                        && name.contains(".so"),
                "unexpected file in the image: {line}"
            );
        }
        names.push(name);
    }
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "layer entries are not sorted");
    for needed in ["slurm-bridge", "etc/passwd", "etc/group", "tmp/"] {
        assert!(
            names.iter().any(|n| n == needed),
            "{needed} missing:\n{listing}"
        );
    }

    let root = tmp.0.join("root");
    fs::create_dir(&root).unwrap();
    run(Command::new("tar")
        .args(["--numeric-owner", "-xpf"])
        .arg(&layer)
        .arg("-C")
        .arg(&root));
    fs::remove_file(&layer).unwrap();
    let tmp_mode = fs::metadata(root.join("tmp")).unwrap().permissions().mode() & 0o7777;
    assert_eq!(tmp_mode, 0o1777, "/tmp mode {tmp_mode:o}");
    let passwd = fs::read_to_string(root.join("etc/passwd")).unwrap();
    assert!(
        passwd
            .lines()
            .any(|l| l.starts_with("nonroot:x:65532:65532:")),
        "{passwd}"
    );
    let group = fs::read_to_string(root.join("etc/group")).unwrap();
    assert!(
        group.lines().any(|l| l.starts_with("nonroot:x:65532:")),
        "{group}"
    );

    // The entrypoint, as the image's user, with nothing but the image's files.
    let user = config["config"]["User"].as_str().unwrap();
    let out = stdout(
        Command::new("chroot")
            .arg(format!("--userspec={user}"))
            .arg(&root)
            .args(&entrypoint)
            .arg("--version")
            .env_clear()
            .env("PATH", PATH_ENV),
    );
    assert!(
        out.contains("slurm-bridge") && out.contains(VERSION),
        "`/slurm-bridge --version` in the image printed {out:?}, expected slurm-bridge {VERSION}"
    );
    let cmd: Vec<&str> = config["config"]["Cmd"]
        .as_array()
        .map(|c| c.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let help = stdout(
        Command::new("chroot")
            .arg(format!("--userspec={user}"))
            .arg(&root)
            .args(&entrypoint)
            .args(&cmd)
            .env_clear()
            .env("PATH", PATH_ENV),
    );
    assert!(
        help.contains("Usage"),
        "the image's default command {entrypoint:?} {cmd:?} printed {help:?}"
    );
}
