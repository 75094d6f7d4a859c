//! Synchronisation helpers every module shares: locks that shrug off poisoning, subscriber
//! lists, and the wait for a stop signal.
//!
//! A panic while a lock is held (a bug, caught by the task that
//! panicked) must not take every later pass down with it: the data behind these locks are caches
//! and counters that stay usable, so every lock in the crate is taken through these helpers.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// [`Mutex::lock`], even if a panicking holder poisoned the lock.
pub trait MutexExt<T> {
    /// The guard, poisoned or not.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T> MutexExt<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// [`RwLock::read`] and [`RwLock::write`], even if a panicking holder poisoned the lock.
pub trait RwLockExt<T> {
    /// A read guard, poisoned or not.
    fn read_locked(&self) -> RwLockReadGuard<'_, T>;
    /// The write guard, poisoned or not.
    fn write_locked(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T> RwLockExt<T> for RwLock<T> {
    fn read_locked(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write_locked(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// Subscribers of a stream of changes, each with its own unbounded channel; a subscriber whose
/// receiver is gone is dropped at the next send. The job watcher, the Slurm node listing and the
/// Kubernetes caches each keep one.
pub struct Subscribers<T>(Mutex<Vec<tokio::sync::mpsc::UnboundedSender<T>>>);

impl<T> Default for Subscribers<T> {
    fn default() -> Self {
        Subscribers(Mutex::new(Vec::new()))
    }
}

impl<T: Clone> Subscribers<T> {
    /// A receiver of every item sent from now on.
    pub fn subscribe(&self) -> tokio::sync::mpsc::UnboundedReceiver<T> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.0.locked().push(tx);
        rx
    }

    /// Sends `item` to every live subscriber.
    pub fn send(&self, item: T) {
        self.0.locked().retain(|tx| tx.send(item.clone()).is_ok());
    }

    /// True when no subscriber is left (after the last send).
    pub fn is_empty(&self) -> bool {
        self.0.locked().is_empty()
    }
}

/// Resolves once `rx` reads true, or its sender is gone: how a task waits for its stop signal
/// (a `watch` channel every component and the process share).
pub async fn until_true(mut rx: tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_is_still_taken() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let r = std::sync::Arc::new(RwLock::new(1));
        let (m2, r2) = (m.clone(), r.clone());
        let _ = std::thread::spawn(move || {
            let _g = m2.lock().unwrap();
            let _w = r2.write().unwrap();
            panic!("poison both");
        })
        .join();
        assert!(m.is_poisoned() && r.is_poisoned());
        *m.locked() += 1;
        *r.write_locked() += 1;
        assert_eq!((*m.locked(), *r.read_locked()), (2, 2));
    }
}
