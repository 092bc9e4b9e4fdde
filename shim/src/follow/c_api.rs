//! The C API of follow mode, `tandem_follow_*` in `include/tandem.h`.

use core::ffi::{c_char, c_int};
use core::sync::atomic::Ordering;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use tandem_proto::follow::{api, FollowOp, FollowStatus};

use super::messages::{
    ask, follow_session, message, notify, offer, refused, request_id, RETRY_EVERY,
};
use super::regions::{Region, Role};
use super::release::free;
use super::state::{enabled, insert, regions, FORKED, MAPPED_BYTES, SHARED_BYTES};
use super::steps::{
    check_size, device_and_granule, driver_failed, map_new, name_and_layout, span_of, Args,
};
use crate::types::{CUdeviceptr, CuResult};
use crate::vmm::{self, Access};

/// `tandem_follow_map`'s wait when the caller passes 0.
pub const DEFAULT_MAP_TIMEOUT_MS: u32 = 5000;
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
        // Freed by another thread while tandemd answered: that free sent the
        // UNSHARE (after this SHARE, so tandemd withdraws what it just took).
        crate::log!(
            Debug,
            "follow: region {:?} was freed while tandemd took it",
            crate::log::String8(&a.name)
        );
    } else if code == api::OK {
        crate::log!(
            Info,
            "follow: offering region {:?} ({} bytes) to followers",
            crate::log::String8(&a.name),
            a.bytes
        );
    } else {
        if refused(code) {
            regions().refused(dptr, &a.name);
        }
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
