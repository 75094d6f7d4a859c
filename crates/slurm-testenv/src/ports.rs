//! Port reservation for test environments: this crate's instances, and kube-testenv's.
//!
//! A [`PortPool`] hands out ports from a band, checked to be bindable and reserved under a lock
//! file together with the instance's meta.json, so parallel tests and processes never pick the
//! same port. slurm-testenv's band lies below the kernel's ephemeral range (so no outgoing
//! connection can hold one); kube-testenv takes the band above it.

use crate::error::{Error, Result};
use crate::paths::run_dir;
use std::collections::HashSet;
use std::fs;
use std::io::Read;
use std::net::TcpListener;
use std::path::PathBuf;

/// Lowest port slurm-testenv hands out.
const LOW: u16 = 10000;

/// Where an environment's instances record their ports, and the band it takes them from.
#[derive(Debug, Clone)]
pub struct PortPool {
    /// The folder holding the instance folders (each with a meta.json) and the lock file.
    pub run_dir: PathBuf,
    /// Ports handed out: `low..high`.
    pub band: (u16, u16),
    /// The address a port must be bindable on to be handed out.
    pub bind_host: &'static str,
    /// The ports one instance's meta.json records.
    pub recorded: fn(&serde_json::Value) -> Vec<u16>,
}

/// Why no ports could be reserved.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no {n} free ports bindable on {host} in {low}-{high}")]
    Exhausted {
        n: usize,
        host: &'static str,
        low: u16,
        high: u16,
    },
}

impl PortPool {
    /// Runs `persist(ports)` with `n` fresh ports while holding the reservation lock; `persist`
    /// must record the ports in the instance's meta.json before returning.
    pub fn reserve<T, E: From<PortError>>(
        &self,
        n: usize,
        persist: impl FnOnce(&[u16]) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        let io = |what: String| move |source| PortError::Io { what, source };
        fs::create_dir_all(&self.run_dir)
            .map_err(io(format!("create {}", self.run_dir.display())))?;
        let lock_path = self.run_dir.join(".ports.lock");
        let lock =
            fs::File::create(&lock_path).map_err(io(format!("create {}", lock_path.display())))?;
        lock.lock()
            .map_err(io(format!("lock {}", lock_path.display())))?;
        let picked = self.pick(n, &self.recorded_ports())?;
        persist(&picked)
    }

    fn pick(&self, n: usize, taken: &HashSet<u16>) -> std::result::Result<Vec<u16>, PortError> {
        let (low, high) = self.band;
        let mut picked = Vec::with_capacity(n);
        let mut seed = random_u64();
        for _ in 0..20_000 {
            if picked.len() == n {
                return Ok(picked);
            }
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let port = low + (seed % u64::from(high - low)) as u16;
            if !taken.contains(&port) && !picked.contains(&port) && self.bindable(port) {
                picked.push(port);
            }
        }
        if picked.len() == n {
            return Ok(picked);
        }
        Err(PortError::Exhausted {
            n,
            host: self.bind_host,
            low,
            high,
        })
    }

    fn bindable(&self, port: u16) -> bool {
        TcpListener::bind((self.bind_host, port)).is_ok()
    }

    /// Ports recorded by every instance folder (live or not yet swept).
    fn recorded_ports(&self) -> HashSet<u16> {
        let Ok(entries) = fs::read_dir(&self.run_dir) else {
            return HashSet::new();
        };
        entries
            .flatten()
            .filter_map(|e| fs::read_to_string(e.path().join("meta.json")).ok())
            .filter_map(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
            .flat_map(|v| (self.recorded)(&v))
            .collect()
    }
}

/// The kernel's ephemeral port range (`ip_local_port_range`), inclusive.
pub fn ephemeral_range() -> (u16, u16) {
    let text = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let mut it = text.split_whitespace().map(|p| p.parse::<u16>().ok());
    match (it.next().flatten(), it.next().flatten()) {
        (Some(low), Some(high)) => (low, high),
        _ => (32768, 60999),
    }
}

/// slurm-testenv's pool: below the ephemeral range.
fn pool() -> PortPool {
    let high = ephemeral_range().0.saturating_sub(1).max(LOW + 1000);
    PortPool {
        run_dir: run_dir(),
        band: (LOW, high),
        bind_host: "0.0.0.0",
        recorded: |v| {
            let slurmd = v
                .get("slurmd")
                .and_then(|s| s.as_array())
                .into_iter()
                .flatten()
                .filter_map(|d| d.get("port")?.as_u64());
            [
                "rest_port",
                "slurmctld_port",
                "slurmd_port",
                "slurmdbd_port",
                "mariadb_port",
            ]
            .iter()
            .filter_map(|key| v.get(key)?.as_u64())
            .chain(slurmd)
            .chain(held_for_process(v))
            .map(|p| p as u16)
            .collect()
        },
    }
}

/// Reserves `n` ports of slurm-testenv's pool (see [`PortPool::reserve`]).
pub(crate) fn reserve<T>(n: usize, persist: impl FnOnce(&[u16]) -> Result<T>) -> Result<T> {
    pool().reserve(n, persist)
}

/// The key of a [`reserve_for_process`] record.
const FOR_PROCESS: &str = "reserved_for_process";

fn held_for_process(v: &serde_json::Value) -> impl Iterator<Item = u64> + '_ {
    v.get(FOR_PROCESS)
        .and_then(|p| p.as_array())
        .into_iter()
        .flatten()
        .filter_map(|p| p.as_u64())
}

/// Reserves `n` ports of slurm-testenv's pool for a process the caller starts itself (a test's
/// server, told its address before it starts). Unlike a port the kernel picks, no outgoing
/// connection and no other reservation can take one before that process binds it. The record
/// is a folder without an instance, which [`crate::sweep_stale`] removes 5 minutes on.
pub fn reserve_for_process(n: usize) -> Result<Vec<u16>> {
    reserve(n, |ports| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = run_dir().join(format!("ports-{}-{nanos}", std::process::id()));
        let record = serde_json::json!({ FOR_PROCESS: ports }).to_string();
        fs::create_dir_all(&dir)
            .and_then(|()| fs::write(dir.join("meta.json"), record))
            .map_err(|source| Error::Io {
                context: format!("record reserved ports in {}", dir.display()),
                source,
            })?;
        Ok(ports.to_vec())
    })
}

impl From<PortError> for Error {
    fn from(e: PortError) -> Self {
        match e {
            PortError::Io { what, source } => Error::Io {
                context: what,
                source,
            },
            PortError::Exhausted { .. } => Error::PortInUse {
                port: 0,
                what: "no free port found below the ephemeral range",
            },
        }
    }
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
        assert!(ports.iter().all(|p| *p >= LOW && *p < ephemeral_range().0));
    }

    #[test]
    fn ports_reserved_for_a_process_are_not_handed_out_again() {
        let held = reserve_for_process(2).unwrap();
        assert!(held.iter().all(|p| *p >= LOW && *p < ephemeral_range().0));
        let recorded = pool().recorded_ports();
        assert!(held.iter().all(|p| recorded.contains(p)), "{held:?}");
    }

    #[test]
    fn a_full_band_is_a_clear_error() {
        let pool = PortPool {
            run_dir: std::env::temp_dir(),
            band: (20000, 20002),
            bind_host: "127.0.0.1",
            recorded: |_| Vec::new(),
        };
        let taken: HashSet<u16> = [20000, 20001].into();
        let err = pool.pick(1, &taken).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no 1 free ports bindable on 127.0.0.1 in 20000-20002"
        );
    }
}
