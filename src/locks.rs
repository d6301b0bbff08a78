//! The std locks' one poison rule. A lock is poisoned when a thread panicked holding it; every
//! std lock in rpctap guards plain values that such a panic cannot leave misread (counters, maps
//! and queues stay whole; a line cut short by a panicking writer is cut off by that writer's own
//! length check), so a poisoned lock is used as it is: one thread's panic (already contained
//! and reported where it happened) must not spread to every thread that takes the lock next.
//! Async code never holds one of these guards across an `.await`.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Taking a std lock whether or not it is poisoned.
pub trait Locked<T: ?Sized> {
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> Locked<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Reading and writing a std `RwLock` whether or not it is poisoned.
pub trait Shared<T: ?Sized> {
    fn read_any(&self) -> RwLockReadGuard<'_, T>;
    fn write_any(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> Shared<T> for RwLock<T> {
    fn read_any(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(|p| p.into_inner())
    }
    fn write_any(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_lock_poisoned_by_a_panic_is_taken_with_its_value() {
        let m = Arc::new(Mutex::new(vec![1u8]));
        let l = Arc::new(RwLock::new(1u32));
        let (m2, l2) = (m.clone(), l.clone());
        let r = std::thread::spawn(move || {
            let _g = m2.lock();
            let _w = l2.write();
            panic!("poison both");
        })
        .join();
        assert!(r.is_err());
        assert!(m.is_poisoned() && l.is_poisoned());
        m.locked().push(2);
        assert_eq!(*m.locked(), vec![1, 2]);
        *l.write_any() += 1;
        assert_eq!(*l.read_any(), 2);
    }
}
