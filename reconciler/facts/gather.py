"""The remote fact-gathering script (python3, stdlib only) and the request it answers."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from reconciler.facts.fence_script import FENCE_CHECK_SOURCE

# Runs on the node with the system python3 (3.8 or later), stdlib only, started as `python3 -I -S -c SCRIPT`: -I
# ignores PYTHON* variables and the user's site dir, -S skips site-packages. The interpreter start dominates a
# gather, so the script imports almost nothing: no json (answers are written by `enc`, requests are Python
# literals), no subprocess (commands are posix_spawn'ed), sha256 from the built-in module rather than OpenSSL.
# The request is a Python literal (`FactRequest.encode()`, ASCII only) read with eval() and no builtins: it comes
# over the same authenticated root channel as the command line itself, so it is no less trusted than the script.
#
# One-shot (`plan`, `apply`): read one request on stdin, print one JSON document.
# Agent (`... -c SCRIPT agent`, the daemon's persistent sessions): answer one request per line, one JSON line
# each, until stdin closes; no interpreter start per cycle.
SCRIPT_FUNCTIONS = r"""
import os, sys, time, pwd, grp, select
try:
    from _sha256 import sha256
except ImportError:
    try:
        from _sha2 import sha256
    except ImportError:
        from hashlib import sha256
ESC = {i: "\\u%04x" % i for i in range(32)}
ESC.update({34: '\\"', 92: "\\\\", 127: "\\u007f"})
def enc(o):
    if o is None: return "null"
    if o is True: return "true"
    if o is False: return "false"
    t = type(o)
    if t is str: return '"' + o.translate(ESC) + '"'
    if t is int: return str(o)
    if t is dict: return "{" + ",".join(enc(str(k)) + ":" + enc(v) for k, v in o.items()) + "}"
    if t is list or t is tuple: return "[" + ",".join([enc(v) for v in o]) + "]"
    return enc(str(o))
def owner(uid, gid):
    try: u = pwd.getpwuid(uid).pw_name
    except KeyError: u = str(uid)
    try: g = grp.getgrgid(gid).gr_name
    except KeyError: g = str(gid)
    return u, g
def spawn(cmd, timeout, env):
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    try:
        pid = os.posix_spawn("/bin/sh", ["sh", "-c", cmd], env, setsid=True, file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, w1, 1), (os.POSIX_SPAWN_DUP2, w2, 2)])
    except BaseException:
        os.close(r1); os.close(r2)
        raise
    finally:
        os.close(w1); os.close(w2)
    chunks = {r1: [], r2: []}
    poller = select.poll()
    poller.register(r1, select.POLLIN); poller.register(r2, select.POLLIN)
    deadline, left, status = time.monotonic() + timeout, 2, None
    try:
        while time.monotonic() < deadline:
            if left:
                for fd, _ in poller.poll(max(1, int((deadline - time.monotonic()) * 1000))):
                    data = os.read(fd, 65536)
                    if data: chunks[fd].append(data)
                    else: poller.unregister(fd); left -= 1
                continue
            done, code = os.waitpid(pid, os.WNOHANG)
            if done:
                status = code
                break
            time.sleep(0.001)
    finally:
        if status is None:
            try: os.killpg(pid, 9)
            except OSError: pass
            os.waitpid(pid, 0)
        os.close(r1); os.close(r2)
    out = b"".join(chunks[r1]).decode("utf-8", "replace")
    err = b"".join(chunks[r2]).decode("utf-8", "replace")
    if status is None: return None, out, "timed out"
    return (os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)), out, err
def run(cmd, timeout, env):
    try:
        return spawn(cmd, timeout, env)
    except (AttributeError, TypeError, NotImplementedError):  # no posix_spawn/setsid here: the subprocess way
        import subprocess
        try:
            p = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=timeout, env=env,
                               stdin=subprocess.DEVNULL, start_new_session=True)
            return p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired:
            return None, "", "timed out"
def stat_item(st, digest):
    u, g = owner(st.st_uid, st.st_gid)
    return {"exists": True, "sha256": digest, "mode": "%04o" % (st.st_mode & 0o7777),
            "owner": u, "group": g, "size": st.st_size}
CODE = {}
def gather(req):
    out = {"hostname": os.uname().nodename, "files": {}, "stats": {}, "commands": {}}
    if "id" in req: out["id"] = req["id"]
    secret = req.get("secret", ())
    globs = req.get("globs")
    if globs:  # pattern -> "files" (read like `files`) or "stats"; only `reconciler import` asks
        import glob
        out["globs"] = {}
        for pattern, kind in globs.items():
            found = sorted(p for p in glob.glob(pattern) if os.path.isfile(p))
            out["globs"][pattern] = found
            target = req["files"] if kind == "files" else req["stats"]
            target += [p for p in found if p not in target]
    for path in req["files"]:
        item = {"exists": False}
        try:
            st = os.stat(path)
            with open(path, "rb") as fh: data = fh.read(req["max_bytes"] + 1)
            item = stat_item(st, sha256(data).hexdigest())
            if len(data) <= req["max_bytes"] and path not in secret:
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
            digest = sha256()
            with open(path, "rb") as fh:
                for block in iter(lambda: fh.read(65536), b""): digest.update(block)
            item = stat_item(st, digest.hexdigest())
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
            rc, so, se = run(cmd, req["timeout"], env)
        except OSError as exc:
            rc, so, se = 127, "", str(exc)
        out["commands"][name] = {"rc": rc, "stdout": so, "stderr": se[-2000:]}
    for name, code in req.get("python", {}).items():  # inline snippets: no process of their own; they set `stdout`
        scope = {"run": run, "env": env, "timeout": req["timeout"]}
        try:
            if code not in CODE: CODE[code] = compile(code, "<" + name + ">", "exec")
            exec(CODE[code], scope)
            out["commands"][name] = {"rc": 0, "stdout": scope.get("stdout", ""), "stderr": ""}
        except Exception as exc:
            out["commands"][name] = {"rc": 1, "stdout": "", "stderr": ("%s: %s" % (type(exc).__name__, exc))[-2000:]}
    return out
def answer(text):
    try:
        req = eval(text, {"__builtins__": {}})
        refusal = None
        if req.get("fence"):  # a leader of a pair asks: remember its epoch, refuse an older one
            lock, refusal = fence_check(req["fence"])
            lock.close()
        body = enc({"error": refusal} if refusal else gather(req))
    except Exception as exc:
        body = enc({"error": "%s: %s" % (type(exc).__name__, exc)})
    return body.encode("utf-8", "backslashreplace")
"""
SCRIPT_MAIN = r"""
if sys.argv[1:] == ["agent"]:
    for line in iter(sys.stdin.buffer.readline, b""):
        sys.stdout.buffer.write(answer(line.decode("utf-8", "replace")) + b"\n")
        sys.stdout.buffer.flush()
else:
    sys.stdout.buffer.write(answer(sys.stdin.buffer.read().decode("utf-8", "replace")))
"""

REMOTE_SCRIPT = SCRIPT_FUNCTIONS + FENCE_CHECK_SOURCE + SCRIPT_MAIN
_QUOTED = "'" + REMOTE_SCRIPT.replace("'", "'\"'\"'") + "'"
GATHER_COMMAND = "python3 -I -S -c " + _QUOTED
AGENT_COMMAND = GATHER_COMMAND + " agent"


@dataclass
class FactRequest:
    """What to gather on one node: files with content, files by hash only (secrets), stat-only paths, commands.

    `python`: stdlib-only snippets run inside the fact script itself (no process of their own); each sets the
    variable `stdout`, reported under `commands` like a shell command's output (rc 0, or 1 with the error).
    `globs`: shell patterns expanded on the node (regular files only); the answer's `globs` lists each one's
    matches, which are gathered as `files` or `stats` as the pattern asks.
    """

    files: list[str] = field(default_factory=list)
    hashes: list[str] = field(default_factory=list)
    stats: list[str] = field(default_factory=list)
    commands: dict[str, str] = field(default_factory=dict)
    services: list[str] = field(default_factory=list)  # whose state drivers need (one status command for all)
    secret: list[str] = field(default_factory=list)  # files of `files` whose content never comes back (sha256 only)
    python: dict[str, str] = field(default_factory=dict)
    globs: dict[str, str] = field(default_factory=dict)  # pattern -> "files" | "stats": matches gathered as such
    max_bytes: int = 1 << 20
    timeout: int = 30

    def encode(self, request_id: int | None = None) -> str:
        """The request as the remote script reads it: a Python literal, ASCII only, on one line."""
        data = asdict(self)
        if request_id is not None:
            data["id"] = request_id
        return ascii(data)
