//! Builds Kubernetes' own components from pinned Go modules (embedded from `go/`) once, and
//! caches the binaries by a hash of everything that shapes them: the module files, the
//! commands, the linker flags, the manifests and the Go version (the build itself is
//! [`crate::gobuild`]).

use crate::error::{Error, Result};
use crate::gobuild::{self, go_version};
use crate::paths::cache_dir;
use std::fs;
use std::path::PathBuf;

/// One pinned Go module and the commands built from it.
pub struct GoModule {
    /// Folder name under `go/` and in the cache.
    pub name: &'static str,
    /// Files of the module (`go.mod`, `go.sum`, Go sources), embedded at compile time.
    pub(crate) files: &'static [(&'static str, &'static str)],
    /// `(binary, package)` pairs to build, all in one `go build`.
    pub commands: &'static [(&'static str, &'static str)],
    /// Linker flags (the version a binary reports, as Kubernetes' own build stamps it).
    pub(crate) ldflags: &'static str,
    /// About how long a first build takes on 2 idle cores, module downloads included (from the
    /// CPU seconds measured 2026-12-01, docs/performance.md), for the progress line.
    pub expected_secs: u64,
    /// `(folder in the module's source, folder in the cache)`: manifests (CRDs) copied next to
    /// the binaries at build time, so an instance needs only `bin/` and the pins decide both.
    pub(crate) manifests: &'static [(&'static str, &'static str)],
    /// Build tags (`go build -tags`), empty for none.
    pub(crate) tags: &'static str,
    /// Build without cgo (`CGO_ENABLED=0`), as containerd's release builds its static binaries.
    pub(crate) no_cgo: bool,
}

macro_rules! module_files {
    ($dir:literal: $($file:literal),+) => {
        &[$(($file, include_str!(concat!("../go/", $dir, "/", $file)))),+]
    };
}

/// The module files of k8s.io/kubernetes, shared by [`KUBERNETES`] and [`KUBE_SCHEDULER`].
const KUBERNETES_FILES: &[(&str, &str)] =
    module_files!("kubernetes": "go.mod", "go.sum", "tools.go");

/// The version stamps Kubernetes' own build puts into its binaries.
const KUBERNETES_LDFLAGS: &str = concat!(
    "-s -w",
    " -X k8s.io/component-base/version.gitVersion=v1.36.3",
    " -X k8s.io/component-base/version.gitMajor=1",
    " -X k8s.io/component-base/version.gitMinor=36",
    " -X k8s.io/component-base/version.gitTreeState=clean",
    " -X k8s.io/client-go/pkg/version.gitVersion=v1.36.3",
    " -X k8s.io/client-go/pkg/version.gitMajor=1",
    " -X k8s.io/client-go/pkg/version.gitMinor=36",
    " -X k8s.io/client-go/pkg/version.gitTreeState=clean",
);

/// kube-apiserver, kube-controller-manager and kubectl from k8s.io/kubernetes: what every
/// instance runs (kubectl for `exec` and the demo).
pub const KUBERNETES: GoModule = GoModule {
    name: "kubernetes",
    files: KUBERNETES_FILES,
    commands: &[
        ("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver"),
        (
            "kube-controller-manager",
            "k8s.io/kubernetes/cmd/kube-controller-manager",
        ),
        ("kubectl", "k8s.io/kubernetes/cmd/kubectl"),
    ],
    ldflags: KUBERNETES_LDFLAGS,
    expected_secs: 390,
    manifests: &[],
    tags: "",
    no_cgo: false,
};

/// kube-scheduler, from the same module as [`KUBERNETES`] (so its build reuses their compiled
/// packages): only for `up --kube-scheduler` (tests and the benchmark), not the demo.
pub const KUBE_SCHEDULER: GoModule = GoModule {
    name: "kube-scheduler",
    files: KUBERNETES_FILES,
    commands: &[("kube-scheduler", "k8s.io/kubernetes/cmd/kube-scheduler")],
    ldflags: KUBERNETES_LDFLAGS,
    expected_secs: 40,
    manifests: &[],
    tags: "",
    no_cgo: false,
};

/// kubelet, from the same module as [`KUBERNETES`] (its build reuses their compiled packages):
/// only for `up --kubelet-nodes` (real nodes).
pub const KUBELET: GoModule = GoModule {
    name: "kubelet",
    files: KUBERNETES_FILES,
    commands: &[("kubelet", "k8s.io/kubernetes/cmd/kubelet")],
    ldflags: KUBERNETES_LDFLAGS,
    expected_secs: 60,
    manifests: &[],
    tags: "",
    no_cgo: false,
};

/// Kubernetes' own DRA test driver (`k8s.io/kubernetes/test/e2e/dra/test-driver`), from the same
/// module as [`KUBERNETES`] (its build reuses their compiled packages): a DRA driver that is not
/// the bridge's, for tests on kubelet nodes. Its `kubelet-plugin` subcommand publishes
/// `--num-devices` devices `device-00` .. (no attributes) in one pool named after the node, and
/// prepares a claim by writing a CDI spec that sets `claim_<claim>_<request>=true` in the
/// containers. Its module files are [`KUBERNETES_FILES`] and `dra_test_driver.go` (the import
/// that pins it), so the other Kubernetes tools keep their cache keys.
pub const DRA_TEST_DRIVER: GoModule = GoModule {
    name: "dra-test-driver",
    files: module_files!("kubernetes": "go.mod", "go.sum", "tools.go", "dra_test_driver.go"),
    commands: &[(
        "dra-test-driver",
        "k8s.io/kubernetes/test/e2e/dra/test-driver",
    )],
    ldflags: KUBERNETES_LDFLAGS,
    // After kubelet: 11 packages of its own and a link (alone, from an empty Go build cache,
    // about 3 min: the 857 packages it needs).
    expected_secs: 20,
    manifests: &[],
    tags: "",
    no_cgo: false,
};

/// The DRA test driver's binary ([`DRA_TEST_DRIVER`]), built first if the cache lacks it.
pub fn dra_test_driver() -> Result<PathBuf> {
    Ok(ensure(&DRA_TEST_DRIVER)?.join("dra-test-driver"))
}

/// containerd 2.x (with NRI), its runc shim and `ctr`, built as containerd's release builds its
/// static binaries (no cgo, no btrfs, devmapper or zfs snapshotters): the container runtime of
/// the kubelet nodes. runc itself and the CNI plugins come from Debian's packages.
pub const CONTAINERD: GoModule = GoModule {
    name: "containerd",
    files: module_files!("containerd": "go.mod", "go.sum", "tools.go"),
    commands: &[
        (
            "containerd",
            "github.com/containerd/containerd/v2/cmd/containerd",
        ),
        (
            "containerd-shim-runc-v2",
            "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
        ),
        ("ctr", "github.com/containerd/containerd/v2/cmd/ctr"),
    ],
    ldflags: "-s -w -X github.com/containerd/containerd/v2/version.Version=v2.4.2",
    expected_secs: 120,
    manifests: &[],
    tags: "no_btrfs no_devmapper no_zfs",
    no_cgo: true,
};

/// The etcd server from go.etcd.io/etcd/server/v3.
pub const ETCD: GoModule = GoModule {
    name: "etcd",
    files: module_files!("etcd": "go.mod", "go.sum", "main.go"),
    commands: &[("etcd", ".")],
    ldflags: "-s -w",
    expected_secs: 60,
    manifests: &[],
    tags: "",
    no_cgo: false,
};

/// The JobSet controller manager (its main package is the module root).
pub const JOBSET: GoModule = GoModule {
    name: "jobset",
    files: module_files!("jobset": "go.mod", "go.sum", "tools.go"),
    commands: &[("jobset-controller", "sigs.k8s.io/jobset")],
    ldflags: "-s -w -X sigs.k8s.io/jobset/pkg/version.GitVersion=v0.12.0",
    expected_secs: 130,
    manifests: &[],
    tags: "",
    no_cgo: false,
};

/// The LeaderWorkerSet controller manager.
pub const LWS: GoModule = GoModule {
    name: "lws",
    files: module_files!("lws": "go.mod", "go.sum", "tools.go"),
    commands: &[("lws-controller", "sigs.k8s.io/lws/cmd")],
    ldflags: "-s -w -X sigs.k8s.io/lws/pkg/version.GitVersion=v0.9.0",
    expected_secs: 170,
    manifests: &[],
    tags: "",
    no_cgo: false,
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
    tags: "",
    no_cgo: false,
};

/// The Kueue controller manager; its CRDs come from the module's `config/components/crd/bases`.
pub const KUEUE: GoModule = GoModule {
    name: "kueue",
    files: module_files!("kueue": "go.mod", "go.sum", "tools.go"),
    commands: &[("kueue", "sigs.k8s.io/kueue/cmd/kueue")],
    ldflags: "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=v0.17.0",
    manifests: &[("config/components/crd/bases", "crds")],
    expected_secs: 450,
    tags: "",
    no_cgo: false,
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
    tags: "",
    no_cgo: false,
};

/// The `helm` binary, built (once, cached) from [`HELM`].
pub fn helm() -> Result<PathBuf> {
    Ok(ensure(&HELM)?.join("helm"))
}

impl GoModule {
    /// The names of the binaries built.
    pub fn binaries(&self) -> Vec<&'static str> {
        self.commands.iter().map(|(b, _)| *b).collect()
    }

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
        let mut h = fnv::FnvHasher::default();
        let mut feed = |b: &[u8]| std::hash::Hasher::write(&mut h, b);
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
        if !self.tags.is_empty() || self.no_cgo {
            feed(self.tags.as_bytes());
            feed(if self.no_cgo { b"cgo=0" } else { b"cgo=1" });
        }
        format!("{:016x}", std::hash::Hasher::finish(&h))
    }
}

/// Every tool `kube-testenv prepare` builds, by the name `--only` takes.
pub const TOOLS: [(&str, &GoModule); 11] = [
    ("kubernetes", &KUBERNETES),
    ("kube-scheduler", &KUBE_SCHEDULER),
    ("kubelet", &KUBELET),
    ("dra-test-driver", &DRA_TEST_DRIVER),
    ("containerd", &CONTAINERD),
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

/// How many tools build at once: two, so one's module download and link overlap the other's
/// compiling, without more compilers than 2 cores can run.
const PARALLEL_BUILDS: usize = 2;

/// Builds (or finds cached) each tool, with one progress line per tool first: cached, or
/// building with its expected time; returns their folders in `tools` order. Up to
/// [`PARALLEL_BUILDS`] modules build at once; tools of one Go module (kubernetes and
/// kube-scheduler) build one after the other, so the second reuses the first's packages.
pub fn prepare_tools(tools: &[(&str, &GoModule)]) -> Result<Vec<PathBuf>> {
    for (i, (name, module)) in tools.iter().enumerate() {
        let what = format!(
            "kube-testenv: [{}/{}] {name} ({})",
            i + 1,
            tools.len(),
            module.binaries().join(", ")
        );
        if is_cached(module)? {
            eprintln!("{what}: cached");
        } else {
            eprintln!(
                "{what}: building, about {} on 2 cores the first time",
                minutes(module.expected_secs)
            );
        }
    }
    // Groups of tool indices sharing a go.mod, in order of their first tool.
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, (_, module)) in tools.iter().enumerate() {
        match groups
            .iter_mut()
            .find(|g| tools[g[0]].1.text("go.mod") == module.text("go.mod"))
        {
            Some(g) => g.push(i),
            None => groups.push(vec![i]),
        }
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(tools.iter().map(|_| None).collect::<Vec<_>>());
    std::thread::scope(|scope| {
        for _ in 0..PARALLEL_BUILDS.min(groups.len()) {
            scope.spawn(|| {
                while let Some(group) =
                    groups.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                {
                    for &i in group {
                        let built = ensure(tools[i].1);
                        let failed = built.is_err();
                        results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(built);
                        if failed {
                            break;
                        }
                    }
                }
            });
        }
    });
    let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    let mut out = Vec::new();
    for (i, built) in results.into_iter().enumerate() {
        match built {
            Some(dir) => out.push(dir?),
            None => {
                return Err(Error::Invalid(format!(
                    "{} was not built: an earlier tool of its Go module failed",
                    tools[i].0
                )));
            }
        }
    }
    Ok(out)
}

/// Empties the Go build and module caches once every tool is built (`prepare --prune`): about
/// 11 GB a CI machine gets back; the binaries stay cached.
pub fn prune_go_caches() -> Result<()> {
    crate::gobuild::prune_caches(&cache_dir())
}

/// `"N min"` (rounded up), or seconds under a minute, for progress lines.
fn minutes(secs: u64) -> String {
    if secs < 60 {
        format!("{secs} s")
    } else {
        format!("{} min", secs.div_ceil(60))
    }
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
    gobuild::build(module, &cache, &out, &go_version)?;
    Ok(out)
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

    /// A module of several commands is built with `go build -o DIR/`, which names each binary
    /// after its package's last path element: the names must agree.
    #[test]
    fn several_commands_are_named_as_go_names_them() {
        for (tool, module) in TOOLS {
            if module.commands.len() > 1 {
                for (binary, package) in module.commands {
                    assert_eq!(package.rsplit('/').next(), Some(*binary), "{tool}");
                }
            }
        }
    }

    /// The demo's set leaves kube-scheduler out, and the two share the module and its stamps.
    #[test]
    fn kube_scheduler_is_a_tool_of_its_own() {
        assert!(!KUBERNETES.binaries().contains(&"kube-scheduler"));
        assert_eq!(KUBE_SCHEDULER.binaries(), ["kube-scheduler"]);
        assert_eq!(KUBE_SCHEDULER.pinned(), KUBERNETES.pinned());
        assert_eq!(KUBE_SCHEDULER.ldflags, KUBERNETES.ldflags);
        assert_ne!(KUBE_SCHEDULER.key("go1.26.8"), KUBERNETES.key("go1.26.8"));
    }

    #[test]
    fn kubelet_and_containerd_are_pinned() {
        assert_eq!(KUBELET.pinned(), KUBERNETES.pinned());
        assert_eq!(
            CONTAINERD.pinned(),
            "github.com/containerd/containerd/v2 v2.4.2"
        );
        assert!(
            CONTAINERD
                .ldflags
                .ends_with(CONTAINERD.pinned().split(' ').nth(1).unwrap())
        );
        assert!(
            KUBERNETES_FILES
                .iter()
                .any(|(_, text)| text.contains("k8s.io/kubernetes/cmd/kubelet"))
        );
    }

    /// The DRA test driver comes from the Kubernetes module, and its own pin file leaves the
    /// other Kubernetes tools' files (and so their cached binaries) as they were.
    #[test]
    fn the_dra_test_driver_is_pinned_beside_kubelet() {
        assert_eq!(DRA_TEST_DRIVER.pinned(), KUBERNETES.pinned());
        assert_eq!(DRA_TEST_DRIVER.text("go.mod"), KUBERNETES.text("go.mod"));
        assert_eq!(DRA_TEST_DRIVER.ldflags, KUBERNETES.ldflags);
        assert!(
            DRA_TEST_DRIVER
                .files
                .iter()
                .any(|(_, text)| text.contains("k8s.io/kubernetes/test/e2e/dra/test-driver"))
        );
        assert!(
            !KUBERNETES_FILES
                .iter()
                .any(|(_, text)| text.contains("test/e2e/dra"))
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
                "kube-scheduler",
                "kubelet",
                "dra-test-driver",
                "containerd",
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
                && err.contains(
                    "kubernetes, kube-scheduler, kubelet, dra-test-driver, containerd, etcd, jobset, lws, trainer, kueue, helm"
                ),
            "{err}"
        );
    }
}
