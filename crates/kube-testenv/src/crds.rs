//! CustomResourceDefinitions every instance has: the coscheduling PodGroup (written here, as
//! sigs.k8s.io/scheduler-plugins is not served by the module proxy), and JobSet and
//! LeaderWorkerSet as their controllers' modules ship them; Kueue's and Trainer's only with
//! their controllers, read from the `crds/` folder their build copied from the module.

use crate::error::{Error, Result};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams};
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

/// `(file, YAML)` of each CRD, embedded from `crds/`.
pub const CRDS: &[(&str, &str)] = &[
    (
        "scheduling.x-k8s.io_podgroups.yaml",
        include_str!("../crds/scheduling.x-k8s.io_podgroups.yaml"),
    ),
    (
        "jobset.x-k8s.io_jobsets.yaml",
        include_str!("../crds/jobset.x-k8s.io_jobsets.yaml"),
    ),
    (
        "leaderworkerset.x-k8s.io_leaderworkersets.yaml",
        include_str!("../crds/leaderworkerset.x-k8s.io_leaderworkersets.yaml"),
    ),
];

/// CRDs only the workload controllers need: LeaderWorkerSet v0.9 always watches DisaggregatedSets.
pub const WORKLOAD_CRDS: &[(&str, &str)] = &[(
    "disaggregatedset.x-k8s.io_disaggregatedsets.yaml",
    include_str!("../crds/disaggregatedset.x-k8s.io_disaggregatedsets.yaml"),
)];

/// Parses one embedded CRD.
pub fn parse(file: &str, yaml: &str) -> Result<CustomResourceDefinition> {
    serde_saphyr::from_str(yaml).map_err(|e| Error::Invalid(format!("CRD {file}: {e}")))
}

/// Reads every `*.yaml` CRD in `dir` (a controller's `crds/` in the binary cache).
pub fn read_dir(dir: &Path) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let entries = fs::read_dir(dir).map_err(Error::io(format!("read {}", dir.display())))?;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.ends_with(".yaml") {
            let text = fs::read_to_string(e.path())
                .map_err(Error::io(format!("read {}", e.path().display())))?;
            out.push((name, text));
        }
    }
    out.sort();
    Ok(out)
}

/// Applies every CRD (server-side, so a restart or a second instance is harmless), those of the
/// workload controllers and the `(file, YAML)` pairs of `more`, and waits until each is
/// Established.
pub async fn install(
    client: &kube::Client,
    workload_controllers: bool,
    more: &[(String, String)],
) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let pp = PatchParams::apply("kube-testenv").force();
    let mut names = Vec::new();
    let extra = if workload_controllers {
        WORKLOAD_CRDS
    } else {
        &[]
    };
    let all = CRDS
        .iter()
        .chain(extra)
        .map(|(f, y)| (*f, *y))
        .chain(more.iter().map(|(f, y)| (f.as_str(), y.as_str())));
    for (file, yaml) in all {
        let crd = parse(file, yaml)?;
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &pp, &Patch::Apply(&crd))
            .await
            .map_err(Error::kube(format!("apply CRD {file}")))?;
        names.push(name);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for name in names {
        loop {
            let crd = api
                .get(&name)
                .await
                .map_err(Error::kube(format!("read CRD {name}")))?;
            let established = crd
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            if established {
                break;
            }
            if Instant::now() > deadline {
                return Err(Error::Invalid(format!(
                    "CRD {name} not Established within 60 s"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_embedded_crd_parses_and_has_a_schema() {
        for (file, yaml) in CRDS.iter().chain(WORKLOAD_CRDS) {
            let crd = parse(file, yaml).unwrap();
            assert!(!crd.spec.versions.is_empty(), "{file}");
            for v in &crd.spec.versions {
                assert!(v.schema.is_some(), "{file} {} has no schema", v.name);
            }
        }
    }
}
