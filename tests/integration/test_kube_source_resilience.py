"""The list/watch source against an API server that breaks its watches, expires resourceVersions,
ends streams at once, or is stopped mid-list (reviewed against client-go's reflector)."""

from __future__ import annotations

import threading
import time
from typing import Any

from test_kube import api, node, pod, wait_for  # noqa: F401 - the api fixture

from extender.cluster.kube.client import KubeClient
from extender.cluster.kube.source import KubeSource
from extender.metrics import Metrics
from extender.testing.fakeapi import FakeApiServer
from extender.testing.fakeapi import errors as fake_errors
from extender.testing.fakeapi.watch import ERROR


class Recorder:
    """A ClusterEvents sink that keeps what it is given and logs every pod call in order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pods: dict[str, Any] = {}
        self.log: list[tuple[str, str, str]] = []  # (op, name, resourceVersion)

    def upsert_pod(self, raw: Any) -> None:
        meta = raw["metadata"]
        with self.lock:
            self.pods[meta["name"]] = raw
            self.log.append(("upsert", meta["name"], meta.get("resourceVersion", "")))

    def remove_pod(self, raw: Any) -> None:
        meta = raw["metadata"]
        with self.lock:
            self.pods.pop(meta["name"], None)
            self.log.append(("remove", meta["name"], meta.get("resourceVersion", "")))

    def upsert_node(self, raw: Any) -> None: ...
    def remove_node(self, name: str) -> None: ...
    def upsert_pdb(self, raw: Any) -> None: ...
    def remove_pdb(self, raw: Any) -> None: ...
    def upsert_pod_group(self, raw: Any) -> None: ...
    def remove_pod_group(self, raw: Any) -> None: ...
    def upsert_elastic_quota(self, raw: Any) -> None: ...
    def remove_elastic_quota(self, raw: Any) -> None: ...
    def mark_synced(self) -> None: ...


def pod_watches(api: FakeApiServer) -> list[Any]:
    return api.requests("GET", r"^/api/v1/pods$", predicate=lambda r: r.watch)


def test_a_broken_watch_resumes_from_the_last_event_seen_not_from_the_list(api: FakeApiServer) -> None:
    """After a watch breaks mid-stream (connection reset), the source re-watches from the
    resourceVersion of its *list*, not from the last event it applied (client-go resumes from
    lastSyncResourceVersion; the module docstring promises "resumed from the last resourceVersion
    seen"). The API server then replays every event since the list: a pod deleted before the
    break is re-added to the cache (an old version over a newer state), and every event since the
    list is applied again."""
    sink = Recorder()
    source = KubeSource(KubeClient(api.api_client()), None, trim=False, watch_timeout=30)
    source.start(sink)
    try:
        assert source.wait_synced(10)
        assert api.wait_for_watchers(1, "pods")
        api.create(pod("doomed", 1))
        wait_for(lambda: "doomed" in sink.pods, what="the watch delivers the pod")
        deleted_rv = api.delete("Pod", "default", "doomed")["metadata"]["resourceVersion"]
        wait_for(lambda: "doomed" not in sink.pods, what="the watch delivers the deletion")
        seen = source.last_resource_version["pod"]
        with sink.lock:
            mark = len(sink.log)

        api.drop_watches("pods", abort=True)  # connection reset mid-stream
        wait_for(lambda: len(pod_watches(api)) >= 2 and api.watch_count("pods") >= 1, what="the watch reopened")
        api.create(pod("marker", 1))
        wait_for(lambda: "marker" in sink.pods, what="events flow again")

        resumed_from = pod_watches(api)[-1].param("resourceVersion")
        with sink.lock:
            after = sink.log[mark:]
        assert ("upsert", "doomed") not in [(op, name) for op, name, _ in after], (
            f"the pod deleted at rv {deleted_rv} was re-added after the reconnect: {after}")
        assert int(resumed_from or 0) >= int(seen), f"re-watched from {resumed_from}, last seen {seen}"
    finally:
        source.stop()


def test_a_broken_watch_does_not_cost_a_full_relist_when_nothing_was_missed(api: FakeApiServer) -> None:
    """The same bug, its cost: once the API server's watch history no longer reaches back to
    the list (minutes in a real cluster), every connection reset of a watch becomes a 410 and
    a full relist (150,000 pods), although the source had seen every event up to now."""
    metrics = Metrics()
    sink = Recorder()
    source = KubeSource(KubeClient(api.api_client()), None, trim=False, watch_timeout=30, metrics=metrics)
    source.start(sink)
    try:
        assert source.wait_synced(10)
        assert api.wait_for_watchers(1, "pods")
        api.create(pod("a", 1))
        wait_for(lambda: "a" in sink.pods, what="the watch delivers the pod")
        api.compact()  # history trimmed up to now: the source has seen everything up to here
        lists_before = len(api.requests("GET", r"^/api/v1/pods$", predicate=lambda r: not r.watch))

        api.drop_watches("pods", abort=True)
        wait_for(lambda: len(pod_watches(api)) >= 2 and api.watch_count("pods") >= 1, what="the watch reopened")
        api.create(pod("b", 1))
        wait_for(lambda: "b" in sink.pods, what="events flow again")

        lists_after = len(api.requests("GET", r"^/api/v1/pods$", predicate=lambda r: not r.watch))
        assert lists_after == lists_before, "a reset watch that had missed nothing relisted every pod"
        assert 'kube_extender_relists_total{kind="pod"}' not in metrics.exposition().decode()
    finally:
        source.stop()


def test_watches_the_api_server_ends_at_once_are_not_reopened_in_a_tight_loop(api: FakeApiServer) -> None:
    """A watch the API server ends cleanly right away, with no event (a server in trouble, an
    overloaded watch cache, a proxy), is reopened at once, with no back-off: the source hammers
    the API server with watch requests as fast as it can (client-go's reflector takes "watch
    lasted less than a second and no items received" for an error and backs off)."""
    sink = Recorder()
    source = KubeSource(KubeClient(api.api_client()), None, trim=False, watch_timeout=30)
    source.start(sink)
    try:
        assert source.wait_synced(10)
        assert api.wait_for_watchers(1, "pods")
        store_watch = api.store.watch

        def ended_at_once(rt: Any, *args: Any, **kwargs: Any) -> Any:
            w = store_watch(rt, *args, **kwargs)
            if rt.plural == "pods":
                w.close("stop")  # the stream ends cleanly before any event
            return w

        api.store.watch = ended_at_once  # type: ignore[method-assign]
        before = len(pod_watches(api))
        api.drop_watches("pods")
        threading.Event().wait(1.0)
        opened = len(pod_watches(api)) - before
        assert opened <= 5, f"{opened} pod watches opened in one second"
    finally:
        source.stop()


def pod_lists(api: FakeApiServer) -> list[Any]:
    return api.requests("GET", r"^/api/v1/pods$", predicate=lambda r: not r.watch)


def test_a_watch_that_keeps_answering_410_does_not_relist_in_a_tight_loop(api: FakeApiServer) -> None:
    """Every 410 (as an answer or an ERROR event) relists at once, with no back-off, however
    often it happens: an API server whose watch cache does not reach back to the list's
    resourceVersion (HA API servers behind a load balancer, one just restarted) makes the source
    list every pod (150,000 in production) as fast as it can. client-go's reflector runs
    ListAndWatch under its back-off manager, so repeated relists are paced (0.8 s doubling)."""
    sink = Recorder()
    source = KubeSource(KubeClient(api.api_client()), None, trim=False, watch_timeout=30)
    source.start(sink)
    try:
        assert source.wait_synced(10)
        assert api.wait_for_watchers(1, "pods")
        api.fail_next("GET", r"^/api/v1/pods$", 410, reason="Expired", message="too old resource version",
                      count=None, predicate=lambda r: r.watch)
        before = len(pod_lists(api))
        api.drop_watches("pods")
        threading.Event().wait(1.0)
        relists = len(pod_lists(api)) - before
        assert relists <= 5, f"{relists} full lists of every pod in one second"
    finally:
        api.clear_faults()
        source.stop()


def test_a_source_stopped_during_its_list_delivers_nothing_and_opens_no_watch(api: FakeApiServer) -> None:
    """``stop()`` promises that a thread still in a list call "ends with the call, delivering
    nothing"; but ``_relist`` applies the page it gets and ``_run`` goes on to open a watch
    without looking at the stop flag: after stop() returned, the pods are delivered to the sink
    and a watch is opened that nobody will close (it lives until its first event or its
    timeout)."""
    api.create(pod("p", 1))
    api.add_latency("GET", r"^/api/v1/pods$", 0.5, count=1)
    sink = Recorder()
    source = KubeSource(KubeClient(api.api_client()), None, trim=False, watch_timeout=30)
    source.start(sink)
    try:
        wait_for(lambda: pod_lists(api), what="the pod list sent")
        source.stop(timeout=0.1)
        threading.Event().wait(1.0)  # the list's answer arrives meanwhile
        assert sink.pods == {}, "a stopped source delivered pods"
        assert api.watch_count("pods") == 0, "a stopped source opened a watch"
    finally:
        source.stop()


def test_a_deletion_found_by_a_relist_carries_the_last_state_known(api: FakeApiServer) -> None:
    """A pod deleted while the watch was away is removed on the relist with a stub holding only
    name, namespace and uid - not the last state delivered, as a watch DELETED (or client-go's
    DeletedFinalStateUnknown.Obj) does. A sink that looks at the deleted pod sees an unbound pod:
    the harness's kube-scheduler (``extender.sim.scheduler.Scheduler.remove_pod``) then emits
    PodDelete instead of AssignedPodDelete and does not requeue the pods waiting for the
    capacity the bound pod just gave back."""
    api.create(pod("bound", 1))
    api.bind("default", "bound", "n1")
    removed: list[Any] = []
    sink = Recorder()
    sink.remove_pod = lambda raw: removed.append(raw)  # type: ignore[method-assign]
    source = KubeSource(KubeClient(api.api_client()), None, trim=False, watch_timeout=30)
    source.start(sink)
    try:
        assert source.wait_synced(10)
        assert sink.pods["bound"]["spec"]["nodeName"] == "n1"
        source.stop()
        api.delete("Pod", "default", "bound")
        api.compact()
        source._stop.clear()
        source._threads.clear()
        source.start(sink)  # resumes from an expired resourceVersion: 410, relist
        wait_for(lambda: removed, what="the missed deletion delivered")
        assert (removed[0].get("spec") or {}).get("nodeName") == "n1", f"deleted as {removed[0]}"
    finally:
        source.stop()


def test_the_harness_scheduler_sees_a_bound_pod_deleted_while_away_as_an_assigned_pod_deletion(
        api: FakeApiServer) -> None:
    """The consequence of the stub above for the harness's emulated kube-scheduler (its informer
    is a KubeSource): a bound pod deleted while the watch was away reaches the scheduler as an
    unassigned pod's deletion (PodDelete), so the pods NodeResourcesFit rejected are not moved
    back to the active queue, as kube-scheduler does on AssignedPodDelete."""
    from extender.sim.config import SchedulerConfig
    from extender.sim.scheduler import Scheduler
    from extender.testing.harness.view import ApiClusterView, scheduler_user_agent

    api.create(pod("bound", 1))
    api.bind("default", "bound", "n1")
    view = ApiClusterView(KubeClient(api.api_client(), user_agent=scheduler_user_agent("1.30")), events=False,
                          watch_timeout=30)
    scheduler = Scheduler(SchedulerConfig(), view)
    events: list[str] = []
    move_all = scheduler.queue.move_all
    scheduler.queue.move_all = lambda event, *a, **k: (events.append(event), move_all(event, *a, **k))[1]  # type: ignore[method-assign]
    try:
        assert view.wait_synced(10)
        source = view.source
        source.stop()
        api.delete("Pod", "default", "bound")
        api.compact()
        source._stop.clear()
        source._threads.clear()
        source.start(source._sink)  # type: ignore[arg-type] - resumes from an expired rv: 410, relist
        wait_for(lambda: view.get_pod("default", "bound") is None, what="the missed deletion delivered")
        assert "AssignedPodDelete" in events, events
    finally:
        view.stop()


def record_backoffs(source: KubeSource, kind: str) -> list[tuple[int, int]]:
    """(failures, status) of every back-off of ``kind``, each waiting 10 ms only."""
    calls: list[tuple[int, int]] = []

    def backoff(k: str, failures: int, exc: BaseException) -> None:
        if k == kind:
            calls.append((failures, getattr(exc, "status", -1)))
        source._stop.wait(0.01)

    source._backoff = backoff  # type: ignore[method-assign]
    return calls


def test_410_error_events_right_after_a_list_back_off_exponentially(api: FakeApiServer) -> None:
    """The API server reports an expired resourceVersion as an ERROR event in a 200 stream
    (client.watch's docstring says so; the fake and kube-apiserver's cacher do so). That
    ERROR event counts in ``_delivered``, so ``gone`` is reset to 0 before every 410 and the
    back-off after each list stays at its first step (0.5 s): two full lists a second for ever,
    where client-go's back-off grows to 30 s. (The resilience test used an HTTP 410 answer.)"""
    sink = Recorder()
    source = KubeSource(KubeClient(api.api_client()), None, trim=False, watch_timeout=30)
    calls = record_backoffs(source, "pod")
    source.start(sink)
    try:
        assert source.wait_synced(10)
        assert api.wait_for_watchers(1, "pods")
        store_watch = api.store.watch

        def lagging(rt: Any, *args: Any, **kwargs: Any) -> Any:  # a watch cache behind every list
            w = store_watch(rt, *args, **kwargs)
            if rt.plural == "pods":
                w.push((ERROR, None, fake_errors.expired("too old resource version").status()))
                w.close("error")
            return w

        api.store.watch = lagging  # type: ignore[method-assign]
        api.drop_watches("pods")
        wait_for(lambda: len([c for c in calls if c[1] == 410]) >= 5, what="five 410 back-offs")
        steps = [n for n, status in calls if status == 410][:5]
        assert steps == [1, 2, 3, 4, 5], f"back-off steps of consecutive 410s after lists: {steps}"
    finally:
        source.stop()


def test_410_back_off_resets_once_a_watch_delivered(api: FakeApiServer) -> None:
    """The docstring: '410s after a list back off until a watch delivers'. ``gone`` is reset only
    when a watch that delivered *fails*; a watch that delivers and ends cleanly (every watch does
    at its timeoutSeconds) leaves it as it was, so each later episode starts where the last one
    ended and soon waits max_backoff before its first relist."""
    sink = Recorder()
    source = KubeSource(KubeClient(api.api_client()), None, trim=False, watch_timeout=30)
    calls = record_backoffs(source, "pod")
    source.start(sink)
    try:
        assert source.wait_synced(10)
        assert api.wait_for_watchers(1, "pods")
        for episode in range(2):
            n = len(pod_watches(api))
            # the next two watches: the resumed one and the one after the relist answer 410
            api.fail_next("GET", r"^/api/v1/pods$", 410, reason="Expired", message="too old resource version",
                          count=2, predicate=lambda r: r.watch)
            api.drop_watches("pods")  # ends cleanly
            wait_for(lambda: len(pod_watches(api)) >= n + 3 and api.watch_count("pods") >= 1,
                     what="watching again")
            before = source.last_resource_version["pod"]
            api.create({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": f"p{episode}", "namespace": "default"},
                        "spec": {"containers": [{"name": "c", "image": "x"}]}})
            wait_for(lambda: source.last_resource_version["pod"] != before, what="the watch delivers")
        steps = [n for n, status in calls if status == 410]
        assert steps == [1, 1], f"first 410 back-off step of each episode: {steps}"
    finally:
        api.clear_faults()
        source.stop()


def test_a_quiet_watch_ending_at_its_timeout_is_not_a_very_short_watch() -> None:
    """watchTimeout has no lower bound; with timeoutSeconds=1 a quiet kind's watch ends after
    the full second the server was asked for. ``_watch`` starts its clock only once the stream
    is open (client-go starts it before the Watch call), so the healthy watch measures under
    SHORT_WATCH and is taken for a failure: back-offs that grow (it never counts as opened)."""
    with FakeApiServer(bookmark_interval=60.0) as api:
        source = KubeSource(KubeClient(api.api_client()), None, trim=False, watch_timeout=1)
        calls = record_backoffs(source, "pdb")
        source.start(Recorder())
        try:
            assert source.wait_synced(10)
            time.sleep(5.5)  # five quiet PDB watches end at their timeout
            assert calls == [], f"healthy 1 s watches failed as very short: {calls}"
        finally:
            source.stop()


def test_a_list_whose_continue_token_expires_is_not_retried_in_a_tight_loop(api: FakeApiServer) -> None:
    """A paged list whose next page answers 410 (its continue token too old - kube-apiserver's
    "The provided continue parameter is too old"): _relist raises ApiError(410) before
    ``listed`` is set, so the 410 branch relists at once with no back-off, and again, for ever."""
    for i in range(3):
        api.create(pod(f"p{i}", 1))
    api.fail_next("GET", r"^/api/v1/pods$", 410, reason="Expired", message="continue parameter too old",
                  count=None, predicate=lambda r: not r.watch and bool(r.param("continue")))
    source = KubeSource(KubeClient(api.api_client()), None, trim=False, watch_timeout=30, page_size=1)
    source.start(Recorder())
    try:
        threading.Event().wait(1.0)
        lists = len(pod_lists(api))
        assert lists <= 10, f"{lists} pod list requests in one second"
    finally:
        api.clear_faults()
        source.stop()


def test_watches_that_open_and_fail_at_once_with_an_error_event_back_off_more_and_more(api: FakeApiServer) -> None:
    """A watch answered 200 whose first and only event is an ERROR other than 410 (a 500, or
    the cacher's 504 'Too large resource version'): no delivery, yet ``_opened`` makes each such
    failure 'a first failure again' - the back-off stays at its first step (0.5 s) for ever,
    where a stream ended at once with no event (very short watch) backs off 1, 2, 3, ..."""
    source = KubeSource(KubeClient(api.api_client()), None, trim=False, watch_timeout=30)
    calls = record_backoffs(source, "pod")
    source.start(Recorder())
    try:
        assert source.wait_synced(10)
        assert api.wait_for_watchers(1, "pods")
        store_watch = api.store.watch

        def failing(rt: Any, *args: Any, **kwargs: Any) -> Any:
            w = store_watch(rt, *args, **kwargs)
            if rt.plural == "pods":
                w.push((ERROR, None, fake_errors.internal_error("etcd unavailable").status()))
                w.close("error")
            return w

        api.store.watch = failing  # type: ignore[method-assign]
        api.drop_watches("pods")
        wait_for(lambda: len([c for c in calls if c[1] == 500]) >= 5, what="five back-offs")
        steps = [n for n, status in calls if status == 500][:5]
        # one step more each time (the break that started it was the first failure)
        assert steps[1:] == [n + 1 for n in steps[:-1]] and steps[0] <= 2, f"back-off steps: {steps}"
    finally:
        source.stop()
