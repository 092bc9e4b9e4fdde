//! Which GPU sharing mode is in force, and tandem over MPS.
//!
//! Three modes, shown by `GET /stats` (`sharing`), `GET /metrics`
//! (`tandem_sharing_mode`) and `tandemctl status`:
//!
//! * **time slicing**: no MPS. Processes take turns on a GPU; tandem's gates
//!   hold training launches back while inference needs the GPU.
//! * **time slicing over MPS**: an MPS control daemon that tandem does not
//!   manage runs on the node (found by one `stat()` of `<pipe dir>/control`
//!   at every stats snapshot, the pipe directory being
//!   `CUDA_MPS_PIPE_DIRECTORY` in tandemd's environment, else NVIDIA's
//!   `/tmp/nvidia-mps`). Kernels of different processes may run at once; the
//!   gates still hold training back, and tandem sets no MPS priority.
//! * **tandem over MPS** (`[mps] enabled`, off by default until GPU
//!   measurements say otherwise): tandemd starts and owns an MPS control
//!   daemon for the node's GPUs ([`daemon`]), or uses the one already running
//!   in its pipe directory. Every shim that registers is told, in its Welcome
//!   ([`tandem_proto::mps`]), to join it before CUDA initialises: training
//!   jobs at `[mps] training_priority` (below normal by default) and
//!   optionally capped in SMs, inference jobs at normal priority. A training
//!   job that joined at low priority is held by no gate or launch limit:
//!   its priority keeps inference first, and `[mps] training_inflight_ns`
//!   is its shim's shallow in-flight bound (`crate::grant::mps_adjust`).
//!
//! The trade-off of MPS: the clients on one GPU share one MPS server
//! context, so a fatal fault in one of them (an illegal memory access, say)
//! reaches every MPS client on that GPU, and the server takes new clients on
//! that GPU only after all of them have exited; jobs lose the isolation of
//! separate contexts. So jobs that join are not offered weight sharing or
//! follow mode, whose read-only mappings turn a stray write into such a
//! fault. MPS runs one user's server at a time (a client of another uid waits
//! until the current server's clients are done), so tandemd has the jobs of
//! one uid join at a time and runs the others outside MPS. If the daemon
//! cannot be started, tandemd stays in time slicing and says why
//! (fail-open).

pub mod config;
pub mod daemon;
mod mode;
mod runtime;

pub use mode::{
    detect, pipe_dir, MpsInfo, MpsSnapshot, SharingMode, SharingSnapshot, DEFAULT_PIPE_DIR,
    PIPE_DIR_ENV,
};
pub use runtime::{Mps, Offer};
