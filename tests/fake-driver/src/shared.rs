//! One simulated GPU shared by several processes: `FAKECUDA_SHARED_DEVICE=<path>`.
//!
//! Without the variable every process has its own device and only its streams order its work
//! (today's behaviour, unchanged). With it, every process using the same path shares ONE device
//! timeline: a small file (created if missing, `mmap`ed `MAP_SHARED`) holds an atomic
//! `device_ready_at`, in ns on `CLOCK_MONOTONIC` (system-wide). A kernel from any stream of any
//! process starts at `max(now, its stream's ready_at, implicit waits, device_ready_at)` and
//! advances `device_ready_at` to its end (a CAS loop), so the kernels of co-located processes
//! serialize like time-sliced work on one GPU, in the order they were launched. Copies, memsets
//! and event records stay stream-only (copy engines run beside the kernels).
//!
//! File layout (native-endian, the file never leaves the host):
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 0      | 8    | `device_ready_at`: ns on `CLOCK_MONOTONIC` when the device is next free |
//! | 8      | 8    | kernels placed on the device by every process (statistics) |
//! | 16     | 8    | the SM placement's lock (0 free, 1 held), with `FAKECUDA_SHARED_SMS=1` |
//! | 24     | 40   | reserved (zero) |
//! | 64     | 8 x [`DEVICE_SMS`] | with `FAKECUDA_SHARED_SMS=1`: each SM's `ready_at`, ns on `CLOCK_MONOTONIC` |
//! | ...    |      | reserved (zero) |
//!
//! With `FAKECUDA_SHARED_SMS=1` as well (issue 23), the shared device runs kernels side by side
//! on its SMs instead of one after another: a kernel of `b` blocks takes `min(b, allowed)` SMs
//! (one block each, one wave) among those its launch may use (all, or what the launch
//! callback's TPC mask leaves: `crate::callbacks`), the ones free first; it starts when the last
//! of them is free (and not before its stream allows) and holds them for its duration. So a
//! kernel masked off some SMs never runs there, and a kernel launched while another holds
//! every SM waits for it, while one that finds SMs left free starts at once. `device_ready_at`
//! then follows the latest end (for the backlog). A process killed inside the placement's
//! short critical section would leave the lock held: the SM mode is for tests that do not kill.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The environment variable naming the shared device's file.
pub const ENV: &str = "FAKECUDA_SHARED_DEVICE";

/// Length of the file and of its mapping.
pub const FILE_LEN: usize = 4096;

/// Where a kernel that may start at `earliest` (stream order) and lasts `duration` runs on a
/// device that is busy until `device_ready_at`: `(start, end)`. Pure.
#[must_use]
pub fn place(device_ready_at: u64, earliest: u64, duration: u64) -> (u64, u64) {
    let start = earliest.max(device_ready_at);
    (start, start.saturating_add(duration))
}

/// Places a kernel on the device whose `device_ready_at` is `cell` and advances it past the
/// kernel (lock-free: several processes may race; each kernel gets its own slot).
pub fn reserve(cell: &AtomicU64, earliest: u64, duration: u64) -> (u64, u64) {
    let mut cur = cell.load(Ordering::Acquire);
    loop {
        let (start, end) = place(cur, earliest, duration);
        // `end >= start >= cur`: the timeline only moves forward.
        match cell.compare_exchange_weak(cur, end, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return (start, end),
            Err(now) => cur = now,
        }
    }
}

/// SMs of the fake device (`CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`: an H100 SXM's 132).
pub const DEVICE_SMS: u32 = 132;

/// The variable that makes the shared device place kernels on SMs (see the module docs).
pub const SMS_ENV: &str = "FAKECUDA_SHARED_SMS";

/// The cell of the SM placement's lock, and of SM 0's `ready_at`.
const LOCK_CELL: usize = 2;
const SM_CELLS: usize = 8;
const _: () = assert!((SM_CELLS + DEVICE_SMS as usize) * 8 <= FILE_LEN);

/// A set of SMs, bit `i` for SM `i` (up to 256).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SmSet(pub [u64; 4]);

impl SmSet {
    /// SMs `0..n`.
    #[must_use]
    pub fn first(n: u32) -> SmSet {
        let mut s = SmSet::default();
        for sm in 0..n.min(256) {
            s.insert(sm);
        }
        s
    }

    /// Adds SM `sm` (< 256).
    pub fn insert(&mut self, sm: u32) {
        self.0[(sm / 64) as usize] |= 1 << (sm % 64);
    }

    /// Whether SM `sm` is in the set.
    #[must_use]
    pub fn contains(&self, sm: u32) -> bool {
        sm < 256 && self.0[(sm / 64) as usize] >> (sm % 64) & 1 == 1
    }

    /// How many SMs the set holds.
    #[must_use]
    pub fn len(&self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }

    /// Its SMs, in order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        (0..256).filter(|&sm| self.contains(sm))
    }
}

/// Places a kernel on SMs whose `ready_at` are `ready` (indexed by SM): `width` of the
/// `allowed` SMs (at least 1, at most all allowed), those free first (lowest index among equals);
/// it starts when the last of them is free, not before `earliest`, and they are busy until its
/// end. Returns `(start, end, the SMs taken)`. Pure but for `ready`; `allowed` not empty.
pub fn place_on_sms(
    ready: &mut [u64],
    earliest: u64,
    duration: u64,
    width: u64,
    allowed: &SmSet,
) -> (u64, u64, SmSet) {
    let mut free: Vec<(u64, u32)> = allowed
        .iter()
        .filter(|&sm| (sm as usize) < ready.len())
        .map(|sm| (ready[sm as usize].max(earliest), sm))
        .collect();
    free.sort_unstable();
    let n = usize::try_from(width)
        .unwrap_or(usize::MAX)
        .clamp(1, free.len().max(1));
    let taken = &free[..n.min(free.len())];
    let start = taken.last().map_or(earliest, |&(t, _)| t);
    let end = start.saturating_add(duration);
    let mut used = SmSet::default();
    for &(_, sm) in taken {
        ready[sm as usize] = end;
        used.insert(sm);
    }
    (start, end, used)
}

/// A launch's TPC disable bits (bit `k`: TPC `k`, SMs `2k` and `2k + 1`), as its descriptor
/// left them after the callbacks. Kept as bits: the SMs are worked out only where a kernel is
/// placed on them ([`TpcMask::sms`]), so a masked launch costs the fake no more than another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TpcMask(pub u128);

impl TpcMask {
    /// The SMs of a device of `sms` SMs the mask leaves.
    pub fn sms(self, sms: u32) -> SmSet {
        let mut s = SmSet::default();
        for sm in 0..sms.min(256) {
            if (sm / 2) >= 128 || self.0 >> (sm / 2) & 1 == 0 {
                s.insert(sm);
            }
        }
        s
    }

    /// Whether it leaves no SM of a device of `sms` SMs.
    pub fn leaves_none(self, sms: u32) -> bool {
        let tpcs = sms.div_ceil(2).min(128);
        let all = if tpcs == 128 {
            u128::MAX
        } else {
            (1u128 << tpcs) - 1
        };
        self.0 & all == all
    }
}

/// Whether `FAKECUDA_SHARED_SMS=1` (read once).
pub fn sm_mode() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os(SMS_ENV).is_some_and(|v| v == "1"))
}

/// A mapping of a shared device file.
pub struct SharedDevice {
    base: *mut libc::c_void,
}

// SAFETY: the mapping is only ever accessed through atomics (`cells`), and the pointer is
// valid for the life of the value (unmapped only in Drop, which needs exclusive ownership).
unsafe impl Send for SharedDevice {}
// SAFETY: as above: every shared access is atomic.
unsafe impl Sync for SharedDevice {}

impl SharedDevice {
    /// Opens (creating it if missing, mode 0666 before umask) and maps the file at `path`.
    pub fn open(path: &Path) -> std::io::Result<SharedDevice> {
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        // SAFETY: `c` is a valid NUL-terminated path; the flags and mode are plain values.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC,
                0o666 as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let result = Self::map(fd);
        // SAFETY: `fd` is ours and no longer needed (a mapping keeps the file alive).
        unsafe { libc::close(fd) };
        result
    }

    fn map(fd: libc::c_int) -> std::io::Result<SharedDevice> {
        // SAFETY: an all-zero `stat` is a valid out-buffer for fstat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is open and `st` is a valid out-pointer.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // Growing to the same length from several processes at once is harmless: the new bytes
        // read as zero and no existing byte changes.
        if (st.st_size as u64) < FILE_LEN as u64 {
            // SAFETY: `fd` is open for writing.
            if unsafe { libc::ftruncate(fd, FILE_LEN as libc::off_t) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        // SAFETY: a fresh shared mapping of FILE_LEN bytes of a file at least that long.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                FILE_LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(SharedDevice { base })
    }

    fn cell(&self, i: usize) -> &AtomicU64 {
        debug_assert!((i + 1) * 8 <= FILE_LEN);
        // SAFETY: the mapping is FILE_LEN bytes, page-aligned (so 8-aligned), live while
        // `self` is, and only ever accessed atomically (here and by other processes).
        unsafe { &*self.base.cast::<AtomicU64>().add(i) }
    }

    /// `device_ready_at` (ns on `CLOCK_MONOTONIC`).
    pub fn ready_at(&self) -> &AtomicU64 {
        self.cell(0)
    }

    /// Kernels placed on the device by every process.
    pub fn kernels(&self) -> &AtomicU64 {
        self.cell(1)
    }

    /// Places one kernel (times in ns on `CLOCK_MONOTONIC`) and counts it.
    pub fn run(&self, earliest: u64, duration: u64) -> (u64, u64) {
        let w = reserve(self.ready_at(), earliest, duration);
        self.kernels().fetch_add(1, Ordering::Relaxed);
        w
    }

    /// Places one kernel of `width` blocks on the SMs it may use ([`place_on_sms`], times in
    /// ns on `CLOCK_MONOTONIC`) under the file's lock, and counts it.
    pub fn run_on_sms(
        &self,
        earliest: u64,
        duration: u64,
        width: u64,
        allowed: &SmSet,
    ) -> (u64, u64, SmSet) {
        let lock = self.cell(LOCK_CELL);
        while lock
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        let mut ready: Vec<u64> = (0..DEVICE_SMS as usize)
            .map(|i| self.cell(SM_CELLS + i).load(Ordering::Relaxed))
            .collect();
        let placed = place_on_sms(&mut ready, earliest, duration, width, allowed);
        for sm in placed.2.iter() {
            self.cell(SM_CELLS + sm as usize)
                .store(ready[sm as usize], Ordering::Relaxed);
        }
        lock.store(0, Ordering::Release);
        self.ready_at().fetch_max(placed.1, Ordering::AcqRel);
        self.kernels().fetch_add(1, Ordering::Relaxed);
        placed
    }
}

impl Drop for SharedDevice {
    fn drop(&mut self) {
        // SAFETY: `base` is our FILE_LEN-byte mapping and no reference into it outlives `self`.
        unsafe { libc::munmap(self.base, FILE_LEN) };
    }
}

/// The process's shared device, if `FAKECUDA_SHARED_DEVICE` is set (read once). A path that
/// cannot be opened is a broken test set-up: it is reported and the process aborts, rather than
/// silently running on a private device.
pub fn device() -> Option<&'static SharedDevice> {
    static DEV: OnceLock<Option<SharedDevice>> = OnceLock::new();
    DEV.get_or_init(|| {
        let path = std::env::var_os(ENV).filter(|p| !p.is_empty())?;
        match SharedDevice::open(Path::new(&path)) {
            Ok(d) => Some(d),
            Err(e) => {
                eprintln!(
                    "fake libcuda: {ENV}={}: cannot open or map it: {e}",
                    Path::new(&path).display()
                );
                std::process::abort();
            }
        }
    })
    .as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_takes_the_sms_free_first_among_those_it_may_use() {
        let mut ready = vec![0u64; 8];
        // 8 blocks on all 8 SMs: busy until 100.
        let (s, e, used) = place_on_sms(&mut ready, 0, 100, 8, &SmSet::first(8));
        assert_eq!((s, e, used), (0, 100, SmSet::first(8)));
        // Another kernel of 2 blocks waits for two of them.
        let (s, e, used) = place_on_sms(&mut ready, 10, 5, 2, &SmSet::first(8));
        assert_eq!((s, e, used.len()), (100, 105, 2));
    }

    #[test]
    fn sms_a_mask_leaves_free_let_another_kernel_start_at_once() {
        // Training masked to SMs 2..8 fills them; inference's 2-block kernel finds SMs 0 and 1.
        let mut ready = vec![0u64; 8];
        let mut training = SmSet::default();
        (2..8).for_each(|sm| training.insert(sm));
        let (_, _, used) = place_on_sms(&mut ready, 0, 1_000, 64, &training);
        assert_eq!(used, training, "never on the reserved SMs");
        let (s, _, used) = place_on_sms(&mut ready, 10, 5, 2, &SmSet::first(8));
        assert_eq!(s, 10, "starts at once");
        assert_eq!(used, SmSet::first(2));
        // Without the reservation it waits for training's blocks.
        let mut ready = vec![0u64; 8];
        place_on_sms(&mut ready, 0, 1_000, 64, &SmSet::first(8));
        assert_eq!(
            place_on_sms(&mut ready, 10, 5, 2, &SmSet::first(8)).0,
            1_000
        );
    }

    #[test]
    fn the_shared_file_places_kernels_of_two_mappings_on_its_sms() {
        let dir = std::env::temp_dir().join(format!("fake-sms-{}", std::process::id()));
        let a = SharedDevice::open(&dir).unwrap();
        let b = SharedDevice::open(&dir).unwrap();
        let mut masked = SmSet::default();
        (8..DEVICE_SMS).for_each(|sm| masked.insert(sm));
        let (_, end, used) = a.run_on_sms(1_000, 50_000, 10_000, &masked);
        assert_eq!(used, masked);
        let (start, _, used) = b.run_on_sms(2_000, 10, 4, &SmSet::first(DEVICE_SMS));
        assert_eq!((start, used), (2_000, SmSet::first(4)));
        let (start, _, _) = b.run_on_sms(2_000, 10, DEVICE_SMS.into(), &SmSet::first(DEVICE_SMS));
        assert_eq!(
            start, end,
            "a kernel wanting every SM waits for the masked one"
        );
        assert_eq!(b.kernels().load(Ordering::Relaxed), 3);
        let _ = std::fs::remove_file(&dir);
    }

    #[test]
    fn idle_device_starts_at_stream_time() {
        assert_eq!(place(0, 1_000, 500), (1_000, 1_500));
        assert_eq!(place(900, 1_000, 500), (1_000, 1_500));
    }

    #[test]
    fn busy_device_delays_the_kernel() {
        assert_eq!(place(5_000, 1_000, 500), (5_000, 5_500));
        assert_eq!(place(10, 0, u64::MAX), (10, u64::MAX));
    }

    #[test]
    fn reservations_serialize_and_advance_the_timeline() {
        let cell = AtomicU64::new(0);
        assert_eq!(reserve(&cell, 100, 50), (100, 150));
        // Another "process" launching earlier in stream time still waits for the device.
        assert_eq!(reserve(&cell, 120, 10), (150, 160));
        assert_eq!(cell.load(Ordering::Relaxed), 160);
        // A kernel after an idle gap starts at its own time.
        assert_eq!(reserve(&cell, 1_000, 1), (1_000, 1_001));
        assert_eq!(cell.load(Ordering::Relaxed), 1_001);
    }

    #[test]
    fn concurrent_reservations_never_overlap() {
        let cell = AtomicU64::new(0);
        let mut windows: Vec<(u64, u64)> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| s.spawn(|| (0..1000).map(|_| reserve(&cell, 0, 7)).collect::<Vec<_>>()))
                .collect();
            hs.into_iter()
                .flat_map(|h| h.join().expect("thread"))
                .collect()
        });
        windows.sort_unstable();
        assert_eq!(windows.len(), 4000);
        for (i, w) in windows.iter().enumerate() {
            assert_eq!(*w, (7 * i as u64, 7 * i as u64 + 7));
        }
        assert_eq!(cell.load(Ordering::Relaxed), 28_000);
    }

    #[test]
    fn two_mappings_of_one_file_share_the_timeline() {
        let path = std::env::temp_dir().join(format!("fakecuda-shared-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let a = SharedDevice::open(&path).expect("open a");
        let b = SharedDevice::open(&path).expect("open b");
        assert_eq!(
            std::fs::metadata(&path).expect("stat").len(),
            FILE_LEN as u64
        );
        assert_eq!(a.run(1_000, 100), (1_000, 1_100));
        assert_eq!(b.run(1_050, 100), (1_100, 1_200));
        assert_eq!(a.ready_at().load(Ordering::Relaxed), 1_200);
        assert_eq!(b.kernels().load(Ordering::Relaxed), 2);
        drop((a, b));
        // Reopening keeps the state (the file is the device).
        let c = SharedDevice::open(&path).expect("reopen");
        assert_eq!(c.ready_at().load(Ordering::Relaxed), 1_200);
        drop(c);
        std::fs::remove_file(&path).expect("rm");
    }

    #[test]
    fn unopenable_path_is_an_error() {
        assert!(SharedDevice::open(Path::new("/nonexistent-dir/fakecuda/dev")).is_err());
    }
}
