//! The parts of NRI's API (`nri.pkg.api.v1alpha1`, containerd/nri
//! `pkg/api/api.proto`) this plugin reads and writes. Field numbers are the
//! proto's; everything else in a message is skipped.

use std::collections::BTreeMap;

use crate::pb::{self, DecodeError, Value, Writer};

/// The Plugin service the runtime calls.
pub const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";
/// The Runtime service the plugin calls.
pub const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";

/// Events (`enum Event`) this plugin subscribes to.
pub const EVENT_RUN_POD_SANDBOX: u32 = 1;
/// See [`EVENT_RUN_POD_SANDBOX`].
pub const EVENT_STOP_POD_SANDBOX: u32 = 2;
/// See [`EVENT_RUN_POD_SANDBOX`].
pub const EVENT_REMOVE_POD_SANDBOX: u32 = 3;
/// See [`EVENT_RUN_POD_SANDBOX`].
pub const EVENT_CREATE_CONTAINER: u32 = 4;

/// `ConfigureResponse.events`: bit `e - 1` for each event `e`.
#[must_use]
pub fn event_mask(events: &[u32]) -> u64 {
    events.iter().fold(0, |m, e| m | (1 << (e - 1)))
}

/// `message PodSandbox` (id 1, name 2, uid 3, namespace 4, labels 5, annotations 6).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pod {
    /// Sandbox id.
    pub id: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// Namespace.
    pub namespace: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
}

impl Pod {
    /// Decode.
    pub fn decode(buf: &[u8]) -> Result<Pod, DecodeError> {
        let mut p = Pod::default();
        for (n, v) in pb::fields(buf)? {
            match n {
                1 => p.id = pb::string(v),
                2 => p.name = pb::string(v),
                3 => p.uid = pb::string(v),
                4 => p.namespace = pb::string(v),
                5 => drop(p.labels.insert_entry(pb::map_entry(v)?)),
                6 => drop(p.annotations.insert_entry(pb::map_entry(v)?)),
                _ => {}
            }
        }
        Ok(p)
    }

    /// Encode (for tests and fake runtimes).
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.string(1, &self.id)
            .string(2, &self.name)
            .string(3, &self.uid)
            .string(4, &self.namespace);
        for (k, v) in &self.labels {
            w.map_entry(5, k, v);
        }
        for (k, v) in &self.annotations {
            w.map_entry(6, k, v);
        }
        w.0
    }
}

trait InsertEntry {
    fn insert_entry(&mut self, e: (String, String)) -> Option<String>;
}

impl InsertEntry for BTreeMap<String, String> {
    fn insert_entry(&mut self, (k, v): (String, String)) -> Option<String> {
        self.insert(k, v)
    }
}

/// `message Container` (id 1, pod_sandbox_id 2, name 3, env 8, linux 11
/// with devices 2 of path 1, CDI_devices 20 of name 1).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Container {
    /// Container id.
    pub id: String,
    /// Its pod's sandbox id.
    pub pod_sandbox_id: String,
    /// Name.
    pub name: String,
    /// `KEY=value` entries.
    pub env: Vec<String>,
    /// Device node paths (`linux.devices[].path`).
    pub devices: Vec<String>,
    /// CDI device names.
    pub cdi_devices: Vec<String>,
}

impl Container {
    /// Decode.
    pub fn decode(buf: &[u8]) -> Result<Container, DecodeError> {
        let mut c = Container::default();
        for (n, v) in pb::fields(buf)? {
            match (n, v) {
                (1, v) => c.id = pb::string(v),
                (2, v) => c.pod_sandbox_id = pb::string(v),
                (3, v) => c.name = pb::string(v),
                (8, v) => c.env.push(pb::string(v)),
                (11, Value::Bytes(linux)) => {
                    for (n, d) in pb::fields(linux)? {
                        if let (2, Value::Bytes(dev)) = (n, d) {
                            for (n, p) in pb::fields(dev)? {
                                if n == 1 {
                                    c.devices.push(pb::string(p));
                                }
                            }
                        }
                    }
                }
                (20, Value::Bytes(cdi)) => {
                    for (n, p) in pb::fields(cdi)? {
                        if n == 1 {
                            c.cdi_devices.push(pb::string(p));
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(c)
    }

    /// Encode (for tests and fake runtimes).
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.string(1, &self.id)
            .string(2, &self.pod_sandbox_id)
            .string(3, &self.name);
        for e in &self.env {
            w.bytes(8, e.as_bytes());
        }
        if !self.devices.is_empty() {
            let mut linux = Writer::default();
            for d in &self.devices {
                let mut dev = Writer::default();
                dev.string(1, d);
                linux.bytes(2, &dev.0);
            }
            w.bytes(11, &linux.0);
        }
        for d in &self.cdi_devices {
            let mut cdi = Writer::default();
            cdi.string(1, d);
            w.bytes(20, &cdi.0);
        }
        w.0
    }
}

/// A bind mount to add (`message Mount`: destination 1, type 2, source 3, options 4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// In the container.
    pub destination: String,
    /// On the host.
    pub source: String,
    /// Mount options (`bind`/`rbind`, `ro`, ...).
    pub options: Vec<String>,
}

/// `message ContainerAdjustment` (mounts 3, env 4 as `KeyValue{key 1, value 2}`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Adjustment {
    /// Mounts to add.
    pub mounts: Vec<Mount>,
    /// Environment variables to set.
    pub env: Vec<(String, String)>,
}

impl Adjustment {
    /// Encode.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        for m in &self.mounts {
            let mut mw = Writer::default();
            mw.string(1, &m.destination)
                .string(2, "bind")
                .string(3, &m.source);
            for o in &m.options {
                mw.bytes(4, o.as_bytes());
            }
            w.bytes(3, &mw.0);
        }
        for (k, v) in &self.env {
            let mut kv = Writer::default();
            kv.string(1, k).string(2, v);
            w.bytes(4, &kv.0);
        }
        w.0
    }

    /// Decode (for tests and fake runtimes).
    pub fn decode(buf: &[u8]) -> Result<Adjustment, DecodeError> {
        let mut a = Adjustment::default();
        for (n, v) in pb::fields(buf)? {
            match (n, v) {
                (3, Value::Bytes(m)) => {
                    let mut mount = Mount {
                        destination: String::new(),
                        source: String::new(),
                        options: Vec::new(),
                    };
                    for (n, f) in pb::fields(m)? {
                        match n {
                            1 => mount.destination = pb::string(f),
                            3 => mount.source = pb::string(f),
                            4 => mount.options.push(pb::string(f)),
                            _ => {}
                        }
                    }
                    a.mounts.push(mount);
                }
                (4, v) => a.env.push(pb::map_entry(v)?),
                _ => {}
            }
        }
        Ok(a)
    }
}

/// The pod (1) and container (2) of a `CreateContainerRequest`.
pub fn create_container_request(buf: &[u8]) -> Result<(Pod, Container), DecodeError> {
    let (mut pod, mut ctr) = (Pod::default(), Container::default());
    for (n, v) in pb::fields(buf)? {
        match (n, v) {
            (1, Value::Bytes(b)) => pod = Pod::decode(b)?,
            (2, Value::Bytes(b)) => ctr = Container::decode(b)?,
            _ => {}
        }
    }
    Ok((pod, ctr))
}

/// The pods (1) and containers (2) of a `SynchronizeRequest`.
pub fn synchronize_request(buf: &[u8]) -> Result<(Vec<Pod>, Vec<Container>), DecodeError> {
    let (mut pods, mut ctrs) = (Vec::new(), Vec::new());
    for (n, v) in pb::fields(buf)? {
        match (n, v) {
            (1, Value::Bytes(b)) => pods.push(Pod::decode(b)?),
            (2, Value::Bytes(b)) => ctrs.push(Container::decode(b)?),
            _ => {}
        }
    }
    Ok((pods, ctrs))
}

/// The pod (field 1) of a pod-sandbox event request.
pub fn pod_request(buf: &[u8]) -> Result<Pod, DecodeError> {
    for (n, v) in pb::fields(buf)? {
        if let (1, Value::Bytes(b)) = (n, v) {
            return Pod::decode(b);
        }
    }
    Ok(Pod::default())
}
