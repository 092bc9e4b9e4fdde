#!/usr/bin/env python3
"""A small client of the CRI v1 API (runtime.v1.RuntimeService), for
scripts/integration: it creates pods and containers in a containerd as the
kubelet would, so tandem-nri sees them through NRI.

    cri_client.py SOCKET version
    cri_client.py SOCKET runp POD.json            -> prints the sandbox id
    cri_client.py SOCKET create POD_ID POD.json CTR.json
                                                  -> prints the container id
    cri_client.py SOCKET start CONTAINER_ID
    cri_client.py SOCKET wait CONTAINER_ID SECONDS -> prints the exit code
    cri_client.py SOCKET stopp POD_ID
    cri_client.py SOCKET rmp POD_ID

POD.json: {"name", "namespace", "uid", "labels", "annotations",
"cgroup_parent", "log_directory"}; the pod uses the node's network, so no CNI
is needed. CTR.json: {"name", "image", "command", "env": {K: V}, "mounts":
[{"container_path", "host_path", "readonly"}], "devices": [{"container_path",
"host_path", "permissions"}], "log_path"}.

The messages are written by hand from cri-api's api.proto
(k8s.io/cri-api/pkg/apis/runtime/v1/api.proto): only the fields used here,
with the proto's field numbers; grpcio carries them as bytes. Any field the
runtime sends back that is not read here is skipped.
"""

import json
import sys
import time

SERVICE = "/runtime.v1.RuntimeService/"

# NamespaceMode: the pod shares the node's network namespace (no CNI).
NODE = 2
# ContainerState
CONTAINER_EXITED = 2


# --- protobuf wire format: the few rules the messages below need ----------


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_bytes(num, data):
    """A length-delimited field (string, bytes, nested message)."""
    return _varint(num << 3 | 2) + _varint(len(data)) + data


def field_str(num, s):
    return field_bytes(num, s.encode()) if s else b""


def field_uint(num, n):
    return _varint(num << 3) + _varint(n) if n else b""


def field_map(num, d):
    """A map<string, string>: one entry message (key 1, value 2) per pair."""
    return b"".join(field_bytes(num, field_str(1, k) + field_str(2, v)) for k, v in sorted((d or {}).items()))


def fields(buf):
    """{field number: [values]}: ints for varints, bytes for the rest."""
    out, at = {}, 0

    def varint():
        nonlocal at
        n = shift = 0
        while True:
            b = buf[at]
            at += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return n

    while at < len(buf):
        key = varint()
        num, wire = key >> 3, key & 7
        if wire == 0:
            v = varint()
        elif wire == 2:
            n = varint()
            v = bytes(buf[at : at + n])
            at += n
        elif wire in (1, 5):
            n = 8 if wire == 1 else 4
            v = bytes(buf[at : at + n])
            at += n
        else:
            raise ValueError(f"unsupported wire type {wire}")
        out.setdefault(num, []).append(v)
    return out


def first(fs, num, default=None):
    return fs.get(num, [default])[0]


# --- the CRI messages -----------------------------------------------------


def pod_sandbox_config(pod):
    """PodSandboxConfig: metadata 1 (name 1, uid 2, namespace 3), log_directory 3,
    labels 6, annotations 7, linux 8 (cgroup_parent 1, security_context 2
    with namespace_options 1 with network 1)."""
    meta = field_str(1, pod["name"]) + field_str(2, pod["uid"]) + field_str(3, pod["namespace"])
    ns_options = field_uint(1, NODE)
    security = field_bytes(1, ns_options)
    linux = field_str(1, pod.get("cgroup_parent", "")) + field_bytes(2, security)
    return (
        field_bytes(1, meta)
        + field_str(3, pod.get("log_directory", ""))
        + field_map(6, pod.get("labels"))
        + field_map(7, pod.get("annotations"))
        + field_bytes(8, linux)
    )


def container_config(ctr):
    """ContainerConfig: metadata 1 (name 1), image 2 (image 1), command 3,
    envs 6 (key 1, value 2), mounts 7 (container_path 1, host_path 2,
    readonly 3), devices 8 (container_path 1, host_path 2, permissions 3),
    labels 9, annotations 10, log_path 11."""
    out = field_bytes(1, field_str(1, ctr["name"])) + field_bytes(2, field_str(1, ctr["image"]))
    for c in ctr.get("command", []):
        out += field_bytes(3, c.encode())
    for k, v in sorted(ctr.get("env", {}).items()):
        out += field_bytes(6, field_str(1, k) + field_str(2, v))
    for m in ctr.get("mounts", []):
        out += field_bytes(
            7, field_str(1, m["container_path"]) + field_str(2, m["host_path"]) + field_uint(3, int(m.get("readonly", False)))
        )
    for d in ctr.get("devices", []):
        out += field_bytes(
            8, field_str(1, d["container_path"]) + field_str(2, d["host_path"]) + field_str(3, d.get("permissions", "rw"))
        )
    out += field_map(9, ctr.get("labels")) + field_map(10, ctr.get("annotations"))
    return out + field_str(11, ctr.get("log_path", ""))


def container_status(response):
    """The state, exit code, reason and message of a ContainerStatusResponse:
    status 1 (state 3, exit_code 7, reason 10, message 11)."""
    st = fields(first(fields(response), 1, b""))
    exit_code = first(st, 7, 0)
    if exit_code >= 1 << 31:  # int32, sign-extended to 64 bits on the wire
        exit_code -= 1 << 64
    return {
        "state": first(st, 3, 0),
        "exit_code": exit_code,
        "reason": first(st, 10, b"").decode(),
        "message": first(st, 11, b"").decode(),
    }


# --- the calls ------------------------------------------------------------


class Runtime:
    def __init__(self, socket):
        import grpc  # only here: the encoders above are tested without it

        self.channel = grpc.insecure_channel(f"unix://{socket}")

    def call(self, method, request, timeout=60):
        rpc = self.channel.unary_unary(SERVICE + method)
        return rpc(request, timeout=timeout)

    def version(self):
        # VersionResponse: version 1, runtime_name 2, runtime_version 3, runtime_api_version 4
        fs = fields(self.call("Version", field_str(1, "v1")))
        return {k: first(fs, n, b"").decode() for k, n in [("runtime_name", 2), ("runtime_version", 3), ("api", 4)]}

    def run_pod(self, pod):
        # RunPodSandboxRequest: config 1 -> RunPodSandboxResponse: pod_sandbox_id 1
        return first(fields(self.call("RunPodSandbox", field_bytes(1, pod_sandbox_config(pod)))), 1, b"").decode()

    def create(self, pod_id, pod, ctr):
        # CreateContainerRequest: pod_sandbox_id 1, config 2, sandbox_config 3
        req = field_str(1, pod_id) + field_bytes(2, container_config(ctr)) + field_bytes(3, pod_sandbox_config(pod))
        return first(fields(self.call("CreateContainer", req)), 1, b"").decode()

    def start(self, cid):
        self.call("StartContainer", field_str(1, cid))

    def status(self, cid):
        return container_status(self.call("ContainerStatus", field_str(1, cid)))

    def wait(self, cid, seconds):
        end = time.monotonic() + seconds
        while True:
            st = self.status(cid)
            if st["state"] == CONTAINER_EXITED:
                return st
            if time.monotonic() > end:
                raise TimeoutError(f"container {cid} still running after {seconds} s: {st}")
            time.sleep(0.1)

    def stop_pod(self, pod_id):
        self.call("StopPodSandbox", field_str(1, pod_id))

    def remove_pod(self, pod_id):
        self.call("RemovePodSandbox", field_str(1, pod_id))


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    rt = Runtime(argv[1])
    cmd, args = argv[2], argv[3:]

    def load(path):
        with open(path) as f:
            return json.load(f)

    if cmd == "version":
        print(json.dumps(rt.version()))
    elif cmd == "runp":
        print(rt.run_pod(load(args[0])))
    elif cmd == "create":
        print(rt.create(args[0], load(args[1]), load(args[2])))
    elif cmd == "start":
        rt.start(args[0])
    elif cmd == "wait":
        st = rt.wait(args[0], float(args[1]))
        print(st["exit_code"])
    elif cmd == "stopp":
        rt.stop_pod(args[0])
    elif cmd == "rmp":
        rt.remove_pod(args[0])
    else:
        sys.exit(f"cri_client: unknown command {cmd!r}\n{__doc__}")


if __name__ == "__main__":
    try:
        main(sys.argv)
    except Exception as e:  # one line for the script's log, not a traceback
        details = getattr(e, "details", None)
        sys.exit(f"cri_client {' '.join(sys.argv[2:3])}: {details() if callable(details) else e}")
