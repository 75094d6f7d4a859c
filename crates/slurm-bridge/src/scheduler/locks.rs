//! One lock per pod group, so two pods of a gang reconciled at once cannot both submit a job.

use crate::sync::MutexExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

/// Locks keyed by group key; entries are dropped when nobody holds or waits for them.
#[derive(Default)]
pub struct GroupLocks {
    locks: Mutex<HashMap<String, Arc<AsyncMutex<()>>>>,
}

/// Held while a group is reconciled.
pub struct GroupGuard<'a> {
    owner: &'a GroupLocks,
    key: String,
    guard: Option<OwnedMutexGuard<()>>,
    /// True when another holder had the lock first: what was read before may be stale.
    pub waited: bool,
}

impl GroupLocks {
    pub async fn lock(&self, key: &str) -> GroupGuard<'_> {
        let lock = self
            .locks
            .locked()
            .entry(key.to_string())
            .or_default()
            .clone();
        let (guard, waited) = match lock.clone().try_lock_owned() {
            Ok(g) => (g, false),
            Err(_) => (lock.lock_owned().await, true),
        };
        GroupGuard {
            owner: self,
            key: key.to_string(),
            guard: Some(guard),
            waited,
        }
    }

    pub fn len(&self) -> usize {
        self.locks.locked().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for GroupGuard<'_> {
    fn drop(&mut self) {
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
                let g = locks.lock("g").await;
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
        let first = locks.lock("h").await;
        assert!(!first.waited, "an uncontended lock did not wait");
    }
}
