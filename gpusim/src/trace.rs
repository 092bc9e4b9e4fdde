//! The trace format, `tandem-trace/1`: defined once in the `tandem-trace`
//! crate (`trace/`), which tandemd and tandemctl write without depending on
//! the model; re-exported here so the model's modules name it as before.

pub use tandem_trace::*;
