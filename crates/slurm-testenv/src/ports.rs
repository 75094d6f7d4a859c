//! Port reservation for instances.
//!
//! Ports come from below the kernel's ephemeral range (so no outgoing connection can hold one),
//! are checked to be bindable, and are reserved under a lock file together with the instance's
//! meta.json, so parallel tests and processes never pick the same port.

use crate::error::{Error, Result};
use crate::paths::run_dir;
use std::collections::HashSet;
use std::fs;
use std::io::Read;
use std::net::TcpListener;

/// Lowest port handed out.
const LOW: u16 = 10000;

/// Runs `persist(ports)` with `n` fresh ports while holding the reservation lock; `persist` must
/// record the ports (in the instance's meta.json) before returning.
pub fn reserve<T>(n: usize, persist: impl FnOnce(&[u16]) -> Result<T>) -> Result<T> {
    let dir = run_dir();
    fs::create_dir_all(&dir).map_err(Error::io(format!("create {}", dir.display())))?;
    let lock_path = dir.join(".ports.lock");
    let lock = fs::File::create(&lock_path)
        .map_err(Error::io(format!("create {}", lock_path.display())))?;
    lock.lock()
        .map_err(Error::io(format!("lock {}", lock_path.display())))?;
    let taken = reserved_ports();
    let high = ephemeral_low().saturating_sub(1).max(LOW + 1000);
    let mut picked: Vec<u16> = Vec::with_capacity(n);
    let mut seed = random_u64();
    let mut tries = 0;
    while picked.len() < n {
        tries += 1;
        if tries > 10_000 {
            return Err(Error::PortInUse {
                port: 0,
                what: "no free port found below the ephemeral range",
            });
        }
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let port = LOW + (seed % u64::from(high - LOW)) as u16;
        if taken.contains(&port) || picked.contains(&port) || !bindable(port) {
            continue;
        }
        picked.push(port);
    }
    persist(&picked)
}

fn bindable(port: u16) -> bool {
    TcpListener::bind(("0.0.0.0", port)).is_ok()
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
        for key in ["rest_port", "slurmctld_port", "slurmd_port"] {
            if let Some(p) = v.get(key).and_then(|p| p.as_u64()) {
                out.insert(p as u16);
            }
        }
    }
    out
}

fn ephemeral_low() -> u16 {
    fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

fn random_u64() -> u64 {
    let mut buf = [0u8; 8];
    if fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .is_err()
    {
        return u64::from(std::process::id()) | 1;
    }
    u64::from_le_bytes(buf) | 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_and_below_the_ephemeral_range() {
        let ports = reserve(3, |p| Ok(p.to_vec())).unwrap();
        assert_eq!(ports.len(), 3);
        assert!(ports[0] != ports[1] && ports[1] != ports[2] && ports[0] != ports[2]);
        assert!(ports.iter().all(|p| *p >= LOW && *p < ephemeral_low()));
    }
}
