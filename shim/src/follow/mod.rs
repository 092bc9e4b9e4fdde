//! Follow mode (`TANDEM_FOLLOW=on`): a job shares a named region of device
//! memory with followers, and a follower maps another job's region read-only,
//! so its outputs track the sharer's live weights (COLTI-style model sharing).
//! The conversation with tandemd is `tandem_proto::follow`; the C API is
//! `tandem_follow_*` in `include/tandem.h`, whose return codes are
//! `tandem_proto::follow::api`.
//!
//! - [`tandem_follow_alloc`] allocates a region with the VMM API (one
//!   shareable physical allocation, whole granules, mapped read-write at a
//!   fresh reservation) and exports it as a POSIX fd; the program fills it,
//!   then [`tandem_follow_offer`] offers it to tandemd by name (SHARE + fd),
//!   waiting for the answer at most [`SHARE_TIMEOUT`], so no follower ever
//!   maps it half filled. The memory is the program's whatever the answer
//!   (fail-open); the fd is kept so a named region is offered again, unasked,
//!   to every tandemd the process registers with later (a restart, or one that
//!   was not running at the first offer).
//! - [`tandem_follow_map`] asks tandemd for a region by name (MAP), retrying
//!   while it is not there yet, imports the fd it gets (MAPPED + fd) and maps
//!   it read-only. The imported handle keeps the memory alive after the sharer
//!   exits: the follower then keeps the last weights. Every tandemd this
//!   process registers with later (a restart) is told of the mapping (HELD),
//!   so its accounting counts it.
//! - [`tandem_follow_free`] and `cuMemFree` on a region's address release it
//!   (after the context's work drains, like `cuMemFree`), and tell tandemd.
//!
//! Answers arrive on the watcher thread, which hands them to the waiting
//! caller through the [`mailbox`]. Nothing here is on a hot path: `cuMemFree`
//! pays one relaxed load while this process has no region.

mod mailbox;
mod regions;

use core::ffi::{c_char, c_int, CStr};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tandem_proto::follow::MAX_REGION_LEN;
use tandem_proto::follow::{api, valid_name, Follow, FollowOp, FollowStatus, FOLLOW_LEN};
use tandem_proto::wire::{Message, HEADER_LEN};

use crate::client::session::Session;
use crate::types::{CUdeviceptr, CUmemGenericAllocationHandle, CuResult};
use crate::vmm::{self, Access, DriverError};
use mailbox::Mailbox;
use regions::{Region, Regions, Role};

/// How long `tandem_follow_offer` waits for tandemd's answer.
pub const SHARE_TIMEOUT: Duration = Duration::from_secs(5);
/// `tandem_follow_map`'s wait when the caller passes 0.
pub const DEFAULT_MAP_TIMEOUT_MS: u32 = 5000;
/// Pause between two MAPs while the region is not there yet.
const RETRY_EVERY: Duration = Duration::from_millis(50);
/// The smallest granule used (the VMM granularity measured on an H100).
const MIN_GRANULE: usize = 2 << 20;

static REGIONS: Mutex<Regions> = Mutex::new(Regions::new());
static MAILBOX: Mailbox = Mailbox::new();
static NEXT_REQUEST: AtomicU64 = AtomicU64::new(1);
/// Whether this process has any region (`cuMemFree`'s only cost otherwise).
static ANY: AtomicBool = AtomicBool::new(false);
static SHARED_BYTES: AtomicU64 = AtomicU64::new(0);
static MAPPED_BYTES: AtomicU64 = AtomicU64::new(0);
/// Set in a fork child: the parent's CUDA state is not usable there.
static FORKED: AtomicBool = AtomicBool::new(false);

fn regions() -> MutexGuard<'static, Regions> {
    // A panic aborts the process (panic = "abort"): never poisoned in use.
    REGIONS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether `TANDEM_FOLLOW=on`.
fn enabled() -> bool {
    crate::client::follow_enabled()
}

// ---- arguments and driver steps ----

/// The validated arguments of a share or map.
struct Args {
    name: Vec<u8>,
    bytes: u64,
    layout: [u8; 16],
}

/// A region size the API accepts, or INVALID (said).
fn check_size(bytes: u64) -> Result<(), c_int> {
    if bytes == 0 || bytes > MAX_REGION_LEN {
        crate::log!(Warn, "follow: region size {bytes} is not in 1..=2^40 bytes");
        return Err(api::INVALID);
    }
    Ok(())
}

/// `bytes` rounded up to whole granules.
fn span_of(bytes: u64, granule: usize) -> Result<usize, c_int> {
    let n = usize::try_from(bytes).map_err(|_| api::INVALID)?;
    Ok(n.div_ceil(granule) * granule)
}

/// A valid region name and its layout tag (zero when `layout` is null).
///
/// # Safety
/// `name` is null or a NUL-terminated string; `layout` is null or 16 readable bytes.
unsafe fn name_and_layout(
    name: *const c_char,
    layout: *const u8,
) -> Result<(Vec<u8>, [u8; 16]), c_int> {
    if name.is_null() {
        return Err(api::INVALID);
    }
    // SAFETY: the caller passes a NUL-terminated string (the C API's contract).
    let name = unsafe { CStr::from_ptr(name) }.to_bytes();
    if !valid_name(name) {
        crate::log!(
            Warn,
            "follow: region name {:?} is not 1 to 56 printable ASCII characters without spaces",
            crate::log::String8(name)
        );
        return Err(api::INVALID);
    }
    let mut tag = [0u8; 16];
    if !layout.is_null() {
        // SAFETY: the caller passes 16 readable bytes (the C API's contract).
        tag.copy_from_slice(unsafe { core::slice::from_raw_parts(layout, 16) });
    }
    Ok((name.to_vec(), tag))
}

/// The calling thread's current context (as an address), its device, and
/// the device's granule.
fn device_and_granule() -> Result<(usize, c_int, usize), c_int> {
    let ctx = match vmm::ctx_current() {
        Ok(c) if !c.is_null() => c as usize,
        Ok(_) => {
            crate::log!(Warn, "follow: no current CUDA context in this thread");
            return Err(api::INVALID);
        }
        Err(e) => return Err(driver_failed(e)),
    };
    let device = vmm::ctx_device().map_err(driver_failed)?;
    let granule = vmm::granularity(device).map_err(driver_failed)?;
    Ok((ctx, device, granule.max(MIN_GRANULE)))
}

fn driver_failed(e: DriverError) -> c_int {
    crate::log!(Debug, "follow: {e}");
    api::DRIVER
}

/// Maps `h` (at least `span` bytes) at a fresh reservation with `access`:
/// the handle and the address. On failure nothing is left behind, `h`
/// released included.
fn map_new(
    h: CUmemGenericAllocationHandle,
    span: usize,
    granule: usize,
    device: c_int,
    access: Access,
) -> vmm::Result<(CUmemGenericAllocationHandle, CUdeviceptr)> {
    let mapped = vmm::reserve(span, granule).and_then(|va| {
        vmm::map(va, span, h)
            .and_then(|()| vmm::set_access(va, span, device, access))
            .map(|()| va)
            .inspect_err(|_| {
                let _ = vmm::unmap(va, span);
                let _ = vmm::address_free(va, span);
            })
    });
    match mapped {
        Ok(va) => Ok((h, va)),
        Err(e) => {
            let _ = vmm::release(h);
            Err(e)
        }
    }
}

fn insert(r: Region) {
    let mut t = regions();
    t.insert(r);
    ANY.store(true, Ordering::Release);
}

// ---- messages ----

fn request_id() -> u64 {
    NEXT_REQUEST.fetch_add(1, Ordering::Relaxed)
}

/// A message about region `name` of `bytes` with `layout` (names were
/// validated on the way in: `None` never happens in practice).
fn message(
    op: FollowOp,
    request: u64,
    name: &[u8],
    bytes: u64,
    layout: [u8; 16],
) -> Option<Follow> {
    let mut f = Follow::new(op, request, name, bytes)?;
    f.layout = layout;
    Some(f)
}

/// Sends an UNSHARE or UNMAP, which nobody answers.
fn notify(s: &Session, op: FollowOp, name: &[u8], bytes: u64, layout: [u8; 16]) {
    if let Some(f) = message(op, 0, name, bytes, layout) {
        send(s, &f, None);
    }
}

fn send(s: &Session, f: &Follow, fd: Option<BorrowedFd<'_>>) -> bool {
    let mut buf = [0u8; HEADER_LEN + FOLLOW_LEN];
    match Message::Follow(*f).encode(&mut buf) {
        Ok(n) => s.send_with_fd(&buf[..n], fd),
        Err(e) => {
            crate::log!(Debug, "follow: cannot encode {}: {e}", f.op.name());
            false
        }
    }
}

/// Sends `f` and waits for its answer until `deadline`; `None`: not sent or
/// not answered (or answered with something that is not the answer to it).
fn ask(
    s: &Session,
    f: &Follow,
    fd: Option<BorrowedFd<'_>>,
    deadline: Instant,
) -> Option<(Follow, Option<OwnedFd>)> {
    MAILBOX.expect(f.request);
    let sent = send(s, f, fd);
    let (a, fd) = MAILBOX.wait(f.request, if sent { deadline } else { Instant::now() })?;
    let expected = if f.op == FollowOp::Share {
        FollowOp::Shared
    } else {
        FollowOp::Mapped
    };
    if a.op != expected || a.name() != f.name() {
        crate::log!(
            Debug,
            "follow: tandemd answered {} for {:?} to a {} of {:?}; ignored",
            a.op.name(),
            a.name_str(),
            f.op.name(),
            f.name_str()
        );
        return None;
    }
    Some((a, fd))
}

/// The registered session, if it speaks follow mode (connects on a first call).
fn follow_session() -> Result<&'static Session, c_int> {
    match crate::client::current() {
        Some(s) if s.follow => {
            // tandemd keys regions by GPU: it must know ours first.
            crate::client::send_device(s);
            Ok(s)
        }
        _ => Err(api::NO_COORDINATOR),
    }
}

/// Offers a shared region to tandemd and waits for the answer.
fn offer(s: &Session, a: &Args, fd: BorrowedFd<'_>) -> c_int {
    let deadline = Instant::now() + SHARE_TIMEOUT;
    loop {
        let Some(f) = message(FollowOp::Share, request_id(), &a.name, a.bytes, a.layout) else {
            return api::INVALID;
        };
        let Some((answer, _)) = ask(s, &f, Some(fd), deadline) else {
            return api::TIMEOUT;
        };
        match api::from_status(FollowStatus(answer.status)) {
            Some(code) => return code,
            None if Instant::now() + RETRY_EVERY < deadline => std::thread::sleep(RETRY_EVERY),
            None => return api::TIMEOUT,
        }
    }
}

// ---- the C API ----

/// Allocates a region that may be offered (see `include/tandem.h`).
///
/// # Safety
/// `dptr` null or writable.
#[no_mangle]
pub unsafe extern "C" fn tandem_follow_alloc(bytes: u64, dptr: *mut CUdeviceptr) -> c_int {
    if dptr.is_null() || FORKED.load(Ordering::Relaxed) {
        return api::INVALID;
    }
    // SAFETY: non-null, writable (the C API's contract).
    unsafe { dptr.write(0) };
    if let Err(code) = check_size(bytes) {
        return code;
    }
    let (ctx, device, granule) = match device_and_granule() {
        Ok(x) => x,
        Err(code) => return code,
    };
    let span = match span_of(bytes, granule) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let allocated = vmm::create(span, device)
        .and_then(|h| map_new(h, span, granule, device, Access::ReadWrite));
    let (handle, base) = match allocated {
        Ok(x) => x,
        Err(e) => return driver_failed(e),
    };
    let export = vmm::export_fd(handle)
        .inspect_err(|e| crate::log!(Debug, "follow: {e}"))
        .ok();
    insert(Region {
        base,
        span: span as u64,
        bytes,
        handle,
        ctx,
        role: Role::Shared { offered: false },
        name: Vec::new(),
        layout: [0; 16],
        export,
    });
    SHARED_BYTES.fetch_add(span as u64, Ordering::Relaxed);
    // SAFETY: as above.
    unsafe { dptr.write(base) };
    api::OK
}

/// Offers a region made by `tandem_follow_alloc` to followers (see `include/tandem.h`).
///
/// # Safety
/// `name` is a NUL-terminated string, `layout` null or 16 readable bytes.
#[no_mangle]
pub unsafe extern "C" fn tandem_follow_offer(
    dptr: CUdeviceptr,
    name: *const c_char,
    layout: *const u8,
) -> c_int {
    if FORKED.load(Ordering::Relaxed) {
        return api::INVALID;
    }
    // SAFETY: forwarded under this function's contract.
    let (name, layout) = match unsafe { name_and_layout(name, layout) } {
        Ok(x) => x,
        Err(code) => return code,
    };
    let (a, fd) = {
        let mut t = regions();
        let Some(r) = t.shared_at(dptr) else {
            crate::log!(
                Warn,
                "follow: {dptr:#x} is not the start of a region from tandem_follow_alloc"
            );
            return api::INVALID;
        };
        if !r.name.is_empty() && r.name != name {
            crate::log!(
                Warn,
                "follow: the region at {dptr:#x} is already offered as {:?}",
                r.name_str()
            );
            return api::INVALID;
        }
        // Named from now on: every tandemd this process registers with later
        // is offered it too.
        r.name = name.clone();
        r.layout = layout;
        let a = Args {
            name,
            bytes: r.bytes,
            layout,
        };
        // A copy of the exported fd: the table stays free while tandemd answers.
        (a, r.export.as_ref().map(|fd| fd.try_clone()))
    };
    if !enabled() {
        return api::DISABLED;
    }
    let s = match follow_session() {
        Ok(s) => s,
        Err(code) => return code,
    };
    let code = match fd {
        Some(Ok(fd)) => offer(s, &a, fd.as_fd()),
        Some(Err(e)) => {
            crate::log!(Debug, "follow: cannot duplicate the region's fd: {e}");
            api::DRIVER
        }
        None => api::DRIVER,
    };
    if code == api::OK && !regions().set_offered(dptr, true) {
        // Freed by another thread while tandemd answered: withdraw it.
        notify(s, FollowOp::Unshare, &a.name, a.bytes, a.layout);
    } else if code == api::OK {
        crate::log!(
            Info,
            "follow: offering region {:?} ({} bytes) to followers",
            crate::log::String8(&a.name),
            a.bytes
        );
    } else {
        crate::log!(
            Info,
            "follow: region {:?} is not offered: {}",
            crate::log::String8(&a.name),
            api::text(code).to_string_lossy()
        );
    }
    code
}

/// Maps another job's region read-only (see `include/tandem.h`).
///
/// # Safety
/// `name` is a NUL-terminated string, `layout` null or 16 readable bytes,
/// `dptr` null or writable.
#[no_mangle]
pub unsafe extern "C" fn tandem_follow_map(
    name: *const c_char,
    bytes: u64,
    layout: *const u8,
    timeout_ms: u32,
    dptr: *mut CUdeviceptr,
) -> c_int {
    if dptr.is_null() || FORKED.load(Ordering::Relaxed) {
        return api::INVALID;
    }
    // SAFETY: non-null, writable (the C API's contract).
    unsafe { dptr.write(0) };
    // SAFETY: forwarded under this function's contract.
    let a = match unsafe { name_and_layout(name, layout) } {
        Ok((name, layout)) => Args {
            name,
            bytes,
            layout,
        },
        Err(code) => return code,
    };
    if let Err(code) = check_size(bytes) {
        return code;
    }
    if !enabled() {
        return api::DISABLED;
    }
    let (ctx, device, granule) = match device_and_granule() {
        Ok(x) => x,
        Err(code) => return code,
    };
    let span = match span_of(a.bytes, granule) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let s = match follow_session() {
        Ok(s) => s,
        Err(code) => return code,
    };
    let wait = if timeout_ms == 0 {
        DEFAULT_MAP_TIMEOUT_MS
    } else {
        timeout_ms
    };
    let deadline = Instant::now() + Duration::from_millis(u64::from(wait));
    let mut last = api::TIMEOUT;
    let fd = loop {
        let Some(f) = message(FollowOp::Map, request_id(), &a.name, a.bytes, a.layout) else {
            return api::INVALID;
        };
        match ask(s, &f, None, deadline) {
            None => return last,
            Some((answer, fd)) => match (FollowStatus(answer.status), fd) {
                (FollowStatus::OK, Some(fd)) => break fd,
                (FollowStatus::OK, None) => {
                    crate::log!(Debug, "follow: MAPPED came without its fd");
                    return api::DRIVER;
                }
                // Not there yet: the sharer may still be starting.
                (st @ (FollowStatus::NOT_FOUND | FollowStatus::NOT_READY), _) => {
                    last = api::from_status(st).unwrap_or(api::TIMEOUT);
                }
                (st, _) => return api::from_status(st).unwrap_or(api::DRIVER),
            },
        }
        if Instant::now() + RETRY_EVERY >= deadline {
            return last;
        }
        std::thread::sleep(RETRY_EVERY);
    };
    let mapped =
        vmm::import_fd(fd.as_fd()).and_then(|h| map_new(h, span, granule, device, Access::Read));
    drop(fd);
    let (handle, base) = match mapped {
        Ok(x) => x,
        Err(e) => {
            // tandemd counted the map: say it is not held.
            notify(s, FollowOp::Unmap, &a.name, a.bytes, a.layout);
            return driver_failed(e);
        }
    };
    insert(Region {
        base,
        span: span as u64,
        bytes: a.bytes,
        handle,
        ctx,
        role: Role::Followed,
        name: a.name.clone(),
        layout: a.layout,
        export: None,
    });
    MAPPED_BYTES.fetch_add(span as u64, Ordering::Relaxed);
    crate::log!(
        Info,
        "follow: mapped region {:?} ({} MiB) read-only",
        crate::log::String8(&a.name),
        span >> 20
    );
    // SAFETY: as above.
    unsafe { dptr.write(base) };
    api::OK
}

/// Releases a region (see `include/tandem.h`).
#[no_mangle]
pub extern "C" fn tandem_follow_free(dptr: CUdeviceptr) -> c_int {
    match free(dptr) {
        None | Some(CuResult::INVALID_VALUE) => api::INVALID,
        Some(CuResult::SUCCESS) => api::OK,
        Some(_) => api::DRIVER,
    }
}

/// The text of a `tandem_follow_*` code (static storage).
#[no_mangle]
pub extern "C" fn tandem_follow_strerror(code: c_int) -> *const c_char {
    api::text(code).as_ptr()
}

/// Device bytes of the regions this process allocated for follow mode
/// (offered or not) and holds now, each rounded up to the granularity (the
/// header's text says the same).
#[no_mangle]
pub extern "C" fn tandem_follow_shared_bytes() -> u64 {
    SHARED_BYTES.load(Ordering::Relaxed)
}

/// Device bytes of other jobs' regions this process maps read-only now,
/// each rounded up to the granularity.
#[no_mangle]
pub extern "C" fn tandem_follow_mapped_bytes() -> u64 {
    MAPPED_BYTES.load(Ordering::Relaxed)
}

// ---- the rest of the shim ----

/// `cuMemFree_v2` of `dptr`: `None` when it is not in a region (the driver
/// frees it), else the result of releasing the region that starts there.
pub fn free(dptr: CUdeviceptr) -> Option<CuResult> {
    if !ANY.load(Ordering::Acquire) {
        return None;
    }
    let r = {
        let mut t = regions();
        if !t.contains(dptr) {
            return None;
        }
        let r = t.remove(dptr);
        ANY.store(!t.is_empty(), Ordering::Release);
        r
    };
    // Inside a region but not its start: the driver's answer for that.
    let Some(r) = r else {
        return Some(CuResult::INVALID_VALUE);
    };
    // Like cuMemFree: the work that may still use it drains first, in the
    // region's own context (a free from a thread where another context, or
    // none, is current, e.g. a garbage collector's: switched and restored).
    let prev = vmm::ctx_current().ok();
    let switch = prev.map(|c| c as usize) != Some(r.ctx);
    if switch {
        let _ = vmm::ctx_set_current(r.ctx as crate::types::CUcontext);
    }
    let drained = vmm::ctx_synchronize();
    let span = r.span as usize;
    let released = vmm::unmap(r.base, span)
        .and_then(|()| vmm::release(r.handle))
        .and_then(|()| vmm::address_free(r.base, span));
    if let (true, Some(c)) = (switch, prev) {
        let _ = vmm::ctx_set_current(c);
    }
    let counter = match r.role {
        Role::Shared { .. } => &SHARED_BYTES,
        Role::Followed => &MAPPED_BYTES,
    };
    counter.fetch_sub(r.span, Ordering::Relaxed);
    let op = match r.role {
        Role::Shared { offered: true } => Some(FollowOp::Unshare),
        Role::Shared { offered: false } => None,
        Role::Followed => Some(FollowOp::Unmap),
    };
    if let (Some(op), Some(s)) = (op, crate::client::published_session()) {
        if s.follow {
            notify(s, op, &r.name, r.bytes, r.layout);
        }
    }
    match drained.and(released) {
        Ok(()) => Some(CuResult::SUCCESS),
        Err(e) => {
            crate::log!(Debug, "follow: releasing {:?}: {e}", r.name_str());
            Some(e.rc)
        }
    }
}

/// A Follow message from tandemd (watcher thread).
pub fn on_message(f: Follow, fd: Option<OwnedFd>) {
    if f.op.from_shim() {
        crate::log!(Debug, "follow: ignoring a {} from tandemd", f.op.name());
        return;
    }
    let Some((f, fd)) = MAILBOX.deliver(f, fd) else {
        return;
    };
    // Nobody waits for it: a caller that gave up, or a re-offer's answer.
    drop(fd);
    let status = FollowStatus(f.status);
    if f.op == FollowOp::Shared {
        let mut t = regions();
        let base = t.shared().find(|r| r.name == f.name()).map(|r| r.base);
        if let Some(base) = base {
            t.set_offered(base, status == FollowStatus::OK);
        }
        drop(t);
        crate::log!(
            Info,
            "follow: tandemd answered the offer of region {:?}: {}",
            f.name_str(),
            status.name()
        );
    } else {
        crate::log!(
            Debug,
            "follow: late answer to a map of {:?}: {}",
            f.name_str(),
            status.name()
        );
    }
}

/// A new session after a reconnect (watcher thread): offer every shared
/// region again, and report every region this process follows with HELD (a
/// new tandemd knows nothing of what was mapped from the last one, so its
/// accounting would miss it), without waiting (the answers to the offers come
/// to [`on_message`]; nothing answers a HELD).
pub fn session_started(s: &Session) {
    if !s.follow || !ANY.load(Ordering::Acquire) {
        return;
    }
    let mut t = regions();
    // tandemd keys regions by GPU: the Device message goes first, which needs
    // a current context in this (the watcher's) thread: any named region's.
    let Some(ctx) = t.named().next().map(|r| r.ctx) else {
        return;
    };
    match vmm::ctx_set_current(ctx as crate::types::CUcontext) {
        Ok(()) => crate::client::send_device(s),
        Err(e) => crate::log!(
            Debug,
            "follow: no Device for the re-offered and held regions: {e}"
        ),
    }
    let mut offered = Vec::new();
    for r in t.shared().filter(|r| !r.name.is_empty()) {
        let (Some(fd), Some(f)) = (
            r.export.as_ref(),
            message(FollowOp::Share, request_id(), &r.name, r.bytes, r.layout),
        ) else {
            continue;
        };
        if send(s, &f, Some(fd.as_fd())) {
            offered.push(r.base);
        }
    }
    for r in t.followed() {
        if let Some(f) = message(FollowOp::Held, 0, &r.name, r.bytes, r.layout) {
            send(s, &f, None);
        }
    }
    // Offered means "tandemd will have it": its answer may still refuse.
    for base in offered {
        t.set_offered(base, true);
    }
}

/// A call returned `CUDA_ERROR_ILLEGAL_ADDRESS`: when this process follows
/// another job's weights, say once that a kernel writing into them is the
/// likely cause.
#[cold]
pub fn illegal_address() {
    static SAID: AtomicBool = AtomicBool::new(false);
    let mapped = MAPPED_BYTES.load(Ordering::Relaxed);
    if mapped == 0 || SAID.swap(true, Ordering::Relaxed) {
        return;
    }
    crate::log::raw_line(format_args!(
        "tandem[{}]: CUDA_ERROR_ILLEGAL_ADDRESS: this process follows {} MiB of another job's \
         weights read-only (TANDEM_FOLLOW=on), and a kernel most likely wrote into them; this \
         process's CUDA context is lost (the sharing job is unaffected). Do not train or modify \
         followed weights; copy them first, or run without following.",
        std::process::id(),
        mapped >> 20
    ));
}

/// One line for the exit dump (`TANDEM_LOG=debug`), when follow mode did anything.
pub fn summary() -> Option<String> {
    let shared = SHARED_BYTES.load(Ordering::Relaxed);
    let mapped = MAPPED_BYTES.load(Ordering::Relaxed);
    (shared != 0 || mapped != 0)
        .then(|| format!("follow shared_bytes={shared} mapped_bytes={mapped}"))
}

/// In a fork child: follow mode is off there (the parent's CUDA state is
/// unusable), and `cuMemFree` goes to the driver.
pub fn after_fork_in_child() {
    FORKED.store(true, Ordering::Relaxed);
    ANY.store(false, Ordering::Relaxed);
}
