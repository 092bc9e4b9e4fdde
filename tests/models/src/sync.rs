//! The stand-in for `proto/src/sync.rs` under the model checker.
//!
//! **Atomics.** The ring and control block live in shared memory and are
//! reached by casting a mapping's address, so their atomics must have std's
//! exact size and layout (proto asserts every offset). loom's atomics do not.
//! So each type here is std-sized (an `UnsafeCell` holding the initial
//! value) and forwards every operation to a loom atomic found by its
//! address in a per-execution table, created on first use from the bytes
//! at that address. Every operation, ordering included, is loom's.
//!
//! Rules for a model: touch a region only through these types, keep it
//! mapped for the whole execution, and do not move an atomic after its
//! first use (the table is keyed by address).
//!
//! **Futex.** [`futex_wait`] and [`futex_wake`] model one futex hash bucket
//! with a loom `Mutex` and `Condvar`: a waiter compares the word with its
//! expected value under the bucket lock and sleeps on the condition
//! variable; a waker takes the lock and wakes every sleeper. That is the
//! kernel's guarantee (a wake that follows the store either finds the
//! waiter asleep or the waiter finds the word changed). The timeout is
//! ignored, on purpose: a waiter sleeps until woken, so a wake-up the
//! protocol loses leaves the waiter asleep forever, and loom reports the
//! execution as a deadlock instead of the bound hiding it.
//!
//! **Waits.** A contended `SyncProducer` push spins, yields and naps, a
//! bounded number of times each, before it drops: [`spin_loop`],
//! [`yield_now`] and [`nap`] are all loom yields, which let the other
//! threads run (loom explores which, and where they are preempted). A
//! model therefore shows what the lock guards (no record lost, torn or
//! reordered), not the bound's length, which is a question of real time.

use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::sync::Arc;

pub use core::sync::atomic::Ordering;

use loom::sync::{Condvar, Mutex};

#[derive(Default)]
struct Table {
    u8s: HashMap<usize, Arc<loom::sync::atomic::AtomicU8>>,
    u32s: HashMap<usize, Arc<loom::sync::atomic::AtomicU32>>,
    u64s: HashMap<usize, Arc<loom::sync::atomic::AtomicU64>>,
}

struct Bucket {
    /// Counts wakes: a sleeper returns once it has changed.
    wakes: Mutex<u64>,
    cv: Condvar,
}

loom::lazy_static! {
    static ref TABLE: std::sync::Mutex<Table> = std::sync::Mutex::new(Table::default());
    static ref BUCKET: Bucket = Bucket { wakes: Mutex::new(0), cv: Condvar::new() };
}

macro_rules! shadow {
    ($name:ident, $t:ty, $field:ident) => {
        /// A std-sized atomic whose operations are loom's (see the module docs).
        #[repr(transparent)]
        pub struct $name(UnsafeCell<$t>);

        // SAFETY: the cell is read once, when the loom atomic standing for it
        // is created (under the table's lock); every other access goes
        // through that loom atomic.
        unsafe impl Sync for $name {}

        impl $name {
            pub const fn new(v: $t) -> Self {
                $name(UnsafeCell::new(v))
            }

            fn model(&self) -> Arc<loom::sync::atomic::$name> {
                let addr = self.0.get() as usize;
                // Not a loom lock: the table is bookkeeping, not part of the
                // model, and no loom operation runs while it is held.
                let mut t = TABLE.lock().unwrap_or_else(|e| e.into_inner());
                Arc::clone(t.$field.entry(addr).or_insert_with(|| {
                    // SAFETY: the address is this live atomic's; before the
                    // first operation nothing but its initial bytes are there.
                    let v = unsafe { self.0.get().read_volatile() };
                    Arc::new(loom::sync::atomic::$name::new(v))
                }))
            }

            pub fn load(&self, o: Ordering) -> $t {
                self.model().load(o)
            }

            pub fn store(&self, v: $t, o: Ordering) {
                self.model().store(v, o)
            }

            pub fn swap(&self, v: $t, o: Ordering) -> $t {
                self.model().swap(v, o)
            }

            pub fn fetch_add(&self, v: $t, o: Ordering) -> $t {
                self.model().fetch_add(v, o)
            }

            pub fn fetch_or(&self, v: $t, o: Ordering) -> $t {
                self.model().fetch_or(v, o)
            }

            pub fn fetch_and(&self, v: $t, o: Ordering) -> $t {
                self.model().fetch_and(v, o)
            }

            pub fn compare_exchange_weak(
                &self,
                current: $t,
                new: $t,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$t, $t> {
                self.model()
                    .compare_exchange_weak(current, new, success, failure)
            }

            pub fn compare_exchange(
                &self,
                current: $t,
                new: $t,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$t, $t> {
                self.model()
                    .compare_exchange(current, new, success, failure)
            }

            pub fn fetch_update<F: FnMut($t) -> Option<$t>>(
                &self,
                set_order: Ordering,
                fetch_order: Ordering,
                f: F,
            ) -> Result<$t, $t> {
                self.model().fetch_update(set_order, fetch_order, f)
            }
        }

        // Process-local state (the board's `Presence`) derives these.
        impl Default for $name {
            fn default() -> Self {
                Self::new(0)
            }
        }

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                // No load: formatting is not part of any protocol modelled.
                f.write_str(stringify!($name))
            }
        }
    };
}

shadow!(AtomicU8, u8, u8s);
shadow!(AtomicU32, u32, u32s);
shadow!(AtomicU64, u64, u64s);

const _: () = {
    assert!(core::mem::size_of::<AtomicU32>() == 4 && core::mem::align_of::<AtomicU32>() == 4);
    assert!(core::mem::size_of::<AtomicU64>() == 8 && core::mem::align_of::<AtomicU64>() == 8);
};

/// The modelled `FUTEX_WAIT` (the timeout is ignored: see the module docs).
pub fn futex_wait(
    word: &AtomicU32,
    expected: u32,
    _timeout: std::time::Duration,
) -> tandem_os::Result<tandem_os::futex::Wait> {
    let mut wakes = BUCKET.wakes.lock().unwrap_or_else(|e| e.into_inner());
    // SeqCst: the kernel's compare is ordered against the waker's store by
    // the bucket lock and full barriers.
    if word.load(Ordering::SeqCst) != expected {
        return Ok(tandem_os::futex::Wait::ValueChanged);
    }
    let seen = *wakes;
    while *wakes == seen {
        wakes = BUCKET.cv.wait(wakes).unwrap_or_else(|e| e.into_inner());
    }
    Ok(tandem_os::futex::Wait::Woken)
}

/// The modelled `FUTEX_WAKE`: wakes every sleeper of the one bucket.
pub fn futex_wake(_word: &AtomicU32, _waiters: u32) -> tandem_os::Result<u32> {
    let mut wakes = BUCKET.wakes.lock().unwrap_or_else(|e| e.into_inner());
    *wakes += 1;
    BUCKET.cv.notify_all();
    Ok(0)
}

/// A contended `SyncProducer` push's spin: a loom yield (loom requires one
/// in every spin loop, and explores the other threads' progress there).
pub fn spin_loop() {
    loom::hint::spin_loop();
}

/// `sched_yield`: a loom yield.
pub fn yield_now() {
    loom::thread::yield_now();
}

/// A short sleep: a loom yield (the model has no clock; what a sleep
/// changes is only which thread runs next).
pub fn nap(_d: core::time::Duration) {
    loom::thread::yield_now();
}
