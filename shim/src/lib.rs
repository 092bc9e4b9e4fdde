//! libtandem.so: the CUDA driver API interposer.
//!
//! Loaded with `LD_PRELOAD` into unmodified CUDA programs. It sees driver calls
//! through all three ways programs reach the driver:
//! 1. exported driver symbols, for programs linked against libcuda;
//! 2. an overridden `dlsym`, for programs that `dlopen("libcuda.so.1")`;
//! 3. its own answers to `cuGetProcAddress{,_v2}`, how the CUDA runtime finds
//!    every driver function.
//!
//! All three come from one list (`table`, expanded into exports by
//! [`hooks`]). Every hooked call is counted and
//! forwarded, unchanged, to the same variant of the real driver. Nothing here
//! needs a coordinator (fail-open): without one the hook fast path is a relaxed
//! load, a relaxed add, one load of the session word and the forwarded call.
//! With one ([`client`]), launches also load the gate and every reported call
//! writes one ring record: still no syscall, allocation or getenv, and one
//! CAS of the ring's try-lock (a push that finds another thread of the
//! process inside its own push spins, yields and naps, at most about 5 ms,
//! then drops the record: `proto::ring::SyncProducer`).
//!
//! The modules stand in layers, each importing only from its own and the ones
//! below (`scripts/import_layers.txt` declares them, and
//! `scripts/check_import_cycles.py`, run by `scripts/test`, fails on an import
//! that runs upward or in a loop):
//! 1. entry points: `hooks` (the exports), `dlsym`, `proc_address`;
//! 2. the interposed operations they call: `launch`, `memops`, `graphs`,
//!    `capture`;
//! 3. the features those use: `dedup` and `follow`, and beneath them
//!    `client`, the coordinator session (it tells them what happened through
//!    a slot this crate root fills at start-up, `client::features`);
//! 4. the driver and utilities: `vmm` and `calls` (the shim's own driver
//!    calls), `driver` and `counters`, `table`, then `log`, `env`, `types`;
//! 5. `tandem_proto` and `tandem_os`, other crates.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod log;

mod calls;
mod capture;
mod client;
mod counters;
mod dedup;
mod dlsym;
mod driver;
mod env;
mod follow;
mod graphs;
mod hooks;
mod launch;
mod memops;
mod proc_address;
mod table;
mod types;
mod vmm;

/// What the coordinator session tells the features built on it. The client
/// stands beneath them and cannot name them: this fills its slot.
static FEATURES: client::Features = client::Features {
    session_started: follow::session_started,
    session_lost: dedup::session_lost,
    tick: tick_features,
    poll_slice: dedup::poll_slice,
    on_dedup: dedup::on_message,
    on_follow: follow::on_message,
};

/// The watcher's periodic work: dedup's scan, follow mode's pending re-offers.
fn tick_features(s: &client::session::Session) {
    dedup::tick(s);
    follow::tick(s);
}

/// The constructor runs in every process the preload reaches (shells, compilers,
/// …), so it does almost nothing: read `TANDEM_LOG`, fill the session's slot
/// for dedup and follow mode (one store), arrange for fork and exit. The
/// driver is found lazily, on first use.
#[ctor::ctor(unsafe)]
fn init() {
    log::init_from_env();
    client::features::install(&FEATURES);
    // SAFETY: registering plain extern "C" functions with no captured state.
    unsafe {
        libc::pthread_atfork(None, None, Some(after_fork_in_child));
        if log::enabled(log::Level::Debug) {
            libc::atexit(at_exit);
        }
    }
}

extern "C" fn after_fork_in_child() {
    counters::reset();
    client::after_fork_in_child();
    dedup::after_fork_in_child();
    follow::after_fork_in_child();
}

extern "C" fn at_exit() {
    counters::dump();
    for line in [dedup::summary(), follow::summary()].into_iter().flatten() {
        log!(Debug, "{line}");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_constructor_gives_the_session_dedup_and_follow_mode() {
        // The constructor ran in this test binary too: without it, the watcher
        // would never pass on a Dedup or Follow message.
        assert!(core::ptr::eq(
            crate::client::features::get(),
            &crate::FEATURES
        ));
    }
}
