//! The ResourceClaim requests and allocation results naming exactly the devices of a share.

use super::{DeviceAsk, DraError, GresDrivers, NodeInventory, REQUEST_CPU, REQUEST_GPU, Share};
use crate::wellknown::DEVICECLASS_DRA_CPU;
use k8s_openapi::api::core::v1::ContainerExtendedResourceRequest;
use k8s_openapi::api::resource::v1::{
    CELDeviceSelector, DeviceRequest, DeviceRequestAllocationResult, DeviceSelector,
    ExactDeviceRequest,
};
use std::collections::{BTreeMap, BTreeSet};

/// A claim's device requests, their allocation results, and the pod's request mappings.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClaimParts {
    pub requests: Vec<DeviceRequest>,
    pub results: Vec<DeviceRequestAllocationResult>,
    pub mappings: Vec<ContainerExtendedResourceRequest>,
}

fn exact(class: &str, name: &str, count: usize, cel: String) -> DeviceRequest {
    DeviceRequest {
        name: name.to_string(),
        exactly: Some(ExactDeviceRequest {
            device_class_name: class.to_string(),
            allocation_mode: Some("ExactCount".into()),
            count: Some(count as i64),
            selectors: Some(vec![DeviceSelector {
                cel: Some(CELDeviceSelector { expression: cel }),
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn join<T: ToString>(v: impl IntoIterator<Item = T>) -> String {
    v.into_iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The claim naming exactly `share`'s devices. `classes` are the DeviceClasses that exist: a GPU
/// class without one is left out of the claim (as the reference), a CPU ask without `dra.cpu`
/// is refused. `drivers` give each GPU class's selector.
pub fn claim_parts(
    node: &str,
    inv: &NodeInventory,
    ask: &DeviceAsk,
    share: &Share,
    classes: &BTreeSet<String>,
    drivers: &GresDrivers,
) -> Result<ClaimParts, DraError> {
    let mut parts = ClaimParts::default();
    let mut request_of: BTreeMap<&str, &str> = BTreeMap::new();
    if !share.cpus.is_empty() {
        if !classes.contains(DEVICECLASS_DRA_CPU) {
            return Err(DraError::NoCpuDeviceClass);
        }
        parts.requests.push(exact(
            DEVICECLASS_DRA_CPU,
            REQUEST_CPU,
            share.cpus.len(),
            format!(
                "device.attributes['dra.cpu'].cpuID in [{}]",
                join(&share.cpus)
            ),
        ));
        for cpu in &share.cpus {
            let (Some(info), Some(pool)) = (inv.cpus.cpus.get(cpu), inv.cpu_pools.get(cpu)) else {
                return Err(DraError::CpuNotOnNode {
                    node: node.to_string(),
                    cpu: *cpu,
                });
            };
            parts.results.push(DeviceRequestAllocationResult {
                request: REQUEST_CPU.into(),
                driver: DEVICECLASS_DRA_CPU.into(),
                pool: pool.clone(),
                device: info.name.clone(),
                ..Default::default()
            });
        }
        request_of.insert(DEVICECLASS_DRA_CPU, REQUEST_CPU);
    }
    for (class, indices) in &share.gpus {
        if !classes.contains(class) {
            tracing::debug!(%class, "no DeviceClass: the claim leaves these devices out");
            continue;
        }
        let devices = inv.gpus.get(class).map(Vec::as_slice).unwrap_or_default();
        let mut chosen = Vec::new();
        for i in indices {
            let d = devices
                .get(*i as usize)
                .ok_or_else(|| DraError::GpuNotOnNode {
                    node: node.to_string(),
                    class: class.clone(),
                    index: *i,
                    count: devices.len(),
                })?;
            chosen.push(d);
            parts.results.push(DeviceRequestAllocationResult {
                request: REQUEST_GPU.into(),
                driver: class.clone(),
                pool: d.pool.clone(),
                device: d.name.clone(),
                ..Default::default()
            });
        }
        let cel = super::drivers::selector(drivers, class, &chosen);
        parts
            .requests
            .push(exact(class, REQUEST_GPU, chosen.len(), cel));
        request_of.insert(class, REQUEST_GPU);
    }
    for (container, class, resource) in &ask.containers {
        if let Some(req) = request_of.get(class.as_str()) {
            parts.mappings.push(ContainerExtendedResourceRequest {
                container_name: container.clone(),
                request_name: req.to_string(),
                resource_name: resource.clone(),
            });
        }
    }
    Ok(parts)
}
