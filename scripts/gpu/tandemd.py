"""tandemd for the GPU scripts: started on a private socket, asked for its
/stats over HTTP on a Unix socket, its log kept when the run is done.

Shared by coordinator.py, interposition.py (the launch loop attached to
tandemd) and follow.py; imports none of them. Stdlib only.
"""

import contextlib
import json
import os
import shutil
import socket
import subprocess
import time


def http_get(sock_path, path, timeout=5.0):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(sock_path)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].decode(errors="replace")
    return status, body.decode(errors="replace")


def stats(stats_sock):
    status, body = http_get(stats_sock, "/stats")
    if " 200 " not in status + " ":
        raise RuntimeError(f"/stats answered {status}")
    return json.loads(body)


def start_tandemd(bin_dir, sock_dir, config=None):
    """tandemd on a private socket in sock_dir: built-in defaults, or the
    TOML text `config` (written to sock_dir/tandemd.toml)."""
    sock = os.path.join(sock_dir, "tandemd.sock")
    if config is None:
        cfg_args = ["--no-config"]
    else:
        path = os.path.join(sock_dir, "tandemd.toml")
        with open(path, "w") as f:
            f.write(config)
        cfg_args = ["--config", path]
    log = open(os.path.join(sock_dir, "tandemd.log"), "w")
    p = subprocess.Popen(
        [os.path.join(bin_dir, "tandemd"), *cfg_args, "--socket", sock],
        stdout=log, stderr=subprocess.STDOUT,
    )
    log.close()  # tandemd holds its own descriptor
    stats_sock = os.path.join(sock_dir, "stats.sock")
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            stats(stats_sock)
            return p, sock, stats_sock
        except (OSError, RuntimeError, ValueError):
            time.sleep(0.05)
    p.kill()
    raise SystemExit("tandemd did not answer on its stats socket within 10 s")


def keep_log_and_remove(sock_dir, log_dest):
    """Moves a private tandemd's log out of its socket folder, then removes the folder."""
    with contextlib.suppress(OSError):
        shutil.copy(os.path.join(sock_dir, "tandemd.log"), log_dest)
    shutil.rmtree(sock_dir, ignore_errors=True)
