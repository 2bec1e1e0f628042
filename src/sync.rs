//! The one way this crate takes a `std::sync::Mutex`, and the bounded queue built on it (`queue`).
//!
//! Every mutex here guards a short, await-free critical section that leaves its data consistent at
//! each step (a push, a remove, a counter), so a panic in another holder cannot leave it half
//! written. Recovering the guard from a poisoned lock is therefore safe, and it keeps one panicking
//! task from turning every later request into a second panic. A leaf: it imports nothing of the
//! crate.

use std::sync::{Mutex, MutexGuard, PoisonError};

pub mod queue;

/// Locks `mutex`, recovering the guard if an earlier holder panicked (see the module docs).
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    #[test]
    fn a_poisoned_lock_still_hands_out_its_data() {
        let shared = Arc::new(Mutex::new(vec![1]));
        let poisoner = shared.clone();
        let panicked = std::thread::spawn(move || {
            let _held = poisoner.lock();
            panic!("poison the lock");
        })
        .join();
        assert!(panicked.is_err());
        assert!(shared.is_poisoned());
        super::lock(&shared).push(2);
        assert_eq!(*super::lock(&shared), vec![1, 2]);
    }
}
