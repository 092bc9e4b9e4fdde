//! The graphs: their kernel nodes, the executable snapshots, and the streams being captured.

use std::collections::BTreeMap;

use super::modules::Work;
use super::streams::StreamKey;

pub struct Graphs {
    /// graph -> its node handles, in insertion (= a valid topological) order.
    pub(crate) graphs: BTreeMap<usize, Vec<usize>>,
    /// node -> (its graph, what it runs).
    pub(crate) nodes: BTreeMap<usize, (usize, Work)>,
    /// executable graph -> snapshot of the work at instantiation.
    pub(crate) execs: BTreeMap<usize, Vec<Work>>,
    /// streams being captured, and the graph each one records into.
    pub(crate) capturing: Vec<(StreamKey, usize)>,
}

impl Graphs {
    pub const fn new() -> Self {
        Self {
            graphs: BTreeMap::new(),
            nodes: BTreeMap::new(),
            execs: BTreeMap::new(),
            capturing: Vec::new(),
        }
    }

    /// The graph a launch on `stream` records into, if the stream is being captured.
    pub fn capture_target(&self, stream: StreamKey) -> Option<usize> {
        self.capturing
            .iter()
            .find(|(s, _)| *s == stream)
            .map(|&(_, g)| g)
    }
}
