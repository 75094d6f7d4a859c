//! Slurm's answers to a submit or update: a permanent rejection (the job as described can never
//! run: "Requested node configuration is not available", an unknown partition, QOS, account,
//! reservation, feature or license) is not retried every few seconds. The group waits with
//! `SlurmSubmitFailed` and Slurm's text until something the job description is made of changes
//! (the pods, their group and its annotations, the nodes Kubernetes may use, Slurm's node names
//! and what they are configured with: CPUs, memory, GRES, features, partitions), or
//! [`RETRY_AFTER`] has passed (another change inside Slurm, a new partition say, is not seen).

use slurm_rest::ErrorKind;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a permanently rejected group waits when nothing it is made of changes.
pub const RETRY_AFTER: Duration = Duration::from_secs(300);

/// Groups remembered at most; older entries are dropped first (they would be retried anyway).
const MAX_GROUPS: usize = 10_000;

/// `ESLURM_*` numbers that describe Slurm's state, not the job: retried with the normal backoff.
const TRANSIENT_ESLURM: [i32; 6] = [
    2016, // ESLURM_NODES_BUSY
    2019, // ESLURM_WRITING_TO_FILE (slurmctld's state save)
    2027, // ESLURM_IN_STANDBY_MODE
    2050, // ESLURM_ACCOUNTING_POLICY (a submit limit frees up as jobs end)
    2055, // ESLURM_RESERVATION_BUSY
    2059, // ESLURM_PORTS_BUSY
];

/// True when Slurm refused the job description itself, so sending it again cannot help.
///
/// Classified by Slurm's error numbers (the text is kept for the user): the client's
/// `InvalidRequest` kind (HTTP 400/422, "Requested node configuration is not available" 2014,
/// invalid partition 2000, invalid reservation 2053, not supported 2036, ...), and any other
/// `ESLURM_*` number (2000-2999: invalid feature 2029, account 2045, license 2048, QOS 2066, ...)
/// except those about slurmctld's state (`TRANSIENT_ESLURM`). Transport failures, slurmctld
/// unreachable, authentication (an operator's fix, retried with backoff) and answers without an
/// error number are transient.
pub fn is_permanent(e: &slurm_rest::Error) -> bool {
    match e.kind() {
        ErrorKind::InvalidRequest => !e
            .slurm_errors()
            .iter()
            .filter_map(|x| x.error_number)
            .any(|n| TRANSIENT_ESLURM.contains(&n)),
        ErrorKind::Other => {
            let numbers: Vec<i32> = e
                .slurm_errors()
                .iter()
                .filter_map(|x| x.error_number)
                .filter(|n| *n != 0)
                .collect();
            !numbers.is_empty()
                && numbers
                    .iter()
                    .all(|n| (2000..3000).contains(n) && !TRANSIENT_ESLURM.contains(n))
        }
        ErrorKind::NotFound
        | ErrorKind::JobNotPending
        | ErrorKind::Authentication
        | ErrorKind::Transient => false,
    }
}

/// A group's last permanent rejection.
#[derive(Debug, Clone)]
struct Rejected {
    /// What the rejected description was made of ([`Rejections::check`]).
    fingerprint: u64,
    at: Instant,
    message: String,
}

/// Permanent rejections by group key.
#[derive(Debug, Default)]
pub struct Rejections {
    by_group: HashMap<String, Rejected>,
}

/// A group that stays rejected: Slurm's text and how long until it is tried again anyway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StillRejected {
    pub message: String,
    pub retry_in: Duration,
}

impl Rejections {
    /// The rejection that still stands for `group`: one made of the same `fingerprint` less than
    /// [`RETRY_AFTER`] ago. Anything else forgets it, so the caller sends the job again.
    pub fn check(&mut self, group: &str, fingerprint: u64, now: Instant) -> Option<StillRejected> {
        let r = self.by_group.get(group)?;
        let age = now.saturating_duration_since(r.at);
        if r.fingerprint == fingerprint && age < RETRY_AFTER {
            return Some(StillRejected {
                message: r.message.clone(),
                retry_in: RETRY_AFTER - age,
            });
        }
        self.by_group.remove(group);
        None
    }

    /// Remembers a permanent rejection of `group`'s description.
    pub fn record(&mut self, group: &str, fingerprint: u64, message: String, now: Instant) {
        if self.by_group.len() >= MAX_GROUPS {
            // Expired entries first; if that is not enough, start over (each group is then
            // simply tried once more).
            self.by_group
                .retain(|_, r| now.saturating_duration_since(r.at) < RETRY_AFTER);
            if self.by_group.len() >= MAX_GROUPS {
                self.by_group.clear();
            }
        }
        self.by_group.insert(
            group.to_string(),
            Rejected {
                fingerprint,
                at: now,
                message,
            },
        );
    }

    /// Forgets `group` (its job was accepted).
    pub fn clear(&mut self, group: &str) {
        self.by_group.remove(group);
    }

    /// Groups remembered.
    pub fn len(&self) -> usize {
        self.by_group.len()
    }

    /// True when no group is remembered.
    pub fn is_empty(&self) -> bool {
        self.by_group.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slurm_rest::models::SlurmErrorEntry;

    fn slurm(status: u16, number: i32, text: &str) -> slurm_rest::Error {
        slurm_rest::Error::from_slurm(
            "POST /slurm/v0.0.44/job/submit",
            status,
            vec![SlurmErrorEntry {
                error_number: Some(number),
                error: Some(text.into()),
                ..Default::default()
            }],
        )
    }

    #[test]
    fn slurm_refusing_the_description_is_permanent() {
        // Answers seen from slurmrestd 26.05 for submits (HTTP 500 with Slurm's entry).
        for (n, text) in [
            (2014, "Requested node configuration is not available"),
            (2000, "Invalid partition name specified"),
            (2053, "Requested reservation is invalid"),
            (2029, "Invalid feature specification"),
            (2048, "Invalid license specification"),
            (2066, "Invalid qos specification"),
            (
                2045,
                "Invalid account or account/partition combination specified",
            ),
        ] {
            assert!(is_permanent(&slurm(500, n, text)), "{n} {text}");
        }
        // A request slurmrestd could not parse.
        assert!(is_permanent(&slurm(400, 9001, "Unable to parse request")));
    }

    #[test]
    fn slurm_state_transport_and_tokens_are_transient() {
        for (status, n, text) in [
            (
                500,
                1800,
                "Unable to contact slurm controller (connect failure)",
            ),
            (500, 2027, "Slurm controller in standby mode"),
            (500, 2050, "Job violates accounting/QOS policy"),
            (500, 5004, "Socket timed out on send/recv operation"),
            (511, 1007, "Protocol authentication error"),
            (503, 0, ""),
            (500, 0, "unknown"),
        ] {
            assert!(!is_permanent(&slurm(status, n, text)), "{n} {text}");
        }
        let refused = slurm_rest::Error::synthetic(ErrorKind::Transient, "connection refused");
        assert!(!is_permanent(&refused));
        let not_pending = slurm(422, 2073, "Job is no longer pending execution");
        assert!(!is_permanent(&not_pending));
    }

    #[test]
    fn a_rejection_stands_until_its_group_changes_or_the_backoff_ends() {
        let mut r = Rejections::default();
        let t0 = Instant::now();
        r.record("g", 1, "Slurm says no".into(), t0);
        let still = r.check("g", 1, t0 + Duration::from_secs(60)).unwrap();
        assert_eq!(still.message, "Slurm says no");
        assert_eq!(still.retry_in, RETRY_AFTER - Duration::from_secs(60));
        assert!(r.check("other", 1, t0).is_none());
        // Something the description is made of changed: tried again, and forgotten.
        assert!(r.check("g", 2, t0).is_none());
        assert!(r.is_empty());
        // The long backoff ended.
        r.record("g", 1, "Slurm says no".into(), t0);
        assert!(r.check("g", 1, t0 + RETRY_AFTER).is_none());
        // Accepted: forgotten.
        r.record("g", 1, "x".into(), t0);
        r.clear("g");
        assert!(r.check("g", 1, t0).is_none());
    }
}
