//! Runs the Go toolchain for [`crate::binaries`]: one `go build` per module (every command of
//! the module at once, so Go compiles their shared packages once and links them in parallel),
//! with a progress line every 20 s, into a folder renamed into the cache only when complete.

use crate::binaries::GoModule;
use crate::error::{Error, Result, tail_of};
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The Go command: `KUBE_TESTENV_GO`, else `go` on PATH, else Go's default install location.
pub(crate) fn go_command() -> String {
    if let Ok(go) = std::env::var("KUBE_TESTENV_GO") {
        return go;
    }
    let on_path = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("go").is_file()));
    let default = Path::new("/usr/local/go/bin/go");
    if !on_path && default.is_file() {
        return default.display().to_string();
    }
    "go".into()
}

/// The Go version in use (`go env GOVERSION`), part of every cache key.
pub(crate) fn go_version() -> Result<String> {
    let out = Command::new(go_command())
        .args(["env", "GOVERSION"])
        .output()
        .map_err(|e| Error::GoMissing {
            message: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(Error::GoMissing {
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `GOFLAGS` of every Go command here.
const GOFLAGS: &str = "-buildvcs=false -mod=readonly";

/// A `go` command in `dir` with the cache's module and build caches and the local toolchain.
fn go(dir: &Path, cache: &Path) -> Command {
    let mut cmd = Command::new(go_command());
    cmd.current_dir(dir)
        .env("GOMODCACHE", cache.join("gomod"))
        .env("GOCACHE", cache.join("gocache"))
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", GOFLAGS);
    cmd
}

/// Empties Go's build and module caches under `cache` (`go clean -cache -modcache`), keeping
/// the built binaries: a CI machine needs the disk more than the next rebuild's speed.
pub(crate) fn prune_caches(cache: &Path) -> Result<()> {
    let status = go(cache, cache)
        .args(["clean", "-cache", "-modcache"])
        .stdin(Stdio::null())
        .status()
        .map_err(|e| Error::GoMissing {
            message: e.to_string(),
        })?;
    if !status.success() {
        return Err(Error::Invalid(format!(
            "go clean -cache -modcache in {} failed ({status})",
            cache.display()
        )));
    }
    Ok(())
}

/// Builds every command of `module` into `out` (renamed into place when complete).
pub(crate) fn build(module: &GoModule, cache: &Path, out: &Path, go_version: &str) -> Result<()> {
    let src = cache.join("src").join(module.name);
    let _ = fs::remove_dir_all(&src);
    fs::create_dir_all(&src).map_err(Error::io(format!("create {}", src.display())))?;
    for (name, text) in module.files {
        fs::write(src.join(name), text).map_err(Error::io(format!("write {name}")))?;
    }
    let tmp = out.with_extension(format!("tmp{}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp).map_err(Error::io(format!("create {}", tmp.display())))?;
    eprintln!(
        "kube-testenv: building {} from {} with {go_version} (first time only; cached in {})",
        module.binaries().join(", "),
        module.pinned(),
        cache.display()
    );
    go_build(module, &src, &tmp, cache)?;
    for (from, to) in module.manifests {
        copy_manifests(module, &src, cache, from, &tmp.join(to))?;
    }
    fs::write(tmp.join(".complete"), format!("{go_version}\n"))
        .map_err(Error::io("mark build complete"))?;
    let _ = fs::remove_dir_all(out);
    fs::rename(&tmp, out).map_err(Error::io(format!("rename into {}", out.display())))?;
    Ok(())
}

/// One `go build` of all of `module`'s commands: `-o FILE` for a single command, `-o DIR/` for
/// several (Go names each binary after its package's last path element, which
/// [`GoModule::commands`] must match; a test checks it).
fn go_build(module: &GoModule, src: &Path, out: &Path, cache: &Path) -> Result<()> {
    let log_path = cache.join(format!("build-{}.log", module.name));
    let mut log =
        fs::File::create(&log_path).map_err(Error::io(format!("create {}", log_path.display())))?;
    let mut cmd = go(src, cache);
    cmd.args(["build", "-v"])
        .arg(format!("-ldflags={}", module.ldflags));
    if !module.tags.is_empty() {
        cmd.arg(format!("-tags={}", module.tags));
    }
    if module.no_cgo {
        cmd.env("CGO_ENABLED", "0");
    }
    match module.commands {
        [(binary, package)] => cmd.arg("-o").arg(out.join(binary)).arg(package),
        commands => cmd
            .arg("-o")
            .arg(format!("{}/", out.display()))
            .args(commands.iter().map(|(_, p)| *p)),
    };
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::GoMissing {
            message: e.to_string(),
        })?;
    let started = Instant::now();
    let mut last_report = Instant::now();
    let mut packages = 0usize;
    if let Some(stderr) = child.stderr.take() {
        for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
            let _ = writeln!(log, "{line}");
            packages += 1;
            if last_report.elapsed() >= Duration::from_secs(20) {
                eprintln!(
                    "kube-testenv: building {}: {packages} packages, {:.0} s (about {} s expected)",
                    module.name,
                    started.elapsed().as_secs_f64(),
                    module.expected_secs
                );
                last_report = Instant::now();
            }
        }
    }
    let status = child
        .wait()
        .map_err(Error::io(format!("wait for go build of {}", module.name)))?;
    let missing = module
        .binaries()
        .into_iter()
        .find(|b| !out.join(b).is_file());
    if !status.success() || missing.is_some() {
        let status = match missing {
            Some(b) if status.success() => format!("{status}, but no binary {b} was written"),
            _ => status.to_string(),
        };
        return Err(Error::Build {
            binary: module.binaries().join(", "),
            module: module.pinned(),
            status,
            tail: tail_of(&log_path, 30),
            log: log_path,
        });
    }
    eprintln!(
        "kube-testenv: built {} in {:.0} s",
        module.binaries().join(", "),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Copies the `*.yaml` files (not `kustomization.yaml`) of `from` in the required module's
/// source (as `go list -m` finds it in the module cache) into `to`.
fn copy_manifests(
    module: &GoModule,
    src: &Path,
    cache: &Path,
    from: &str,
    to: &Path,
) -> Result<()> {
    let required = module.pinned();
    let path = required.split(' ').next().unwrap_or_default();
    let out = go(src, cache)
        .args(["list", "-m", "-f", "{{.Dir}}", path])
        .output()
        .map_err(|e| Error::GoMissing {
            message: e.to_string(),
        })?;
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || dir.is_empty() {
        return Err(Error::Invalid(format!(
            "go list -m {path}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let from_dir = PathBuf::from(&dir).join(from);
    fs::create_dir_all(to).map_err(Error::io(format!("create {}", to.display())))?;
    let entries =
        fs::read_dir(&from_dir).map_err(Error::io(format!("read {}", from_dir.display())))?;
    let mut copied = 0;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.ends_with(".yaml") && name != "kustomization.yaml" {
            fs::copy(e.path(), to.join(&name)).map_err(Error::io(format!("copy {name}")))?;
            copied += 1;
        }
    }
    if copied == 0 {
        return Err(Error::Invalid(format!(
            "{required}: no manifests in {}",
            from_dir.display()
        )));
    }
    Ok(())
}
