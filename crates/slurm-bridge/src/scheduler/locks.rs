//! One lock per pod group, so two pods of a gang reconciled at once cannot both submit a job,
//! and a pass learns whether its group was reconciled since it read it.

use crate::sync::MutexExt;
use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

/// Slots recording the last release per group hash: a collision only costs a pass one more read.
const RELEASE_SLOTS: usize = 1024;

/// Locks keyed by group key; entries are dropped when nobody holds or waits for them.
pub struct GroupLocks {
    locks: Mutex<HashMap<String, Arc<AsyncMutex<()>>>>,
    /// Counts releases; a [`Ticket`] is its value when a pass read its group.
    releases: AtomicU64,
    /// The count at the latest release of any group hashing to each slot.
    released_at: Box<[AtomicU64]>,
}

/// When a pass read its group: taken before reading, handed to [`GroupLocks::lock`].
#[derive(Clone, Copy, Debug)]
pub struct Ticket(u64);

/// Held while a group is reconciled.
pub struct GroupGuard<'a> {
    owner: &'a GroupLocks,
    key: String,
    guard: Option<OwnedMutexGuard<()>>,
    /// True when another pass of the group held the lock after the ticket was taken (waited
    /// for, or released just before): what was read before may be stale.
    pub waited: bool,
}

impl Default for GroupLocks {
    fn default() -> Self {
        Self {
            locks: Mutex::default(),
            releases: AtomicU64::new(0),
            released_at: (0..RELEASE_SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl GroupLocks {
    /// Taken before a pass reads its group, so that [`GroupLocks::lock`] can tell whether the
    /// group's lock was released since (its reads predate that pass's writes).
    pub fn ticket(&self) -> Ticket {
        Ticket(self.releases.load(Ordering::SeqCst))
    }

    pub async fn lock(&self, key: &str, read_at: Ticket) -> GroupGuard<'_> {
        let lock = self
            .locks
            .locked()
            .entry(key.to_string())
            .or_default()
            .clone();
        let (guard, contended) = match lock.clone().try_lock_owned() {
            Ok(g) => (g, false),
            Err(_) => (lock.lock_owned().await, true),
        };
        // Recorded by the previous holder before it let go, so visible once the lock is ours.
        let released_since = self.released_at[slot(key)].load(Ordering::SeqCst) > read_at.0;
        GroupGuard {
            owner: self,
            key: key.to_string(),
            guard: Some(guard),
            waited: contended || released_since,
        }
    }

    pub fn len(&self) -> usize {
        self.locks.locked().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn slot(key: &str) -> usize {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    (h.finish() % RELEASE_SLOTS as u64) as usize
}

impl Drop for GroupGuard<'_> {
    fn drop(&mut self) {
        let now = self.owner.releases.fetch_add(1, Ordering::SeqCst) + 1;
        self.owner.released_at[slot(&self.key)].fetch_max(now, Ordering::SeqCst);
        drop(self.guard.take());
        let mut locks = self.owner.locks.locked();
        // Only the map holds it now: nobody is waiting.
        if locks
            .get(&self.key)
            .is_some_and(|l| Arc::strong_count(l) == 1)
        {
            locks.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn one_holder_per_group_and_entries_are_freed() {
        let locks = Arc::new(GroupLocks::default());
        let inside = Arc::new(AtomicUsize::new(0));
        let max = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        let waited = Arc::new(AtomicUsize::new(0));
        for _ in 0..8 {
            let (locks, inside, max, waited) =
                (locks.clone(), inside.clone(), max.clone(), waited.clone());
            tasks.push(tokio::spawn(async move {
                let g = locks.lock("g", locks.ticket()).await;
                if g.waited {
                    waited.fetch_add(1, Ordering::SeqCst);
                }
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                max.fetch_max(now, Ordering::SeqCst);
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(max.load(Ordering::SeqCst), 1);
        assert!(locks.is_empty());
        let first = locks.lock("h", locks.ticket()).await;
        assert!(!first.waited, "an uncontended lock did not wait");
    }

    #[tokio::test]
    async fn a_release_after_the_ticket_counts_as_waiting() {
        let locks = GroupLocks::default();
        let read_at = locks.ticket();
        // Another pass of the group takes and releases the lock between the read and the lock.
        drop(locks.lock("g", locks.ticket()).await);
        assert!(
            locks.lock("g", read_at).await.waited,
            "its read predates a release"
        );
        let fresh = locks.ticket();
        assert!(
            !locks.lock("g", fresh).await.waited,
            "no release since this read"
        );
        // Another group's release does not count (unless it shares the slot).
        let read_at = locks.ticket();
        let other = (0..)
            .map(|i| format!("other-{i}"))
            .find(|k| slot(k) != slot("g"))
            .unwrap();
        drop(locks.lock(&other, locks.ticket()).await);
        assert!(!locks.lock("g", read_at).await.waited);
    }
}
