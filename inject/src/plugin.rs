//! The plugin: registers with the runtime, answers its calls (Configure,
//! Synchronize, CreateContainer, pod events), adjusts GPU containers
//! ([`crate::policy`]) and keeps the pod records ([`crate::records`]).

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use crate::api::{self, Pod};
use crate::pb::{self, Value, Writer};
use crate::policy::{self, Paths};
use crate::records::Records;
use crate::wire::{self, Message, PLUGIN_CONN, RUNTIME_CONN, TYPE_REQUEST, TYPE_RESPONSE};

/// The plugin's state.
pub struct Plugin {
    /// Host and container paths.
    pub paths: Paths,
    records: Records,
    /// Pods by sandbox id (containers name their pod by it).
    pods: BTreeMap<String, Pod>,
    log: Box<dyn FnMut(&str) + Send>,
}

impl Plugin {
    /// A plugin keeping records in `records_dir`, logging with `log`.
    pub fn new(
        paths: Paths,
        records_dir: &Path,
        log: Box<dyn FnMut(&str) + Send>,
    ) -> io::Result<Plugin> {
        Ok(Plugin {
            paths,
            records: Records::new(records_dir)?,
            pods: BTreeMap::new(),
            log,
        })
    }

    fn record(&mut self, pod: &Pod, container: Option<(&str, &str)>) {
        if pod.uid.is_empty() {
            return;
        }
        if let Err(e) = self.records.write(pod, container) {
            (self.log)(&format!(
                "cannot record pod {}/{}: {e}",
                pod.namespace, pod.name
            ));
        }
    }

    /// The answer's payload to `method` with `payload`; `None`: stop (Shutdown).
    pub fn handle(&mut self, method: &str, payload: &[u8]) -> io::Result<Option<Vec<u8>>> {
        let bad = |e: pb::DecodeError| io::Error::new(io::ErrorKind::InvalidData, e.0);
        match method {
            "Configure" => {
                let mask = api::event_mask(&[
                    api::EVENT_RUN_POD_SANDBOX,
                    api::EVENT_STOP_POD_SANDBOX,
                    api::EVENT_REMOVE_POD_SANDBOX,
                    api::EVENT_CREATE_CONTAINER,
                ]);
                let mut w = Writer::default();
                w.uint(2, mask);
                Ok(Some(w.0))
            }
            "Synchronize" => {
                let (pods, ctrs) = api::synchronize_request(payload).map_err(bad)?;
                for p in &pods {
                    self.pods.insert(p.id.clone(), p.clone());
                    self.record(p, None);
                }
                for c in &ctrs {
                    if let Some(p) = self.pods.get(&c.pod_sandbox_id).cloned() {
                        self.record(&p, Some((&c.id, &c.name)));
                    }
                }
                let live: Vec<&str> = pods.iter().map(|p| p.uid.as_str()).collect();
                self.records.keep_only(&live);
                Ok(Some(Vec::new()))
            }
            "RunPodSandbox" => {
                let p = api::pod_request(payload).map_err(bad)?;
                self.record(&p, None);
                self.pods.insert(p.id.clone(), p);
                Ok(Some(Vec::new()))
            }
            "StopPodSandbox" => Ok(Some(Vec::new())),
            "RemovePodSandbox" => {
                let p = api::pod_request(payload).map_err(bad)?;
                self.forget(&p);
                Ok(Some(Vec::new()))
            }
            "StateChange" => {
                // Older runtimes deliver pod events here: {event 1, pod 2}.
                let mut event = 0;
                let mut pod = None;
                for (n, v) in pb::fields(payload).map_err(bad)? {
                    match (n, v) {
                        (1, Value::Varint(e)) => event = e,
                        (2, Value::Bytes(b)) => pod = Some(Pod::decode(b).map_err(bad)?),
                        _ => {}
                    }
                }
                if let (3, Some(p)) = (event, pod) {
                    self.forget(&p);
                }
                Ok(Some(Vec::new()))
            }
            "CreateContainer" => {
                let (pod, c) = api::create_container_request(payload).map_err(bad)?;
                self.record(&pod, Some((&c.id, &c.name)));
                self.pods.insert(pod.id.clone(), pod.clone());
                let mut w = Writer::default();
                match policy::skip_reason(&pod, &c) {
                    Some(why) => (self.log)(&format!(
                        "{}/{} container {}: not injected ({why})",
                        pod.namespace, pod.name, c.name
                    )),
                    None => {
                        (self.log)(&format!(
                            "{}/{} container {}: libtandem.so injected",
                            pod.namespace, pod.name, c.name
                        ));
                        w.bytes(1, &policy::adjustment(&pod, &c, &self.paths).encode());
                    }
                }
                Ok(Some(w.0))
            }
            "Shutdown" => Ok(None),
            // Every other event: nothing to change.
            _ => Ok(Some(Vec::new())),
        }
    }

    fn forget(&mut self, p: &Pod) {
        self.pods.remove(&p.id);
        self.records.remove(&p.uid);
    }

    /// Register as `name` with index `idx` over `sock`, then serve until the
    /// runtime hangs up or shuts the plugin down.
    pub fn serve(&mut self, mut sock: UnixStream, name: &str, idx: &str) -> io::Result<()> {
        let mut reg = Writer::default();
        reg.string(1, name).string(2, idx);
        let call = Message {
            stream: 1,
            kind: TYPE_REQUEST,
            body: wire::request(api::RUNTIME_SERVICE, "RegisterPlugin", &reg.0),
        };
        wire::write_frame(&mut sock, RUNTIME_CONN, &call.encode())?;
        let mut bufs: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
        loop {
            let (conn, data) = match wire::read_frame(&mut sock) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e),
            };
            let buf = bufs.entry(conn).or_default();
            buf.extend_from_slice(&data);
            while let Some(m) = Message::take(bufs.entry(conn).or_default())? {
                match (conn, m.kind) {
                    (RUNTIME_CONN, TYPE_RESPONSE) => {
                        let (code, msg, _) = wire::parse_response(&m.body)?;
                        if code != 0 {
                            return Err(io::Error::other(format!(
                                "the runtime refused the registration: {msg} (code {code})"
                            )));
                        }
                        (self.log)(&format!("registered with the runtime as {idx}-{name}"));
                    }
                    (PLUGIN_CONN, TYPE_REQUEST) => {
                        let (_, method, payload) = wire::parse_request(&m.body)?;
                        let answer = self.handle(&method, &payload)?;
                        let reply = Message {
                            stream: m.stream,
                            kind: TYPE_RESPONSE,
                            body: wire::response(answer.as_deref().unwrap_or(&[])),
                        };
                        wire::write_frame(&mut sock, PLUGIN_CONN, &reply.encode())?;
                        sock.flush()?;
                        if answer.is_none() {
                            (self.log)("the runtime shut the plugin down");
                            return Ok(());
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}
