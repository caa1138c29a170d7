//! The one way head and nodes lock their shared state.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locks `mutex`, taking the guard even if a thread panicked while holding
/// it.
///
/// Every mutex in the head and the nodes guards state that each update
/// leaves whole (a value replaced or a map entry inserted in one step), so
/// a panic elsewhere must not turn every later request into a second panic.
pub fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// [`lock`] for a reader of an `RwLock`.
pub fn read<T: ?Sized>(rwlock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    rwlock.read().unwrap_or_else(PoisonError::into_inner)
}

/// [`lock`] for the writer of an `RwLock`.
pub fn write<T: ?Sized>(rwlock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    rwlock.write().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::lock;
    use std::sync::{Arc, Mutex};

    #[test]
    fn a_mutex_poisoned_by_a_panic_still_locks() {
        let shared = Arc::new(Mutex::new(1));
        let held = Arc::clone(&shared);
        let panicked = std::thread::spawn(move || {
            let _guard = held.lock();
            panic!("while holding the lock");
        })
        .join();
        assert!(panicked.is_err());
        assert!(shared.is_poisoned());
        *lock(&shared) += 1;
        assert_eq!(*lock(&shared), 2);
    }
}
