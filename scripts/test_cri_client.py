"""scripts/cri_client.py writes the CRI messages by hand: its bytes must be
what protobuf makes of the same messages, with cri-api's field numbers
(k8s.io/cri-api/pkg/apis/runtime/v1/api.proto), and it must read what a
runtime sends back.

Stdlib only: the encodings are checked against bytes that protobuf's own
encoder produced (GOLDEN below). Where google.protobuf can be imported
(Debian's python3-protobuf, which python3-grpcio brings), the same messages
are also built from a descriptor of api.proto's fields and serialized by
protobuf, so the golden bytes themselves are checked to be protobuf's; the
test says when it skips that part. No daemon, no grpc.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cri_client  # noqa: E402

UID = "3f1c2a6e-6a0e-4f7b-9d3e-2b7c1a0e5d11"
POD = {
    "name": "gpu-inference",
    "namespace": "tandem-it",
    "uid": UID,
    # two keys, given out of order: a map's entries go sorted by key
    "labels": {"tandem.io/inference": "true", "app": "llm"},
    "annotations": {"tandem.io/class": "inference"},
    "cgroup_parent": "/kubepods/besteffort/pod" + UID,
    "log_directory": "/var/log/pods/tandem-it_gpu-inference_" + UID,
}
CTR = {
    "name": "main",
    "image": "docker.io/tandem-integration/rootfs:1",
    "command": ["/bin/sh", "-c", "exec /bin/launcher --count 10 --hold </hold/fifo"],
    "env": {"TANDEM_CLASS": "inference", "A": "b"},
    "mounts": [
        {"container_path": "/hold", "host_path": "/tmp/hold", "readonly": True},
        {"container_path": "/data", "host_path": "/srv/data", "readonly": False},
    ],
    "devices": [{"container_path": "/dev/nvidia0", "host_path": "/dev/nvidia0", "permissions": "rw"}],
    "labels": {"io.kubernetes.container.name": "main"},
    "log_path": "main/0.log",
}
POD_ID = "bc91907867fcec76ae633bf3b2155b34da62decbb75a671c6731d43415a95667"

# What protobuf 3.21.12 (Debian 12's python3-protobuf, module version
# 4.21.12) serializes (deterministic=True) for the messages make_pod and
# make_ctr below build from POD and CTR, and for status_response(-1), in hex.
GOLDEN = {
    "PodSandboxConfig": (
        "0a400a0d6770752d696e666572656e6365122433663163326136652d366130652d346637622d396433652d3262376331"
        "613065356431311a0974616e64656d2d69741a4a2f7661722f6c6f672f706f64732f74616e64656d2d69745f6770752d"
        "696e666572656e63655f33663163326136652d366130652d346637622d396433652d326237633161306535643131320a"
        "0a0361707012036c6c6d321b0a1374616e64656d2e696f2f696e666572656e63651204747275653a1c0a0f74616e6465"
        "6d2e696f2f636c6173731209696e666572656e636542440a3c2f6b756265706f64732f626573746566666f72742f706f"
        "6433663163326136652d366130652d346637622d396433652d32623763316130653564313112040a020802"
    ),
    "ContainerConfig": (
        "0a060a046d61696e12270a25646f636b65722e696f2f74616e64656d2d696e746567726174696f6e2f726f6f7466733a"
        "311a072f62696e2f73681a022d631a3065786563202f62696e2f6c61756e63686572202d2d636f756e74203130202d2d"
        "686f6c64203c2f686f6c642f6669666f32060a014112016232190a0c54414e44454d5f434c4153531209696e66657265"
        "6e63653a140a052f686f6c6412092f746d702f686f6c6418013a120a052f6461746112092f7372762f6461746142200a"
        "0c2f6465762f6e766964696130120c2f6465762f6e7669646961301a0272774a240a1c696f2e6b756265726e65746573"
        "2e636f6e7461696e65722e6e616d6512046d61696e5a0a6d61696e2f302e6c6f67"
    ),
    "ContainerStatusResponse": (
        "0ae7010a4062633931393037383637666365633736616536333362663362323135356233346461363264656362623735"
        "61363731633637333164343334313561393536363712060a046d61696e180220959a97f9f694bfbd183095ae82d6fa94"
        "bfbd1838ffffffffffffffffff0142270a25646f636b65722e696f2f74616e64656d2d696e746567726174696f6e2f72"
        "6f6f7466733a3152054572726f725a0b6578697420737461747573623d0a15696f2e6b756265726e657465732e706f64"
        "2e756964122433663163326136652d366130652d346637622d396433652d326237633161306535643131120b0a037069"
        "64120434323432"
    ),
}


def hexbytes(h):
    return bytes.fromhex(h)


class Varint(unittest.TestCase):
    def test_known_encodings(self):
        # protobuf's encoding guide: 1 -> 01, 150 -> 96 01, 300 -> ac 02.
        self.assertEqual(cri_client._varint(0), b"\x00")
        self.assertEqual(cri_client._varint(1), b"\x01")
        self.assertEqual(cri_client._varint(150), b"\x96\x01")
        self.assertEqual(cri_client._varint(300), b"\xac\x02")
        # a negative int32 goes as its 64-bit two's complement: ten bytes
        self.assertEqual(cri_client._varint((1 << 64) - 1), b"\xff" * 9 + b"\x01")

    def test_fields_reads_every_wire_type_and_keeps_repeats(self):
        buf = (
            cri_client.field_uint(1, 300)
            + cri_client.field_str(2, "a")
            + cri_client.field_str(2, "b")
            + bytes([3 << 3 | 1]) + b"\x01" * 8  # fixed64
            + bytes([4 << 3 | 5]) + b"\x02" * 4  # fixed32
        )
        fs = cri_client.fields(buf)
        self.assertEqual(fs, {1: [300], 2: [b"a", b"b"], 3: [b"\x01" * 8], 4: [b"\x02" * 4]})
        with self.assertRaises(ValueError):
            cri_client.fields(bytes([5 << 3 | 3]))  # a group: never in CRI


class Golden(unittest.TestCase):
    """The hand encoding against bytes protobuf produced (no protobuf needed)."""

    def test_pod_sandbox_config(self):
        self.assertEqual(cri_client.pod_sandbox_config(POD).hex(), GOLDEN["PodSandboxConfig"])

    def test_container_config(self):
        self.assertEqual(cri_client.container_config(CTR).hex(), GOLDEN["ContainerConfig"])

    def test_container_status_response(self):
        # exit code -1: an int32 sent as ten bytes; fields not read are skipped
        got = cri_client.container_status(hexbytes(GOLDEN["ContainerStatusResponse"]))
        self.assertEqual(got, {"state": 2, "exit_code": -1, "reason": "Error", "message": "exit status"})


def _protobuf():
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError:
        return None
    return descriptor_pb2, descriptor_pool, message_factory


# The messages cri_client.py writes or reads, with api.proto's field numbers
# and types (enums as int32: the same varint on the wire).
SCHEMA = {
    "VersionRequest": [("version", 1, "string")],
    "VersionResponse": [
        ("version", 1, "string"),
        ("runtime_name", 2, "string"),
        ("runtime_version", 3, "string"),
        ("runtime_api_version", 4, "string"),
    ],
    "PodSandboxMetadata": [("name", 1, "string"), ("uid", 2, "string"), ("namespace", 3, "string"), ("attempt", 4, "uint32")],
    "NamespaceOption": [("network", 1, "int32"), ("pid", 2, "int32"), ("ipc", 3, "int32")],
    "LinuxSandboxSecurityContext": [("namespace_options", 1, "NamespaceOption")],
    "LinuxPodSandboxConfig": [("cgroup_parent", 1, "string"), ("security_context", 2, "LinuxSandboxSecurityContext")],
    "PodSandboxConfig": [
        ("metadata", 1, "PodSandboxMetadata"),
        ("hostname", 2, "string"),
        ("log_directory", 3, "string"),
        ("labels", 6, "map"),
        ("annotations", 7, "map"),
        ("linux", 8, "LinuxPodSandboxConfig"),
    ],
    "RunPodSandboxRequest": [("config", 1, "PodSandboxConfig"), ("runtime_handler", 2, "string")],
    "RunPodSandboxResponse": [("pod_sandbox_id", 1, "string")],
    "ContainerMetadata": [("name", 1, "string"), ("attempt", 2, "uint32")],
    "ImageSpec": [("image", 1, "string"), ("annotations", 2, "map")],
    "KeyValue": [("key", 1, "string"), ("value", 2, "string")],
    "Mount": [("container_path", 1, "string"), ("host_path", 2, "string"), ("readonly", 3, "bool")],
    "Device": [("container_path", 1, "string"), ("host_path", 2, "string"), ("permissions", 3, "string")],
    "ContainerConfig": [
        ("metadata", 1, "ContainerMetadata"),
        ("image", 2, "ImageSpec"),
        ("command", 3, "repeated string"),
        ("args", 4, "repeated string"),
        ("working_dir", 5, "string"),
        ("envs", 6, "repeated KeyValue"),
        ("mounts", 7, "repeated Mount"),
        ("devices", 8, "repeated Device"),
        ("labels", 9, "map"),
        ("annotations", 10, "map"),
        ("log_path", 11, "string"),
    ],
    "CreateContainerRequest": [
        ("pod_sandbox_id", 1, "string"),
        ("config", 2, "ContainerConfig"),
        ("sandbox_config", 3, "PodSandboxConfig"),
    ],
    "ContainerStatus": [
        ("id", 1, "string"),
        ("metadata", 2, "ContainerMetadata"),
        ("state", 3, "int32"),
        ("created_at", 4, "int64"),
        ("started_at", 5, "int64"),
        ("finished_at", 6, "int64"),
        ("exit_code", 7, "int32"),
        ("image", 8, "ImageSpec"),
        ("reason", 10, "string"),
        ("message", 11, "string"),
        ("labels", 12, "map"),
    ],
    "ContainerStatusResponse": [("status", 1, "ContainerStatus"), ("info", 2, "map")],
}


def _classes():
    """{message name: protobuf class} built from SCHEMA, or None without protobuf."""
    pb = _protobuf()
    if pb is None:
        return None
    descriptor_pb2, descriptor_pool, message_factory = pb
    F = descriptor_pb2.FieldDescriptorProto
    scalar = {"string": F.TYPE_STRING, "int32": F.TYPE_INT32, "int64": F.TYPE_INT64, "uint32": F.TYPE_UINT32, "bool": F.TYPE_BOOL}
    fdp = descriptor_pb2.FileDescriptorProto(name="tandem_cri_subset.proto", package="runtime.v1", syntax="proto3")
    for msg, flds in SCHEMA.items():
        m = fdp.message_type.add(name=msg)
        for name, num, kind in flds:
            f = m.field.add(name=name, number=num, label=F.LABEL_OPTIONAL)
            if kind.startswith("repeated "):
                kind = kind[len("repeated "):]
                f.label = F.LABEL_REPEATED
            if kind == "map":
                entry = name.title().replace("_", "") + "Entry"
                e = m.nested_type.add(name=entry)
                e.options.map_entry = True
                e.field.add(name="key", number=1, label=F.LABEL_OPTIONAL, type=F.TYPE_STRING)
                e.field.add(name="value", number=2, label=F.LABEL_OPTIONAL, type=F.TYPE_STRING)
                f.label, f.type, f.type_name = F.LABEL_REPEATED, F.TYPE_MESSAGE, f".runtime.v1.{msg}.{entry}"
            elif kind in scalar:
                f.type = scalar[kind]
            else:
                f.type, f.type_name = F.TYPE_MESSAGE, f".runtime.v1.{kind}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    get = getattr(message_factory, "GetMessageClass", None)
    if get is None:  # protobuf < 4.22
        factory = message_factory.MessageFactory(pool)
        get = factory.GetPrototype
    return {msg: get(pool.FindMessageTypeByName(f"runtime.v1.{msg}")) for msg in SCHEMA}


def make_pod(pb, pod):
    c = pb["PodSandboxConfig"]()
    c.metadata.name, c.metadata.uid, c.metadata.namespace = pod["name"], pod["uid"], pod["namespace"]
    c.log_directory = pod["log_directory"]
    c.labels.update(pod["labels"])
    c.annotations.update(pod["annotations"])
    c.linux.cgroup_parent = pod["cgroup_parent"]
    c.linux.security_context.namespace_options.network = cri_client.NODE
    return c


def make_ctr(pb, ctr):
    c = pb["ContainerConfig"]()
    c.metadata.name = ctr["name"]
    c.image.image = ctr["image"]
    c.command.extend(ctr["command"])
    for k, v in sorted(ctr["env"].items()):
        c.envs.add(key=k, value=v)
    for m in ctr["mounts"]:
        c.mounts.add(container_path=m["container_path"], host_path=m["host_path"], readonly=m["readonly"])
    for d in ctr["devices"]:
        c.devices.add(container_path=d["container_path"], host_path=d["host_path"], permissions=d["permissions"])
    c.labels.update(ctr["labels"])
    c.log_path = ctr["log_path"]
    return c


def status_response(pb, code):
    """An exited container's ContainerStatusResponse, with fields cri_client
    does not read (metadata, created_at, finished_at, image, labels, info)
    around the ones it does."""
    r = pb["ContainerStatusResponse"]()
    s = r.status
    s.id, s.metadata.name, s.state = POD_ID, "main", cri_client.CONTAINER_EXITED
    s.created_at, s.finished_at, s.exit_code = 1764000000123456789, 1764000001123456789, code
    s.image.image, s.reason, s.message = CTR["image"], "Error", "exit status"
    s.labels["io.kubernetes.pod.uid"] = UID
    r.info["pid"] = "4242"
    return r


class AgainstProtobuf(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pb = _classes()
        if cls.pb is None:
            raise unittest.SkipTest("google.protobuf is not importable here (Debian: python3-protobuf)")

    def serialized(self, msg):
        return msg.SerializeToString(deterministic=True)

    def test_golden_bytes_are_protobufs(self):
        self.assertEqual(self.serialized(make_pod(self.pb, POD)).hex(), GOLDEN["PodSandboxConfig"])
        self.assertEqual(self.serialized(make_ctr(self.pb, CTR)).hex(), GOLDEN["ContainerConfig"])
        self.assertEqual(self.serialized(status_response(self.pb, -1)).hex(), GOLDEN["ContainerStatusResponse"])

    def test_container_config_and_create_request(self):
        want = self.serialized(make_ctr(self.pb, CTR))
        self.assertEqual(cri_client.container_config(CTR), want)
        req = self.pb["CreateContainerRequest"](pod_sandbox_id=POD_ID)
        req.config.CopyFrom(make_ctr(self.pb, CTR))
        req.sandbox_config.CopyFrom(make_pod(self.pb, POD))
        ours = (
            cri_client.field_str(1, POD_ID)
            + cri_client.field_bytes(2, cri_client.container_config(CTR))
            + cri_client.field_bytes(3, cri_client.pod_sandbox_config(POD))
        )
        self.assertEqual(ours, self.serialized(req))
        # and protobuf reads ours back as the same request
        back = self.pb["CreateContainerRequest"]()
        back.ParseFromString(ours)
        self.assertEqual(back.config.mounts[0].readonly, True)
        self.assertEqual(back.config.mounts[1].readonly, False)
        self.assertEqual(dict(back.sandbox_config.labels), POD["labels"])
        self.assertEqual(back.sandbox_config.linux.security_context.namespace_options.network, 2)

    def test_a_pod_without_labels_or_log_directory(self):
        bare = {"name": "p", "namespace": "n", "uid": "u"}
        c = self.pb["PodSandboxConfig"]()
        c.metadata.name, c.metadata.namespace, c.metadata.uid = "p", "n", "u"
        c.linux.security_context.namespace_options.network = cri_client.NODE
        self.assertEqual(cri_client.pod_sandbox_config(bare), self.serialized(c))

    def test_responses_as_a_runtime_sends_them(self):
        for code in [0, 137, -1]:
            got = cri_client.container_status(self.serialized(status_response(self.pb, code)))
            self.assertEqual(got, {"state": 2, "exit_code": code, "reason": "Error", "message": "exit status"})
        v = self.pb["VersionResponse"](version="0.1.0", runtime_name="containerd", runtime_version="1.7.24~ds1", runtime_api_version="v1")
        fs = cri_client.fields(self.serialized(v))
        self.assertEqual([cri_client.first(fs, n).decode() for n in (2, 3, 4)], ["containerd", "1.7.24~ds1", "v1"])
        self.assertEqual(
            cri_client.first(cri_client.fields(self.serialized(self.pb["RunPodSandboxResponse"](pod_sandbox_id=POD_ID))), 1),
            POD_ID.encode(),
        )


if __name__ == "__main__":
    unittest.main()
