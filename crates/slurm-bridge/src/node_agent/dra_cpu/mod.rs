//! The node agent as the `dra.cpu` DRA driver of its node (`--dra-cpu`), so pods whose
//! ResourceClaims the bridge wrote (the machine CPUs of their job's cores, docs/dra.md) start on
//! a real kubelet:
//!
//! - [`slice`]: publishes the node's CPUs as a `resource.k8s.io/v1` ResourceSlice (one device
//!   `cpu<N>` per machine CPU, pool = the node, attributes `dra.cpu/cpuID`, `coreID`,
//!   `socketID`, `coreType`), the very form `dra::NodeInventory` reads;
//! - [`claim`]: the pure check of a claim the kubelet asks to prepare (allocated to `dra.cpu`
//!   devices of this node) into a [`PreparedClaim`];
//! - [`cdi`]: the CDI spec of a prepared claim (the container sees `DRA_CPUS=<cpu list>`), one
//!   file per claim in containerd's CDI folder, also the agent's memory of what it prepared;
//! - [`kubelet`]: the kubelet plugin: registration and DRA gRPC services on the kubelet's
//!   plugin sockets, NodePrepareResources / NodeUnprepareResources.
//!
//! The NRI pin reads [`Prepared`]: a container of a pod with a prepared claim is pinned to the
//! claim's CPUs (a part of its job's cores when pods of one job share the node).

pub mod cdi;
pub mod claim;
pub mod kubelet;
pub mod slice;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

pub use claim::{ClaimError, PreparedClaim, PreparedDevice};

/// The driver's name, its DeviceClass's and its attributes' prefix.
pub const DRIVER: &str = crate::wellknown::DEVICECLASS_DRA_CPU;

/// The environment variable a container of a prepared claim gets: its CPUs as a list (`0-1,4`).
pub const ENV_DRA_CPUS: &str = "DRA_CPUS";

/// The claims this agent prepared and not yet unprepared, by claim uid; shared by the kubelet
/// plugin (which fills it) and the NRI pin (which reads it).
#[derive(Debug, Clone, Default)]
pub struct Prepared(Arc<RwLock<BTreeMap<String, PreparedClaim>>>);

impl Prepared {
    /// The store holding `claims` (those read back from the CDI folder at start).
    pub fn with(claims: impl IntoIterator<Item = PreparedClaim>) -> Prepared {
        let p = Prepared::default();
        for c in claims {
            p.insert(c);
        }
        p
    }

    /// Remembers a prepared claim.
    pub fn insert(&self, claim: PreparedClaim) {
        self.0
            .write()
            .expect("not poisoned")
            .insert(claim.uid.clone(), claim);
    }

    /// Forgets a claim; the claim it held, if any.
    pub fn remove(&self, uid: &str) -> Option<PreparedClaim> {
        self.0.write().expect("not poisoned").remove(uid)
    }

    /// The prepared claim of uid `uid`.
    pub fn get(&self, uid: &str) -> Option<PreparedClaim> {
        self.0.read().expect("not poisoned").get(uid).cloned()
    }

    /// The CPUs of the prepared claims reserved for pod `pod_uid`; `None` when it has none.
    pub fn cpus_of_pod(&self, pod_uid: &str) -> Option<BTreeSet<i64>> {
        let claims = self.0.read().expect("not poisoned");
        let mut cpus = BTreeSet::new();
        let mut any = false;
        for c in claims.values().filter(|c| c.pod_uids.contains(pod_uid)) {
            any = true;
            cpus.extend(c.cpus.iter().copied());
        }
        any.then_some(cpus)
    }

    /// How many claims are prepared.
    pub fn len(&self) -> usize {
        self.0.read().expect("not poisoned").len()
    }

    /// True when no claim is prepared.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
