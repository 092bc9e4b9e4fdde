//! What a registered shim reports about itself: the names of its kernels
//! (FuncName, once per function id) and the device it runs on (Device, once
//! per connection).
//!
//! A FuncName may end in the function's attributes ([`FuncAttrs`], 8 bytes
//! after the name): the shim appends them only for a coordinator whose
//! Welcome set [`WELCOME_FLAG_FUNC_ATTRS`](super::WELCOME_FLAG_FUNC_ATTRS),
//! which decodes both forms, so an older tandemd (whose decoder wants the
//! name to end the body) never sees the tail, and an older shim's FuncName
//! decodes with no attributes.
//!
//! A Device may end the same way in its SMs' capacity ([`DeviceShape`], 20
//! bytes after the name), appended only for a coordinator whose Welcome set
//! [`WELCOME_FLAG_DEVICE_SHAPE`](super::WELCOME_FLAG_DEVICE_SHAPE): what
//! tandemd needs to learn inference's kernel widths (scheduler v3's SM
//! reservation, `tandem_sched::reserve`).

use crate::bytes::{get_u16, get_u32, get_u64};
use crate::error::Result;

use super::envelope::{bounded, exact, need, no_nul};

/// Longest kernel name a FuncName may carry (the shim truncates longer ones).
pub const MAX_FUNC_NAME_LEN: usize = 1024;
/// Longest device name a Device message may carry.
pub const MAX_DEVICE_NAME_LEN: usize = 256;
/// Fixed part of a FuncName body.
pub const FUNC_NAME_FIXED_LEN: usize = 10;
/// Length of the attributes tail a FuncName may end in.
pub const FUNC_ATTRS_LEN: usize = 8;
/// Fixed part of a Device body.
pub const DEVICE_FIXED_LEN: usize = 22;
/// Length of the shape tail a Device may end in.
pub const DEVICE_SHAPE_LEN: usize = 20;

/// Shim -> coordinator: the name of a kernel, sent once per function id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FuncName<'a> {
    /// [`func_id`](crate::record::func_id) of the full name.
    pub func_id: u64,
    /// Name bytes (mangled, as the driver reports it), no NUL, at most
    /// [`MAX_FUNC_NAME_LEN`] (the shim truncates; `func_id` hashes the full name).
    pub name: &'a [u8],
    /// The function's attributes, when the shim sent them.
    pub attrs: Option<FuncAttrs>,
}

/// What the driver reports of a function (`cuFuncGetAttribute`): what one
/// of its blocks holds of an SM besides its threads. 0: unknown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuncAttrs {
    /// `CU_FUNC_ATTRIBUTE_NUM_REGS`: registers per thread.
    pub regs_per_thread: u32,
    /// `CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES`: static shared memory per
    /// block, bytes (a launch adds its dynamic shared memory).
    pub static_smem_bytes: u32,
}

/// Shim -> coordinator: the device the client runs on, sent once per connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Device<'a> {
    /// The CUDA device ordinal in the client's numbering (`CUDA_VISIBLE_DEVICES` applies).
    pub ordinal: u32,
    /// The device UUID (`cuDeviceGetUuid`): the key that is the same in every process.
    pub uuid: [u8; 16],
    /// Device name bytes (`cuDeviceGetName`), no NUL, at most [`MAX_DEVICE_NAME_LEN`].
    pub name: &'a [u8],
    /// Its SMs, when the shim sent them.
    pub shape: Option<DeviceShape>,
}

/// What the driver reports of a device's SMs (`cuDeviceGetAttribute`).
/// 0: unknown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceShape {
    /// `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`.
    pub sms: u32,
    /// `CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR`.
    pub threads_per_sm: u32,
    /// `CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR`.
    pub regs_per_sm: u32,
    /// `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR`, bytes.
    pub smem_per_sm: u32,
    /// `CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR`.
    pub blocks_per_sm: u32,
}

impl<'a> FuncName<'a> {
    pub(super) fn decode_body(b: &'a [u8]) -> Result<FuncName<'a>> {
        need("FuncName", b.len(), FUNC_NAME_FIXED_LEN)?;
        let func_id = get_u64(b, 0);
        let len = usize::from(get_u16(b, 8));
        bounded("kernel name", len, MAX_FUNC_NAME_LEN)?;
        let end = FUNC_NAME_FIXED_LEN + len;
        let attrs = if b.len() == end + FUNC_ATTRS_LEN {
            Some(FuncAttrs {
                regs_per_thread: get_u32(b, end),
                static_smem_bytes: get_u32(b, end + 4),
            })
        } else {
            exact("FuncName", end, b.len())?;
            None
        };
        let name = &b[FUNC_NAME_FIXED_LEN..end];
        no_nul("kernel name", name)?;
        Ok(FuncName {
            func_id,
            name,
            attrs,
        })
    }

    pub(super) fn body_len(&self) -> usize {
        FUNC_NAME_FIXED_LEN + self.name.len() + self.attrs.map_or(0, |_| FUNC_ATTRS_LEN)
    }

    pub(super) fn validate(&self) -> Result<()> {
        bounded("kernel name", self.name.len(), MAX_FUNC_NAME_LEN)?;
        no_nul("kernel name", self.name)
    }

    /// Write the body into `b`, exactly [`body_len`](Self::body_len) bytes.
    pub(super) fn encode_body(&self, b: &mut [u8]) {
        b[0..8].copy_from_slice(&self.func_id.to_le_bytes());
        b[8..10].copy_from_slice(&(self.name.len() as u16).to_le_bytes());
        let end = FUNC_NAME_FIXED_LEN + self.name.len();
        b[FUNC_NAME_FIXED_LEN..end].copy_from_slice(self.name);
        if let Some(a) = self.attrs {
            b[end..end + 4].copy_from_slice(&a.regs_per_thread.to_le_bytes());
            b[end + 4..end + 8].copy_from_slice(&a.static_smem_bytes.to_le_bytes());
        }
    }
}

impl<'a> Device<'a> {
    pub(super) fn decode_body(b: &'a [u8]) -> Result<Device<'a>> {
        need("Device", b.len(), DEVICE_FIXED_LEN)?;
        let ordinal = get_u32(b, 0);
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[4..20]);
        let len = usize::from(get_u16(b, 20));
        bounded("device name", len, MAX_DEVICE_NAME_LEN)?;
        let end = DEVICE_FIXED_LEN + len;
        let shape = if b.len() == end + DEVICE_SHAPE_LEN {
            let at = |i: usize| get_u32(b, end + 4 * i);
            Some(DeviceShape {
                sms: at(0),
                threads_per_sm: at(1),
                regs_per_sm: at(2),
                smem_per_sm: at(3),
                blocks_per_sm: at(4),
            })
        } else {
            exact("Device", end, b.len())?;
            None
        };
        let name = &b[DEVICE_FIXED_LEN..end];
        no_nul("device name", name)?;
        Ok(Device {
            ordinal,
            uuid,
            name,
            shape,
        })
    }

    pub(super) fn body_len(&self) -> usize {
        DEVICE_FIXED_LEN + self.name.len() + self.shape.map_or(0, |_| DEVICE_SHAPE_LEN)
    }

    pub(super) fn validate(&self) -> Result<()> {
        bounded("device name", self.name.len(), MAX_DEVICE_NAME_LEN)?;
        no_nul("device name", self.name)
    }

    /// Write the body into `b`, exactly [`body_len`](Self::body_len) bytes.
    pub(super) fn encode_body(&self, b: &mut [u8]) {
        b[0..4].copy_from_slice(&self.ordinal.to_le_bytes());
        b[4..20].copy_from_slice(&self.uuid);
        b[20..22].copy_from_slice(&(self.name.len() as u16).to_le_bytes());
        let end = DEVICE_FIXED_LEN + self.name.len();
        b[DEVICE_FIXED_LEN..end].copy_from_slice(self.name);
        if let Some(d) = self.shape {
            let words = [
                d.sms,
                d.threads_per_sm,
                d.regs_per_sm,
                d.smem_per_sm,
                d.blocks_per_sm,
            ];
            for (i, w) in words.iter().enumerate() {
                b[end + 4 * i..end + 4 * i + 4].copy_from_slice(&w.to_le_bytes());
            }
        }
    }
}
