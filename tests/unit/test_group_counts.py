"""The cache's per-group member counts (``ClusterCache.group_count``/``group_member``): right after
every change to what is stored for a pod, assumes, forgets and expiries included, and always equal
to what reading the group's pods (``pods_labelled``) gives."""

from __future__ import annotations

from typing import Callable

from builders import GPU, make_node, make_pod

from extender.cache.cache import ClusterCache
from extender.framework.clock import FakeClock
from extender.framework.pod_group import GROUP_LABEL, MemberState
from extender.framework.views import PodInfo

TTL = 30.0


def member(name: str, group: str = "a", node: str | None = None, phase: str | None = None) -> dict:
    b = make_pod(name).uid(f"u-{name}").req(gpu=1).labels(**{GROUP_LABEL: group})
    if node:
        b = b.node(node)
    pod = b.obj()
    if phase:
        pod["status"]["phase"] = phase
    return pod


def counted(cache: ClusterCache, group: str) -> tuple[int, int, int]:
    c = cache.group_count("default", group)
    return c.members, c.assigned, c.bound


def read(cache: ClusterCache, group: str) -> tuple[int, int, int]:
    """The same counts from the group's pods as ``find_pods`` reads them."""
    pods = cache.pods_labelled("default", GROUP_LABEL, group)
    return (len(pods), sum(1 for p in pods if p.node_name),
            sum(1 for p in pods if (p.raw.get("spec") or {}).get("nodeName")))


def info(name: str, group: str = "a") -> PodInfo:
    return PodInfo.from_pod(member(name, group), [GPU])


Step = tuple[str, Callable[[ClusterCache, FakeClock], object], tuple[int, int, int], tuple[int, int, int], bool]


STEPS: list[Step] = [
    # what, action, group a (members, assigned, bound), group b, did a member of a leave
    ("pending members arrive", lambda c, k: [c.upsert_pod(member(f"m{i}")) for i in range(3)],
     (3, 0, 0), (0, 0, 0), False),
    ("assumed at bind", lambda c, k: c.assume(info("m0"), "n1"), (3, 1, 0), (0, 0, 0), False),
    ("the watch confirms the bind", lambda c, k: c.upsert_pod(member("m0", node="n1")), (3, 1, 1), (0, 0, 0), False),
    ("another assumed, then forgotten: pending again", lambda c, k: (c.assume(info("m1"), "n2"), c.forget("u-m1")),
     (3, 1, 1), (0, 0, 0), False),
    ("assumed, binding finished, never confirmed: expires", lambda c, k: (
        c.assume(info("m2"), "n1"), c.finish_binding("u-m2"), k.advance(TTL + 1), c.cleanup_expired()),
     (3, 1, 1), (0, 0, 0), False),
    ("relabelled into another group", lambda c, k: c.upsert_pod(member("m1", "b")), (2, 1, 1), (1, 0, 0), True),
    ("an unknown pod assumed at bind, then forgotten: nothing else is stored for it",
     lambda c, k: (c.assume(info("x"), "n2"), c.forget("u-x")), (2, 1, 1), (1, 0, 0), True),
    ("a bound member finishes", lambda c, k: c.upsert_pod(member("m0", node="n1", phase="Succeeded")),
     (1, 0, 0), (1, 0, 0), True),
    ("deleted", lambda c, k: c.remove_pod(member("m2")), (0, 0, 0), (1, 0, 0), True),
    ("the group comes back after it was empty", lambda c, k: c.upsert_pod(member("m9", node="n2")),
     (1, 1, 1), (1, 0, 0), False),
]


def test_group_counts_follow_every_change() -> None:
    clock = FakeClock()
    cache = ClusterCache([GPU], clock, assumed_ttl=TTL)
    for node in ("n1", "n2"):
        cache.upsert_node(make_node(node).alloc(gpu=8).obj())
    for what, act, want_a, want_b, left in STEPS:
        before = cache.group_count("default", "a").left
        act(cache, clock)
        assert (counted(cache, "a"), counted(cache, "b")) == (want_a, want_b), what
        assert (read(cache, "a"), read(cache, "b")) == (want_a, want_b), what
        assert (cache.group_count("default", "a").left != before) is left, what


def test_a_member_state_names_its_group_only() -> None:
    cache = ClusterCache([GPU], FakeClock(), assumed_ttl=TTL)
    cache.upsert_node(make_node("n1").alloc(gpu=8).obj())
    cache.upsert_pod(member("m0"))
    assert cache.group_member("default", "a", "u-m0") == MemberState(assigned=False, bound=False)
    cache.assume(info("m0"), "n1")
    assert cache.group_member("default", "a", "u-m0") == MemberState(assigned=True, bound=False)
    assert cache.group_member("default", "b", "u-m0") is None
    assert cache.group_member("other", "a", "u-m0") is None
    assert cache.group_member("default", "a", "u-nobody") is None
