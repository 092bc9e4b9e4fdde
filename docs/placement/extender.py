#!/usr/bin/env python3
"""A Kubernetes scheduler-extender `filter` that asks tandem's /predict.

A documented example (docs/placement.md), standard library only. kube-scheduler
POSTs ExtenderArgs to /filter; for a pod annotated with a trace

    tandem.dev/trace: NAME      -> TRACE_DIR/NAME.json (a tandem-trace/1 file)
    tandem.dev/class: inference|training   (optional: must match the trace)
    tandem.dev/rate:  "100"                (optional: requests/s)

it asks each candidate node's tandemd (TCP, `[stats] tcp_listen` with
`tcp_serves_stats = true`) for its GPUs (GET /stats) and, for each GPU,
POST /predict?gpu=I with the trace. A node passes when some GPU's verdict is
in ACCEPT, or a GPU has no jobs (409 "has no jobs": the pod would run alone).
Every verdict is a prediction of tandem's GPU-sharing model, not a
measurement; the reasons given for failed nodes say so, with the model's
version.

Environment: LISTEN (default 0.0.0.0:8888), TANDEM_PORT (9400), TRACE_DIR
(/etc/tandem/traces), ACCEPT ("fits"; "fits,fits only over MPS" where nodes run
tandem over MPS), FAIL_OPEN (1: a node whose tandemd fails or does not answer
passes), WORKERS (8 nodes asked at once), TIMEOUT (60 s per request).

    python3 extender.py              # serve
    python3 extender.py --self-test  # the filter against a fake tandemd
"""

import concurrent.futures
import http.server
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request

TANDEM_PORT = int(os.environ.get("TANDEM_PORT", "9400"))
TRACE_DIR = os.environ.get("TRACE_DIR", "/etc/tandem/traces")
ACCEPT = {v.strip() for v in os.environ.get("ACCEPT", "fits").split(",") if v.strip()}
FAIL_OPEN = os.environ.get("FAIL_OPEN", "1") != "0"
WORKERS = int(os.environ.get("WORKERS", "8"))
TIMEOUT = float(os.environ.get("TIMEOUT", "60"))
ANNOTATION = "tandem.dev/"


def node_address(node):
    """The node's InternalIP, else its name (a resolvable host name)."""
    for a in (node.get("status") or {}).get("addresses") or []:
        if a.get("type") == "InternalIP":
            return a.get("address")
    return (node.get("metadata") or {}).get("name")


def send(method, url, body=None):
    """(status, text) of one request; urllib's HTTPError is an answer too."""
    req = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def ask_node(address, trace, query, ask=send):
    """(passes, reason) for one node: its GPUs, one prediction each."""
    base = f"http://{address}:{TANDEM_PORT}"
    status, text = ask("GET", f"{base}/stats")
    if status != 200:
        return FAIL_OPEN, f"tandemd's /stats answered {status}: {text.strip()}"
    gpus = json.loads(text).get("gpus") or []
    if not gpus:
        return True, "tandemd sees no GPU in use: nothing to collide with"
    reasons = []
    for i, gpu in enumerate(gpus):
        status, text = ask("POST", f"{base}/predict?gpu={i}{query}", trace)
        if status == 200:
            p = json.loads(text)
            verdict = p["verdict"]
            if verdict in ACCEPT:
                return True, f"GPU {i}: {verdict} (prediction, model {p['model_version']})"
            reasons.append(f"GPU {i}: {verdict} (prediction, model {p['model_version']})")
        elif status == 409 and "has no jobs" in text:
            return True, f"GPU {i} has no jobs"
        else:
            if FAIL_OPEN:
                return True, f"GPU {i}: /predict answered {status} ({text.strip()}): passed (FAIL_OPEN)"
            reasons.append(f"GPU {i}: /predict answered {status}: {text.strip()}")
    return False, "; ".join(reasons)


def pod_request(pod):
    """(trace bytes, query string) for an annotated pod, or None."""
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    name = ann.get(ANNOTATION + "trace")
    if not name:
        return None
    if "/" in name or name.startswith("."):
        raise ValueError(f"{ANNOTATION}trace {name!r}: a name, not a path")
    with open(os.path.join(TRACE_DIR, name + ".json"), "rb") as f:
        trace = f.read()
    query = ""
    for key in ("class", "rate"):
        value = ann.get(ANNOTATION + key)
        if value:
            query += f"&{key}={urllib.parse.quote(value)}"
    return trace, query


def filter_args(args, ask=send):
    """ExtenderArgs -> ExtenderFilterResult."""
    pod = args.get("Pod") or args.get("pod") or {}
    nodes = (args.get("Nodes") or {}).get("items")
    names = args.get("NodeNames")
    candidates = nodes if nodes is not None else [{"metadata": {"name": n}} for n in names or []]
    try:
        req = pod_request(pod)
    except (OSError, ValueError) as e:
        return {"Nodes": args.get("Nodes"), "NodeNames": names, "FailedNodes": {}, "Error": str(e)}
    if req is None:  # not ours to judge
        return {"Nodes": args.get("Nodes"), "NodeNames": names, "FailedNodes": {}, "Error": ""}
    trace, query = req

    def judge(node):
        try:
            return ask_node(node_address(node), trace, query, ask)
        except (OSError, ValueError, KeyError) as e:
            return FAIL_OPEN, f"asking tandemd failed: {e}"

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, WORKERS)) as ex:
        results = list(ex.map(judge, candidates))
    keep, failed = [], {}
    for node, (ok, reason) in zip(candidates, results):
        name = node["metadata"]["name"]
        if ok:
            keep.append(node)
        else:
            failed[name] = "tandem: " + reason
    out = {"FailedNodes": failed, "Error": ""}
    if nodes is not None:
        out["Nodes"] = {"items": keep}
        out["NodeNames"] = None
    else:
        out["Nodes"] = None
        out["NodeNames"] = [n["metadata"]["name"] for n in keep]
    return out


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        if self.path.rstrip("/") != "/filter":
            self.send_error(404, "only /filter")
            return
        n = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.dumps(filter_args(json.loads(self.rfile.read(n)))).encode()
        except ValueError as e:
            self.send_error(400, str(e))
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def self_test():
    """The filter against a fake tandemd: node a fits on GPU 1, node b does
    not fit, node c's GPU has no jobs, node d's tandemd is down."""
    global ACCEPT, FAIL_OPEN, TRACE_DIR
    import tempfile

    ACCEPT = {"fits"}
    answers = {
        "a": {"/stats": (200, {"gpus": [{}, {}]}),
              "/predict?gpu=0": (200, {"verdict": "does not fit", "model_version": "gpusim-3"}),
              "/predict?gpu=1": (200, {"verdict": "fits", "model_version": "gpusim-3"})},
        "b": {"/stats": (200, {"gpus": [{}]}),
              "/predict?gpu=0": (200, {"verdict": "fits only over MPS", "model_version": "gpusim-3"})},
        "c": {"/stats": (200, {"gpus": [{}]}),
              "/predict?gpu=0": (409, "GPU GPU-c (H100) has no jobs: nothing to predict against")},
    }
    seen = []

    def ask(method, url, body=None):
        host = url.split("//")[1].split(":")[0]
        path = url.split(str(TANDEM_PORT))[1].split("&")[0]
        seen.append((method, host, url, body))
        if host not in answers:
            raise OSError("connection refused")
        status, doc = answers[host][path]
        return status, doc if isinstance(doc, str) else json.dumps(doc)

    with tempfile.TemporaryDirectory() as d:
        TRACE_DIR = d
        with open(os.path.join(d, "b4.json"), "w") as f:
            f.write('{"format": "tandem-trace/1"}')
        pod = {"metadata": {"annotations": {"tandem.dev/trace": "b4", "tandem.dev/rate": "100"}}}
        nodes = [{"metadata": {"name": n}, "status": {"addresses": [{"type": "InternalIP", "address": n}]}}
                 for n in "abcd"]
        for fail_open, want in ((True, ["a", "c", "d"]), (False, ["a", "c"])):
            FAIL_OPEN = fail_open
            r = filter_args({"Pod": pod, "Nodes": {"items": nodes}}, ask)
            got = [n["metadata"]["name"] for n in r["Nodes"]["items"]]
            assert got == want, (fail_open, got, r)
            assert "fits only over MPS (prediction, model gpusim-3)" in r["FailedNodes"]["b"], r
        # The trace and the rate went to /predict; GPU 1 of node a was asked.
        posts = [u for m, h, u, b in seen if m == "POST"]
        assert any(u.endswith(":9400/predict?gpu=1&rate=100") for u in posts), posts
        assert all(b == b'{"format": "tandem-trace/1"}' for m, _, _, b in seen if m == "POST")
        # A pod without the annotation is not judged; a path is refused.
        r = filter_args({"Pod": {}, "NodeNames": ["a", "b"]}, ask)
        assert r["NodeNames"] == ["a", "b"] and r["Error"] == "", r
        bad = {"metadata": {"annotations": {"tandem.dev/trace": "../etc/x"}}}
        assert "a name, not a path" in filter_args({"Pod": bad, "NodeNames": ["a"]}, ask)["Error"]
    print("extender self-test: ok")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
    else:
        host, _, port = os.environ.get("LISTEN", "0.0.0.0:8888").rpartition(":")
        http.server.ThreadingHTTPServer((host, int(port)), Handler).serve_forever()
