"""The remote fact-gathering script (python3, stdlib only) and the request it answers."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

# Runs on the node as `python3 -c ...`; reads the request as JSON on stdin, prints one JSON document.
REMOTE_SCRIPT = r'''
import hashlib, json, os, pwd, grp, subprocess, sys
req = json.load(sys.stdin)
out = {"hostname": os.uname().nodename, "files": {}, "stats": {}, "commands": {}}
def owner(uid, gid):
    try: u = pwd.getpwuid(uid).pw_name
    except KeyError: u = str(uid)
    try: g = grp.getgrgid(gid).gr_name
    except KeyError: g = str(gid)
    return u, g
for path in req["files"]:
    item = {"exists": False}
    try:
        st = os.stat(path)
        with open(path, "rb") as fh: data = fh.read(req["max_bytes"] + 1)
        u, g = owner(st.st_uid, st.st_gid)
        item = {"exists": True, "sha256": hashlib.sha256(data).hexdigest(), "mode": "%04o" % (st.st_mode & 0o7777),
                "owner": u, "group": g, "size": st.st_size}
        if len(data) <= req["max_bytes"] and path not in req.get("secret", ()):
            item["content"] = data.decode("utf-8", "replace")
    except FileNotFoundError:
        pass
    except OSError as exc:
        item = {"exists": False, "error": str(exc)}
    out["files"][path] = item
for path in req.get("hashes", []):  # secrets: hash, mode and owner only; the content never leaves the node
    item = {"exists": False}
    try:
        st = os.stat(path)
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(65536), b""): digest.update(block)
        u, g = owner(st.st_uid, st.st_gid)
        item = {"exists": True, "sha256": digest.hexdigest(), "mode": "%04o" % (st.st_mode & 0o7777),
                "owner": u, "group": g, "size": st.st_size}
    except FileNotFoundError:
        pass
    except OSError as exc:
        item = {"exists": False, "error": str(exc)}
    out["files"][path] = item
for path in req["stats"]:
    try:
        st = os.stat(path)
        out["stats"][path] = {"exists": True, "size": st.st_size, "mtime": int(st.st_mtime)}
    except OSError:
        out["stats"][path] = {"exists": False}
env = dict(os.environ, LC_ALL="C", PATH=os.environ.get("PATH", "") + ":/usr/sbin:/sbin:/usr/bin:/bin")
for name, cmd in req["commands"].items():
    try:
        p = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=req["timeout"], env=env)
        out["commands"][name] = {"rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr[-2000:]}
    except subprocess.TimeoutExpired:
        out["commands"][name] = {"rc": None, "stdout": "", "stderr": "timed out"}
for name, code in req.get("python", {}).items():  # inline snippets: no process of their own; they set `stdout`
    scope = {"subprocess": subprocess, "env": env, "timeout": req["timeout"]}
    try:
        exec(code, scope)
        out["commands"][name] = {"rc": 0, "stdout": scope.get("stdout", ""), "stderr": ""}
    except Exception as exc:
        out["commands"][name] = {"rc": 1, "stdout": "", "stderr": ("%s: %s" % (type(exc).__name__, exc))[-2000:]}
json.dump(out, sys.stdout)
'''

GATHER_COMMAND = "python3 -c " + "'" + REMOTE_SCRIPT.replace("'", "'\"'\"'") + "'"


@dataclass
class FactRequest:
    """What to gather on one node: files with content, files by hash only (secrets), stat-only paths, commands.

    `python`: stdlib-only snippets run inside the fact script itself (no process of their own); each sets the
    variable `stdout`, reported under `commands` like a shell command's output (rc 0, or 1 with the error).
    """

    files: list[str] = field(default_factory=list)
    hashes: list[str] = field(default_factory=list)
    stats: list[str] = field(default_factory=list)
    commands: dict[str, str] = field(default_factory=dict)
    services: list[str] = field(default_factory=list)  # whose state drivers need (one status command for all)
    secret: list[str] = field(default_factory=list)  # files of `files` whose content never comes back (sha256 only)
    python: dict[str, str] = field(default_factory=dict)
    max_bytes: int = 1 << 20
    timeout: int = 30

    def to_json(self) -> str:
        """The request as the remote script reads it on stdin."""
        return json.dumps(asdict(self), sort_keys=True)
