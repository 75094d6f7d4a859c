//! Effective pod requests and limits by the Kubernetes rules (component-helpers
//! `PodRequests` / `PodLimits`): regular containers, init containers, restartable init
//! containers (sidecars), pod overhead and pod-level resources.

use std::collections::BTreeMap;

use crate::k8s::slim_pod::{Container, PodSpec};
use k8s_openapi::api::core::v1::ResourceRequirements;

use super::quantity::{Quantity, QuantityError};

/// Resource name → quantity.
pub type ResourceList = BTreeMap<String, Quantity>;

/// A resource quantity that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{place}: resource {resource}: {source}")]
pub struct ResourceError {
    /// Where the quantity was (`container main requests`, `overhead`, ...).
    pub place: String,
    /// Resource name.
    pub resource: String,
    /// The parse error.
    #[source]
    pub source: QuantityError,
}

/// Resources that pod-level `spec.resources` may set.
fn pod_level_supported(name: &str) -> bool {
    name == "cpu" || name == "memory" || name.starts_with("hugepages-")
}

fn parse_list(
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    place: &str,
) -> Result<ResourceList, ResourceError> {
    let mut out = ResourceList::new();
    for (name, q) in list.into_iter().flatten() {
        let v = Quantity::from_k8s(q).map_err(|source| ResourceError {
            place: place.to_string(),
            resource: name.clone(),
            source,
        })?;
        out.insert(name.clone(), v);
    }
    Ok(out)
}

/// Requests and limits of one container, with the API server's defaulting applied
/// (a limit without a request makes the request equal to the limit).
fn container_resources(
    c: &Container,
    which: &str,
) -> Result<(ResourceList, ResourceList), ResourceError> {
    resource_requirements(c.resources.as_ref(), &format!("{which} {}", c.name))
}

fn resource_requirements(
    r: Option<&ResourceRequirements>,
    place: &str,
) -> Result<(ResourceList, ResourceList), ResourceError> {
    let mut requests = parse_list(
        r.and_then(|r| r.requests.as_ref()),
        &format!("{place} requests"),
    )?;
    let limits = parse_list(
        r.and_then(|r| r.limits.as_ref()),
        &format!("{place} limits"),
    )?;
    for (name, q) in &limits {
        requests.entry(name.clone()).or_insert(*q);
    }
    Ok((requests, limits))
}

fn add_into(acc: &mut ResourceList, add: &ResourceList) {
    for (name, q) in add {
        let e = acc.entry(name.clone()).or_default();
        *e = e.saturating_add(*q);
    }
}

fn max_into(acc: &mut ResourceList, other: &ResourceList) {
    for (name, q) in other {
        let e = acc.entry(name.clone()).or_default();
        if *q > *e {
            *e = *q;
        }
    }
}

/// Which side of the container resources to compute.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Requests,
    Limits,
}

fn effective(spec: &PodSpec, side: Side) -> Result<ResourceList, ResourceError> {
    let pick =
        |(req, lim): (ResourceList, ResourceList)| if side == Side::Requests { req } else { lim };
    let mut total = ResourceList::new();
    for c in &spec.containers {
        add_into(&mut total, &pick(container_resources(c, "container")?));
    }
    let mut sidecars = ResourceList::new();
    let mut init_max = ResourceList::new();
    for c in spec.init_containers.iter().flatten() {
        let mut value = pick(container_resources(c, "init container")?);
        if c.restart_policy.as_deref() == Some("Always") {
            add_into(&mut total, &value);
            add_into(&mut sidecars, &value);
            value = sidecars.clone();
        } else {
            add_into(&mut value, &sidecars);
        }
        max_into(&mut init_max, &value);
    }
    max_into(&mut total, &init_max);

    let overhead = parse_list(spec.overhead.as_ref(), "overhead")?;
    match side {
        Side::Requests => add_into(&mut total, &overhead),
        Side::Limits => {
            for (name, q) in &overhead {
                if let Some(v) = total.get_mut(name) {
                    *v = v.saturating_add(*q);
                }
            }
        }
    }

    if spec.resources.is_some() {
        let (req, lim) = resource_requirements(spec.resources.as_deref(), "pod-level resources")?;
        let pod_level = pick((req, lim));
        for (name, q) in pod_level {
            if pod_level_supported(&name) {
                total.insert(name, q);
            }
        }
    }
    Ok(total)
}

/// Effective requests of a pod (what the Kubernetes scheduler reserves).
pub fn pod_requests(spec: &PodSpec) -> Result<ResourceList, ResourceError> {
    effective(spec, Side::Requests)
}

/// Effective limits of a pod.
pub fn pod_limits(spec: &PodSpec) -> Result<ResourceList, ResourceError> {
    effective(spec, Side::Limits)
}

const MIB: i128 = 1024 * 1024;

/// Bytes rounded up to whole MiB (Slurm's memory unit). Values ≤ 0 give 0.
pub fn bytes_to_mib_ceil(q: &Quantity) -> u64 {
    let bytes = q.ceil_units();
    if bytes <= 0 {
        return 0;
    }
    u64::try_from((bytes + MIB - 1) / MIB).unwrap_or(u64::MAX)
}

/// CPU and memory asked of Slurm for a set of pods (reference §4.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuMem {
    /// CPUs per task: the largest CPU request or limit (including DRA CPUs), rounded up.
    pub cpus_per_task: Option<u32>,
    /// Memory per node in MiB: the largest memory request or limit, rounded up.
    pub mem_per_node_mib: Option<u64>,
}

/// CPUs and memory for the pods of one external job: the maximum over the pods.
pub fn cpu_and_memory<'a>(
    specs: impl IntoIterator<Item = &'a PodSpec>,
) -> Result<CpuMem, ResourceError> {
    let mut cpu_max = Quantity::ZERO;
    let mut mem_max = Quantity::ZERO;
    for spec in specs {
        let requests = pod_requests(spec)?;
        let limits = pod_limits(spec)?;
        for list in [&requests, &limits] {
            for name in ["cpu", crate::wellknown::RESOURCE_DRA_CPU] {
                if let Some(q) = list.get(name) {
                    cpu_max = cpu_max.max(*q);
                }
            }
            if let Some(q) = list.get("memory") {
                mem_max = mem_max.max(*q);
            }
        }
    }
    let cpus = cpu_max.ceil_units();
    let mem = bytes_to_mib_ceil(&mem_max);
    Ok(CpuMem {
        cpus_per_task: (cpus > 0).then(|| u32::try_from(cpus).unwrap_or(u32::MAX)),
        mem_per_node_mib: (mem > 0).then_some(mem),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KQ;

    fn rl(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, KQ>> {
        if pairs.is_empty() {
            return None;
        }
        Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), KQ(v.to_string())))
                .collect(),
        )
    }

    fn container(name: &str, req: &[(&str, &str)], lim: &[(&str, &str)]) -> Container {
        Container {
            name: name.into(),
            resources: Some(ResourceRequirements {
                requests: rl(req),
                limits: rl(lim),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn bytes_to_mib_rounds_up() {
        for (text, mib) in [
            ("0", 0),
            ("-1Mi", 0),
            ("1", 1),
            ("1Mi", 1),
            ("1025Ki", 2),
            ("1Gi", 1024),
            ("100M", 96),
        ] {
            assert_eq!(bytes_to_mib_ceil(&q(text)), mib, "{text}");
        }
    }

    #[test]
    fn no_resources_leaves_both_unset() {
        let spec = PodSpec {
            containers: vec![Container {
                name: "c".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(cpu_and_memory([&spec]).unwrap(), CpuMem::default());
    }

    #[test]
    fn max_of_requests_and_limits() {
        let spec = PodSpec {
            containers: vec![container(
                "c",
                &[("cpu", "1"), ("memory", "100Mi")],
                &[("cpu", "2"), ("memory", "200Mi")],
            )],
            ..Default::default()
        };
        assert_eq!(
            cpu_and_memory([&spec]).unwrap(),
            CpuMem {
                cpus_per_task: Some(2),
                mem_per_node_mib: Some(200)
            }
        );
    }

    #[test]
    fn max_over_three_pods() {
        let specs: Vec<PodSpec> = [("1", "100Mi"), ("8", "400Mi"), ("4", "300Mi")]
            .iter()
            .map(|(c, m)| PodSpec {
                containers: vec![container("c", &[("cpu", c), ("memory", m)], &[])],
                ..Default::default()
            })
            .collect();
        assert_eq!(
            cpu_and_memory(&specs).unwrap(),
            CpuMem {
                cpus_per_task: Some(8),
                mem_per_node_mib: Some(400)
            }
        );
    }

    #[test]
    fn dra_cpu_counts_as_cpu() {
        let spec = PodSpec {
            containers: vec![container(
                "c",
                &[],
                &[(crate::wellknown::RESOURCE_DRA_CPU, "4")],
            )],
            ..Default::default()
        };
        assert_eq!(cpu_and_memory([&spec]).unwrap().cpus_per_task, Some(4));
    }

    #[test]
    fn milli_cpu_rounds_up_and_small_memory_rounds_up_to_one_mib() {
        let spec = PodSpec {
            containers: vec![container("c", &[("cpu", "100m"), ("memory", "1k")], &[])],
            ..Default::default()
        };
        assert_eq!(
            cpu_and_memory([&spec]).unwrap(),
            CpuMem {
                cpus_per_task: Some(1),
                mem_per_node_mib: Some(1)
            }
        );
    }

    #[test]
    fn init_containers_and_sidecars() {
        // regular: 1 cpu; sidecar (restartable) 1 cpu runs alongside; init 3 cpu runs after
        // the sidecar started → candidate 3 + 1 = 4; pod = max(1 + 1, 4) = 4.
        let mut sidecar = container("side", &[("cpu", "1")], &[]);
        sidecar.restart_policy = Some("Always".into());
        let spec = PodSpec {
            containers: vec![container("main", &[("cpu", "1")], &[])],
            init_containers: Some(vec![sidecar, container("init", &[("cpu", "3")], &[])]),
            ..Default::default()
        };
        assert_eq!(pod_requests(&spec).unwrap()["cpu"], q("4"));
        // A big regular container dominates.
        let mut spec2 = spec.clone();
        spec2.containers = vec![container("main", &[("cpu", "5")], &[])];
        assert_eq!(pod_requests(&spec2).unwrap()["cpu"], q("6"));
    }

    #[test]
    fn overhead_added_to_requests_and_to_present_limits_only() {
        let spec = PodSpec {
            containers: vec![container(
                "c",
                &[("cpu", "1"), ("memory", "1Gi")],
                &[("cpu", "2")],
            )],
            overhead: rl(&[("cpu", "250m"), ("memory", "120Mi")]),
            ..Default::default()
        };
        let req = pod_requests(&spec).unwrap();
        assert_eq!(req["cpu"], q("1250m"));
        assert_eq!(req["memory"], q("1144Mi"));
        let lim = pod_limits(&spec).unwrap();
        assert_eq!(lim["cpu"], q("2250m"));
        assert!(!lim.contains_key("memory"));
    }

    #[test]
    fn pod_level_resources_override() {
        let spec = PodSpec {
            containers: vec![container("c", &[("cpu", "1")], &[("nvidia.com/gpu", "1")])],
            resources: Some(Box::new(ResourceRequirements {
                limits: rl(&[("cpu", "22"), ("memory", "1Mi")]),
                ..Default::default()
            })),
            ..Default::default()
        };
        let lim = pod_limits(&spec).unwrap();
        assert_eq!(lim["cpu"], q("22"));
        assert_eq!(lim["nvidia.com/gpu"], q("1"));
        assert_eq!(pod_requests(&spec).unwrap()["cpu"], q("22"));
    }

    #[test]
    fn limit_defaults_request() {
        let spec = PodSpec {
            containers: vec![container("c", &[], &[("memory", "2Gi")])],
            ..Default::default()
        };
        assert_eq!(pod_requests(&spec).unwrap()["memory"], q("2Gi"));
    }

    #[test]
    fn bad_quantity_names_the_container() {
        let spec = PodSpec {
            containers: vec![container("main", &[("cpu", "lots")], &[])],
            ..Default::default()
        };
        let err = pod_requests(&spec).unwrap_err().to_string();
        assert!(err.contains("container main requests"), "{err}");
        assert!(err.contains("cpu"), "{err}");
    }
}
