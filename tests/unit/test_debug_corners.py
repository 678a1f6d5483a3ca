"""The debug views for an operator: a re-created pod's own verdicts, one odd node that does not
break the snapshot, two reads of one verdict at once."""

from __future__ import annotations

import threading
from typing import Any, Callable

from builders import make_node, make_pod

from extender.runtime.batch import LazyStatuses
from extender.runtime.outcomes import NodeTexts


def test_debug_pod_does_not_show_a_previous_incarnation_s_verdicts(make_app: Callable[..., Any]) -> None:
    """A StatefulSet pod is deleted and re-created under the same name (new UID). The new pod is
    pending and rejected everywhere, yet /debug/pods still shows the old pod's bind verdict
    ("bound" to n1) next to the new pod's filter verdict."""
    app, cluster = make_app([make_node("n1").alloc(gpu=2).obj()])
    client = app.test_client()
    old = make_pod("web-0").uid("uid-old").req(gpu=1).obj()
    cluster.add_pod(old)
    client.post("/scheduler/filter", json={"Pod": old, "NodeNames": ["n1"]}, buffered=True)
    reply = client.post("/scheduler/bind", json={"PodName": "web-0", "PodNamespace": "default",
                                                 "PodUID": "uid-old", "Node": "n1"}, buffered=True)
    assert reply.get_json() == {"Error": ""}
    cluster.delete_pod("default", "web-0")
    new = make_pod("web-0").uid("uid-new").req(gpu=4).obj()  # too big for n1
    cluster.add_pod(new)
    client.post("/scheduler/filter", json={"Pod": new, "NodeNames": ["n1"]}, buffered=True)

    body = client.get("/debug/pods/default/web-0").get_json()
    assert body["state"] == "pending"
    assert body["verdicts"]["filter"]["outcome"] == "unschedulable"
    stale = {verb: (v["uid"], v["outcome"]) for verb, v in body["verdicts"].items() if v["uid"] != "uid-new"}
    assert stale == {}, f"verdicts of the deleted incarnation shown for the pending pod: {stale}"


def test_debug_snapshot_survives_a_node_with_a_huge_gpu_memory_label(make_app: Callable[..., Any]) -> None:
    """One node whose GPU Feature Discovery memory label is a valid label value but beyond 64 bits
    makes the whole /debug/snapshot (and ?node=odd) a 500: orjson cannot encode the integer in
    the device rows. ?node=fine still answers; filter is unaffected."""
    mem, compute, count = "example.com/gpu-memory", "example.com/gpu-compute", "example.com/gpu"
    odd = make_node("odd").obj()
    odd["metadata"]["labels"].update({"nvidia.com/gpu.count": "1", "nvidia.com/gpu.memory": "9" * 25})
    fine = make_node("fine").obj()
    fine["metadata"]["labels"].update({"nvidia.com/gpu.count": "1", "nvidia.com/gpu.memory": "24576"})
    app, _ = make_app([odd, fine], managedResources=[{"name": r} for r in (mem, compute, count)],
                      profiles=[{"schedulerName": "default-scheduler", "plugins": {
                          "multiPoint": {"enabled": [{"name": "DeviceShare"}], "disabled": ["NodeResources"]}}}])
    client = app.test_client()
    for path in ("/debug/snapshot", "/debug/snapshot?node=fine"):
        resp = client.get(path)
        assert resp.status_code == 200, (path, resp.status_code, resp.get_data(as_text=True)[:300])
    resp = client.get("/debug/snapshot?node=odd")
    assert resp.status_code < 500, resp.get_data(as_text=True)[:300]


def test_two_reads_of_one_lazy_verdict_at_once_make_it_once() -> None:
    """A batch filter's per-node statuses are made on first read (LazyStatuses, a MadeOnRead); its
    maker can run once only. Two readers at once (two /debug/pods requests): the second waits for
    the first's dict instead of making it again (LazyStatuses' second make failed: a 500)."""
    import threading

    from extender.runtime.outcomes import MadeOnRead

    class Slow(MadeOnRead[int]):
        def __init__(self) -> None:
            super().__init__()
            self.made = 0
            self.inside, self.go = threading.Event(), threading.Event()

        def _make(self) -> dict[str, int]:
            self.made += 1
            self.inside.set()
            self.go.wait(5)
            return {"a": 1}

    lazy = Slow()
    first = threading.Thread(target=lambda: lazy["a"])
    first.start()
    assert lazy.inside.wait(5)
    second = threading.Thread(target=lambda: lazy["a"])
    second.start()
    second.join(0.2)
    lazy.go.set()
    first.join(5)
    second.join(5)
    assert lazy.made == 1 and dict(lazy) == {"a": 1}


def test_debug_pod_shows_the_rejection_of_a_new_pod_while_the_old_one_is_still_counted(
        make_app: Callable[..., Any]) -> None:
    """web-0 (uid-old) was filtered and bound through the extender. It is deleted and created
    again; kube-scheduler (whose informer is ahead) sends the new one (uid-new) to filter while
    the extender's watch still has the old one bound on n1 - the stale-view case
    test_the_release_of_an_earlier_pod_of_the_same_name_nudges_the_new_one covers. The new pod
    is rejected, and its rejection Event says "Details: /debug/pods/default/web-0"; but that view
    takes the old pod (still placed in the cache, the new one not pending there yet) for the
    current one and drops the new pod's filter verdict: it shows only the old pod's 'bound'."""
    app, cluster = make_app([make_node("n1").alloc(gpu=1).obj()])
    client = app.test_client()
    old = make_pod("web-0").uid("uid-old").req(gpu=1).obj()
    cluster.add_pod(old)
    client.post("/scheduler/filter", json={"Pod": old, "NodeNames": ["n1"]}, buffered=True)
    reply = client.post("/scheduler/bind", json={"PodName": "web-0", "PodNamespace": "default",
                                                 "PodUID": "uid-old", "Node": "n1"}, buffered=True)
    assert reply.get_json() == {"Error": ""}
    new = make_pod("web-0").uid("uid-new").req(gpu=1).obj()  # the extender has not seen old's deletion yet
    reply = client.post("/scheduler/filter", json={"Pod": new, "NodeNames": ["n1"]}, buffered=True).get_json()
    assert not reply["NodeNames"] and reply["FailedNodes"]  # rejected: the old web-0 still counts

    body = client.get("/debug/pods/default/web-0").get_json()
    assert "filter" in body["verdicts"], f"the new pod's rejection is hidden: {body['state']}, {body['verdicts'].keys()}"
    assert body["verdicts"]["filter"]["uid"] == "uid-new"


def test_a_lazy_mapping_made_from_another_lazy_mapping_does_not_deadlock() -> None:
    """MadeOnRead makes its dict under one module-wide lock; a ``_make`` that reads another
    MadeOnRead not made yet (a LazyStatuses built from a NodeTexts) takes it again in the same
    thread: the lock is re-entrant, so that works (a plain lock blocked for ever)."""
    texts = NodeTexts([(["a", "b"], "Insufficient example.com/gpu", True)])
    lazy = LazyStatuses(lambda: {name: text for name, text in texts.items()})  # type: ignore[misc]
    got: list[int] = []
    reader = threading.Thread(target=lambda: got.append(len(lazy)), daemon=True)
    reader.start()
    reader.join(2)
    assert not reader.is_alive(), "reading a MadeOnRead whose _make reads another MadeOnRead deadlocked"
    assert got == [2]
