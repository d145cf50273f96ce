"""Production's section of the shared PR comment says what a merged commit meets on its way there: the promotion
rule (after, soak, approval, windows), a hold standing on its daemon, the last hotfix. The lines come from the
production daemon's real SQLite store (written by the real `reconciler promote` path) and the repository's
promotion.yaml; the comment goes through the real report path to each forge's stand-in (tests/forge/stands.py)."""

from __future__ import annotations

from pathlib import Path

import structlog

from reconciler.daemon.promotion_http import CLUSTER_KEY
from reconciler.daemon.promotion_operator import give, request
from reconciler.daemon.promotion_view import load, pr_lines
from reconciler.daemon.store import Store
from reconciler.desired.promotion import read_promotion
from reconciler.forge.base import Forge
from reconciler.forge.pr_plan import report_pull_requests
from reconciler.forge.pr_sections import parse_sections
from tests.forge.conftest import Origin, converged_facts
from tests.forge.stands import Stand
from tests.forge.test_pr_clusters import BASE_CHANGE, FLEET, base_of, body_of, fleet, forge, open_pr, stand  # noqa: F401

PROMOTION = ("promotion:\n  prod: {after: staging, soak: 30m, approval: required,\n"
             "         windows: [{days: mon-fri, start: '09:00', end: '17:00', timezone: Europe/Berlin}]}\n")


def test_prods_section_carries_its_promotion_rule_and_its_hold(fleet: Origin, stand: Stand,  # noqa: F811
                                                               forge: Forge, tmp_path: Path) -> None:  # noqa: F811
    fleet.write(f"{FLEET}/promotion.yaml", PROMOTION)
    fleet.commit("promotion")
    fleet.push_main()
    store = Store(tmp_path / "prod.db")
    store.set(CLUSTER_KEY, "prod")
    give(store.path, request("hold", None, "alice@login1", "change freeze <b>until</b> `Monday`"), "prod")
    base = base_of(fleet, "prod")
    rule = read_promotion(Path(fleet.daemon.working_dir) / FLEET).get("prod")
    lines = pr_lines(load(store), rule)
    sha = open_pr(fleet, stand, 3, BASE_CHANGE)
    report_pull_requests(fleet.daemon, FLEET, forge, converged_facts(base), base, store.conn, [],
                         structlog.get_logger(), cluster="prod", promotion=lines)
    section = parse_sections(body_of(stand, 3))["prod"]
    assert section.head == sha
    assert ("**Promotion**: once merged, `prod` applies it after `staging` applied it and stayed healthy for "
            "30m, and only once approved (`reconciler promote approve COMMIT --cluster prod`); only inside its "
            "promotion windows (now ") in section.text
    assert ("**Held**: nothing merged reaches `prod` until `reconciler promote release` (manual, alice@login1 at "
            in section.text)
    # the operator's words are shown, never interpreted: no HTML, no code span of theirs
    assert "change freeze &lt;b&gt;until&lt;/b&gt; 'Monday'" in section.text
    # released: the section is written again (the promotion's state is part of what it was planned for)
    give(store.path, request("release", None, "alice@login1", ""), "prod")
    report_pull_requests(fleet.daemon, FLEET, forge, converged_facts(base), base, store.conn, [],
                         structlog.get_logger(), cluster="prod", promotion=pr_lines(load(store), rule))
    again = parse_sections(body_of(stand, 3))["prod"]
    assert "**Held**" not in again.text and "**Promotion**: once merged" in again.text
    store.close()
