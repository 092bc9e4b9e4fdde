//! A model of one GPU shared by several processes (docs to follow).

pub mod calibration;
pub mod gpu;
pub mod job;
pub mod matrix;
pub mod mps;
pub mod params;
pub mod report;
pub mod rng;
pub mod synthetic;
pub mod tandem;
pub mod timeslice;
pub mod trace;
pub mod world;

#[cfg(test)]
mod policy_tests;
