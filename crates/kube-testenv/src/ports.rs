//! Port reservation for instances, by slurm-testenv's [`PortPool`].
//!
//! Ports come from above the kernel's ephemeral range (61000-65535 by default), a band that
//! neither outgoing connections nor slurm-testenv (which stays below the ephemeral range) use.

use crate::error::{Error, Result};
use crate::paths::run_dir;
use slurm_testenv::ports::{PortError, PortPool, ephemeral_range};

/// Runs `persist(ports)` with `n` fresh ports while holding the reservation lock; `persist` must
/// record them (in the instance's meta.json, key `ports`) before returning.
pub fn reserve<T>(n: usize, persist: impl FnOnce(&[u16]) -> Result<T>) -> Result<T> {
    pool().reserve(n, persist)
}

fn pool() -> PortPool {
    PortPool {
        run_dir: run_dir(),
        band: band(),
        bind_host: "127.0.0.1",
        recorded: |v| {
            v.get("ports")
                .and_then(|p| p.as_object())
                .map(|ports| {
                    ports
                        .values()
                        .filter_map(|p| p.as_u64())
                        .map(|p| p as u16)
                        .collect()
                })
                .unwrap_or_default()
        },
    }
}

/// `[low, high)`: above the ephemeral range, or a fixed band if that range reaches 65535.
fn band() -> (u16, u16) {
    let high_end = ephemeral_range().1;
    if high_end < 64000 {
        (high_end + 1, 65535)
    } else {
        (20000, 30000)
    }
}

impl From<PortError> for Error {
    fn from(e: PortError) -> Self {
        match e {
            PortError::Io { what, source } => Error::io(what)(source),
            exhausted @ PortError::Exhausted { .. } => Error::Invalid(exhausted.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn ports_are_distinct_and_in_range() {
        let ports = reserve(4, |p| Ok(p.to_vec())).unwrap();
        let (low, high) = band();
        let unique: HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(unique.len(), 4);
        assert!(ports.iter().all(|p| *p >= low && *p < high));
    }
}
