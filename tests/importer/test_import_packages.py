"""`reconciler import --packages`: patterns checked, the node-side snippet run by the real fact script against
real dpkg status files and a real rpm database, and the `packages:` document nodes fold into."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from reconciler.facts.gather import GATHER_COMMAND, FactRequest
from reconciler.importer import packages
from reconciler.importer.packages import Installed, NodePackages, PatternError, parse_patterns

REPO = Path(__file__).resolve().parents[2]

STATUS = """\
Package: hello
Status: install ok installed
Priority: optional
Architecture: amd64
Version: 2.10-3
Description: example package based on GNU hello
 Version: 9.9 (a continuation line is not a field)

Package: nvidia-driver-standin
Status: hold ok installed
Architecture: all
Version: 550.127.05-1

Package: nvidia-old
Status: deinstall ok config-files
Architecture: all
Version: 470.1-1

Package: nvidia-broken
Status: install reinstreq half-configured
Architecture: all
Version: 535.1-1

Package: libfoo
Status: install ok installed
Architecture: amd64
Multi-Arch: same
Version: 1.2-1

Package: libfoo
Status: install ok installed
Architecture: i386
Multi-Arch: same
Version: 1.2-1

Package: tzdata
Status: install ok installed
Architecture: all
Version: 2025b-0+deb12u1

Package: nvidia-fabricmanager-standin
Status: install ok triggers-pending
Architecture: all
Version: 550.127.05-1
"""


def gather(snippet: str) -> dict[str, object]:
    """The real remote fact script (run here with python3) answering a request with SNIPPET."""
    req = FactRequest(python={"packages": snippet})
    proc = subprocess.run(["sh", "-c", GATHER_COMMAND], input=req.encode(), capture_output=True, text=True,
                          check=True)
    answer: dict[str, object] = json.loads(proc.stdout)["commands"]["packages"]
    assert answer["rc"] == 0, answer
    return answer


def test_patterns_are_checked() -> None:
    assert parse_patterns("nvidia-*, slurm*,enroot*,tzdata,nvidia-*") == ["nvidia-*", "slurm*", "enroot*", "tzdata"]
    assert parse_patterns("lib[a-c]x?,g++,libstdc++6") == ["lib[a-c]x?", "g++", "libstdc++6"]
    for bad, words in (("", "no pattern given"), (" , ", "no pattern given"), ("a,,b", "empty pattern"),
                       ("nvidia driver", "'nvidia driver' is not a package name"),
                       ("../etc/passwd", "is not a package name"), ("x;rm -rf /", "is not a package name"),
                       ("lib[ab", "unclosed")):
        with pytest.raises(PatternError, match=words):
            parse_patterns(bad)


def test_dpkg_status_read_on_the_node(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text(STATUS)
    snippet = packages.snippet(["hello", "nvidia-*", "libfoo", "tz*"], dpkg_status=str(status))
    node = packages.parse(str(gather(snippet)["stdout"]))
    assert node.manager == "apt"
    assert node.packages == {"hello": Installed("2.10-3"), "nvidia-driver-standin": Installed("550.127.05-1", True),
                             "libfoo": Installed("1.2-1"), "tzdata": Installed("2025b-0+deb12u1")}
    # config-files is not installed (left out silently); half-configured is named, not adopted
    assert node.problems == [
        "nvidia-broken 535.1-1: dpkg state 'half-configured' (not fully installed), not adopted",
        "nvidia-fabricmanager-standin 550.127.05-1: dpkg state 'triggers-pending' (not fully installed), not adopted"]


def test_multiarch_copies_in_different_versions_are_not_adopted(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text(STATUS.replace("Architecture: i386\nMulti-Arch: same\nVersion: 1.2-1",
                                     "Architecture: i386\nMulti-Arch: same\nVersion: 1.3-1"))
    node = packages.parse(str(gather(packages.snippet(["libfoo"], dpkg_status=str(status)))["stdout"]))
    assert node.packages == {}
    assert node.problems == ["libfoo: installed in 2 versions (1.2-1, 1.3-1), not adopted "
                             "(packages: keeps one version of a name)"]


@pytest.mark.skipif(not Path("/var/lib/dpkg/status").is_file() or shutil.which("dpkg-query") is None,
                    reason="not a Debian host")
def test_this_hosts_dpkg_agrees_with_dpkg_query() -> None:
    """The snippet against this machine's real dpkg database gives what dpkg-query says."""
    node = packages.parse(str(gather(packages.snippet(["libc6", "tzdata", "python3*"]))["stdout"]))
    query = subprocess.run(["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Status}\n",
                            "libc6", "tzdata", "python3*"], capture_output=True, text=True, check=False).stdout
    expected = {name: version for name, version, state in (line.split("\t") for line in query.splitlines())
                if state == "installed"}
    assert {name: inst.version for name, inst in node.packages.items()} == expected
    assert "libc6" in expected


def _rpm(db: Path, spec_dir: Path, name: str, version: str, epoch: str | None = None) -> None:
    """Build a tiny noarch package with rpmbuild and register it in the rpm database DB (files not installed)."""
    spec = spec_dir / f"{name}-{version}.spec"
    spec.write_text(f"Name: {name}\nVersion: {version}\nRelease: 1\n" + (f"Epoch: {epoch}\n" if epoch else "")
                    + "Summary: test\nLicense: MIT\nBuildArch: noarch\n%description\ntest\n%files\n")
    top = spec_dir / "top"
    subprocess.run(["rpmbuild", "-bb", "--define", f"_topdir {top}", str(spec)], capture_output=True, check=True)
    [built] = (top / "RPMS" / "noarch").glob(f"{name}-{version}-1.noarch.rpm")
    subprocess.run(["rpm", "--dbpath", str(db), "-i", "--justdb", "--nodeps", str(built)], capture_output=True,
                   check=True)


@pytest.mark.skipif(shutil.which("rpmbuild") is None or shutil.which("rpm") is None, reason="no rpm/rpmbuild")
def test_rpm_database_and_versionlock(tmp_path: Path) -> None:
    """A real rpm database (packages built with rpmbuild): epoch kept, versionlock read, two versions refused."""
    db = tmp_path / "db"
    db.mkdir()
    _rpm(db, tmp_path, "nvidia-driver-standin", "570.86.15", epoch="2")
    _rpm(db, tmp_path, "slurm-standin", "22.05.8")
    _rpm(db, tmp_path, "kernel-standin", "6.1.1")
    _rpm(db, tmp_path, "kernel-standin", "6.1.2")  # installonly packages keep several versions
    _rpm(db, tmp_path, "other", "1.0")
    locks = tmp_path / "versionlock.list"
    locks.write_text("# Added lock\nnvidia-driver-standin-2:570.86.15-1.*\n!slurm-standin-0:22.05.8-1.*\n")
    snippet = packages.snippet(["nvidia-*", "slurm*", "kernel*"], dpkg_status=str(tmp_path / "absent"),
                               rpm=f"rpm --dbpath {db}", versionlock=str(locks))
    node = packages.parse(str(gather(snippet)["stdout"]))
    assert node.manager == "dnf"
    assert node.packages == {"nvidia-driver-standin": Installed("2:570.86.15-1", hold=True),
                             "slurm-standin": Installed("22.05.8-1", hold=False)}  # `!` excludes, it holds nothing
    assert node.problems == ["kernel-standin: installed in 2 versions (6.1.1-1, 6.1.2-1), not adopted "
                             "(packages: keeps one version of a name)"]


def test_a_node_without_dpkg_or_rpm(tmp_path: Path) -> None:
    snippet = packages.snippet(["x"], dpkg_status=str(tmp_path / "absent"), rpm=str(tmp_path / "no-rpm"))
    assert packages.parse(str(gather(snippet)["stdout"])).manager is None


def _dump(doc: object) -> str:
    yaml = YAML(typ="rt")
    yaml.indent(mapping=2, sequence=4, offset=2)
    out = StringIO()
    yaml.dump(doc, out)
    return out.getvalue()


def test_nodes_with_the_same_packages_share_an_entry() -> None:
    common = {"tzdata": Installed("2025b-0+deb12u1"), "nvidia-driver-standin": Installed("550.127.05-1", True)}
    answers = {f"gpu{i:02d}": NodePackages("apt", dict(common)) for i in range(1, 5)}
    answers["gpu03"] = NodePackages("apt", {**common, "hello": Installed("2.10-3")})
    answers["ctl"] = NodePackages("apt", {"tzdata": Installed("2025b-0+deb12u1")})
    answers["nfs1"] = NodePackages("apt", {})  # nothing matched there: no entry
    warnings: list[str] = []
    doc = packages.packages_doc(answers, ["tzdata", "nvidia-*", "hello*", "enroot*"], warnings)
    assert doc is not None
    entries = [(e["nodes"], dict(e["packages"])) for e in doc["packages"]]
    assert [nodes for nodes, _ in entries] == ["gpu[01-02,04]", "ctl", "gpu03"]
    assert entries[0][1]["tzdata"] == "2025b-0+deb12u1" and "hello" in entries[2][1]
    assert warnings == ["packages: no node has a package matching 'enroot*'"]
    text = _dump(doc)
    assert 'nvidia-driver-standin: {version: "550.127.05-1", hold: true}' in text
    assert 'tzdata: "2025b-0+deb12u1"' in text  # versions always quoted: 1.10 is not a float
    assert YAML(typ="safe").load(text)["packages"][0]["packages"]["nvidia-driver-standin"] == \
        {"version": "550.127.05-1", "hold": True}


def test_problems_and_unknown_managers_are_warnings() -> None:
    answers = {"gpu01": NodePackages(None, {}), "gpu02": NodePackages("apt", {}, ["x 1: dpkg state 'unpacked'"])}
    warnings: list[str] = []
    assert packages.packages_doc(answers, ["x"], warnings) is None
    assert warnings == ["gpu01: packages: neither dpkg nor rpm found, no packages adopted",
                        "gpu02: packages: x 1: dpkg state 'unpacked'",
                        "packages: no node has a package matching 'x'"]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The reconciler command line."""
    return subprocess.run([sys.executable, "-m", "reconciler.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=120)


@pytest.mark.parametrize(("value", "words"), [("nvidia driver", "is not a package name"), ("", "no pattern given"),
                                              ("a,,b", "empty pattern")])
def test_cli_refuses_a_bad_pattern_and_writes_nothing(tmp_path: Path, value: str, words: str) -> None:
    out = tmp_path / "out"
    result = cli("import", "ssh://ctl", "--out", str(out), "--packages", value)
    assert result.returncode == 1 and words in result.stderr, result.stderr
    assert not out.exists()


def test_cli_packages_need_an_ssh_source(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "slurm.conf").write_text("ClusterName=c\nSlurmctldHost=ctl\nNodeName=gpu01 CPUs=1\n")
    out = tmp_path / "out"
    result = cli("import", str(tmp_path / "etc"), "--config-dir", "/", "--out", str(out), "--packages", "tzdata")
    assert result.returncode == 1 and "must be an ssh:// URL" in result.stderr, result.stderr
    assert not out.exists()


def test_the_import_and_the_facts_read_dpkg_status_alike(tmp_path: Path) -> None:
    """One reader of dpkg's status file (reconciler/facts/packages.py, read_dpkg_status) for the import and the
    facts: on the same file (deb822 lets a field's value follow the colon without a space, and a continuation line
    start with a tab) they find the same installed versions and holds. Before, the facts' reader wanted ': ' and
    took a tab-continued line for a field, so `Version:2.1-1` was an uninstalled package to it, installed to the
    import's."""
    from reconciler.facts.packages import parse_dpkg_status

    text = STATUS + ("\nPackage: tight\nStatus: hold ok installed\nArchitecture: all\nVersion:2.1-1\n"
                     "Description: x\n\tStatus: deinstall ok config-files\n")
    status = tmp_path / "status"
    status.write_text(text)
    names = ["hello", "nvidia-driver-standin", "nvidia-old", "libfoo", "tzdata", "tight"]
    imported = packages.parse(str(gather(packages.snippet(names, dpkg_status=str(status)))["stdout"])).packages
    facts = parse_dpkg_status(text, set(names))
    assert {n: (i.version, i.held) for n, i in facts.items() if i.version is not None} == \
        {n: (i.version, i.hold) for n, i in imported.items()}
    assert imported["tight"] == Installed("2.1-1", True) and facts["tight"].version == "2.1-1"
