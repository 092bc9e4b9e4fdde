//! A fake `libcuda.so.1` for GPU-less tests of tandem: host memory for device memory, simulated
//! kernel durations on per-stream timelines, and the driver entry points the shim touches.
//!
//! The contract it implements is the tandem issue-3 contract (hooked variants, support
//! functions, `cuGetProcAddress` rules, the module image format, introspection exports). This
//! is a test double: every claim about real behaviour is checked on a real GPU.
//!
//! Modules:
//! - `exports`: the one table of exported entry points (symbol, GPA name, version, per-thread);
//! - `table`: the table machinery and `cuGetProcAddress` selection;
//! - `device`: device queries, contexts, error strings;
//! - `memory`: allocations, range checks, copies, memsets;
//! - `streams` / `events`: simulated time;
//! - `shared`: one device timeline shared by several processes (`FAKECUDA_SHARED_DEVICE`);
//! - `kernels`: module images, argument decoding, kernel ops, launches;
//! - `graphs`: graphs as lists of kernel nodes;
//! - `vmm`: `cuMemCreate` & co. on memfd + mmap;
//! - `introspect`: `fakecuda_*` counters.
#![deny(unsafe_op_in_unsafe_fn)]

mod types;
#[macro_use]
mod table;

mod device;
mod events;
mod exports;
mod graphs;
mod introspect;
mod kernels;
mod memory;
mod shared;
mod state;
mod streams;
#[cfg(test)]
mod testing;
mod vmm;
