"""The remote file writer: atomic install (temp + fsync + rename) with backup, validation and rollback."""

from __future__ import annotations

import json

from reconciler.engine.fence import FENCE_DIR
from reconciler.engine.ops import REVEAL, WriteFile
from reconciler.facts.fence_script import FENCE_CHECK_SOURCE

BACKUP_SUFFIX = ".reconciler-bak"
TMP_MARK = ".reconciler-tmp."

# Runs on the node as `python3 -c ...`; stdin: JSON list of writes; stdout: JSON list of results.
REMOTE_SCRIPT = r'''
import base64, errno, glob, hashlib, json, os, pwd, grp, shutil, subprocess, sys, tempfile
BAK, TMP, FENCE_DIR = %(bak)r, %(tmp)r, %(fence)r
def fsync_dir(d):
    fd = os.open(d, os.O_RDONLY)
    try: os.fsync(fd)
    finally: os.close(fd)
def install(src_bytes, path, mode, owner, group):
    d, base = os.path.split(path)
    fd, tmp = tempfile.mkstemp(prefix="." + base + TMP, dir=d)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(src_bytes); fh.flush(); os.fsync(fh.fileno())
        if mode: os.chmod(tmp, int(mode, 8))
        if owner or group:
            os.chown(tmp, pwd.getpwnam(owner).pw_uid if owner else -1, grp.getgrnam(group).gr_gid if group else -1)
        return tmp
    except BaseException:
        os.unlink(tmp); raise
def run(cmd):
    p = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=300)
    return p.returncode, (p.stdout + p.stderr).strip()[-2000:]
def write(op):
    path = op["path"]; d, base = os.path.split(path)
    os.makedirs(d, exist_ok=True)
    for stale in glob.glob(os.path.join(d, "." + base + TMP + "*")):
        os.unlink(stale)  # left by a writer killed before its rename
    old = None
    if os.path.exists(path):
        with open(path, "rb") as fh: old = fh.read()
        old_mode = "%%o" %% (os.stat(path).st_mode & 0o7777)
        if op.get("expect_sha256") and hashlib.sha256(old).hexdigest() != op["expect_sha256"]:
            return {"ok": False, "error": "file changed on the node since facts were gathered; re-plan"}
    data = base64.b64decode(op["content"]) if op.get("encoding") == "base64" else op["content"].encode()
    tmp = install(data, path, op.get("mode"), op.get("owner"), op.get("group"))
    try:
        if op.get("validate_cmd"):
            rc, out = run(op["validate_cmd"].replace("%%s", tmp))
            if rc != 0:
                os.unlink(tmp)
                return {"ok": False, "error": "validation failed: " + out}
        if old is not None and op.get("backup", True):
            bak = install(old, path + BAK, old_mode, None, None)
            os.rename(bak, path + BAK)
        elif os.path.exists(path + BAK) and not op.get("backup", True):
            os.unlink(path + BAK)  # no copy of an old secret stays behind
        os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)  # the backup failed (a full disk): the new copy must not stay beside the old file
        raise
    fsync_dir(d)
    if op.get("after"):
        rc, out = run(op["after"])
        if rc != 0:
            if old is not None:
                back = install(old, path, old_mode, None, None)
                os.rename(back, path)
            else:
                os.unlink(path)
            fsync_dir(d); run(op["after"])
            return {"ok": False, "error": op["after"] + " rejected the new file (old one restored): " + out}
    return {"ok": True}
def journal(fence, op):
    import time
    fdir = fence.get("dir") or FENCE_DIR
    data = base64.b64decode(op["content"]) if op.get("encoding") == "base64" else op["content"].encode()
    line = json.dumps({"at": time.time(), "epoch": int(fence["epoch"]), "holder": fence.get("holder"),
                       "path": op["path"], "sha256": hashlib.sha256(data).hexdigest()})
    with open(os.path.join(fdir, "writes.log"), "a") as fh:
        fh.write(line + "\n"); fh.flush(); os.fsync(fh.fileno())
request = json.load(sys.stdin)
fence = request.get("fence") if isinstance(request, dict) else None
ops = request["writes"] if isinstance(request, dict) else request
refusal = None
if fence:
    held, refusal = fence_check(fence)
results = []
for op in ops:
    if refusal:
        results.append({"ok": False, "error": refusal}); continue
    try: results.append(write(op))
    except Exception as exc:
        code = errno.errorcode.get(getattr(exc, "errno", None) or 0)  # ENOSPC, EROFS, EACCES: what admins grep for
        named = " (%%s)" %% code if code else ""
        results.append({"ok": False, "error": "%%s: %%s%%s" %% (type(exc).__name__, exc, named)})
    if fence and results[-1].get("ok"):
        journal(fence, op)
json.dump(results, sys.stdout)
if fence: held.close()  # the fence lock, held through the writes (closed, not left to exit: no ResourceWarning)
''' % {"bak": BACKUP_SUFFIX, "tmp": TMP_MARK, "fence": FENCE_DIR}  # noqa: UP031

REMOTE_SCRIPT = REMOTE_SCRIPT.replace("\nrequest = json.load(sys.stdin)",
                                      FENCE_CHECK_SOURCE + "request = json.load(sys.stdin)", 1)
WRITE_COMMAND = "python3 -c " + "'" + REMOTE_SCRIPT.replace("'", "'\"'\"'") + "'"


def write_request(ops: list[WriteFile], fence: dict[str, object] | None = None) -> str:
    """The JSON the remote writer reads on stdin.

    FENCE (`{"epoch": N, "holder": NAME}`, optional `dir`): the node refuses every write of a request whose epoch is
    lower than the highest it has seen (a deposed leader), remembers a higher one, and journals each write it
    makes with its epoch (`writes.log`). Without it, writes are not fenced (a single daemon, the CLI).
    """
    writes = [op.model_dump(context={REVEAL: True}) for op in ops]
    return json.dumps({"fence": fence, "writes": writes} if fence is not None else writes)
