//! `tandem-nri`: injects `libtandem.so` into the GPU containers of a
//! Kubernetes node without editing any pod, as an NRI plugin (the Node
//! Resource Interface of containerd >= 1.7 and CRI-O >= 1.26), and records
//! each pod's namespace, name, labels and annotations, as the runtime reports
//! them, for tandemd's rules (`[kubernetes] pod_info_dir`).
//!
//! * [`pb`] — the protobuf wire rules it needs;
//! * [`api`] — the NRI messages it reads and writes;
//! * [`wire`] — NRI's multiplexed socket and ttrpc framing;
//! * [`policy`] — which containers get tandem, and what they get;
//! * [`records`] — the pod records tandemd reads;
//! * [`plugin`] — registration and the runtime's calls;
//! * [`reconnect`] — back-off and quiet logging while the runtime is unreachable.
//!
//! It runs in tandemd's DaemonSet, so a node without tandemd has no plugin
//! and its pods start exactly as before.

pub mod api;
pub mod pb;
pub mod plugin;
pub mod policy;
pub mod reconnect;
pub mod records;
pub mod wire;
