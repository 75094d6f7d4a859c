//! GRES (`tres_per_node`) from device-plugin GPUs and DRA extended resources (reference §4.8).

use crate::k8s::slim_pod::PodSpec;

use super::pod_resources::{ResourceError, pod_limits};
use super::quantity::Quantity;
use crate::resources::gres_drivers::GresDrivers;
use crate::wellknown::{DEVICE_PLUGIN_GPUS, DEVICECLASS_DRA_CPU, DEVICECLASS_PREFIX};

/// Why a pod's devices cannot be expressed as Slurm GRES.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GresError {
    /// A resource quantity did not parse.
    #[error(transparent)]
    Resource(#[from] ResourceError),
    /// A DRA extended resource whose DeviceClass the bridge cannot map to Slurm.
    #[error(
        "extended resource {resource} is backed by DeviceClass {class:?}, which slurm-bridge \
         does not support (supported DeviceClasses: {supported}; more DRA drivers are added \
         by the config's draDeviceDrivers)"
    )]
    UnsupportedDeviceClass {
        /// Full resource name.
        resource: String,
        /// DeviceClass name.
        class: String,
        /// The DeviceClasses taken, comma-separated.
        supported: String,
    },
    /// A device count that is not a whole positive number.
    #[error("resource {resource}: device count {value} is not a whole number")]
    NotWhole {
        /// Resource name.
        resource: String,
        /// The value given.
        value: String,
    },
}

/// The GRES string for the pods of one external job, from their effective limits.
///
/// The largest device count wins across pods and resources; on a tie the first pod (in
/// the given order) and the first resource name (sorted) wins, so the result is
/// deterministic (the reference used map order). A DRA class is GRES `gpu:<class>` when
/// `drivers` has it.
pub fn gres_for<'a>(
    specs: impl IntoIterator<Item = &'a PodSpec>,
    drivers: &GresDrivers,
) -> Result<Option<String>, GresError> {
    let mut best: Option<(Quantity, String)> = None;
    for spec in specs {
        let limits = pod_limits(spec)?;
        for (name, q) in &limits {
            let gres_name = if DEVICE_PLUGIN_GPUS.contains(&name.as_str()) {
                "gres/gpu".to_string()
            } else if let Some(class) = name.strip_prefix(DEVICECLASS_PREFIX) {
                if class == DEVICECLASS_DRA_CPU {
                    continue;
                }
                if !drivers.contains(class) {
                    return Err(GresError::UnsupportedDeviceClass {
                        resource: name.clone(),
                        class: class.to_string(),
                        supported: drivers.supported(),
                    });
                }
                format!("gres/gpu:{class}")
            } else {
                continue;
            };
            if q.as_integer().is_none() {
                return Err(GresError::NotWhole {
                    resource: name.clone(),
                    value: q.to_string(),
                });
            }
            if q.is_zero() || q.nanos() < 0 {
                continue;
            }
            if best.as_ref().is_none_or(|(b, _)| q > b) {
                best = Some((*q, format!("{gres_name}={q}")));
            }
        }
    }
    Ok(best.map(|(_, s)| s))
}

/// `gres` (as [`gres_for`] makes it, `<name>=<count>`) for `n` times the devices: the GRES per
/// node of `n` pods sharing a node. A string without a count is one device.
pub fn gres_times(gres: &str, n: u32) -> String {
    let (name, count) = match gres.rsplit_once('=') {
        Some((name, c)) => match c.parse::<u64>() {
            Ok(c) => (name, c),
            Err(_) => return gres.to_string(),
        },
        None => (gres, 1),
    };
    format!("{name}={}", count.saturating_mul(u64::from(n)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::slim_pod::Container;
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KQ;

    fn pod(limits: &[(&str, &str)]) -> PodSpec {
        PodSpec {
            containers: vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    limits: Some(
                        limits
                            .iter()
                            .map(|(k, v)| (k.to_string(), KQ(v.to_string())))
                            .collect(),
                    ),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn table() {
        let cases: Vec<(Vec<PodSpec>, Option<&str>)> = vec![
            (vec![pod(&[])], None),
            (vec![pod(&[("nvidia.com/gpu", "1")])], Some("gres/gpu=1")),
            (vec![pod(&[("nvidia.com/gpu", "2")])], Some("gres/gpu=2")),
            (
                vec![pod(&[("amd.com/gpu", "2")]), pod(&[("amd.com/gpu", "1")])],
                Some("gres/gpu=2"),
            ),
            (
                vec![pod(&[(
                    "deviceclass.resource.kubernetes.io/gpu.nvidia.com",
                    "1",
                )])],
                Some("gres/gpu:gpu.nvidia.com=1"),
            ),
            (
                vec![pod(&[("deviceclass.resource.kubernetes.io/dra.cpu", "4")])],
                None,
            ),
            (
                vec![
                    pod(&[("deviceclass.resource.kubernetes.io/gpu.example.com", "1")]),
                    pod(&[("deviceclass.resource.kubernetes.io/gpu.example.com", "2")]),
                ],
                Some("gres/gpu:gpu.example.com=2"),
            ),
            // tie: first pod wins
            (
                vec![
                    pod(&[("amd.com/gpu", "1")]),
                    pod(&[("deviceclass.resource.kubernetes.io/gpu.example.com", "1")]),
                ],
                Some("gres/gpu=1"),
            ),
        ];
        for (i, (pods, want)) in cases.into_iter().enumerate() {
            let builtin = GresDrivers::builtin();
            assert_eq!(
                gres_for(&pods, &builtin).unwrap().as_deref(),
                want,
                "case {i}"
            );
        }
    }

    #[test]
    fn unsupported_device_class_is_rejected() {
        let fpga = [pod(&[(
            "deviceclass.resource.kubernetes.io/fpga.acme.com",
            "1",
        )])];
        let err = gres_for(&fpga, &GresDrivers::builtin()).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("fpga.acme.com")
                && text.contains("does not support")
                && text.contains("dra.cpu, gpu.nvidia.com, gpu.example.com;")
                && text.contains("draDeviceDrivers"),
            "{text}"
        );
        // An admin's driver is GRES like the GPU drivers.
        let drivers = GresDrivers::with([crate::resources::gres_drivers::GresDriver {
            name: "fpga.acme.com".into(),
            index: crate::resources::gres_drivers::DeviceIndex::NameNumber,
        }]);
        assert_eq!(
            gres_for(&fpga, &drivers).unwrap().as_deref(),
            Some("gres/gpu:fpga.acme.com=1")
        );
    }

    #[test]
    fn gres_times_scales_the_count() {
        assert_eq!(
            gres_times("gres/gpu:gpu.example.com=2", 3),
            "gres/gpu:gpu.example.com=6"
        );
        assert_eq!(gres_times("gres/gpu", 2), "gres/gpu=2");
        assert_eq!(gres_times("gres/gpu=x", 2), "gres/gpu=x");
    }

    #[test]
    fn fractional_gpu_is_rejected() {
        assert!(matches!(
            gres_for(
                &[pod(&[("nvidia.com/gpu", "500m")])],
                &GresDrivers::builtin()
            ),
            Err(GresError::NotWhole { .. })
        ));
    }
}
