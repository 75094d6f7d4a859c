//! Port reservation for instances.
//!
//! Ports come from above the kernel's ephemeral range (61000-65535 by default), a range that
//! neither outgoing connections nor slurm-testenv (which stays below the ephemeral range) use.
//! They are checked to be bindable and reserved under a lock file together with the instance's
//! meta.json, so parallel tests and processes never pick the same port.

use crate::error::{Error, Result};
use crate::paths::run_dir;
use std::collections::HashSet;
use std::fs;
use std::net::TcpListener;

/// Runs `persist(ports)` with `n` fresh ports while holding the reservation lock; `persist` must
/// record them (in the instance's meta.json, key `ports`) before returning.
pub fn reserve<T>(n: usize, persist: impl FnOnce(&[u16]) -> Result<T>) -> Result<T> {
    let dir = run_dir();
    fs::create_dir_all(&dir).map_err(Error::io(format!("create {}", dir.display())))?;
    let lock_path = dir.join(".ports.lock");
    let lock = fs::File::create(&lock_path)
        .map_err(Error::io(format!("create {}", lock_path.display())))?;
    lock.lock()
        .map_err(Error::io(format!("lock {}", lock_path.display())))?;
    let taken = reserved_ports();
    let (low, high) = range();
    let mut picked = Vec::with_capacity(n);
    let mut seed = seed();
    for _ in 0..20_000 {
        if picked.len() == n {
            break;
        }
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let port = low + (seed % u64::from(high - low)) as u16;
        if !taken.contains(&port) && !picked.contains(&port) && bindable(port) {
            picked.push(port);
        }
    }
    if picked.len() < n {
        return Err(Error::Invalid(format!(
            "no {n} free loopback ports in {low}-{high}"
        )));
    }
    persist(&picked)
}

/// `[low, high)`: above the ephemeral range, or a fixed high band if that range reaches 65535.
fn range() -> (u16, u16) {
    let high_end = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().nth(1)?.parse::<u16>().ok())
        .unwrap_or(60999);
    if high_end < 64000 {
        (high_end + 1, 65535)
    } else {
        (20000, 30000)
    }
}

fn bindable(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// Ports recorded by every instance folder (live or not yet swept).
fn reserved_ports() -> HashSet<u16> {
    let mut out = HashSet::new();
    let Ok(entries) = fs::read_dir(run_dir()) else {
        return out;
    };
    for e in entries.flatten() {
        let Ok(text) = fs::read_to_string(e.path().join("meta.json")) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        if let Some(ports) = v.get("ports").and_then(|p| p.as_object()) {
            out.extend(ports.values().filter_map(|p| p.as_u64()).map(|p| p as u16));
        }
    }
    out
}

fn seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    (t ^ (u64::from(std::process::id()) << 32)) | 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_and_in_range() {
        let ports = reserve(4, |p| Ok(p.to_vec())).unwrap();
        let (low, high) = range();
        let unique: HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(unique.len(), 4);
        assert!(ports.iter().all(|p| *p >= low && *p < high));
    }
}
