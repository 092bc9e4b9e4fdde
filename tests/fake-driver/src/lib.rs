//! A fake `libcuda.so.1` for GPU-less tests of tandem: host memory for device memory, simulated
//! kernel durations on per-stream timelines, and the driver entry points the shim touches.
//!
//! The contract it implements is the tandem issue-3 contract (hooked variants, support
//! functions, `cuGetProcAddress` rules, the module image format, introspection exports). This
//! is a test double: every claim about real behaviour is checked on a real GPU.
//!
//! Modules, top to bottom (each imports only from its own layer and those below;
//! `scripts/import_layers.txt` declares the layers and `scripts/check_import_cycles.py` checks
//! them):
//! - `exports`: the one table of exported entry points (symbol, GPA name, version, per-thread);
//!   `introspect`: the `fakecuda_*` exports;
//! - `table`: the table machinery and `cuGetProcAddress` selection;
//! - the driver functions: `device` (device queries, contexts, error strings), `memory`
//!   (allocations), `copies` (copies, memsets), `pitched` (2D/3D copies, pitched memsets),
//!   `streams` / `events` (simulated time), `kernels` (modules, launches), `graphs` (graphs as
//!   lists of kernel nodes), `vmm` (`cuMemCreate` & co. on memfd) and `address_space`
//!   (reserve, map, access on mmap);
//! - what launches share: `kernel_args` (dimensions, argument decoding), `execute` (running
//!   kernels);
//! - `state`: the one global state and its parts (contexts, allocations, streams, events,
//!   modules, graphs, VMM);
//! - `counts` (what `introspect` reports), `clock` (stream time), `shared` (one device
//!   timeline shared by several processes, `FAKECUDA_SHARED_DEVICE`), `types`.
#![deny(unsafe_op_in_unsafe_fn)]

mod types;
#[macro_use]
mod table;

mod address_space;
mod callbacks;
mod clock;
mod copies;
mod counts;
mod device;
mod events;
mod execute;
mod exports;
mod graphs;
mod introspect;
mod kernel_args;
mod kernels;
mod memory;
mod pitched;
mod shared;
mod state;
mod streams;
#[cfg(test)]
mod testing;
mod vmm;
