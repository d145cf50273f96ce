"""A pull request's plan never decrypts: its .age files are compared by ciphertext with the main branch's.

End to end through the fake GitHub, on a real Git origin, with pyrage.decrypt replaced by a function that fails
(the PR is planned in a forked child under limits, as in the daemon: a call would make its status "error").
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import structlog

from reconciler.desired.agesecrets import encrypt, load_identities, unlock
from reconciler.facts.models import FileFact
from reconciler.forge.github import GitHubForge
from reconciler.forge.pr_git import export_tree
from reconciler.forge.pr_plan import report_pull_requests
from tests.desired.secrets.conftest import SENTINEL, Key
from tests.desired.secrets.test_age_plan import no_decrypt
from tests.forge.conftest import SUBDIR, Origin, converged_facts
from tests.forge.fake_github import FakeGitHub

PATH = "/etc/reconciler-test/db.conf"
AGE = f"{SUBDIR}/secrets/db.conf.age"
FILES = f"""\
files:
  - {{path: {PATH}, nodes: gpu01, source: secrets/db.conf.age, mode: "0600"}}
"""


def _main_with_secret(origin: Origin, key: Key) -> None:
    origin.write(f"{SUBDIR}/secrets.yaml", f"secrets:\n  recipients: [{key.recipient}]\n")
    origin.write(f"{SUBDIR}/files.yaml", FILES)
    (origin.work / AGE).parent.mkdir(parents=True, exist_ok=True)
    (origin.work / AGE).write_bytes(encrypt(f"pass={SENTINEL}-main\n".encode(), [key.recipient]))
    origin.commit("a secret from Git")
    origin.push_main()


def _open(origin: Origin, fake: FakeGitHub, number: int, secret: str | None, other: bool = False,
          key: Key | None = None) -> str:
    origin.branch(f"pr-{number}")
    if secret is not None and key is not None:
        (origin.work / AGE).write_bytes(encrypt(secret.encode(), [key.recipient]))
    if other:
        origin.write(f"{SUBDIR}/files.yaml", FILES.replace('mode: "0600"', 'mode: "0640"'))
    sha = origin.commit(f"PR {number}")
    origin.push_pr(number, sha)
    fake.add_pull(number, sha, head_ref=f"pr-{number}", title=f"PR {number}")
    return sha


def test_pr_plans_compare_ciphertexts_and_never_decrypt(origin: Origin, fake: FakeGitHub,
                                                        forge: GitHubForge, key: Key,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    _main_with_secret(origin, key)
    base = origin.base()
    unlock(base, load_identities(key.identity), str(key.identity))  # the daemon decrypts main, with its identity
    facts = converged_facts(base)
    main_text = f"pass={SENTINEL}-main\n"
    facts.nodes["gpu01"].files[PATH] = FileFact(exists=True, sha256=hashlib.sha256(main_text.encode()).hexdigest(),
                                                mode="0600", owner="root", group="root")
    _open(origin, fake, 1, f"pass={SENTINEL}-new\n", key=key)  # new content
    _open(origin, fake, 2, None, other=True)  # same ciphertext, other mode
    no_decrypt(monkeypatch)
    results = report_pull_requests(origin.daemon, SUBDIR, forge, facts, base, None, [], structlog.get_logger())
    assert [r.status for r in results] == ["created", "created"], [r.error for r in results]
    changed = fake.comments_on(1)[0]["body"]
    assert "secret changed in this pull request" in changed and "not decrypted here" in changed
    assert "-<age ciphertext sha256:" in changed and "+<age ciphertext sha256:" in changed  # in the diff fence
    assert "**Verdict: 1 change(s) on 1 node(s)" in changed
    same = fake.comments_on(2)[0]["body"]
    assert "update /etc/reconciler-test/db.conf (secret unchanged by this pull request; mode 0600 -&gt; 0640)" in same
    for body in (changed, same):
        assert SENTINEL not in body


def test_export_tree_carries_age_files_as_ciphertext(origin: Origin, key: Key, tmp_path: Path) -> None:
    _main_with_secret(origin, key)
    repo = origin.daemon
    out = export_tree(repo, repo.head.commit.hexsha, SUBDIR, tmp_path / "out")
    assert (out / "secrets" / "db.conf.age").read_bytes() == (origin.work / AGE).read_bytes()
