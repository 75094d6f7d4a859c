//! The DRA drivers whose devices become Slurm GRES `gpu:<driver>`, and how each finds a
//! device's GRES index: the built-in GPU drivers and the admin's (config `draDeviceDrivers`).
//! Here, below config and [`crate::dra`], because config.yaml names them and GRES requests
//! check against them; the claims' CEL selectors are `crate::dra`'s.

use crate::wellknown::DEVICECLASS_DRA_CPU;
use k8s_openapi::api::resource::v1::Device;

/// How a driver's device gives its GRES index (its place among the node's devices of that
/// driver: Slurm's GRES index `i` is the `i`-th device by index).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceIndex {
    /// The device's int attribute `index` (`<driver>/index` or `index`), as `gpu.example.com`.
    Attribute,
    /// The number at the end of the device's name (`device-03` → 3).
    NameNumber,
    /// The number of a name `gpu-<n>` (the built-in `gpu.nvidia.com`).
    GpuName,
}

/// DeviceClass (and driver) names of the built-in GPU drivers.
pub const GPU_NVIDIA: &str = "gpu.nvidia.com";
pub const GPU_EXAMPLE: &str = "gpu.example.com";

/// A DRA driver whose devices become GRES; its DeviceClass has the driver's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GresDriver {
    /// The driver (`spec.driver` of its ResourceSlices), also the DeviceClass pods ask for.
    pub name: String,
    pub index: DeviceIndex,
}

/// The drivers whose devices become GRES: the built-in `gpu.nvidia.com` and `gpu.example.com`,
/// then the config's. Passed to what reads slices and pods' DRA resources; never global.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GresDrivers(Vec<GresDriver>);

impl Default for GresDrivers {
    fn default() -> Self {
        GresDrivers::builtin()
    }
}

impl GresDrivers {
    /// The built-in GPU drivers only.
    pub fn builtin() -> GresDrivers {
        GresDrivers(vec![
            GresDriver {
                name: GPU_NVIDIA.into(),
                index: DeviceIndex::GpuName,
            },
            GresDriver {
                name: GPU_EXAMPLE.into(),
                index: DeviceIndex::Attribute,
            },
        ])
    }

    /// The built-in drivers and `extra` (the config's, which config validation keeps distinct
    /// from the built-ins and `dra.cpu`; a repeated name is skipped).
    pub fn with(extra: impl IntoIterator<Item = GresDriver>) -> GresDrivers {
        let mut all = GresDrivers::builtin();
        for d in extra {
            if d.name != DEVICECLASS_DRA_CPU && all.get(&d.name).is_none() {
                all.0.push(d);
            }
        }
        all
    }

    /// How `driver`'s devices give their index; `None` when its devices are not GRES.
    pub fn get(&self, driver: &str) -> Option<DeviceIndex> {
        self.0.iter().find(|d| d.name == driver).map(|d| d.index)
    }

    /// True when the devices of `driver` (a DeviceClass of that name) become GRES.
    pub fn contains(&self, driver: &str) -> bool {
        self.get(driver).is_some()
    }

    /// Every DeviceClass the bridge takes, `dra.cpu` first, for messages.
    pub fn supported(&self) -> String {
        std::iter::once(DEVICECLASS_DRA_CPU)
            .chain(self.0.iter().map(|d| d.name.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The GRES index of `device` of `driver`; `None` when the driver is not one of these or
    /// the device has no index of the driver's kind.
    pub fn index_of(&self, driver: &str, device: &Device) -> Option<i64> {
        let number = |n: &str| {
            (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                .then(|| n.parse::<i64>().ok())
                .flatten()
        };
        match self.get(driver)? {
            DeviceIndex::GpuName => device.name.strip_prefix("gpu-").and_then(number),
            DeviceIndex::NameNumber => {
                let digits = device.name.len()
                    - device
                        .name
                        .bytes()
                        .rev()
                        .take_while(u8::is_ascii_digit)
                        .count();
                number(&device.name[digits..])
            }
            DeviceIndex::Attribute => {
                let attrs = device.attributes.as_ref()?;
                attrs
                    .get(&format!("{driver}/index"))
                    .or_else(|| attrs.get("index"))
                    .and_then(|a| a.int)
                    .filter(|i| *i >= 0)
            }
        }
    }
}
