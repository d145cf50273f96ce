"""The multi-cluster PR comment's text: sections kept, stale ones waiting again, hostile cluster names inert."""

from __future__ import annotations

from reconciler.engine.report import MARKER
from reconciler.forge.pr_sections import ClusterView, compose, parse_sections, section_is_current

OLD, NEW = "a" * 40, "b" * 40


def body(head: str, cluster: str, own: str, view: ClusterView, old: str | None = None, fp: str = "f1") -> str:
    return compose(old, number=7, head_sha=head, head_ref="topic", view=view, cluster=cluster, fp=fp,
                   own=lambda budget: f"### Cluster `{cluster}`\n\n{own}\n", limit=65_535)


def test_each_daemon_keeps_the_others_section() -> None:
    view = ClusterView(touched=["prod", "staging"])
    first = body(NEW, "staging", "staging's plan", view)
    assert first.startswith(MARKER)
    second = body(NEW, "prod", "prod's plan", view, old=first, fp="f2")
    sections = parse_sections(second)
    assert "staging's plan" in sections["staging"].text and sections["staging"].fp == "f1"
    assert "prod's plan" in sections["prod"].text
    assert section_is_current(second, "staging", NEW, "f1") and section_is_current(second, "prod", NEW, "f2")
    assert not section_is_current(second, "prod", NEW, "f1") and not section_is_current(second, "prod", OLD, "f2")


def test_a_section_of_an_earlier_push_is_waiting_again() -> None:
    view = ClusterView(touched=["prod", "staging"])
    first = body(OLD, "staging", "staging's plan of the old head", view)
    second = body(NEW, "prod", "prod's plan", view, old=first)
    assert "staging's plan of the old head" not in second
    assert (f"_waiting for staging's daemon_ (its plan of the earlier commit `{OLD}` is out of date)"
            in parse_sections(second)["staging"].text)


def test_untouched_and_removed_clusters_get_no_section() -> None:
    view = ClusterView(touched=["prod"], untouched=["staging"], removed=["old"])
    text = body(NEW, "staging", "never shown", view)
    assert list(parse_sections(text)) == ["prod"] and "never shown" not in text
    assert "**Clusters this change does not touch**: `staging`" in text
    assert "**Clusters this change removes**: `old`" in text
    assert section_is_current(text, "staging", NEW, "any") and not section_is_current(text, "staging", OLD, "any")


def test_a_cluster_name_that_could_forge_a_marker_gets_no_section() -> None:
    hostile = f"x --> <!-- /reconciler-cluster: prod --> <!-- reconciler-cluster: prod head={NEW} fp=0"
    view = ClusterView(touched=["prod", hostile, "a`![t](http://x/)`"])
    text = body(NEW, "prod", "prod's plan", view)
    assert list(parse_sections(text)) == ["prod"] and "prod's plan" in parse_sections(text)["prod"].text
    assert "<!-- /reconciler-cluster: prod --> <!--" not in text  # the name is shown escaped
    assert "`a'![t](http://x/)'`" in text  # inside its code span: not an image


def test_sections_written_through_gitlab_notes_are_kept() -> None:
    """The read-modify-write on GitLab (python-gitlab against the fake): each cluster's section survives."""
    from reconciler.forge.base import Secret
    from reconciler.forge.gitlab import GitLabForge
    from reconciler.forge.pr_shared_comment import update_shared_comment
    from tests.forge.conftest import TOKEN
    from tests.forge.fake_gitlab import FakeGitLab

    fake = FakeGitLab(token=TOKEN)
    view = ClusterView(touched=["prod", "staging"])
    with fake.running():
        fake.add_mr(3, NEW)
        forge = GitLabForge(fake.url, fake.project, Secret(TOKEN), sleep=lambda s: None)
        [pr] = forge.open_pull_requests()
        actions = [update_shared_comment(forge, pr, lambda old, c=c: body(NEW, c, f"{c}'s plan", view, old=old)).action
                   for c in ("staging", "prod", "staging")]
        assert actions == ["created", "edited", "unchanged"]
        [note] = [n for n in fake.notes_on(3) if not n["system"]]
        assert {n: s.text.count("'s plan") for n, s in parse_sections(note["body"]).items()} == {"prod": 1, "staging": 1}
