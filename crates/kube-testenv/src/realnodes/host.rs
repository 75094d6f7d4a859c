//! What the kubelet nodes need from the host besides the Go builds: Debian's `runc` and
//! `containernetworking-plugins` (installed with apt-get when missing), and the test image, a
//! busybox-static root fs written as a docker archive and cached.

use crate::error::{Error, Result, tail_of};
use crate::paths::cache_dir;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The image `up` announces as `KUBE_TESTENV_IMAGE`: busybox (a POSIX shell and the usual
/// commands in `/bin`), on every kubelet node. No registry serves it: pods use it with
/// `imagePullPolicy: IfNotPresent` (the default for a tag other than `latest`) or `Never`.
pub const IMAGE: &str = "kube-testenv.local/busybox:1";

/// The pod sandbox ("pause") image of the kubelet nodes: the same root fs, running a shell that
/// waits for SIGTERM.
pub const PAUSE_IMAGE: &str = "kube-testenv.local/pause:1";

/// runc, from Debian's package (containerd's runc shim runs it).
pub(crate) const RUNC: &str = "/usr/sbin/runc";
/// The CNI plugins of Debian's `containernetworking-plugins` (bridge, host-local, loopback).
pub(crate) const CNI_BIN_DIR: &str = "/usr/lib/cni";

/// The Debian packages the kubelet nodes use, with a file each installs.
const PACKAGES: [(&str, &str); 2] = [
    ("runc", RUNC),
    ("containernetworking-plugins", "/usr/lib/cni/bridge"),
];

/// Installs `runc` and `containernetworking-plugins` with apt-get (after `apt-get update`)
/// unless present.
pub fn ensure_packages() -> Result<()> {
    let missing: Vec<&str> = PACKAGES
        .iter()
        .filter(|(_, file)| !Path::new(file).exists())
        .map(|(p, _)| *p)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!(
        "kube-testenv: installing {} with apt-get (kubelet nodes)",
        missing.join(" ")
    );
    apt(&format!(
        "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q {}",
        missing.join(" ")
    ))
}

fn apt(script: &str) -> Result<()> {
    let cache = cache_dir();
    fs::create_dir_all(&cache).map_err(Error::io(format!("create {}", cache.display())))?;
    let log = cache.join("apt.log");
    let out = fs::File::create(&log).map_err(Error::io(format!("create {}", log.display())))?;
    let status = Command::new("sh")
        .args(["-c", script])
        .stdin(Stdio::null())
        .stdout(out.try_clone().map_err(Error::io("dup log"))?)
        .stderr(out)
        .status()
        .map_err(Error::io("run apt-get"))?;
    if !status.success() {
        return Err(Error::Invalid(format!(
            "`{script}` failed ({status}); log {}:\n{}",
            log.display(),
            tail_of(&log, 20)
        )));
    }
    Ok(())
}

/// Bump to rebuild the cached image archive.
const IMAGE_VERSION: u32 = 1;

/// The image archive (both [`IMAGE`] and [`PAUSE_IMAGE`]), built once from Debian's
/// `busybox-static` package (`apt-get download`, `dpkg-deb -x`: nothing is installed on the
/// host) and cached in `images/` of the cache folder.
pub fn image_archive() -> Result<PathBuf> {
    let dir = cache_dir().join("images");
    fs::create_dir_all(&dir).map_err(Error::io(format!("create {}", dir.display())))?;
    let out = dir.join(format!("busybox-v{IMAGE_VERSION}.tar"));
    if out.is_file() {
        return Ok(out);
    }
    let lock_path = dir.join(".lock");
    let lock = fs::File::create(&lock_path)
        .map_err(Error::io(format!("create {}", lock_path.display())))?;
    lock.lock()
        .map_err(Error::io(format!("lock {}", lock_path.display())))?;
    if out.is_file() {
        return Ok(out);
    }
    let work = dir.join(format!("build-{}", std::process::id()));
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).map_err(Error::io(format!("create {}", work.display())))?;
    let built = build_archive(&work, &out);
    let _ = fs::remove_dir_all(&work);
    built.map(|()| out)
}

/// Runs `cmd` (stdin closed); a failure names `what` and carries its stderr. Returns stdout.
pub(super) fn run(what: &str, cmd: &mut Command) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(Error::io(format!("run {what}")))?;
    if !out.status.success() {
        return Err(Error::Invalid(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn sha256_hex(data: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, data)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn build_archive(work: &Path, out: &Path) -> Result<()> {
    eprintln!("kube-testenv: building the test image {IMAGE} from Debian's busybox-static");
    let download = |work: &Path| {
        run(
            "apt-get download busybox-static",
            Command::new("apt-get")
                .args(["download", "-q", "busybox-static"])
                .current_dir(work),
        )
    };
    if download(work).is_err() {
        // The package lists may be missing or stale.
        apt("apt-get update -q")?;
        download(work)?;
    }
    let deb = fs::read_dir(work)
        .map_err(Error::io("read the download folder"))?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .ok_or_else(|| Error::Invalid("apt-get download busybox-static wrote no .deb".into()))?;
    let extracted = work.join("deb");
    run(
        "dpkg-deb -x",
        Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&extracted),
    )?;
    let busybox = ["bin/busybox", "usr/bin/busybox"]
        .iter()
        .map(|p| extracted.join(p))
        .find(|p| p.is_file())
        .ok_or_else(|| Error::Invalid("busybox-static's package has no busybox binary".into()))?;

    let root = work.join("rootfs");
    for d in [
        "bin", "etc", "tmp", "proc", "sys", "dev", "root", "var", "usr",
    ] {
        fs::create_dir_all(root.join(d)).map_err(Error::io("create the image's folders"))?;
    }
    fs::copy(&busybox, root.join("bin/busybox")).map_err(Error::io("copy busybox"))?;
    let applets = run("busybox --list", Command::new(&busybox).arg("--list"))?;
    for applet in applets.lines().map(str::trim) {
        if applet.is_empty() || applet == "busybox" || applet.contains('/') {
            continue;
        }
        std::os::unix::fs::symlink("busybox", root.join("bin").join(applet))
            .map_err(Error::io(format!("link applet {applet}")))?;
    }
    std::os::unix::fs::symlink("../bin", root.join("usr/bin")).ok();
    fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
    )
    .map_err(Error::io("write etc/passwd"))?;
    fs::write(root.join("etc/group"), "root:x:0:\nnogroup:x:65534:\n")
        .map_err(Error::io("write etc/group"))?;
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(root.join("tmp"), fs::Permissions::from_mode(0o1777))
        .map_err(Error::io("chmod tmp"))?;

    let archive = work.join("archive");
    fs::create_dir_all(&archive).map_err(Error::io("create the archive folder"))?;
    let layer = archive.join("layer.tar");
    run(
        "tar (image layer)",
        Command::new("tar")
            .args([
                "--numeric-owner",
                "--owner=0",
                "--group=0",
                "--sort=name",
                "--mtime=@0",
                "-C",
            ])
            .arg(&root)
            .arg("-cf")
            .arg(&layer)
            .arg("."),
    )?;
    let layer_bytes = fs::read(&layer).map_err(Error::io("read the layer"))?;
    let diff_id = format!("sha256:{}", sha256_hex(&layer_bytes));
    let layer_dir = sha256_hex(&layer_bytes);
    fs::create_dir_all(archive.join(&layer_dir)).map_err(Error::io("create the layer folder"))?;
    fs::rename(&layer, archive.join(&layer_dir).join("layer.tar"))
        .map_err(Error::io("move the layer"))?;

    let pause_script = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done";
    let images = [
        (IMAGE, serde_json::json!({"Cmd": ["sh"]})),
        (
            PAUSE_IMAGE,
            serde_json::json!({"Entrypoint": ["/bin/sh", "-c", pause_script]}),
        ),
    ];
    let mut manifest = Vec::new();
    let mut names = vec!["manifest.json".to_string(), layer_dir.clone()];
    for (reference, extra) in images {
        let mut config = serde_json::json!({
            "Env": ["PATH=/bin:/usr/bin"],
            "WorkingDir": "/",
        });
        if let (Some(c), Some(e)) = (config.as_object_mut(), extra.as_object()) {
            c.extend(e.clone());
        }
        let image = serde_json::json!({
            "architecture": "amd64",
            "os": "linux",
            "created": "1970-01-01T00:00:00Z",
            "config": config,
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "kube-testenv: busybox-static"}],
        });
        let bytes = serde_json::to_vec(&image).expect("image config serializes");
        let file = format!("{}.json", sha256_hex(&bytes));
        fs::write(archive.join(&file), &bytes).map_err(Error::io("write the image config"))?;
        manifest.push(serde_json::json!({
            "Config": file,
            "RepoTags": [reference],
            "Layers": [format!("{layer_dir}/layer.tar")],
        }));
        names.push(file);
    }
    fs::write(
        archive.join("manifest.json"),
        serde_json::to_vec(&manifest).expect("manifest serializes"),
    )
    .map_err(Error::io("write manifest.json"))?;
    let tmp = out.with_extension(format!("tmp{}", std::process::id()));
    run(
        "tar (image archive)",
        Command::new("tar")
            .args(["--numeric-owner", "--owner=0", "--group=0", "-C"])
            .arg(&archive)
            .arg("-cf")
            .arg(&tmp)
            .args(&names),
    )?;
    fs::rename(&tmp, out).map_err(Error::io(format!("rename into {}", out.display())))?;
    Ok(())
}
