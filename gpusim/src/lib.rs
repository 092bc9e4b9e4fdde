//! A model of one GPU shared by several processes (docs to follow).

pub mod gpu;
pub mod mps;
pub mod rng;
pub mod timeslice;
pub mod trace;
