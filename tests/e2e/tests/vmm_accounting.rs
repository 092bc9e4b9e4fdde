//! Device memory a program creates itself through the VMM API (`cuMemCreate`:
//! PyTorch's expandable segments, JAX's allocator) counts in tandemd's
//! per-job memory, apart from `cuMemAlloc` memory, and leaves it with
//! `cuMemRelease`. A job that asked for weight sharing is told, once, that
//! such memory is not deduplicated. The shim and the fake driver run in this
//! test's process.

use std::time::Duration;

use tandem_e2e::coord::{client_by_pid, num, poll, Tandemd, TestDir};
use tandem_e2e::inproc::{ok, CUresult, InProcess};

type CreateFn = unsafe extern "C" fn(*mut u64, usize, *const AllocationProp, u64) -> CUresult;
type ReleaseFn = unsafe extern "C" fn(u64) -> CUresult;
type AllocFn = unsafe extern "C" fn(*mut u64, usize) -> CUresult;
type FreeFn = unsafe extern "C" fn(u64) -> CUresult;

/// `CUmemAllocationProp` (cuda.h, 32 bytes).
#[repr(C)]
struct AllocationProp {
    type_: u32,
    requested_handle_types: u32,
    location_type: u32,
    location_id: i32,
    win32_handle_meta_data: *mut libc::c_void,
    compression_type: u8,
    gpu_direct_rdma_capable: u8,
    usage: u16,
    reserved: [u8; 4],
}

const MIB: u64 = 1 << 20;
const WAIT: Duration = Duration::from_secs(10);

/// This process's stderr (fd 2) sent to a file until [`Stderr::restore`].
struct Stderr {
    saved: libc::c_int,
    path: std::path::PathBuf,
}

impl Stderr {
    fn capture(path: &std::path::Path) -> Stderr {
        let file = std::fs::File::create(path).expect("create the stderr file");
        // SAFETY: dup/dup2 on valid descriptors; fd 2 is restored by restore().
        let saved = unsafe { libc::dup(2) };
        assert!(saved >= 0, "dup(2)");
        // SAFETY: as above; `file` stays open until dup2 has taken it.
        assert!(unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&file), 2) } == 2);
        Stderr {
            saved,
            path: path.to_path_buf(),
        }
    }

    /// Puts fd 2 back and returns what was written meanwhile.
    fn restore(self) -> String {
        // SAFETY: `saved` is the duplicate of the original fd 2 made above.
        unsafe {
            assert!(libc::dup2(self.saved, 2) == 2);
            libc::close(self.saved);
        }
        std::fs::read_to_string(&self.path).expect("read the stderr file")
    }
}

/// This process's `bytes_allocated` in tandemd's stats, once it equals `want`.
fn wait_allocated(d: &Tandemd, want: u64, what: &str) {
    let pid = std::process::id();
    poll(WAIT, what, || {
        let s = d.try_stats()?;
        let c = client_by_pid(&s, pid).ok_or("not registered yet")?;
        let got = num(c, "bytes_allocated");
        if got == want {
            Ok(())
        } else {
            Err(format!("bytes_allocated {got}, want {want}"))
        }
    });
}

#[test]
fn memory_the_program_creates_with_cu_mem_create_counts_in_its_stats() {
    let dir = TestDir::new("vmm-accounting");
    let d = Tandemd::start(&dir);
    std::env::set_var("TANDEM_SHARE_WEIGHTS", "on");
    let p = InProcess::load(&dir.socket());
    // SAFETY: each type is the cuda.h signature of the symbol named; the
    // shim's exports are its hooks, which forward to the fake driver.
    let (create, release, alloc, free) = unsafe {
        (
            p.shim_sym::<CreateFn>("cuMemCreate"),
            p.shim_sym::<ReleaseFn>("cuMemRelease"),
            p.shim_sym::<AllocFn>("cuMemAlloc_v2"),
            p.shim_sym::<FreeFn>("cuMemFree_v2"),
        )
    };
    let prop = AllocationProp {
        type_: 1,                  // CU_MEM_ALLOCATION_TYPE_PINNED
        requested_handle_types: 0, // CU_MEM_HANDLE_TYPE_NONE
        location_type: 1,          // CU_MEM_LOCATION_TYPE_DEVICE
        location_id: 0,
        win32_handle_meta_data: std::ptr::null_mut(),
        compression_type: 0,
        gpu_direct_rdma_capable: 0,
        usage: 0,
        reserved: [0; 4],
    };
    let pid = std::process::id();
    poll(WAIT, "registered with weight sharing granted", || {
        let s = d.try_stats()?;
        let c = client_by_pid(&s, pid).ok_or("not registered yet")?;
        match c["dedup"]["share_weights"].as_bool() {
            Some(true) => Ok(()),
            _ => Err(format!("share_weights not granted: {c}")),
        }
    });
    let (mut h1, mut h2, mut dptr) = (0u64, 0u64, 0u64);
    let said = Stderr::capture(&dir.path().join("stderr"));
    // SAFETY: valid out-pointers and property struct; sizes are multiples of
    // the fake's 2 MiB granularity.
    unsafe {
        ok(alloc(&mut dptr, MIB as usize), "cuMemAlloc_v2");
        ok(create(&mut h1, (4 * MIB) as usize, &prop, 0), "cuMemCreate");
        ok(create(&mut h2, (2 * MIB) as usize, &prop, 0), "cuMemCreate");
    }
    let said = said.restore();
    let lines: Vec<&str> = said.lines().filter(|l| l.contains("cuMemCreate")).collect();
    assert_eq!(lines.len(), 1, "one line about cuMemCreate: {said:?}");
    assert!(
        lines[0].contains("not deduplicated") && lines[0].contains("4 MiB"),
        "{said:?}"
    );
    wait_allocated(&d, 7 * MIB, "1 MiB allocated and 6 MiB created");

    // SAFETY: a handle cuMemCreate returned, never mapped.
    unsafe { ok(release(h1), "cuMemRelease") };
    wait_allocated(&d, 3 * MIB, "the 4 MiB handle released");
    // A failed release (the same handle again) changes nothing; the
    // allocation's free takes only its own bytes.
    // SAFETY: the fake driver refuses a released handle.
    assert_ne!(unsafe { release(h1) }, 0, "a released handle is refused");
    // SAFETY: the address cuMemAlloc_v2 returned.
    unsafe { ok(free(dptr), "cuMemFree_v2") };
    wait_allocated(&d, 2 * MIB, "the allocation freed, the 2 MiB handle left");
    // SAFETY: a live handle.
    unsafe { ok(release(h2), "cuMemRelease") };
    wait_allocated(&d, 0, "everything released");
}
