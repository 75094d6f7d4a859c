//! CDI (Container Device Interface) specs of prepared claims: one file per claim in the folder
//! containerd reads (`cdi_spec_dirs`), one CDI device per claim whose container edits set
//! `DRA_CPUS=<cpu list>`, so the container sees the CPUs it was given. The spec's annotations
//! also record the claim (namespace, name, uid, pods, CPUs): after a restart the agent reads
//! them back as the claims it prepared.

use super::{DRIVER, ENV_DRA_CPUS, PreparedClaim, PreparedDevice};
use crate::resources::cpulist::{format_cpu_list, parse_cpu_list};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// The CDI kind (`vendor/class`) of the agent's devices.
pub const KIND: &str = "dra.cpu/claim";
/// The CDI spec version written (the first with spec annotations).
pub const CDI_VERSION: &str = "0.6.0";
/// Annotation keys recording the claim.
const A_NAMESPACE: &str = "slurm-bridge.slinky.slurm.net/claim-namespace";
const A_NAME: &str = "slurm-bridge.slinky.slurm.net/claim-name";
const A_UID: &str = "slurm-bridge.slinky.slurm.net/claim-uid";
const A_PODS: &str = "slurm-bridge.slinky.slurm.net/pod-uids";
const A_CPUS: &str = "slurm-bridge.slinky.slurm.net/cpus";
const A_DEVICES: &str = "slurm-bridge.slinky.slurm.net/devices";

/// The CDI folder could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum CdiError {
    #[error("writing CDI spec {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("removing CDI spec {path}: {source}")]
    Remove {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("reading CDI folder {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The fully qualified CDI device id of a claim (`dra.cpu/claim=<uid>`).
pub fn device_id(claim_uid: &str) -> String {
    format!("{KIND}={claim_uid}")
}

/// The spec file of a claim in `dir`.
pub fn spec_path(dir: &Path, claim_uid: &str) -> PathBuf {
    dir.join(format!("{DRIVER}-{claim_uid}.json"))
}

fn cpu_list(cpus: &std::collections::BTreeSet<i64>) -> String {
    let cpus: Vec<u32> = cpus.iter().filter_map(|c| u32::try_from(*c).ok()).collect();
    format_cpu_list(&cpus)
}

/// The CDI spec of a prepared claim.
pub fn spec(claim: &PreparedClaim) -> Value {
    let cpus = cpu_list(&claim.cpus);
    let devices: Vec<String> = claim
        .devices
        .iter()
        .map(|d| format!("{}/{}/{}", d.request, d.pool, d.device))
        .collect();
    let pods: Vec<&str> = claim.pod_uids.iter().map(String::as_str).collect();
    json!({
        "cdiVersion": CDI_VERSION,
        "kind": KIND,
        "annotations": {
            A_NAMESPACE: claim.namespace,
            A_NAME: claim.name,
            A_UID: claim.uid,
            A_PODS: pods.join(","),
            A_CPUS: cpus,
            A_DEVICES: devices.join(","),
        },
        "devices": [{
            "name": claim.uid,
            "containerEdits": {"env": [format!("{ENV_DRA_CPUS}={cpus}")]},
        }],
    })
}

/// The claim a spec of ours records; `None` for any other file.
pub fn parse(spec: &Value) -> Option<PreparedClaim> {
    if spec.get("kind")?.as_str()? != KIND {
        return None;
    }
    let a = spec.get("annotations")?;
    let get = |k: &str| a.get(k)?.as_str().map(str::to_string);
    let split = |s: String| -> Vec<String> {
        s.split(',')
            .filter(|x| !x.is_empty())
            .map(str::to_string)
            .collect()
    };
    let devices = split(get(A_DEVICES)?)
        .into_iter()
        .map(|d| {
            let mut parts = d.splitn(3, '/');
            Some(PreparedDevice {
                request: parts.next()?.to_string(),
                pool: parts.next()?.to_string(),
                device: parts.next()?.to_string(),
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(PreparedClaim {
        namespace: get(A_NAMESPACE)?,
        name: get(A_NAME)?,
        uid: get(A_UID)?,
        pod_uids: split(get(A_PODS)?).into_iter().collect(),
        cpus: parse_cpu_list(&get(A_CPUS)?)
            .ok()?
            .into_iter()
            .map(i64::from)
            .collect(),
        devices,
    })
}

/// Writes a claim's spec into `dir` (whole or not at all: a temporary file renamed, as
/// containerd may read the folder at any time).
pub fn write(dir: &Path, claim: &PreparedClaim) -> Result<PathBuf, CdiError> {
    let path = spec_path(dir, &claim.uid);
    let tmp = dir.join(format!(".{DRIVER}-{}.tmp", claim.uid));
    let err = |source| CdiError::Write {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(err)?;
    let text = serde_json::to_vec_pretty(&spec(claim)).expect("JSON serializes");
    std::fs::write(&tmp, text).map_err(err)?;
    std::fs::rename(&tmp, &path).map_err(err)?;
    Ok(path)
}

/// Removes a claim's spec from `dir` (gone already is fine).
pub fn remove(dir: &Path, claim_uid: &str) -> Result<(), CdiError> {
    let path = spec_path(dir, claim_uid);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(CdiError::Remove { path, source: e })
        }
        _ => Ok(()),
    }
}

/// The claims whose specs are in `dir` (a missing folder holds none).
pub fn load(dir: &Path) -> Result<Vec<PreparedClaim>, CdiError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(CdiError::Read {
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    let prefix = format!("{DRIVER}-");
    let mut claims = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with(&prefix) || !name.ends_with(".json") {
            continue;
        }
        let parsed = std::fs::read(e.path())
            .ok()
            .and_then(|t| serde_json::from_slice::<Value>(&t).ok())
            .and_then(|v| parse(&v));
        match parsed {
            Some(c) => claims.push(c),
            None => {
                tracing::warn!(file = %e.path().display(), "not a CDI spec of this agent; left alone")
            }
        }
    }
    Ok(claims)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn claim() -> PreparedClaim {
        PreparedClaim {
            namespace: "ns".into(),
            name: "p-extended-resources-x".into(),
            uid: "c1".into(),
            pod_uids: BTreeSet::from(["pod-uid".to_string()]),
            cpus: BTreeSet::from([0, 1, 4]),
            devices: vec![
                PreparedDevice {
                    request: "cpu".into(),
                    pool: "node-1".into(),
                    device: "cpu0".into(),
                },
                PreparedDevice {
                    request: "cpu".into(),
                    pool: "node-1".into(),
                    device: "cpu1".into(),
                },
            ],
        }
    }

    #[test]
    fn a_spec_sets_dra_cpus_and_reads_back_as_its_claim() {
        let s = spec(&claim());
        assert_eq!(s["kind"], "dra.cpu/claim");
        assert_eq!(s["devices"][0]["name"], "c1");
        assert_eq!(
            s["devices"][0]["containerEdits"]["env"],
            json!(["DRA_CPUS=0-1,4"])
        );
        assert_eq!(parse(&s), Some(claim()));
        assert_eq!(device_id("c1"), "dra.cpu/claim=c1");
        assert_eq!(parse(&json!({"kind": "other/x"})), None);
    }

    #[test]
    fn specs_are_written_loaded_and_removed() {
        let dir = std::env::temp_dir().join(format!("sb-cdi-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(load(&dir).unwrap().is_empty());
        let path = write(&dir, &claim()).unwrap();
        assert_eq!(path, dir.join("dra.cpu-c1.json"));
        std::fs::write(dir.join("dra.cpu-junk.json"), "{").unwrap();
        std::fs::write(dir.join("vendor.json"), "{}").unwrap();
        assert_eq!(load(&dir).unwrap(), vec![claim()]);
        remove(&dir, "c1").unwrap();
        remove(&dir, "c1").unwrap();
        assert!(!path.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
