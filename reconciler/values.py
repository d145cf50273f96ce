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
- **exports(5)** (`export_client`, `export_option`, `exports_escape`): a client is a host name (with `*`/`?`
  wildcards), an `@netgroup`, an IPv4/IPv6 address or network (`/len` or `/mask`), or `*`; an option is
  one of nfs-utils' option names, with a value of the right shape where it takes one. Paths are written
  with the same octal escapes (nfs-utils' `xgettok` decodes them); `"` is refused (it toggles quoting).
- **enroot URIs** (`enroot_uri`): `docker://[USER@][REGISTRY#]IMAGE[:TAG|@sha256:DIGEST]`,
  `dockerd://IMAGE[:TAG]`, `podman://IMAGE[:TAG]` (enroot-import(1)), image names in the OCI
  reference grammar.
"""

from __future__ import annotations

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
