//! Locks that survive a panicked holder: every shared state in shepherd stays
//! usable after a thread that held it panicked (the state is plain data, and
//! the panic is reported where it happened), so a poisoned lock is taken as is.

use std::sync::{Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

/// Locks `mutex`, poisoned or not.
pub fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Takes `lock` for reading, poisoned or not.
pub fn read<T: ?Sized>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

/// Takes `lock` for writing, poisoned or not.
pub fn write<T: ?Sized>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}

/// Waits on `condvar` with `guard`, poisoned or not.
pub fn wait<'a, T>(condvar: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    condvar.wait(guard).unwrap_or_else(|e| e.into_inner())
}

/// Waits on `condvar` with `guard` for at most `timeout`, poisoned or not; true
/// when the wait timed out.
pub fn wait_timeout<'a, T>(
    condvar: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: Duration,
) -> (MutexGuard<'a, T>, bool) {
    let (guard, result) = condvar
        .wait_timeout(guard, timeout)
        .unwrap_or_else(|e| e.into_inner());
    (guard, result.timed_out())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_poisoned_lock_is_taken_with_its_data() {
        let shared = Arc::new((Mutex::new(1), RwLock::new(2)));
        let held = Arc::clone(&shared);
        let joined = std::thread::spawn(move || {
            let _m = held.0.lock().unwrap();
            let _w = held.1.write().unwrap();
            panic!("poison both");
        })
        .join();
        assert!(joined.is_err());
        assert!(shared.0.is_poisoned() && shared.1.is_poisoned());
        *lock(&shared.0) += 1;
        assert_eq!(*lock(&shared.0), 2);
        *write(&shared.1) += 1;
        assert_eq!(*read(&shared.1), 3);
    }
}
