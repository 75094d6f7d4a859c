//! The key placements are cached under: what of a pod decides where it may run.

use super::fit_requests;
use crate::k8s::slim_pod::Pod;

/// What of a pod decides where it may run: its nodeSelector, required node affinity,
/// tolerations and effective requests ([`fit_requests`]), as a hashable key (pods of a Job or a
/// gang usually share one, so the filter runs once for all of them).
pub fn constraints_key(pods: &[Pod]) -> u64 {
    use std::hash::{Hash, Hasher};
    let distinct: std::collections::BTreeSet<String> = pods
        .iter()
        .map(|p| {
            let spec = p.spec.as_ref();
            serde_json::json!([
                spec.and_then(|s| s.node_selector.as_ref()),
                spec.and_then(|s| s.affinity.as_ref())
                    .and_then(|a| a.node_affinity.as_ref()),
                spec.and_then(|s| s.tolerations.as_ref()),
                fit_requests(p).map(|r| {
                    r.iter()
                        .map(|(name, q)| (name.clone(), q.to_string()))
                        .collect::<std::collections::BTreeMap<_, _>>()
                }),
            ])
            .to_string()
        })
        .collect();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    distinct.hash(&mut h);
    h.finish()
}
