//! Pod resources: Kubernetes quantities, effective requests and limits, and GRES.

pub mod gres;
pub mod pod_resources;
pub mod quantity;

pub use quantity::{Quantity, QuantityError};
