//! Pod resources: Kubernetes quantities, effective requests and limits, GRES, Slurm core bitmaps
//! and the CPU map (the DRA device logic built on them is [`crate::dra`]).

pub mod bitmap;
pub mod cpulist;
pub mod cpumap;
pub mod gres;
pub mod gres_drivers;
pub mod pod_resources;
pub mod quantity;

pub use quantity::{Quantity, QuantityError};
