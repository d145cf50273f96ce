"""Value checks for everything the schema renders into a file or a command (issue 13).

Each check is a plain function that returns its (unchanged) argument or raises ValueError with a short
reason; the `Annotated` types below wrap them for pydantic, so a refusal carries the field's file:line:col.

The rules, and why:

- **No control or invisible characters, anywhere** (`no_control_chars`): C0/C1 controls (newline, CR, tab,
  NUL, ...), Unicode line/paragraph separators (Python's `splitlines` splits on them), format characters
  (bidi overrides: what a reviewer reads would not be what is written) and non-ASCII spaces. Only fields
  that are multi-line text by design (a patch's `content`, `match`, `replace`) may hold newlines and tabs.
- **Slurm values** (`slurm_value`, `slurm_key`, `check_slurm_mapping`): slurm.conf, gres.conf and
  cgroup.conf are read by Slurm's `s_p_parse_line` (src/common/parse_config.c), checked on the testbed with
  the real `slurmctld` and `scontrol show config` (Slurm 22.05):
  * `#` starts a comment even inside quotes (`Key="a#b"` reads back as `"a`); `\\#` reads back as `#`;
  * every `\\` escapes the next character (`x\\y` reads back as `xy`; `\\\\` as `\\`);
  * a value with spaces must be quoted (`Key="a b"` reads back as `a b`; unquoted, the rest of the line is
    parsed as more keys);
  * there is no way to put a `"` inside a quoted value (`"a\\"b"` reads back as `"a"b"`), and a value that
    starts with `"` is ambiguous.
  So: the renderer escapes `\\` and `#` with a backslash and quotes values holding spaces
  (`reconciler.render.common.slurm_value`); the schema refuses `"`, control characters and empty
  values (leave a key out instead of setting it to nothing). Keys are letters and digits, as Slurm's
  key grammar (`[[:alnum:]]+`).
- **Paths** (`clean_abs_path`): absolute and already normalised: no `..` or `.` component, no `//`, no
  trailing `/` (except `/` itself). The path a reviewer reads is the path that is written; nothing is
  normalised silently.
- **fstab** (`fstab_field`, `fstab_escape`): fields are separated by blanks; libmount decodes `\\ooo`
  octal escapes, so spaces, `\\` and `#` are written as `\\040`, `\\134`, `\\043`. Mount options are
  refused when they hold blanks, `,` (the separator of the joined list), `"`, `\\` or `#`.
- **Lustre** (`lustre_source`, `lustre_options`, mount.lustre(8)): the source is
  `MGSNID[,NID...][:MGSNID...]:/FSNAME[/SUBDIR]`, NIDs `ADDRESS@NET` with an IPv4 address on tcp/o2ib (the
  kernel reports mounts with addresses, so a host name would never match `/proc/mounts`), fsname 1-8
  letters, digits, `_`, `-`. Options come from a known list (generic mount(8) options, Lustre client
  options, `x-systemd.*`); an unknown one is refused with "did you mean"; `flock`/`localflock`/`noflock`
  (and `ro`/`rw`, ...) exclude each other; `_netdev` is required, not added: what the YAML says is what
  /etc/fstab gets.
- **exports(5)** (`export_client`, `export_option`, `exports_escape`): a client is a host name (with `*`/`?`
  wildcards), an `@netgroup`, an IPv4/IPv6 address or network (`/len` or `/mask`), or `*`; an option is
  one of nfs-utils' option names, with a value of the right shape where it takes one. Paths are written
  with the same octal escapes (nfs-utils' `xgettok` decodes them); `"` is refused (it toggles quoting).
- **enroot URIs** (`enroot_uri`): `docker://[USER@][REGISTRY#]IMAGE[:TAG|@sha256:DIGEST]`,
  `dockerd://IMAGE[:TAG]`, `podman://IMAGE[:TAG]` (enroot-import(1)), image names in the OCI
  reference grammar.
"""

from __future__ import annotations

import difflib
import ipaddress
import posixpath
import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator

T = TypeVar("T")

# Text fields that are multi-line by design: newlines and tabs allowed, other controls still refused.
MULTILINE_OK = "\n\t"
_INVISIBLE = {"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"}


def _describe(ch: str) -> str:
    name = unicodedata.name(ch, "")
    return f"U+{ord(ch):04X}" + (f" {name}" if name else "")


def no_control_chars(text: str, allow: str = "") -> str:
    """Refuse control, format and invisible characters (newline, tab, NUL, CR, bidi overrides, ...)."""
    for ch in text:
        if ch in allow or ch == " ":
            continue
        category = unicodedata.category(ch)
        if category in _INVISIBLE or (category == "Zs"):
            raise ValueError(f"control or invisible character {_describe(ch)} is not allowed here")
    return text


_DROP: dict[str, dict[int, None]] = {}


def _drop(keep: str) -> dict[int, None]:
    """The str.translate table that leaves out the characters of KEEP."""
    return _DROP.setdefault(keep, dict.fromkeys(map(ord, keep)))


def visible(text: str, keep: str = "\n\t") -> str:
    """TEXT for display: control, format and invisible characters (ESC, bidi overrides, line separators) shown
    as `\\x1b` / `\\u202e`, so text read from a node cannot drive a terminal or hide itself in a report."""
    if text.isascii() and (text.isprintable() or text.translate(_DROP.get(keep) or _drop(keep)).isprintable()):
        return text  # ASCII that prints once KEEP is left out has nothing to escape (a diff is multi-line)
    out = []
    for ch in text:
        if ch in keep or ch == " " or unicodedata.category(ch) not in _INVISIBLE:
            out.append(ch)
        else:
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
    return "".join(out)


def multiline_text(text: str) -> str:
    """Multi-line text (file content): newlines and tabs allowed, other control characters refused."""
    return no_control_chars(text, allow=MULTILINE_OK)


def check_strings(value: Any, allow: str = "") -> Any:
    """Check every string (and mapping key) inside VALUE with no_control_chars; return VALUE."""
    if isinstance(value, str):
        no_control_chars(value, allow)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            check_strings(key, allow)
            try:
                check_strings(item, allow)
            except ValueError as exc:
                raise ValueError(f"{key}: {exc}") from None
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            check_strings(item, allow)
    return value


# ---------------------------------------------------------------- Slurm

_SLURM_KEY = re.compile(r"[A-Za-z][A-Za-z0-9]*")


def slurm_key(key: str) -> str:
    """A slurm.conf/cgroup.conf key: letters and digits, starting with a letter."""
    if not _SLURM_KEY.fullmatch(key):
        raise ValueError(f"not a Slurm key: {key!r} (letters and digits only)")
    return key


def slurm_value(value: T) -> T:
    """A value Slurm reads back as the same single value once rendered (see the module docstring)."""
    if isinstance(value, bool | int | float) or value is None:
        return value
    text = str(value)
    no_control_chars(text)
    if text == "":
        raise ValueError("empty value: leave the key out instead")
    if '"' in text:
        raise ValueError('a Slurm value cannot hold a double quote (")')
    return value


def slurm_word(value: str, what: str = "value", extra: str = "") -> str:
    """A value that is one item of a Slurm list (features, GRES type, host): no blanks, ',' or quotes."""
    slurm_value(value)
    bad = set(' ,"') | set(extra)
    found = sorted(ch for ch in set(value) if ch in bad)
    if found:
        raise ValueError(f"{what} {value!r} cannot hold {' '.join(repr(c) for c in found)}")
    return value


def check_slurm_mapping(mapping: Mapping[str, T], reserved: Iterable[str] = ()) -> Mapping[str, T]:
    """Check the keys and values of a free-form Slurm parameter mapping; refuse RESERVED keys."""
    taken = {k.lower(): k for k in reserved}
    seen: dict[str, str] = {}
    for key, value in mapping.items():
        slurm_key(key)
        if key.lower() in taken:
            raise ValueError(f"{key} is set by its own schema key, not here")
        if key.lower() in seen:  # Slurm keys are case-insensitive
            raise ValueError(f"{key} and {seen[key.lower()]} are the same Slurm key")
        seen[key.lower()] = key
        try:
            slurm_value(value)
        except ValueError as exc:
            raise ValueError(f"{key}: {exc}") from None
    return mapping


def check_slurm_list(items: list[str], what: str = "item") -> list[str]:
    """Items joined with ',' into one Slurm value (e.g. Features): each one word."""
    for item in items:
        slurm_word(item, what)
    return items


# ---------------------------------------------------------------- paths


def clean_abs_path(path: str) -> str:
    """An absolute, normalised path: no `..`, `.`, `//` or trailing `/` (except `/` itself)."""
    no_control_chars(path)
    if not path.startswith("/"):
        raise ValueError(f"path must be absolute, got {path!r}")
    if path != "/" and (path.endswith("/") or "//" in path):
        raise ValueError(f"path must be normalised (no '//' or trailing '/'), got {path!r}")
    if any(part in (".", "..") for part in path.split("/")):
        raise ValueError(f"path must not hold '.' or '..' components, got {path!r}")
    assert posixpath.normpath(path) == path or path.startswith("//")
    return path


def slurm_path(path: str) -> str:
    """A clean absolute path that is also a Slurm value."""
    return slurm_value(clean_abs_path(path))


# ---------------------------------------------------------------- fstab


def _octal_escape(text: str, chars: str) -> str:
    return "".join(f"\\{ord(ch):03o}" if ch in chars else ch for ch in text)


def fstab_escape(field: str) -> str:
    """Write an fstab field: blanks, '\\' and '#' as libmount's octal escapes (\\040, \\134, \\043)."""
    return _octal_escape(field, " \\#")


def fstab_unescape(field: str) -> str:
    """Read an fstab or /proc/mounts field back: decode `\\ooo` octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def fstab_field(text: str) -> str:
    """A non-empty fstab field (source, mountpoint): no control characters; blanks are escaped when written."""
    no_control_chars(text)
    if not text:
        raise ValueError("empty fstab field")
    return text


def mount_option(option: str) -> str:
    """One mount option (`vers=4.2`, `noatime`): no blanks, ',', quotes, '\\' or '#'."""
    no_control_chars(option)
    if not re.fullmatch(r"[A-Za-z0-9_.:=/@+-]+", option):
        raise ValueError(f"not a mount option: {option!r} (letters, digits and _.:=/@+- only; one option per item)")
    return option


# ---------------------------------------------------------------- Lustre (mount.lustre(8))

# LNet network types of a NID (`ADDRESS@NET[N]`, libcfs nidstrings): tcp and o2ib carry an IPv4 address,
# the others a number.
_LNET_IP_NETS = ("tcp", "o2ib")
_LNET_NUM_NETS = ("lo", "gni", "ptlf", "kfi", "efa")
_LNET_NET = re.compile(rf"({'|'.join(_LNET_IP_NETS + _LNET_NUM_NETS)})(\d*)")
_LUSTRE_FSNAME = re.compile(r"[A-Za-z0-9_-]{1,8}")
LUSTRE_FLAGS = frozenset({
    # mount(8) and libmount generic options
    "defaults", "_netdev", "ro", "rw", "auto", "noauto", "nofail", "user", "nouser", "users", "owner", "group",
    "suid", "nosuid", "dev", "nodev", "exec", "noexec", "sync", "async", "dirsync", "atime", "noatime",
    "diratime", "nodiratime", "relatime", "norelatime", "strictatime", "nostrictatime", "lazytime", "nolazytime",
    "silent", "loud", "x-systemd.automount",
    # Lustre client options (mount.lustre(8))
    "flock", "localflock", "noflock", "user_xattr", "nouser_xattr", "acl", "noacl", "user_fid2path",
    "nouser_fid2path", "lazystatfs", "nolazystatfs", "always_ping", "encrypt", "noencrypt", "verbose",
    "noverbose", "32bitapi",
})
_LUSTRE_VALUED = {
    "retry": r"\d+",
    "mgssec": r"null|plain|gssnull|krb5n|krb5a|krb5i|krb5p|skn|ska|ski|skpi",
    "skpath": r"/[A-Za-z0-9_.@+/-]*",
    "exclude": r"[A-Za-z0-9_-]{1,8}-OST[0-9a-fA-F]{4}(:[A-Za-z0-9_-]{1,8}-OST[0-9a-fA-F]{4})*",
    "network": rf"({'|'.join(_LNET_IP_NETS + _LNET_NUM_NETS)})\d*",
    "x-systemd.requires": r"[A-Za-z0-9_.@:/-]+",
    "x-systemd.after": r"[A-Za-z0-9_.@:/-]+",
    "x-systemd.before": r"[A-Za-z0-9_.@:/-]+",
    "x-systemd.wanted-by": r"[A-Za-z0-9_.@:/-]+",
    "x-systemd.required-by": r"[A-Za-z0-9_.@:/-]+",
    "x-systemd.requires-mounts-for": r"/[A-Za-z0-9_.@/-]*",
    "x-systemd.mount-timeout": r"\d+(ms|s|min|h)?",
    "x-systemd.idle-timeout": r"\d+(ms|s|min|h)?",
    "x-systemd.device-timeout": r"\d+(ms|s|min|h)?",
}
# At most one option of each group: they contradict each other.
LUSTRE_EXCLUSIVE = (("flock", "localflock", "noflock"), ("ro", "rw"), ("user_xattr", "nouser_xattr"),
                    ("acl", "noacl"), ("lazystatfs", "nolazystatfs"), ("auto", "noauto"),
                    ("encrypt", "noencrypt"), ("verbose", "noverbose"), ("user_fid2path", "nouser_fid2path"))


def lustre_nid(nid: str) -> str:
    """One LNet NID: `10.0.0.5@tcp`, `10.1.1.1@o2ib1` (IPv4 on tcp/o2ib), `0@lo`, `42@gni`."""
    address, sep, net = nid.partition("@")
    match = _LNET_NET.fullmatch(net)
    if not sep or not address or match is None:
        raise ValueError(f"not an LNet NID: {nid!r} (ADDRESS@NET, e.g. 10.0.0.5@tcp or 10.1.1.1@o2ib)")
    if match.group(1) in _LNET_IP_NETS:
        try:
            ipaddress.IPv4Address(address)
        except ValueError:
            raise ValueError(f"NID {nid!r}: the address of a {match.group(1)} NID is an IPv4 address, as "
                             "`lctl list_nids` shows it (the kernel reports mounts that way)") from None
    elif not address.isdigit():
        raise ValueError(f"NID {nid!r}: the address of a {match.group(1)} NID is a number")
    return nid


def lustre_source(source: str) -> str:
    """A Lustre client source: `MGSNID[,NID...][:MGSNID[,NID...]...]:/FSNAME[/SUBDIR]` (mount.lustre(8))."""
    no_control_chars(source)
    mgs, sep, rest = source.partition(":/")
    if not sep or not mgs:
        raise ValueError(f"not a Lustre source: {source!r} (MGSNID[:MGSNID...]:/fsname, e.g. 10.0.0.5@tcp:/lustrefs)")
    for node in mgs.split(":"):
        if not node:
            raise ValueError(f"empty MGS NID in {source!r} (MGS nodes are separated by one ':')")
        for nid in node.split(","):
            lustre_nid(nid)
    fsname, _, subdir = rest.partition("/")
    if not _LUSTRE_FSNAME.fullmatch(fsname):
        raise ValueError(f"not a Lustre file system name: {fsname!r} (1-8 letters, digits, _ or -)")
    if subdir and (not re.fullmatch(r"[A-Za-z0-9_.@+/-]+", subdir) or subdir.endswith("/")
                   or any(part in ("", ".", "..") for part in subdir.split("/"))):
        raise ValueError(f"bad subdirectory {subdir!r} in Lustre source {source!r}")
    return source


def lustre_source_key(source: str) -> str:
    """A Lustre source as the kernel reports it: `@tcp0` is `@tcp`, `@o2ib0` is `@o2ib`; trailing '/' dropped."""
    return re.sub(r"@([a-z][a-z0-9]*[a-z])0(?=[,:])", r"@\1", source.rstrip("/"))


def lustre_options(options: list[str]) -> list[str]:
    """Lustre mount options: known ones only, `_netdev` present, no two of one exclusive group, no repeats."""
    seen: set[str] = set()
    for option in options:
        mount_option(option)
        name, sep, value = option.partition("=")
        if sep:
            pattern = _LUSTRE_VALUED.get(name)
            if pattern is not None and not re.fullmatch(pattern, value):
                raise ValueError(f"bad value for Lustre mount option {name}: {value!r}")
            known = pattern is not None
        else:
            known = option in LUSTRE_FLAGS
        if not known:
            names = sorted(LUSTRE_FLAGS | {f"{k}=" for k in _LUSTRE_VALUED})
            near = difflib.get_close_matches(option if not sep else f"{name}=", names, n=2, cutoff=0.6)
            hint = f" (did you mean {' or '.join(near)}?)" if near else ""
            raise ValueError(f"unknown Lustre mount option {option!r}{hint}")
        if name in seen:
            raise ValueError(f"Lustre mount option {name} given twice")
        seen.add(name)
    for group in LUSTRE_EXCLUSIVE:
        both = [o for o in group if o in seen]
        if len(both) > 1:
            raise ValueError(f"Lustre mount options {' and '.join(both)} exclude each other: keep one")
    if "_netdev" not in seen:
        raise ValueError("a lustre mount needs the _netdev option (the mount must wait for the network and "
                         "LNet; without it boot tries to mount before the network is up): add _netdev")
    return options


# ---------------------------------------------------------------- exports(5)

_HOST = re.compile(r"[A-Za-z0-9*?]([A-Za-z0-9*?.-]*[A-Za-z0-9*?])?")
_NETGROUP = re.compile(r"@[A-Za-z0-9_.-]+")
_NUM = r"\d+"
_EXPORT_FLAGS = {
    "secure", "insecure", "rw", "ro", "async", "sync", "wdelay", "no_wdelay", "nohide", "hide", "crossmnt",
    "nocrossmnt", "no_subtree_check", "subtree_check", "insecure_locks", "secure_locks", "no_auth_nlm",
    "auth_nlm", "mp", "mountpoint", "nordirplus", "pnfs", "no_pnfs", "security_label", "no_security_label",
    "root_squash", "no_root_squash", "all_squash", "no_all_squash", "acl", "no_acl", "async_locks",
}
_EXPORT_VALUED = {
    "fsid": r"\d+|root|[0-9A-Fa-f-]{8,}",
    "anonuid": _NUM, "anongid": _NUM,
    "sec": r"(sys|krb5|krb5i|krb5p|none)(:(sys|krb5|krb5i|krb5p|none))*",
    "mountpoint": r"/[^\s,()\"#\\]*", "mp": r"/[^\s,()\"#\\]*",
    "refer": r"/[^\s,()\"#\\@]*@[A-Za-z0-9.:+-]+", "replicas": r"/[^\s,()\"#\\@]*@[A-Za-z0-9.:+-]+",
    "xprtsec": r"(none|tls|mtls)(:(none|tls|mtls))*",
}


def export_client(client: str) -> str:
    """An exports(5) client: host (with * ? wildcards), @netgroup, IP address or network, or `*`."""
    no_control_chars(client)
    if client == "*" or _NETGROUP.fullmatch(client):
        return client
    try:
        ipaddress.ip_network(client, strict=False)
        return client
    except ValueError:
        pass
    if "/" in client:  # a network with a dotted mask: 10.0.0.0/255.255.255.0
        address, _, mask = client.partition("/")
        try:
            ipaddress.IPv4Network(f"{address}/{mask}", strict=False)
            return client
        except ValueError:
            raise ValueError(f"not an exports(5) network: {client!r}") from None
    if _HOST.fullmatch(client) and not re.fullmatch(r"[\d.]+", client):
        return client
    raise ValueError(f"not an exports(5) client: {client!r} (host, *.domain, @netgroup, address or network, or *)")


def export_option(option: str) -> str:
    """An exports(5) option: a known flag, or a known `name=value` with a value of the right shape."""
    no_control_chars(option)
    name, sep, value = option.partition("=")
    if not sep and name in _EXPORT_FLAGS:
        return option
    pattern = _EXPORT_VALUED.get(name)
    if sep and pattern is not None and re.fullmatch(pattern, value):
        return option
    if sep and pattern is not None:
        raise ValueError(f"bad value for export option {name}: {value!r}")
    raise ValueError(f"not an exports(5) option: {option!r}")


def exports_escape(path: str) -> str:
    """Write an /etc/exports path: blanks, '\\' and '#' as the octal escapes nfs-utils decodes."""
    return _octal_escape(path, " \\#")


def export_path(path: str) -> str:
    """An exported path: clean and absolute, without '"' (it toggles quoting in exports(5))."""
    clean_abs_path(path)
    if '"' in path:
        raise ValueError('an exported path cannot hold a double quote (")')
    return path


def is_wide_client(client: str) -> bool:
    """True for `*`, a wildcard matching every host, or a network of /16 or wider (/48 for IPv6)."""
    if client.strip("*?.") == "":
        return True
    try:
        network = ipaddress.ip_network(client, strict=False)
    except ValueError:
        if "/" in client:
            address, _, mask = client.partition("/")
            try:
                network = ipaddress.IPv4Network(f"{address}/{mask}", strict=False)
            except ValueError:
                return False
        else:
            return False
    return network.prefixlen <= (16 if network.version == 4 else 48)


def is_world_client(client: str) -> bool:
    """True for `*` (or only wildcards) and the all-addresses networks 0.0.0.0/0 and ::/0."""
    if client.strip("*?.") == "":
        return True
    try:
        return ipaddress.ip_network(client, strict=False).prefixlen == 0
    except ValueError:
        return False


# ---------------------------------------------------------------- enroot, names

_OCI_NAME = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
_OCI_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"sha256:[0-9a-f]{64}"
_ENROOT_URI = re.compile(
    rf"docker://(?:[A-Za-z0-9._-]+@)?(?:[A-Za-z0-9.-]+(?::\d{{1,5}})?#)?{_OCI_NAME}(?::{_OCI_TAG})?(?:@{_DIGEST})?"
    rf"|(?:dockerd|podman)://{_OCI_NAME}(?::{_OCI_TAG})?"
)


def enroot_uri(uri: str) -> str:
    """An enroot import URI: docker://[USER@][REGISTRY#]IMAGE[:TAG], dockerd://IMAGE[:TAG], podman://IMAGE[:TAG]."""
    no_control_chars(uri)
    if not _ENROOT_URI.fullmatch(uri):
        raise ValueError(f"not an enroot URI: {uri!r} (docker://[USER@][REGISTRY#]IMAGE[:TAG], "
                         "dockerd://IMAGE[:TAG] or podman://IMAGE[:TAG])")
    return uri


def name_token(value: str) -> str:
    """A name used in commands and files: letters, digits and _.@:+- (a user, a service, a node)."""
    no_control_chars(value)
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.@:+-]*", value):
        raise ValueError(f"not a plain name: {value!r} (letters, digits and _.@:+- only)")
    return value


# ---------------------------------------------------------------- pydantic types

Text = Annotated[str, AfterValidator(no_control_chars)]
MultilineText = Annotated[str, AfterValidator(multiline_text)]
SlurmStr = Annotated[str, AfterValidator(slurm_value)]
SlurmWord = Annotated[str, AfterValidator(lambda v: slurm_word(v))]
GresWord = Annotated[str, AfterValidator(lambda v: slurm_word(v, "GRES name", ":"))]
SlurmPath = Annotated[str, AfterValidator(slurm_path)]
CleanPath = Annotated[str, AfterValidator(clean_abs_path)]
FstabField = Annotated[str, AfterValidator(fstab_field)]
MountOption = Annotated[str, AfterValidator(mount_option)]
ExportClient = Annotated[str, AfterValidator(export_client)]
ExportOption = Annotated[str, AfterValidator(export_option)]
ExportPath = Annotated[str, AfterValidator(export_path)]
EnrootUri = Annotated[str, AfterValidator(enroot_uri)]
NameToken = Annotated[str, AfterValidator(name_token)]
