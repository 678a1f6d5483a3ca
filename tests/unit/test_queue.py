"""The queue over the cache: nominations follow the pods through the cache's change fan-out, and
a nomination that ends or moves is a capacity release (outside the cache lock); held capacity
counts nominations of equal or higher priority."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from builders import GPU, make_node, make_pod

from extender.cache.cache import ClusterCache
from extender.framework.clock import FakeClock
from extender.framework.events import ClusterEvent
from extender.queue.queue import SchedulingQueue


@pytest.fixture
def cache() -> ClusterCache:
    c = ClusterCache([GPU], FakeClock())
    c.upsert_node(make_node("n1").alloc(gpu=4).obj())
    c.upsert_node(make_node("n2").alloc(gpu=4).obj())
    return c


def nominated_pod(name: str, node: str, gpu: int = 2, priority: int = 0) -> dict[str, Any]:
    builder = make_pod(name).uid(f"u-{name}").priority(priority)
    raw = (builder.req(gpu=gpu) if gpu else builder).obj()
    raw["status"] = {"nominatedNodeName": node}
    return raw


def releases(cache: ClusterCache, since: int) -> list[tuple[str, str | None]]:
    return [(c.key, c.node) for c in cache.changes_since(since)[0] if c.event is ClusterEvent.ALLOCATION_RELEASED]


def bound(raw: dict[str, Any], node: str) -> dict[str, Any]:
    return dict(raw, spec=dict(raw["spec"], nodeName=node), status={})


@pytest.mark.parametrize("ending, released", [
    ("bound", [("default/p", "n1")]),
    ("deleted", [("default/p", "n1")]),
    ("moved", [("default/p", "n1")]),
    ("cleared", [("default/p", "n1")]),
    ("terminal", [("default/p", "n1")]),
    ("updated", []),
])
def test_a_nomination_that_ends_or_moves_releases_its_node(cache: ClusterCache, ending: str,
                                                           released: list[tuple[str, str]]) -> None:
    queue = SchedulingQueue(cache, cache.clock)
    raw = nominated_pod("p", "n1")
    cache.upsert_pod(raw)
    assert [p.name for p in queue.nominated("n1")] == ["p"] and queue.held_nodes() == {"n1"}
    seq = cache.change_count()
    if ending == "bound":
        cache.upsert_pod(bound(raw, "n2"))
    elif ending == "deleted":
        cache.remove_pod(raw)
    elif ending == "moved":
        cache.upsert_pod(nominated_pod("p", "n2"))
    elif ending == "cleared":
        cache.upsert_pod(dict(raw, status={}))
    elif ending == "terminal":
        cache.upsert_pod(dict(raw, status={"phase": "Failed", "nominatedNodeName": "n1"}))
    else:
        cache.upsert_pod(nominated_pod("p", "n1", priority=5))
    assert releases(cache, seq) == released
    still = ending == "updated"
    assert [p.name for p in queue.nominated("n1")] == (["p"] if still else [])
    assert [p.name for p in queue.nominated("n2")] == (["p"] if ending == "moved" else [])


def test_a_nomination_without_managed_requests_releases_nothing(cache: ClusterCache) -> None:
    queue = SchedulingQueue(cache, cache.clock)
    raw = nominated_pod("p", "n1", gpu=0)
    cache.upsert_pod(raw)
    seq = cache.change_count()
    cache.remove_pod(raw)
    assert releases(cache, seq) == [] and queue.nominated("n1") == []


LOCAL_NOMINATION = [
    # id, what the watch shows after this process nominated p to n1 (in order), where p is nominated then
    ("nothing-yet", [], "n1"),
    ("an-update-naming-no-node", [{}], "n1"),  # a condition written before the nomination arrived
    ("the-nomination", [{"nominatedNodeName": "n1"}], "n1"),
    ("the-nomination-then-cleared", [{"nominatedNodeName": "n1"}, {}], None),
    ("another-node", [{"nominatedNodeName": "n2"}], "n2"),
    ("bound", ["bound"], None),
    ("deleted", ["deleted"], None),
]


@pytest.mark.parametrize("shown, where", [c[1:] for c in LOCAL_NOMINATION], ids=[c[0] for c in LOCAL_NOMINATION])
def test_a_nomination_made_here_counts_before_the_watch_shows_it(cache: ClusterCache, shown: list[Any],
                                                                 where: str | None) -> None:
    """As kube-scheduler's nominator records its own nominations before the API server has them:
    held at once, kept by updates that name no node until one names one, after which the
    cluster speaks for it."""
    queue = SchedulingQueue(cache, cache.clock)
    raw = make_pod("p").uid("u-p").req(gpu=2).obj()
    pod = cache.upsert_pod(raw)
    queue.nominator.nominate(pod, "n1")
    assert [p.name for p in queue.nominated("n1")] == ["p"] and queue.held_nodes() == {"n1"}
    for status in shown:
        if status == "bound":
            cache.upsert_pod(bound(raw, "n1"))
        elif status == "deleted":
            cache.remove_pod(raw)
        else:
            cache.upsert_pod(dict(raw, status=status))
    for node in ("n1", "n2"):
        assert [p.name for p in queue.nominated(node)] == (["p"] if node == where else [])


@pytest.mark.parametrize("ended", ["deleted", "bound", "deleting"])
def test_a_pod_the_watch_showed_ended_is_not_nominated_here(cache: ClusterCache, ended: str) -> None:
    """The preemptor was deleted (or bound) while its filter call preempted for it: the
    engine's nomination afterwards must not hold its capacity for a pod no update will ever
    release (kube-scheduler's nominator checks its pod lister likewise)."""
    queue = SchedulingQueue(cache, cache.clock)
    raw = make_pod("p").uid("u-p").req(gpu=2).obj()
    pod = cache.upsert_pod(raw)
    if ended == "deleted":
        cache.remove_pod(raw)
    elif ended == "bound":
        cache.upsert_pod(bound(raw, "n2"))
    else:
        cache.upsert_pod({**raw, "metadata": {**raw["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}})
    queue.nominator.nominate(pod, "n1")
    assert queue.nominated("n1") == [] and queue.held_nodes() == set()


def test_a_nomination_the_watch_showed_first_is_the_clusters(cache: ClusterCache) -> None:
    """The watch may deliver the nomination before the engine records it (an in-memory cluster
    does, within the write): a later update clearing it then ends it."""
    queue = SchedulingQueue(cache, cache.clock)
    raw = nominated_pod("p", "n1")
    pod = cache.upsert_pod(raw)
    queue.nominator.nominate(pod, "n1")
    cache.upsert_pod(dict(raw, status={}))
    assert queue.nominated("n1") == [] and queue.held_nodes() == set()


def test_held_capacity_counts_nominations_of_equal_or_higher_priority(cache: ClusterCache) -> None:
    queue = SchedulingQueue(cache, cache.clock)
    cache.upsert_pod(nominated_pod("high", "n1", gpu=3, priority=10))
    node = cache.snapshot().get("n1")
    assert node is not None
    low = cache.upsert_pod(make_pod("low").uid("u-low").req(gpu=2).priority(1).obj())
    higher = cache.upsert_pod(make_pod("higher").uid("u-higher").req(gpu=2).priority(20).obj())
    assert queue.with_held(node, low).requested[GPU] == 3000, "held against a pod of lower priority"
    assert queue.with_held(node, higher) is node, "not against one of higher priority"


def test_the_release_is_noted_outside_the_cache_lock(cache: ClusterCache) -> None:
    """Listeners run after the cache lock is released: another thread can read the cache meanwhile
    (a listener called under the lock would block it, and the nominator would call back into the
    cache with the lock held)."""
    other_thread_read: list[int] = []

    def listener(uid: str, pod: Any) -> None:
        reader = threading.Thread(target=lambda: other_thread_read.append(cache.change_count()))
        reader.start()
        reader.join(10)

    cache.on_pod_change(listener)
    cache.upsert_pod(nominated_pod("p", "n1"))
    assert len(other_thread_read) == 1, "the listener ran with the cache lock held"


def test_pod_changes_reach_listeners_in_order_before_the_call_returns(cache: ClusterCache) -> None:
    seen: list[tuple[str, bool]] = []
    cache.on_pod_change(lambda uid, pod: seen.append((uid, pod is not None)))
    raw = make_pod("p").uid("u").req(gpu=1).obj()
    cache.upsert_pod(raw)
    assert seen == [("u", True)]
    cache.remove_pod(raw)
    assert seen == [("u", True), ("u", False)]


def test_held_capacity_adds_the_same_slots_once_and_follows_every_change(cache: ClusterCache) -> None:
    """The same slots held on the same NodeInfo are added once (the answer is reused); a slot
    gone, a claim that stops a slot counting, or a new snapshot of the node gives a new answer."""
    queue = SchedulingQueue(cache, cache.clock)
    reservations = queue.held.reservations
    outsider = cache.upsert_pod(make_pod("o").uid("u-o").req(gpu=1).obj())
    member = cache.upsert_pod(make_pod("m").uid("u-m").req(gpu=1).obj())
    reservations.place("g", 0, [("n1", member), ("n1", member)], ttl=60.0)
    node = cache.snapshot().get("n1")
    assert node is not None
    first = queue.with_held(node, outsider)
    assert first.requested[GPU] == 2000 and queue.with_held(node, outsider) is first
    assert reservations.claim("g", "u-o", prefer={"n1"}) == "n1"
    assert queue.with_held(node, outsider).requested[GPU] == 1000, "its own claimed slot no longer counts"
    assert reservations.consume("g", "u-m", "n1", {GPU: 1000})
    assert queue.with_held(node, member).requested[GPU] == 1000, "one slot left, claimed by another"
    cache.upsert_pod(bound(make_pod("r").uid("u-r").req(gpu=1).obj(), "n1"))
    later = cache.snapshot().get("n1")
    assert later is not None and later is not node
    assert queue.with_held(later, member).requested[GPU] == 2000, "the node's new pod and the slot"
