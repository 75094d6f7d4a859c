//! Builds Kubernetes' own components from pinned Go modules (embedded from `go/`) once, and
//! caches the binaries by a hash of the module files and the Go version.

use crate::error::{Error, Result, tail_of};
use crate::paths::cache_dir;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One pinned Go module and the commands built from it.
pub struct GoModule {
    /// Folder name under `go/` and in the cache.
    pub name: &'static str,
    /// Files of the module (`go.mod`, `go.sum`, Go sources), embedded at compile time.
    files: &'static [(&'static str, &'static str)],
    /// `(binary, package)` pairs to build.
    pub commands: &'static [(&'static str, &'static str)],
    /// Linker flags (the version a binary reports, as Kubernetes' own build stamps it).
    ldflags: &'static str,
    /// About how long a first build takes on 2 cores (measured 2026-12-01, modules downloaded
    /// once), for the progress line.
    pub expected_secs: u64,
    /// `(folder in the module's source, folder in the cache)`: manifests (CRDs) copied next to
    /// the binaries at build time, so an instance needs only `bin/` and the pins decide both.
    manifests: &'static [(&'static str, &'static str)],
}

macro_rules! module_files {
    ($dir:literal: $($file:literal),+) => {
        &[$(($file, include_str!(concat!("../go/", $dir, "/", $file)))),+]
    };
}

/// kube-apiserver, kube-controller-manager, kube-scheduler and kubectl from k8s.io/kubernetes.
pub const KUBERNETES: GoModule = GoModule {
    name: "kubernetes",
    files: module_files!("kubernetes": "go.mod", "go.sum", "tools.go"),
    commands: &[
        ("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver"),
        (
            "kube-controller-manager",
            "k8s.io/kubernetes/cmd/kube-controller-manager",
        ),
        ("kube-scheduler", "k8s.io/kubernetes/cmd/kube-scheduler"),
        ("kubectl", "k8s.io/kubernetes/cmd/kubectl"),
    ],
    ldflags: concat!(
        "-s -w",
        " -X k8s.io/component-base/version.gitVersion=v1.36.3",
        " -X k8s.io/component-base/version.gitMajor=1",
        " -X k8s.io/component-base/version.gitMinor=36",
        " -X k8s.io/component-base/version.gitTreeState=clean",
        " -X k8s.io/client-go/pkg/version.gitVersion=v1.36.3",
        " -X k8s.io/client-go/pkg/version.gitMajor=1",
        " -X k8s.io/client-go/pkg/version.gitMinor=36",
        " -X k8s.io/client-go/pkg/version.gitTreeState=clean",
    ),
    expected_secs: 670,
    manifests: &[],
};

/// The etcd server from go.etcd.io/etcd/server/v3.
pub const ETCD: GoModule = GoModule {
    name: "etcd",
    files: module_files!("etcd": "go.mod", "go.sum", "main.go"),
    commands: &[("etcd", ".")],
    ldflags: "-s -w",
    expected_secs: 50,
    manifests: &[],
};

/// The JobSet controller manager (its main package is the module root).
pub const JOBSET: GoModule = GoModule {
    name: "jobset",
    files: module_files!("jobset": "go.mod", "go.sum", "tools.go"),
    commands: &[("jobset-controller", "sigs.k8s.io/jobset")],
    ldflags: "-s -w -X sigs.k8s.io/jobset/pkg/version.GitVersion=v0.12.0",
    expected_secs: 130,
    manifests: &[],
};

/// The LeaderWorkerSet controller manager.
pub const LWS: GoModule = GoModule {
    name: "lws",
    files: module_files!("lws": "go.mod", "go.sum", "tools.go"),
    commands: &[("lws-controller", "sigs.k8s.io/lws/cmd")],
    ldflags: "-s -w -X sigs.k8s.io/lws/pkg/version.GitVersion=v0.9.0",
    expected_secs: 170,
    manifests: &[],
};

/// The Kubeflow Trainer controller manager (v2); its CRDs come from the module's
/// `manifests/base/crds`. It creates JobSets, so it runs with the JobSet controller.
pub const TRAINER: GoModule = GoModule {
    name: "trainer",
    files: module_files!("trainer": "go.mod", "go.sum", "tools.go"),
    commands: &[(
        "trainer-controller-manager",
        "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager",
    )],
    ldflags: "-s -w",
    manifests: &[("manifests/base/crds", "crds")],
    expected_secs: 190,
};

/// The Kueue controller manager; its CRDs come from the module's `config/components/crd/bases`.
pub const KUEUE: GoModule = GoModule {
    name: "kueue",
    files: module_files!("kueue": "go.mod", "go.sum", "tools.go"),
    commands: &[("kueue", "sigs.k8s.io/kueue/cmd/kueue")],
    ldflags: "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=v0.17.0",
    manifests: &[("config/components/crd/bases", "crds")],
    expected_secs: 450,
};

/// Helm 3, for the chart tests (`helm lint`, `helm template`, `helm install`). Its k8s.io
/// libraries are the ones helm pins (v0.37), independent of the control plane's module.
pub const HELM: GoModule = GoModule {
    name: "helm",
    files: module_files!("helm": "go.mod", "go.sum", "tools.go"),
    commands: &[("helm", "helm.sh/helm/v3/cmd/helm")],
    ldflags: concat!(
        "-s -w",
        " -X helm.sh/helm/v3/internal/version.version=v3.22.0",
        " -X helm.sh/helm/v3/internal/version.gitTreeState=clean",
        " -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1",
        " -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=36",
        " -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1",
        " -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=36",
    ),
    expected_secs: 180,
    manifests: &[],
};

/// The `helm` binary, built (once, cached) from [`HELM`].
pub fn helm() -> Result<PathBuf> {
    Ok(ensure(&HELM)?.join("helm"))
}

impl GoModule {
    fn text(&self, file: &str) -> &'static str {
        self.files
            .iter()
            .find(|(f, _)| *f == file)
            .map(|(_, t)| *t)
            .unwrap_or("")
    }

    /// The first `require`d module and version, to name in messages.
    pub fn pinned(&self) -> String {
        let gomod = self.text("go.mod");
        let mut in_block = false;
        for line in gomod.lines().map(str::trim) {
            if let Some(rest) = line.strip_prefix("require ") {
                if rest.trim() == "(" {
                    in_block = true;
                    continue;
                }
                return rest
                    .split_whitespace()
                    .take(2)
                    .collect::<Vec<_>>()
                    .join(" ");
            }
            if in_block && !line.is_empty() && !line.starts_with("//") {
                return line
                    .split_whitespace()
                    .take(2)
                    .collect::<Vec<_>>()
                    .join(" ");
            }
        }
        self.name.to_string()
    }

    fn key(&self, go_version: &str) -> String {
        // FNV-1a: only needs to change when the inputs change.
        let mut h: u64 = 0xcbf29ce484222325;
        let mut feed = |b: &[u8]| {
            for x in b {
                h ^= u64::from(*x);
                h = h.wrapping_mul(0x100000001b3);
            }
        };
        feed(go_version.as_bytes());
        feed(self.ldflags.as_bytes());
        for (name, text) in self.files {
            feed(name.as_bytes());
            feed(text.as_bytes());
        }
        for (bin, pkg) in self.commands {
            feed(bin.as_bytes());
            feed(pkg.as_bytes());
        }
        for (from, to) in self.manifests {
            feed(from.as_bytes());
            feed(to.as_bytes());
        }
        format!("{h:016x}")
    }
}

/// The Go command: `KUBE_TESTENV_GO`, else `go` on PATH, else Go's default install location.
fn go_command() -> String {
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

fn go_version() -> Result<String> {
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

/// Every tool `kube-testenv prepare` builds, by the name `--only` takes.
pub const TOOLS: [(&str, &GoModule); 7] = [
    ("kubernetes", &KUBERNETES),
    ("etcd", &ETCD),
    ("jobset", &JOBSET),
    ("lws", &LWS),
    ("trainer", &TRAINER),
    ("kueue", &KUEUE),
    ("helm", &HELM),
];

/// The tools named in `names` (every tool when empty), in [`TOOLS`] order; an unknown name is
/// an error naming the accepted ones.
pub fn tools(names: &[String]) -> Result<Vec<(&'static str, &'static GoModule)>> {
    let accepted = || TOOLS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ");
    if let Some(bad) = names.iter().find(|n| !TOOLS.iter().any(|(t, _)| t == n)) {
        return Err(Error::Invalid(format!(
            "unknown tool {bad:?} for --only: use a comma-separated list of {}",
            accepted()
        )));
    }
    Ok(TOOLS
        .iter()
        .filter(|(t, _)| names.is_empty() || names.iter().any(|n| n == t))
        .copied()
        .collect())
}

/// True when the cache holds `module`'s binaries for the Go in use.
pub fn is_cached(module: &GoModule) -> Result<bool> {
    let out =
        cache_dir()
            .join("bin")
            .join(format!("{}-{}", module.name, module.key(&go_version()?)));
    Ok(out.join(".complete").exists())
}

/// Builds (or finds cached) each tool, with one progress line per tool before it: cached, or
/// building with its expected time; returns their folders.
pub fn prepare_tools(tools: &[(&str, &GoModule)]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for (i, (name, module)) in tools.iter().enumerate() {
        let binaries: Vec<&str> = module.commands.iter().map(|(b, _)| *b).collect();
        let what = format!(
            "kube-testenv: [{}/{}] {name} ({})",
            i + 1,
            tools.len(),
            binaries.join(", ")
        );
        if is_cached(module)? {
            eprintln!("{what}: cached");
        } else {
            eprintln!(
                "{what}: building, about {} min on 2 cores the first time",
                module.expected_secs.div_ceil(60)
            );
        }
        out.push(ensure(module)?);
    }
    Ok(out)
}

/// Returns the folder holding `module`'s binaries, building them first if the cache lacks them.
/// Parallel callers (test processes) wait on a lock instead of building twice.
pub fn ensure(module: &GoModule) -> Result<PathBuf> {
    let cache = cache_dir();
    let bin_root = cache.join("bin");
    fs::create_dir_all(&bin_root).map_err(Error::io(format!("create {}", bin_root.display())))?;
    let go_version = go_version()?;
    let out = bin_root.join(format!("{}-{}", module.name, module.key(&go_version)));
    if out.join(".complete").exists() {
        return Ok(out);
    }
    let lock_path = bin_root.join(format!(".{}.lock", module.name));
    let lock = fs::File::create(&lock_path)
        .map_err(Error::io(format!("create {}", lock_path.display())))?;
    lock.lock()
        .map_err(Error::io(format!("lock {}", lock_path.display())))?;
    if out.join(".complete").exists() {
        return Ok(out);
    }
    build(module, &cache, &out, &go_version)?;
    Ok(out)
}

fn build(module: &GoModule, cache: &Path, out: &Path, go_version: &str) -> Result<()> {
    let src = cache.join("src").join(module.name);
    let _ = fs::remove_dir_all(&src);
    fs::create_dir_all(&src).map_err(Error::io(format!("create {}", src.display())))?;
    for (name, text) in module.files {
        fs::write(src.join(name), text).map_err(Error::io(format!("write {name}")))?;
    }
    let tmp = out.with_extension(format!("tmp{}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp).map_err(Error::io(format!("create {}", tmp.display())))?;
    let started = Instant::now();
    eprintln!(
        "kube-testenv: building {} from {} with {go_version} (first time only; cached in {})",
        module
            .commands
            .iter()
            .map(|(b, _)| *b)
            .collect::<Vec<_>>()
            .join(", "),
        module.pinned(),
        cache.display()
    );
    for (binary, package) in module.commands {
        build_one(module, &src, &tmp, cache, binary, package)?;
    }
    for (from, to) in module.manifests {
        copy_manifests(module, &src, cache, from, &tmp.join(to))?;
    }
    fs::write(tmp.join(".complete"), format!("{go_version}\n"))
        .map_err(Error::io("mark build complete"))?;
    let _ = fs::remove_dir_all(out);
    fs::rename(&tmp, out).map_err(Error::io(format!("rename into {}", out.display())))?;
    if module.commands.len() > 1 {
        eprintln!(
            "kube-testenv: built {} in {:.0} s",
            module.name,
            started.elapsed().as_secs_f64()
        );
    }
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
    let out = Command::new(go_command())
        .current_dir(src)
        .args(["list", "-m", "-f", "{{.Dir}}", path])
        .env("GOMODCACHE", cache.join("gomod"))
        .env("GOCACHE", cache.join("gocache"))
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-buildvcs=false -mod=readonly")
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
    let from_dir = Path::new(&dir).join(from);
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

fn build_one(
    module: &GoModule,
    src: &Path,
    out: &Path,
    cache: &Path,
    binary: &str,
    package: &str,
) -> Result<()> {
    let log_path = cache.join(format!("build-{binary}.log"));
    let mut log =
        fs::File::create(&log_path).map_err(Error::io(format!("create {}", log_path.display())))?;
    let mut child = Command::new(go_command())
        .current_dir(src)
        .args(["build", "-v"])
        .arg(format!("-ldflags={}", module.ldflags))
        .arg("-o")
        .arg(out.join(binary))
        .arg(package)
        .env("GOMODCACHE", cache.join("gomod"))
        .env("GOCACHE", cache.join("gocache"))
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-buildvcs=false -mod=readonly")
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
                    "kube-testenv: building {binary}: {packages} packages, {:.0} s",
                    started.elapsed().as_secs_f64()
                );
                last_report = Instant::now();
            }
        }
    }
    let status = child
        .wait()
        .map_err(Error::io(format!("wait for go build {binary}")))?;
    if !status.success() {
        return Err(Error::Build {
            binary: binary.into(),
            module: module.pinned(),
            status: status.to_string(),
            tail: tail_of(&log_path, 30),
            log: log_path,
        });
    }
    eprintln!(
        "kube-testenv: built {binary} in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_names_the_required_module() {
        assert_eq!(KUBERNETES.pinned(), "k8s.io/kubernetes v1.36.3");
        assert!(ETCD.pinned().starts_with("go.etcd.io/etcd/server/v3 v3.6."));
    }

    #[test]
    fn kubernetes_binaries_report_the_pinned_version() {
        let version = KUBERNETES.pinned().split(' ').nth(1).unwrap().to_string();
        assert!(
            KUBERNETES
                .ldflags
                .contains(&format!("gitVersion={version} "))
        );
        assert!(
            JOBSET
                .ldflags
                .ends_with(JOBSET.pinned().split(' ').nth(1).unwrap())
        );
    }

    #[test]
    fn helm_reports_the_pinned_version() {
        let version = HELM.pinned().split(' ').nth(1).unwrap().to_string();
        assert_eq!(HELM.pinned(), "helm.sh/helm/v3 v3.22.0");
        assert!(
            HELM.ldflags
                .contains(&format!("version.version={version} "))
        );
    }

    #[test]
    fn trainer_and_kueue_are_pinned() {
        assert_eq!(TRAINER.pinned(), "github.com/kubeflow/trainer/v2 v2.0.0");
        assert_eq!(KUEUE.pinned(), "sigs.k8s.io/kueue v0.17.0");
        assert!(
            KUEUE
                .ldflags
                .ends_with(KUEUE.pinned().split(' ').nth(1).unwrap())
        );
    }

    #[test]
    fn key_depends_on_go_version() {
        assert_ne!(ETCD.key("go1.26.8"), ETCD.key("go1.26.9"));
        assert_eq!(ETCD.key("go1.26.8"), ETCD.key("go1.26.8"));
    }
}

#[cfg(test)]
mod tool_tests {
    use super::*;

    #[test]
    fn only_names_known_tools_in_their_order() {
        let names = |v: &[&str]| -> Vec<&str> {
            let v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
            tools(&v).unwrap().into_iter().map(|(n, _)| n).collect()
        };
        assert_eq!(
            names(&[]),
            [
                "kubernetes",
                "etcd",
                "jobset",
                "lws",
                "trainer",
                "kueue",
                "helm"
            ]
        );
        assert_eq!(names(&["etcd", "kubernetes"]), ["kubernetes", "etcd"]);
        let Err(err) = tools(&["kube".to_string()]) else {
            panic!("an unknown tool is refused");
        };
        let err = err.to_string();
        assert!(
            err.contains("\"kube\"")
                && err.contains("kubernetes, etcd, jobset, lws, trainer, kueue, helm"),
            "{err}"
        );
    }
}
