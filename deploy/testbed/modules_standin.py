"""STAND-IN for kernel modules on testbed compute nodes: a `modprobe` that "loads" made-up modules into /sys/module.

This host kernel loads no modules (no /proc/modules), and a node must never touch the host kernel anyway. So each
compute node gets a node-local tmpfs on /sys/module (node_init.py) and, in its own upper layer only (never on the
host), /usr/sbin/modprobe replaced by this stand-in. It knows the modules in MODULES, nothing else:

- `modprobe NAME [k=v ...]` creates /sys/module/<NAME, - as _>/{initstate,refcnt,parameters/*} from the module's
  defaults, then the `options NAME ...` lines of /etc/modprobe.d/*.conf, then the command line; an
  `install NAME CMD` line runs CMD instead (`/bin/false` fails, as with kmod); loaded already: nothing.
- `modprobe -r NAME` removes it; a refcnt above 0 refuses ("is in use"); not loaded: nothing.
- an unknown module: "modprobe: FATAL: Module x not found in directory /lib/modules/<release>", exit 1.

A bool parameter reads Y or N, as sysfs shows one. The module appears whole (built aside, then renamed).
"""

from __future__ import annotations

# sysfs name -> parameter -> (type, default). Made up: the names say they are stand-ins.
MODULES: dict[str, dict[str, tuple[str, str]]] = {
    "nvidia_standin": {"NVreg_EnableGpuFirmware": ("uint", "18"),
                       "NVreg_RestrictProfilingToAdminUsers": ("uint", "1"),
                       "NVreg_EnableStreamMemOPs": ("uint", "0")},
    "nvidia_drm_standin": {"modeset": ("bool", "N")},
    "ib_standin": {},
}

MODPROBE = "usr/sbin/modprobe"

SCRIPT = r'''#!/usr/bin/python3 -I
# STAND-IN for modprobe on a testbed node (deploy/testbed/modules_standin.py): "loads" made-up modules into
# this node's own tmpfs /sys/module. Not kmod; knows only the modules below.
import glob, os, shutil, subprocess, sys
MODULES = __MODULES__
DRIVER_FILES = __DRIVER_FILES__
SYS = "/sys/module"

def fail(msg, code=1):
    sys.stderr.write("modprobe: " + msg + "\n")
    sys.exit(code)

def norm(name):
    return name.replace("-", "_")

def config():
    options, install = {}, {}
    for path in sorted(glob.glob("/etc/modprobe.d/*.conf")):
        try:
            lines = open(path).read().splitlines()
        except OSError:
            continue
        for line in lines:
            words = line.split("#", 1)[0].split()
            if len(words) >= 2 and words[0] == "options":
                options.setdefault(norm(words[1]), []).extend(words[2:])
            elif len(words) >= 3 and words[0] == "install":
                install[norm(words[1])] = " ".join(words[2:])
    return options, install

def shown(kind, value):
    if kind == "bool":
        return "Y" if value in ("1", "y", "Y") else "N"
    return value

def load(name, args):
    mod = norm(name)
    if mod not in MODULES:
        fail("FATAL: Module %s not found in directory /lib/modules/%s" % (name, os.uname().release))
    if os.path.isdir(os.path.join(SYS, mod)):
        return
    options, install = config()
    if mod in install:
        rc = subprocess.call(["/bin/sh", "-c", install[mod]])
        if rc != 0:
            fail("ERROR: Error running install command '%s' for module %s: retcode %d" % (install[mod], mod, rc))
        return
    values = {key: default for key, (_, default) in MODULES[mod].items()}
    for word in options.get(mod, []) + args:
        key, _, value = word.partition("=")
        if key in values:  # an unknown parameter is ignored, as the kernel does (it logs a warning)
            values[key] = shown(MODULES[mod][key][0], value)
    tmp = os.path.join(SYS, "." + mod + ".loading")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "parameters"))
    for fname, text in (("initstate", "live"), ("refcnt", "0")):
        with open(os.path.join(tmp, fname), "w") as fh:
            fh.write(text + "\n")
    for key, value in values.items():
        with open(os.path.join(tmp, "parameters", key), "w") as fh:
            fh.write(value + "\n")
    if mod in DRIVER_FILES:  # a (re)load loads the driver stand-in installed now: nvidia-smi reports it
        src, dst = DRIVER_FILES[mod]
        shutil.rmtree(dst, ignore_errors=True)
        if os.path.isdir(src):
            shutil.copytree(src, dst)
    os.rename(tmp, os.path.join(SYS, mod))

def remove(name):
    mod = norm(name)
    path = os.path.join(SYS, mod)
    if not os.path.isdir(path):
        if mod not in MODULES:
            fail("FATAL: Module %s not found." % name)
        return
    try:
        used = int(open(os.path.join(path, "refcnt")).read().strip() or "0")
    except (OSError, ValueError):
        used = 0
    if used > 0:
        fail("FATAL: Module %s is in use." % mod)
    shutil.rmtree(path)

def main(argv):
    words = [a for a in argv if not a.startswith("-")]
    flags = [a for a in argv if a.startswith("-")]
    unknown = [f for f in flags if f not in ("-r", "--remove", "-q", "--quiet")]
    if unknown or not words:
        fail("stand-in: usage: modprobe [-r] [-q] MODULE [param=value ...]", 1)
    if "-r" in flags or "--remove" in flags:
        for name in words:
            remove(name)
    else:
        load(words[0], words[1:])

main(sys.argv[1:])
'''


def script() -> str:
    """The stand-in modprobe, with its module table."""
    from package_repo import DRIVER_INSTALLED, DRIVER_LOADED  # the driver stand-in's files (a sibling module)

    driver = {"nvidia_standin": (DRIVER_INSTALLED, DRIVER_LOADED)}
    return SCRIPT.replace("__MODULES__", repr(MODULES)).replace("__DRIVER_FILES__", repr(driver))


def files() -> dict[str, tuple[bytes, int]]:
    """Path in a node's upper layer -> (content, mode): the stand-in modprobe."""
    return {MODPROBE: (script().encode(), 0o755)}
