//! What a pod asks of DRA extended resources (`deviceclass.resource.kubernetes.io/<class>`).

use super::DraError;
use crate::k8s::slim_pod::Pod;
use crate::resources::quantity::Quantity;
use crate::wellknown::{DEVICECLASS_DRA_CPU, DEVICECLASS_PREFIX};
use std::collections::BTreeMap;

/// What a pod asks of DRA extended resources.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceAsk {
    /// CPUs of `deviceclass.resource.kubernetes.io/dra.cpu` (summed over containers).
    pub cpus: u64,
    /// Devices per GPU DeviceClass.
    pub gpus: BTreeMap<String, u64>,
    /// `(container, class, full resource name)`, init containers first, for the pod's
    /// `extendedResourceClaimStatus`.
    pub containers: Vec<(String, String, String)>,
}

impl DeviceAsk {
    /// The DRA extended resources a pod asks for (requests, falling back to limits), `None` when
    /// it asks for none. Refuses a GPU class asked in two containers and fractional counts.
    pub fn of(pod: &Pod) -> Result<Option<DeviceAsk>, DraError> {
        let Some(spec) = pod.spec.as_ref() else {
            return Ok(None);
        };
        let mut ask = DeviceAsk::default();
        let mut owner: BTreeMap<String, String> = BTreeMap::new();
        let containers = spec
            .init_containers
            .iter()
            .flatten()
            .chain(spec.containers.iter());
        for c in containers {
            let Some(res) = c.resources.as_ref() else {
                continue;
            };
            let mut asked: BTreeMap<
                &String,
                &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
            > = res.limits.iter().flatten().collect();
            asked.extend(res.requests.iter().flatten());
            for (name, q) in asked {
                let Some(class) = name.strip_prefix(DEVICECLASS_PREFIX) else {
                    continue;
                };
                let n = Quantity::from_k8s(q)
                    .ok()
                    .and_then(|q| q.as_integer())
                    .and_then(|n| u64::try_from(n).ok())
                    .ok_or_else(|| DraError::NotWhole {
                        resource: name.clone(),
                        value: q.0.clone(),
                    })?;
                if n == 0 {
                    continue;
                }
                if class == DEVICECLASS_DRA_CPU {
                    ask.cpus += n;
                } else {
                    if let Some(first) = owner.get(class)
                        && first != &c.name
                    {
                        return Err(DraError::ClassInTwoContainers {
                            class: class.to_string(),
                            first: first.clone(),
                            second: c.name.clone(),
                        });
                    }
                    owner.insert(class.to_string(), c.name.clone());
                    *ask.gpus.entry(class.to_string()).or_default() = n;
                }
                ask.containers
                    .push((c.name.clone(), class.to_string(), name.clone()));
            }
        }
        Ok((ask.cpus > 0 || !ask.gpus.is_empty()).then_some(ask))
    }
}
