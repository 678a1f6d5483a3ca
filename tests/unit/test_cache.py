"""ClusterCache: the assumed-pod state machine, accounting, expiry and snapshots."""

from __future__ import annotations

import threading
from typing import Any, Callable

import pytest
from builders import GPU, make_node, make_pod

from extender.cache.cache import AssumeError, ClusterCache
from extender.cache.changes import ChangeLog
from extender.framework.clock import FakeClock
from extender.framework.status import Status
from extender.framework.views import PodInfo


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def cache(clock: FakeClock) -> ClusterCache:
    c = ClusterCache([GPU], clock, assumed_ttl=30)
    c.upsert_node(make_node("n1").alloc(gpu=4).obj())
    c.upsert_node(make_node("n2").alloc(gpu=2).obj())
    return c


def used(cache: ClusterCache, node: str) -> int:
    info = cache.snapshot().get(node)
    assert info is not None
    return info.requested.get(GPU, 0)


def pending(name: str, gpus: int) -> dict:
    return make_pod(name).uid(f"u-{name}").req(gpu=gpus).obj()


def test_bound_pods_are_accounted_and_terminal_pods_release(cache: ClusterCache) -> None:
    pod = make_pod("a").uid("ua").req(gpu=3).node("n1").obj()
    cache.upsert_pod(pod)
    assert used(cache, "n1") == 3000
    pod["status"]["phase"] = "Succeeded"
    cache.upsert_pod(pod)
    assert used(cache, "n1") == 0
    assert cache.sizes()["pods"] == 0


def test_assume_counts_at_once_and_forget_releases(cache: ClusterCache) -> None:
    info = cache.upsert_pod(pending("p", 2))
    assert cache.pending_pod("default", "p") is not None
    assert cache.assume(info, "n1").ok
    assert used(cache, "n1") == 2000 and cache.is_assumed(info.uid)
    assert cache.sizes()["assumed_pods"] == 1
    assert cache.forget(info.uid) is True
    assert used(cache, "n1") == 0
    assert cache.forget(info.uid) is False, "forget is idempotent"


def test_assume_twice_or_on_unknown_node_raises(cache: ClusterCache) -> None:
    info = cache.upsert_pod(pending("p", 1))
    cache.assume(info, "n1")
    with pytest.raises(AssumeError):
        cache.assume(info, "n2")
    with pytest.raises(AssumeError):
        cache.assume(cache.upsert_pod(pending("q", 1)), "nope")


def test_assume_check_runs_on_current_node_and_can_refuse(cache: ClusterCache) -> None:
    info = cache.upsert_pod(pending("p", 1))
    st = cache.assume(info, "n2", check=lambda node: Status.unschedulable(f"free {node.free(GPU)}"))
    assert not st.ok and st.message == "free 2000"
    assert used(cache, "n2") == 0 and not cache.is_assumed(info.uid)


def test_watch_confirmation_turns_assumed_into_added(cache: ClusterCache, clock: FakeClock) -> None:
    raw = pending("p", 2)
    info = cache.upsert_pod(raw)
    cache.assume(info, "n1")
    cache.finish_binding(info.uid)
    raw["spec"]["nodeName"] = "n1"
    cache.upsert_pod(raw)
    assert not cache.is_assumed(info.uid)
    clock.advance(3600)
    assert cache.cleanup_expired() == []
    assert used(cache, "n1") == 2000, "a confirmed pod never expires"
    assert cache.pending_pod("default", "p") is None


def test_unconfirmed_binding_expires_after_ttl_only_once_finished(cache: ClusterCache, clock: FakeClock) -> None:
    info = cache.upsert_pod(pending("p", 2))
    cache.assume(info, "n1")
    clock.advance(100)
    assert cache.cleanup_expired() == [], "binding not finished yet: no expiry"
    cache.finish_binding(info.uid)
    clock.advance(29)
    assert cache.cleanup_expired() == []
    clock.advance(2)
    assert [p.key for p in cache.cleanup_expired()] == ["default/p"]
    assert used(cache, "n1") == 0


def test_each_finished_binding_expires_at_its_own_deadline(cache: ClusterCache, clock: FakeClock) -> None:
    """Expiry follows each pod's own deadline whatever happened in between: a pod still waiting
    (not finished) never expires, a pod forgotten and assumed again counts from its new finish,
    a confirmed pod never expires."""
    start = clock.monotonic()
    infos = {name: cache.upsert_pod(pending(name, 1)) for name in ("early", "late", "again", "waiting", "confirmed")}
    for info in infos.values():
        cache.assume(info, "n1")
    for name in ("early", "again", "confirmed"):
        cache.finish_binding(infos[name].uid)
    clock.advance(10)
    cache.finish_binding(infos["late"].uid)
    cache.forget(infos["again"].uid)
    cache.assume(infos["again"], "n1")
    cache.finish_binding(infos["again"].uid)
    confirmed = pending("confirmed", 1)
    confirmed["spec"]["nodeName"] = "n1"
    cache.upsert_pod(confirmed)
    expired = {}
    for at in (29, 31, 39, 41, 3600):
        clock.advance(start + at - clock.monotonic())
        expired[at] = sorted(p.name for p in cache.cleanup_expired())
    assert expired == {29: [], 31: ["early"], 39: [], 41: ["again", "late"], 3600: []}
    assert cache.is_assumed(infos["waiting"].uid) and used(cache, "n1") == 2000, "waiting and confirmed"


def test_ttl_zero_never_expires(clock: FakeClock) -> None:
    c = ClusterCache([GPU], clock, assumed_ttl=0)
    c.upsert_node(make_node("n1").alloc(gpu=1).obj())
    info = c.upsert_pod(pending("p", 1))
    c.assume(info, "n1")
    c.finish_binding(info.uid)
    clock.advance(10**6)
    assert c.cleanup_expired() == [] and c.is_assumed(info.uid)


def test_pod_bound_elsewhere_than_assumed_moves_the_accounting(cache: ClusterCache) -> None:
    raw = pending("p", 1)
    info = cache.upsert_pod(raw)
    cache.assume(info, "n1")
    raw["spec"]["nodeName"] = "n2"
    cache.upsert_pod(raw)
    assert used(cache, "n1") == 0 and used(cache, "n2") == 1000


def test_deleted_pod_releases_even_when_assumed(cache: ClusterCache) -> None:
    raw = pending("p", 1)
    info = cache.upsert_pod(raw)
    cache.assume(info, "n1")
    cache.remove_pod(raw)
    assert used(cache, "n1") == 0 and cache.sizes()["assumed_pods"] == 0


def test_node_removed_with_pods_comes_back_with_its_usage(cache: ClusterCache) -> None:
    cache.upsert_pod(make_pod("a").uid("ua").req(gpu=1).node("n2").obj())
    cache.remove_node("n2")
    assert cache.snapshot().get("n2") is None
    assert cache.sizes()["nodes"] == 1
    cache.upsert_node(make_node("n2").alloc(gpu=2).obj())
    assert used(cache, "n2") == 1000


def test_node_update_changes_allocatable(cache: ClusterCache) -> None:
    cache.upsert_node(make_node("n1").alloc(gpu=8).obj())
    assert cache.snapshot().get("n1").allocatable[GPU] == 8000  # type: ignore[union-attr]


def test_snapshot_is_shared_until_a_change_and_old_snapshots_stay_consistent(cache: ClusterCache) -> None:
    s1 = cache.snapshot()
    assert cache.snapshot() is s1
    info = cache.upsert_pod(pending("p", 1))
    assert cache.snapshot() is s1, "a pending pod changes no node"
    cache.assume(info, "n1")
    s2 = cache.snapshot()
    assert s2 is not s1 and s2.generation > s1.generation
    assert s1.get("n1").requested.get(GPU, 0) == 0  # type: ignore[union-attr]
    assert s2.get("n1").requested[GPU] == 1000  # type: ignore[union-attr]
    assert s2.get("n2") is s1.get("n2"), "unchanged NodeInfos are shared, not copied"


def test_malformed_objects_raise_value_error(cache: ClusterCache) -> None:
    with pytest.raises(ValueError):
        cache.upsert_node({"metadata": {}})
    with pytest.raises(ValueError):
        cache.upsert_pod({"metadata": {"name": "x"}, "spec": {"containers": [{"resources": {"requests": {GPU: "lots"}}}]}})


def test_concurrent_assumes_never_overcommit(cache: ClusterCache) -> None:
    infos = [cache.upsert_pod(pending(f"p{i}", 1)) for i in range(40)]
    ok: list[str] = []
    lock = threading.Lock()

    def go(info: PodInfo) -> None:
        st = cache.assume(info, "n1", check=lambda n: Status() if n.free(GPU) >= 1000 else Status.unschedulable("full"))
        if st.ok:
            with lock:
                ok.append(info.uid)

    threads = [threading.Thread(target=go, args=(i,)) for i in infos]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ok) == 4 and used(cache, "n1") == 4000


# ---- label index and change log ------------------------------------------------------------------

def labelled(name: str, group: str, uid: str | None = None, ns: str = "default") -> dict:
    return make_pod(name, ns).uid(uid or f"u-{name}").req(gpu=1).labels(g=group).obj()


def names(pods: list[PodInfo]) -> list[str]:
    return sorted(f"{p.name}@{p.node_name or '-'}" for p in pods)


def test_pods_labelled_follows_every_change(cache: ClusterCache) -> None:
    cache.upsert_pod(labelled("before-index", "a"))  # exists before the first query builds the index
    assert names(cache.pods_labelled("default", "g", "a")) == ["before-index@-"]
    steps = [
        ("a new pending pod", lambda: cache.upsert_pod(labelled("p1", "a")), ["before-index@-", "p1@-"]),
        ("another namespace", lambda: cache.upsert_pod(labelled("p2", "a", ns="other")), ["before-index@-", "p1@-"]),
        ("assumed", lambda: cache.assume(PodInfo.from_pod(labelled("p1", "a"), [GPU]), "n1"),
         ["before-index@-", "p1@n1"]),
        ("relabelled", lambda: cache.upsert_pod(labelled("before-index", "b")), ["p1@n1"]),
        ("re-created under the same name", lambda: (cache.remove_pod(labelled("p1", "a")),
                                                    cache.upsert_pod(labelled("p1", "a", uid="u-new"))), ["p1@-"]),
        ("deleted", lambda: cache.remove_pod(labelled("p1", "a", uid="u-new")), []),
        ("an unknown pod assumed at bind", lambda: cache.assume(PodInfo.from_pod(labelled("seen", "a"), [GPU]), "n2"),
         ["seen@n2"]),
    ]
    for what, act, expected in steps:
        act()
        assert names(cache.pods_labelled("default", "g", "a")) == expected, what
    assert names(cache.pods_labelled("default", "g", "b")) == ["before-index@-"]


def test_changes_since_names_what_happened(cache: ClusterCache) -> None:
    from extender.framework.events import ClusterEvent as E
    _, start, _ = cache.changes_since(None)
    cache.upsert_pod(make_pod("a").uid("ua").req(gpu=1).node("n1").obj())
    cache.upsert_node(make_node("n1").alloc(gpu=4).obj())            # no change we care about: not recorded
    cache.upsert_node(make_node("n1").alloc(gpu=8).obj())
    cache.upsert_node(make_node("n3").alloc(gpu=1).obj())
    cache.remove_pod(make_pod("a").uid("ua").obj())
    changes, latest, complete = cache.changes_since(start)
    assert complete and latest == changes[-1].seq
    assert [(c.event, c.key, c.node) for c in changes] == [
        (E.POD_ADD, "default/a", "n1"), (E.NODE_UPDATE, "n1", ""), (E.NODE_ADD, "n3", ""),
        (E.POD_DELETE, "default/a", ""), (E.ALLOCATION_RELEASED, "default/a", "n1")]
    assert cache.changes_since(latest) == ([], latest, True)


def test_changes_since_reports_a_gap_when_the_log_overflowed(cache: ClusterCache, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache, "_changes", ChangeLog(size=3))
    _, start, _ = cache.changes_since(None)
    for i in range(5):
        cache.upsert_pod(pending(f"p{i}", 1))
    changes, _, complete = cache.changes_since(start)
    assert not complete and len(changes) == 3


def test_changes_since_slices_the_log_at_its_boundaries(cache: ClusterCache, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache, "_changes", ChangeLog(size=10))
    for i in range(25):
        cache.upsert_pdb({"metadata": {"name": f"b{i}", "namespace": "default"}, "spec": {"minAvailable": 1}})
    latest = cache.change_count()
    oldest = cache._changes._log[0].seq
    assert oldest == latest - 9 and [c.seq for c in cache._changes._log] == list(range(oldest, latest + 1))
    cases = [
        ("long before the oldest kept change", 0, False),
        ("two before the oldest kept change", oldest - 2, False),
        ("just before the oldest kept change", oldest - 1, True),
        ("at the oldest kept change", oldest, True),
        ("inside", oldest + 4, True),
        ("just before the latest", latest - 1, True),
        ("at the latest", latest, True),
        ("beyond the latest", latest + 5, True),
    ]
    for what, seq, complete in cases:
        changes, at, whole = cache.changes_since(seq)
        assert (at, whole) == (latest, complete), what
        assert changes == [c for c in cache._changes._log if c.seq > seq], what
        assert [c.seq for c in changes] == list(range(max(seq + 1, oldest), latest + 1)), what
    assert cache.changes_since(None) == ([], latest, True)


def index_entries(cache: ClusterCache, key: str = "g") -> set[tuple[str, str, str, str]]:
    """Every (namespace, value, uid, pod key) in the label index of ``key``."""
    return {(ns, value, uid, pkey) for (ns, value), entries in cache._labels._by_key[key].items()
            for uid, pkey in entries}


def test_label_index_forgets_deleted_pods(cache: ClusterCache) -> None:
    cache.upsert_pod(labelled("keeper", "k"))
    assert names(cache.pods_labelled("default", "g", "k")) == ["keeper@-"]  # the index exists now
    for group in range(100):
        members = [labelled(f"m{group}-{i}", f"group-{group}") for i in range(4)]
        for i, member in enumerate(members):
            if i % 2:  # half of them bound, half pending
                member["spec"]["nodeName"] = "n1"
            cache.upsert_pod(member)
        assert len(cache.pods_labelled("default", "g", f"group-{group}")) == 4
        for member in members:
            cache.remove_pod(member)
    assert index_entries(cache) == {("default", "k", "u-keeper", "default/keeper")}
    assert len(cache._labels._by_key["g"]) == 1
    assert all(cache.pods_labelled("default", "g", f"group-{g}") == [] for g in range(100))


def test_label_index_drops_terminal_pods_and_old_values(cache: ClusterCache) -> None:
    cache.pods_labelled("default", "g", "a")  # build the (empty) index
    entry = ("u-p", "default/p")
    steps: list[tuple[str, Callable[[], Any], set[tuple[str, str, str, str]]]] = [
        ("pending", lambda: cache.upsert_pod(labelled("p", "a")), {("default", "a", *entry)}),
        ("relabelled while pending", lambda: cache.upsert_pod(labelled("p", "b")), {("default", "b", *entry)}),
        ("bound", lambda: cache.upsert_pod(make_pod("p").uid("u-p").req(gpu=1).labels(g="b").node("n1").obj()),
         {("default", "b", *entry)}),
        ("relabelled while bound", lambda: cache.upsert_pod(
            make_pod("p").uid("u-p").req(gpu=1).labels(g="c").node("n1").obj()), {("default", "c", *entry)}),
        ("label removed", lambda: cache.upsert_pod(make_pod("p").uid("u-p").req(gpu=1).node("n1").obj()), set()),
        ("labelled again", lambda: cache.upsert_pod(
            make_pod("p").uid("u-p").req(gpu=1).labels(g="a").node("n1").obj()), {("default", "a", *entry)}),
        ("terminal", lambda: cache.upsert_pod(
            make_pod("p").uid("u-p").req(gpu=1).labels(g="a").node("n1").phase("Succeeded").obj()), set()),
        ("pending, then re-created under the same name without a deletion",
         lambda: (cache.upsert_pod(labelled("q", "a")), cache.upsert_pod(labelled("q", "a", uid="u-q2"))),
         {("default", "a", "u-q2", "default/q")}),
        ("a pending pod turning terminal", lambda: cache.upsert_pod(
            make_pod("q").uid("u-q2").req(gpu=1).labels(g="a").phase("Failed").obj()), set()),
    ]
    for what, act, expected in steps:
        act()
        assert index_entries(cache) == expected, what
        for value in "abc":
            assert names(cache.pods_labelled("default", "g", value)) == sorted(
                f"{pkey.split('/')[1]}@{'n1' if cache.pod(uid) else '-'}"
                for _, v, uid, pkey in expected if v == value), what


# ---- found by a fuzz of incremental against rebuilt caches ---------------------------------------

PREFIX = "kube-extender.io/"


def _group_cache() -> ClusterCache:
    cache = ClusterCache([GPU], FakeClock(), assumed_ttl=30, annotation_prefix=PREFIX)
    cache.upsert_node(make_node("n1").alloc(gpu=4).obj())
    return cache


def _labelled(cache: ClusterCache, value: str) -> tuple[int, list[str]]:
    from extender.framework.pod_group import GROUP_LABEL
    return (cache.group_count("default", value).members,
            [p.uid for p in cache.pods_labelled("default", GROUP_LABEL, value)])


@pytest.mark.parametrize("end", ["forget", "expiry"])
def test_a_pod_relabelled_while_assumed_is_found_by_its_new_label_once_the_assumption_ends(end: str) -> None:
    """The update re-indexed the pod against the assumed copy (the old labels); forget and expiry
    regrouped it but did not re-index: group_count counted a member pods_labelled (Gang's
    find_pods) no longer found."""
    import copy

    from extender.framework.pod_group import GROUP_LABEL
    cache = _group_cache()
    raw = make_pod("p").uid("u-p").req(gpu=1).labels(**{GROUP_LABEL: "g1"}).obj()
    info = cache.upsert_pod(raw)
    assert _labelled(cache, "g1") == (1, ["u-p"]) and cache.assume(info, "n1").ok
    relabelled = copy.deepcopy(raw)
    relabelled["metadata"]["labels"][GROUP_LABEL] = "g2"  # while it waits in Permit, say
    cache.upsert_pod(relabelled)
    if end == "forget":
        assert cache.forget("u-p")
    else:
        cache.finish_binding("u-p")
        cache.clock.advance(31)  # type: ignore[attr-defined]
        assert [p.uid for p in cache.cleanup_expired()] == ["u-p"]
    assert _labelled(cache, "g2") == (1, ["u-p"]) and _labelled(cache, "g1") == (0, [])


def test_a_ledger_reservation_follows_its_pods_updates() -> None:
    """A pod an older version annotated before binding is held by its allocation; an update
    with the same allocation kept the first version: old labels (group counts, the label index)
    and old requests (the node's use)."""
    import copy

    from extender.framework import ledger
    from extender.framework.pod_group import GROUP_LABEL
    cache = _group_cache()
    alloc = ledger.encode(ledger.Allocation("n1", {GPU: 1000}, 1, cache.clock.now()))
    raw = make_pod("p").uid("u-p").req(gpu=1).labels(**{GROUP_LABEL: "g1"}).annotations(
        **{PREFIX + "allocation": alloc}).obj()
    cache.upsert_pod(raw)
    updated = copy.deepcopy(raw)
    updated["metadata"]["labels"][GROUP_LABEL] = "g2"
    updated["spec"]["containers"][0]["resources"]["requests"][GPU] = "3"
    cache.upsert_pod(updated)
    assert _labelled(cache, "g2") == (1, ["u-p"]) and _labelled(cache, "g1") == (0, [])
    node = cache.snapshot().get("n1")
    assert node is not None and node.requested[GPU] == 3000
