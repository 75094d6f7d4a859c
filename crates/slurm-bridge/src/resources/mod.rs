//! Pod resources: Kubernetes quantities, effective requests and limits, GRES, and DRA devices
//! (core bitmaps, the CPU map, node inventories from ResourceSlices, claims).

pub mod bitmap;
pub mod cpumap;
pub mod dra;
pub mod gres;
pub mod pod_resources;
pub mod quantity;

pub use quantity::{Quantity, QuantityError};
