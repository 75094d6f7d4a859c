//! The CEL selector of a claim request for the devices Slurm chose, by how the driver indexes
//! its devices ([`GresDrivers`], in `crate::resources::gres_drivers`).

use super::GpuDevice;
use crate::resources::gres_drivers::{DeviceIndex, GresDrivers};

/// The CEL selector of a claim request for `chosen` devices of `driver`. DRA's CEL sees a
/// device's driver, attributes and capacity but not its name, so devices indexed by name are
/// selected by driver only; the allocation results name them.
pub fn selector(drivers: &GresDrivers, driver: &str, chosen: &[&GpuDevice]) -> String {
    let join = |v: Vec<String>| v.join(",");
    match drivers.get(driver) {
        Some(DeviceIndex::GpuName) => format!(
            "device.attributes['{driver}'].name in [{}]",
            join(chosen.iter().map(|d| format!("'{}'", d.name)).collect())
        ),
        Some(DeviceIndex::Attribute) => format!(
            "device.attributes['{driver}'].index in [{}]",
            join(chosen.iter().map(|d| d.index.to_string()).collect())
        ),
        Some(DeviceIndex::NameNumber) | None => format!("device.driver == '{driver}'"),
    }
}
