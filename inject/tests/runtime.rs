//! tandem-nri against a runtime speaking NRI's protocol as containerd and
//! CRI-O do (multiplexed socket, ttrpc, the api.proto messages): it
//! registers, subscribes, records pods, injects GPU containers only, leaves
//! opted-out pods alone, forgets removed pods and stops on Shutdown.

use std::collections::BTreeMap;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;

use tandem_inject::api::{self, Adjustment, Container, Pod};
use tandem_inject::pb::{self, Value, Writer};
use tandem_inject::plugin::Plugin;
use tandem_inject::policy::Paths;
use tandem_inject::wire::{self, Message, PLUGIN_CONN, RUNTIME_CONN, TYPE_REQUEST, TYPE_RESPONSE};

struct Runtime {
    sock: UnixStream,
    next_stream: u32,
}

impl Runtime {
    fn call(&mut self, method: &str, payload: &[u8]) -> Vec<u8> {
        let stream = self.next_stream;
        self.next_stream += 2;
        let m = Message {
            stream,
            kind: TYPE_REQUEST,
            body: wire::request(api::PLUGIN_SERVICE, method, payload),
        };
        wire::write_frame(&mut self.sock, PLUGIN_CONN, &m.encode()).unwrap();
        let (conn, data) = wire::read_frame(&mut self.sock).unwrap();
        assert_eq!(conn, PLUGIN_CONN);
        let mut buf = data;
        let r = Message::take(&mut buf).unwrap().expect("a whole message");
        assert_eq!((r.stream, r.kind), (stream, TYPE_RESPONSE));
        let (code, msg, payload) = wire::parse_response(&r.body).unwrap();
        assert_eq!(code, 0, "{msg}");
        payload
    }
}

fn pod(uid: &str, name: &str, annotations: &[(&str, &str)]) -> Pod {
    Pod {
        id: format!("sandbox-{name}"),
        name: name.into(),
        uid: uid.into(),
        namespace: "serving".into(),
        labels: BTreeMap::from([("app".to_string(), name.to_string())]),
        annotations: annotations
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect(),
    }
}

fn create(p: &Pod, c: &Container) -> Vec<u8> {
    let mut w = Writer::default();
    w.bytes(1, &p.encode()).bytes(2, &c.encode());
    w.0
}

fn adjustment(resp: &[u8]) -> Option<Adjustment> {
    pb::fields(resp)
        .unwrap()
        .into_iter()
        .find_map(|(n, v)| match (n, v) {
            (1, Value::Bytes(b)) => Some(Adjustment::decode(b).unwrap()),
            _ => None,
        })
}

#[test]
fn registers_injects_gpu_containers_and_keeps_pod_records() {
    let dir = std::env::temp_dir().join(format!("tandem-nri-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock_path = dir.join("nri.sock");
    let records: PathBuf = dir.join("pods");
    let listener = UnixListener::bind(&sock_path).unwrap();
    let rec = records.clone();
    let plugin = std::thread::spawn(move || {
        let mut p = Plugin::new(Paths::default(), &rec, Box::new(|_| {})).unwrap();
        p.serve(UnixStream::connect(&sock_path).unwrap(), "tandem", "50")
    });
    let (sock, _) = listener.accept().unwrap();
    let mut rt = Runtime {
        sock,
        next_stream: 1,
    };

    // Registration arrives on the runtime's connection.
    let (conn, data) = wire::read_frame(&mut rt.sock).unwrap();
    assert_eq!(conn, RUNTIME_CONN);
    let mut buf = data;
    let reg = Message::take(&mut buf).unwrap().unwrap();
    let (service, method, payload) = wire::parse_request(&reg.body).unwrap();
    assert_eq!(
        (service.as_str(), method.as_str()),
        (api::RUNTIME_SERVICE, "RegisterPlugin")
    );
    let f = pb::fields(&payload).unwrap();
    assert_eq!(pb::string(f[0].1), "tandem");
    assert_eq!(pb::string(f[1].1), "50");
    let ok = Message {
        stream: reg.stream,
        kind: TYPE_RESPONSE,
        body: wire::response(&[]),
    };
    wire::write_frame(&mut rt.sock, RUNTIME_CONN, &ok.encode()).unwrap();

    // Configure: subscribed to pod runs/stops/removals and container creation.
    let cfg = rt.call("Configure", &[]);
    let mask = pb::fields(&cfg)
        .unwrap()
        .into_iter()
        .find_map(|(n, v)| match (n, v) {
            (2, Value::Varint(m)) => Some(m),
            _ => None,
        });
    assert_eq!(mask, Some(0b1111));

    // Synchronize: existing pods are recorded, stale records removed.
    std::fs::write(
        records.join("00000000-dead-beef-0000-000000000000.json"),
        "{}",
    )
    .unwrap();
    let llm = pod(
        "7c1a2b3c-0001-11e9-b385-42010a80018d",
        "llm",
        &[("tandem.io/class", "inference")],
    );
    let mut sync = Writer::default();
    sync.bytes(1, &llm.encode());
    rt.call("Synchronize", &sync.0);
    assert!(!records
        .join("00000000-dead-beef-0000-000000000000.json")
        .exists());
    let rec_path = records.join(format!("{}.json", llm.uid));
    let rec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&rec_path).unwrap()).unwrap();
    assert_eq!(rec["namespace"], "serving");
    assert_eq!(rec["labels"]["app"], "llm");

    // A GPU container gets the library, the socket and the environment.
    let gpu = Container {
        id: "a1".repeat(32),
        pod_sandbox_id: llm.id.clone(),
        name: "server".into(),
        env: vec!["PATH=/usr/bin".into()],
        devices: vec!["/dev/nvidiactl".into(), "/dev/nvidia0".into()],
        ..Container::default()
    };
    let a = adjustment(&rt.call("CreateContainer", &create(&llm, &gpu))).expect("adjusted");
    let env: BTreeMap<_, _> = a.env.iter().cloned().collect();
    assert_eq!(env["LD_PRELOAD"], "/usr/local/lib/tandem/libtandem.so");
    assert_eq!(env["TANDEM_SOCKET"], "/run/tandem/tandemd.sock");
    assert_eq!(env["TANDEM_CLASS"], "inference");
    let mounts: Vec<(&str, &str)> = a
        .mounts
        .iter()
        .map(|m| (m.source.as_str(), m.destination.as_str()))
        .collect();
    assert_eq!(
        mounts,
        [
            ("/var/lib/tandem/lib", "/usr/local/lib/tandem"),
            ("/run/tandem", "/run/tandem")
        ]
    );
    let rec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&rec_path).unwrap()).unwrap();
    assert_eq!(rec["containers"][&gpu.id], "server", "{rec}");

    // A container without a GPU, and a GPU container of a pod that opted out: untouched.
    let cpu = Container {
        id: "b2".repeat(32),
        name: "sidecar".into(),
        ..Container::default()
    };
    assert_eq!(
        adjustment(&rt.call("CreateContainer", &create(&llm, &cpu))),
        None
    );
    let out = pod(
        "9d4e5f6a-0002-11e9-b385-42010a80018d",
        "batch",
        &[("tandem.io/inject", "false")],
    );
    assert_eq!(
        adjustment(&rt.call("CreateContainer", &create(&out, &gpu))),
        None
    );

    // A removed pod's record goes; Shutdown ends the plugin.
    let mut rm = Writer::default();
    rm.bytes(1, &llm.encode());
    rt.call("RemovePodSandbox", &rm.0);
    assert!(!rec_path.exists());
    rt.call("Shutdown", &[]);
    plugin.join().unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
