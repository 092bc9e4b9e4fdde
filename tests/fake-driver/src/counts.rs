//! What the fake counts while it runs, for the `fakecuda_*` exports (`crate::introspect`):
//! kernels executed and where the last one ran; and, at `cuInit`, the MPS environment
//! (`FAKECUDA_INIT_ENV_FILE`).

use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) static KERNELS_EXECUTED: AtomicU64 = AtomicU64::new(0);
/// The last kernel's `(start, end)` in stream time (ns since `streams::base_ns`); 0: none yet.
pub(crate) static LAST_START: AtomicU64 = AtomicU64::new(0);
pub(crate) static LAST_END: AtomicU64 = AtomicU64::new(0);

/// The SMs the last kernel ran on, on a shared device with `FAKECUDA_SHARED_SMS=1`; zeros
/// otherwise. Written under the state lock.
pub(crate) static LAST_SMS: std::sync::Mutex<crate::shared::SmSet> =
    std::sync::Mutex::new(crate::shared::SmSet([0; 4]));

/// Notes the SMs the last kernel ran on.
pub fn last_kernel_sms(sms: crate::shared::SmSet) {
    *LAST_SMS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = sms;
}

/// Notes where the last kernel ran (stream time). Called under the state lock.
pub fn last_kernel(start: u64, end: u64) {
    LAST_START.store(start, Ordering::Relaxed);
    LAST_END.store(end, Ordering::Relaxed);
}

/// The variables [`record_init_env`] records, in its file's order.
pub const INIT_ENV_VARS: [&str; 3] = [
    "CUDA_MPS_PIPE_DIRECTORY",
    "CUDA_MPS_CLIENT_PRIORITY",
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
];

/// Writes the MPS environment at `cuInit` to `$FAKECUDA_INIT_ENV_FILE`, if set.
pub fn record_init_env() {
    let Some(path) = std::env::var_os("FAKECUDA_INIT_ENV_FILE").filter(|p| !p.is_empty()) else {
        return;
    };
    let mut text = String::new();
    for name in INIT_ENV_VARS {
        match std::env::var(name) {
            Ok(v) => text.push_str(&format!("{name}={v}\n")),
            Err(_) => text.push_str(&format!("{name}\n")),
        }
    }
    let path = std::path::PathBuf::from(path);
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    if std::fs::write(&tmp, text).is_ok() {
        let _ = std::fs::rename(&tmp, &path);
    }
}

/// Counts `n` more executed kernels.
pub fn kernels_executed_add(n: u64) {
    KERNELS_EXECUTED.fetch_add(n, Ordering::Relaxed);
}
