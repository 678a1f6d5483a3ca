"""The Harness: fake API server, kube-extender replica(s) and the emulated kube-scheduler, on wall time.

See the package docstring (``extender.testing.harness``) for how to use it.
"""

from __future__ import annotations

import heapq
import itertools
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from extender.cli import scheduler_entry
from extender.cluster.kube.client import KubeClient
from extender.config.model import ExtenderConfig, parse_config
from extender.framework import ledger
from extender.sim.config import ExtenderSpec, SchedulerConfig
from extender.sim.clocks import RealClock
from extender.sim.records import RunSummary
from extender.sim.scheduler import Scheduler
from extender.testing.fakeapi import FakeApiServer
from extender.testing.fakeapi.codec import clone
from extender.testing.harness.devices import DeviceAccounting
from extender.testing.harness.extenders import (CONFIG_HEADER, InProcessExtender, ProcessExtender, Replica,
                                                ServiceTransport)
from extender.testing.harness.observe import Leak, PodLife, Recorder, Release, Violation
from extender.testing.harness.view import ApiClusterView, scheduler_user_agent

Delay = float | Callable[[], float]

SCHEDULER_AGENT = "kube-scheduler"
EXTENDER_AGENT = "kube-extender"

FAST_LEADER_ELECTION = {"leaseDuration": "2500ms", "renewDeadline": "1500ms", "retryPeriod": "250ms"}
"""Lease timings for several replicas, unless the configuration gives its own: a failover takes
about 2.5 s instead of 15 (leaseDuration stays 1 s above renewDeadline, the least the configuration
allows)."""


class HarnessError(RuntimeError):
    """The harness could not set up (a replica or the scheduler did not sync in time)."""


class _Timeline:
    """Runs callables at harness times on one thread, in time order (ties: in the order given)."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._heap: list[tuple[float, int, str, Callable[[], Any]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self.errors: list[tuple[str, BaseException]] = []
        self._thread = threading.Thread(target=self._loop, name="harness-timeline", daemon=True)
        self._thread.start()

    def at(self, t: float, label: str, fn: Callable[[], Any]) -> None:
        with self._cond:
            heapq.heappush(self._heap, (t, next(self._seq), label, fn))
            self._cond.notify()

    def pending(self) -> int:
        with self._cond:
            return len(self._heap)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0][0] > self._now()):
                    self._cond.wait(None if not self._heap else max(0.0, self._heap[0][0] - self._now()))
                if self._stopped:
                    return
                _, _, label, fn = heapq.heappop(self._heap)
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - reported through ``errors``, the run goes on
                self.errors.append((label, exc))

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(timeout=5)


class Harness:
    """A fake API server, ``replicas`` kube-extender(s) and the emulated kube-scheduler.

    ``objects``: seed objects (Nodes, Pods - a pod with ``spec.nodeName`` is created bound and
    Running -, PriorityClasses, PodGroups, PodDisruptionBudgets, ...), created through admission
    before anyone starts. ``extender``: ExtenderConfiguration keys (the shipped defaults
    otherwise; with ``replicas > 1`` leader election is turned on with
    :data:`FAST_LEADER_ELECTION` timings unless configured). ``processes``: run the replicas as
    ``kube-extender serve`` processes instead of in this process (``extender_executable``: which
    ``kube-extender``; default: the one next to this Python). ``version``: the emulated
    kube-scheduler's ("1.29" or "1.30"); ``scheduler``: further :class:`SchedulerConfig` fields.
    ``scheduler_delay``/``extender_delay``: watch delivery delays of each side's informer (see
    :meth:`set_delays`). ``seed``: the scheduler's tie-breaking. ``workdir``: kubeconfigs,
    configurations and process logs (default: a temporary directory, removed on stop)."""

    def __init__(self, *, objects: Iterable[Mapping[str, Any]] = (), extender: Mapping[str, Any] | None = None,
                 replicas: int = 1, processes: bool = False, version: str = "1.30",
                 scheduler: Mapping[str, Any] | None = None, scheduler_delay: Delay = 0.0,
                 extender_delay: Delay = 0.0, seed: int = 0, workdir: str | Path | None = None,
                 sync_timeout: float = 30.0, probe_period: float = 0.05, scheduler_events: bool = True,
                 request_log_size: int = 500_000, extender_executable: str | Path | None = None) -> None:
        if replicas < 1:
            raise ValueError("replicas must be at least 1")
        self.objects = [clone(dict(o)) for o in objects]
        config = dict(extender or {})
        if replicas > 1:
            config["leaderElection"] = {"enabled": True, **FAST_LEADER_ELECTION, **dict(config.get("leaderElection") or {})}
        self.extender_config = config
        self.replica_count = replicas
        self.processes = processes
        self.extender_executable = extender_executable
        self.version = version
        self.scheduler_overrides = dict(scheduler or {})
        self.seed = seed
        self.sync_timeout = sync_timeout
        self.probe_period = probe_period
        self.scheduler_events = scheduler_events
        self._delays: dict[str, Delay] = {SCHEDULER_AGENT: scheduler_delay, EXTENDER_AGENT: extender_delay}
        self._delay_rules: dict[str, Any] = {}
        self._own_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="kube-extender-harness-") if workdir is None else workdir)
        self.api = FakeApiServer(request_log_size=request_log_size, bookmark_interval=1.0,
                                 crds=("podgroups", "elasticquotas"))
        self.t0 = 0.0
        self.recorder: Recorder | None = None
        self.replicas: list[Replica] = []
        self.service: ServiceTransport | None = None
        self.view: ApiClusterView | None = None
        self.scheduler: Scheduler | None = None
        self.summary: RunSummary | None = None
        self._thread: threading.Thread | None = None
        self._timeline: _Timeline | None = None

    # ---- life cycle ------------------------------------------------------------------------------

    def __enter__(self) -> Harness:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start everything and wait until every side has synced (:class:`HarnessError` if not
        within ``sync_timeout``)."""
        self.t0 = time.time()
        config = parse_config({**CONFIG_HEADER, **self.extender_config})
        devices = DeviceAccounting.from_config(config)
        self.recorder = Recorder(config.managed_names, self.t0, devices=devices,
                                 ledger_keys=[ledger.key(config.annotation_prefix)]
                                 + ([devices.assignment] if devices is not None else []))
        self.api.start()
        self.api.on_commit(self.recorder.commit)
        for ns in ("default", "kube-system"):
            self.api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        for obj in self.objects:
            self._create(obj, seed=True)
        self.set_delays(scheduler=self._delays[SCHEDULER_AGENT], extender=self._delays[EXTENDER_AGENT])
        self._timeline = _Timeline(self.now)
        self.replicas = [self._replica(f"extender-{i}") for i in range(self.replica_count)]
        for replica in self.replicas:
            replica.start()
        self.service = ServiceTransport(self.replicas, self.probe_period)
        if not self.wait_until(lambda: bool(self.service and self.service.probe()), self.sync_timeout):
            raise HarnessError(f"no extender replica became ready within {self.sync_timeout:g}s "
                               f"(logs, if any, in {self.workdir})")
        self._start_scheduler(config)

    def _replica(self, name: str) -> Replica:
        if self.processes:
            return ProcessExtender(self.api, self.extender_config, name=name, workdir=self.workdir,
                                   executable=self.extender_executable)
        return InProcessExtender(self.api, self.extender_config, name=name, workdir=self.workdir)

    def _start_scheduler(self, config: ExtenderConfig) -> None:
        assert self.recorder is not None and self.service is not None
        client = KubeClient(self.api.api_client(), user_agent=scheduler_user_agent(self.version))
        self.view = ApiClusterView(client, events=self.scheduler_events)
        spec = ExtenderSpec.from_dict(scheduler_entry(config), "extenders[0]", transport=self.service)
        fields = {"stop_when_settled": False, **self.scheduler_overrides}
        cfg = SchedulerConfig(extenders=(spec,), version=self.version, seed=self.seed, **fields).validate()
        self.scheduler = Scheduler(cfg, self.view, clock=RealClock())
        self.scheduler.on_cycle.append(self.recorder.cycle)
        if not self.view.wait_synced(self.sync_timeout):
            raise HarnessError(f"the scheduler's informer did not sync within {self.sync_timeout:g}s")
        self._thread = threading.Thread(target=self._run_scheduler, name="kube-scheduler", daemon=True)
        self._thread.start()

    def _run_scheduler(self) -> None:
        assert self.scheduler is not None
        self.summary = self.scheduler.run(until_stopped=True)

    def stop(self) -> None:
        """Stop everything (idempotent): the scheduler first, then the replicas, then the API server."""
        if self.scheduler is not None:
            self.scheduler.stop()
            if self._thread is not None:
                self._thread.join(timeout=10)
            self.scheduler.close()
        if self.view is not None:
            self.view.stop()
        if self.service is not None:
            self.service.close()
        for replica in self.replicas:
            replica.stop()
        if self._timeline is not None:
            self._timeline.stop()
        self.api.stop()
        self.scheduler = self.view = self.service = self._timeline = None
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # ---- the cluster's weather ---------------------------------------------------------------------

    def set_delays(self, *, scheduler: Delay | None = None, extender: Delay | None = None) -> None:
        """Watch delivery delays at the API server (seconds, or a callable drawn per event): every
        watch event reaches kube-scheduler's informer ``scheduler`` seconds after it was
        committed, and every extender replica's ``extender`` seconds after; order is kept. None
        leaves a side unchanged. Changes apply to events not yet delivered."""
        for agent, delay in ((SCHEDULER_AGENT, scheduler), (EXTENDER_AGENT, extender)):
            if delay is None:
                continue
            old = self._delay_rules.pop(agent, None)
            if old is not None:
                old.remove()
            self._delays[agent] = delay
            self._delay_rules[agent] = self.api.delay_watches(agent, delay)

    def _create(self, obj: Mapping[str, Any], seed: bool = False) -> dict[str, Any]:
        """Create through admission (defaults, priority from the PriorityClass); a seeded pod
        with ``spec.nodeName`` is then marked Running, as its kubelet would."""
        body = clone(dict(obj))
        rt = self.api.resource_type(str(body.get("kind")), body.get("apiVersion"))
        namespace = (body.get("metadata") or {}).get("namespace") or ("default" if rt.namespaced else None)
        stored = clone(self.api.store.create(rt, namespace, body, admit=True))
        if seed and rt.kind == "Pod" and (stored.get("spec") or {}).get("nodeName"):
            meta = stored["metadata"]
            stored = self.api.patch("Pod", meta["namespace"], meta["name"], {"status": {"phase": "Running"}}, "merge")
        return stored

    def create_pod(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        """Create a pod now (through admission, as a user's create would be); returns it as stored."""
        return self._create(pod)

    def delete_pod(self, name: str, namespace: str = "default") -> bool:
        """Delete a pod now (immediately: no grace period); False when it did not exist."""
        return self.api.delete("Pod", namespace, name) is not None

    def at(self, t: float, fn: Callable[[], Any], label: str = "") -> None:
        """Run ``fn`` at harness time ``t`` (seconds since start) on the harness's timeline thread;
        an exception is kept in :attr:`action_errors`."""
        assert self._timeline is not None, "start the harness first"
        self._timeline.at(t, label or getattr(fn, "__name__", "action"), fn)

    def after(self, seconds: float, fn: Callable[[], Any], label: str = "") -> None:
        self.at(self.now() + seconds, fn, label)

    def pending_actions(self) -> int:
        return self._timeline.pending() if self._timeline is not None else 0

    @property
    def action_errors(self) -> list[tuple[str, BaseException]]:
        return list(self._timeline.errors) if self._timeline is not None else []

    # ---- extender replicas ---------------------------------------------------------------------------

    def leader(self) -> Replica | None:
        """The replica kube-scheduler's calls go to now (the first ready one), if any."""
        if self.service is None:
            return None
        names = self.service.probe()
        return next((r for r in self.replicas if names and r.name == names[0]), None)

    def kill_extender(self, index: int = 0) -> None:
        """Crash replica ``index`` (SIGKILL for a process; its lease is not released)."""
        self.replicas[index].kill()

    def restart_extender(self, index: int = 0) -> None:
        self.replicas[index].start()

    # ---- time and waiting ------------------------------------------------------------------------------

    def now(self) -> float:
        """Seconds since the harness started (the time base of every observation)."""
        return time.time() - self.t0

    def wait_until(self, predicate: Callable[[], Any], timeout: float, poll: float = 0.02) -> bool:
        """Poll ``predicate`` until it is true (True) or ``timeout`` seconds pass (False)."""
        deadline = time.monotonic() + timeout
        while True:
            if predicate():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll)

    # ---- observations ------------------------------------------------------------------------------------

    def pod(self, name: str, namespace: str = "default") -> PodLife:
        """The latest pod created as ``namespace/name`` (KeyError if none was)."""
        assert self.recorder is not None
        life = self.recorder.pod(f"{namespace}/{name}")
        if life is None:
            raise KeyError(f"no pod {namespace}/{name} was created")
        return life

    @property
    def lives(self) -> list[PodLife]:
        return list(self.recorder.lives) if self.recorder is not None else []

    @property
    def releases(self) -> list[Release]:
        return list(self.recorder.releases) if self.recorder is not None else []

    @property
    def violations(self) -> list[Violation]:
        return list(self.recorder.violations) if self.recorder is not None else []

    @property
    def leaks(self) -> list[Leak]:
        """Writes that left the extender's ledger annotations on a pod that is not bound."""
        return list(self.recorder.leaks) if self.recorder is not None else []

    def pending(self) -> list[PodLife]:
        """Pods neither bound nor finished, in creation order."""
        return [life for life in self.lives if life.pending]

    def request_counts(self, user_agent: str = "") -> dict[tuple[str, str, str], int]:
        """API requests so far by (User-Agent, verb, resource), only agents starting with ``user_agent``."""
        return {k: n for k, n in self.api.request_counts().items() if k[0].startswith(user_agent)}
