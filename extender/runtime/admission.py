"""Admission through scheduling gates: the extender's PreEnqueue, with an unmodified kube-scheduler.

Pods created with the extender's gate (``spec.schedulingGates: [{name: kube-extender.io/admission}]``)
are never tried by kube-scheduler. The Admitter looks at them in QueueSort order (priority, then
age) and runs the PreEnqueue plugins of each pod's profile; a pod every plugin admits gets the
extender's gate removed (and only that gate: other controllers' gates stay), after which
kube-scheduler schedules it within a fraction of a second.

Strategies:

* ``StrictFIFO``: a pod that is not admitted blocks the pods behind it that want any of the same
  managed resources (a big job is not starved by a stream of small ones).
* ``BestEffortFIFO``: a pod that is not admitted is skipped; those behind it are still considered.

Queueing hints: a pod a PreEnqueue plugin held is evaluated again only after a cluster event that
plugin declared (``events_to_register`` / ``queueing_hint``, see ``extender.framework.events``)
or a change to the pod itself; in between it keeps its verdict (and, under StrictFIFO, its place
at the head). A pass runs when the cluster changed, at most every ``interval`` seconds; every
``resync`` seconds all gated pods are evaluated, events or not.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable

from extender.framework.handle import WriteError
from extender.framework.views import PodInfo
from extender.runtime.engine import Engine

log = logging.getLogger(__name__)

STRATEGIES = ("StrictFIFO", "BestEffortFIFO")


@dataclass
class AdmissionResult:
    admitted: list[str]
    held: dict[str, str]
    """pod key -> why it stays gated."""
    evaluated: int = 0
    """Pods run through PreEnqueue in this pass (the others kept their verdict)."""


@dataclass(frozen=True)
class _Verdict:
    plugin: str
    reason: str


class Admitter:
    def __init__(self, engine: Engine, gate: str, strategy: str = "BestEffortFIFO") -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}")
        self.engine = engine
        self.gate = gate
        self.strategy = strategy
        self.last: AdmissionResult = AdmissionResult([], {})
        self._stop = threading.Event()
        self._seq: int | None = None
        self._verdicts: dict[str, _Verdict] = {}

    def gated(self) -> list[PodInfo]:
        """Pending pods carrying the extender's gate, in the default profile's QueueSort order."""
        pods = [p for p in self.engine.cache.pending_pods()
                if any(isinstance(g, dict) and g.get("name") == self.gate
                       for g in (p.raw.get("spec") or {}).get("schedulingGates") or ())]
        return self.engine.frameworks[self.engine.default_profile].sorted_queue(pods)

    def run_once(self, full: bool = False) -> AdmissionResult:
        """One pass over the gated pods in queue order. ``full``: evaluate every pod, not only
        those the events since the last pass may help."""
        full = full or self._seq is None
        changes, self._seq, complete = self.engine.cache.changes_since(None if full else self._seq)
        full = full or not complete
        admitted: list[str] = []
        held: dict[str, str] = {}
        blocked: set[str] = set()
        evaluated = 0
        gated = self.gated()
        live = {p.uid for p in gated}
        self._verdicts = {uid: v for uid, v in self._verdicts.items() if uid in live}
        for pod in gated:
            wants = set(pod.requests)
            if self.strategy == "StrictFIFO" and wants & blocked:
                held[pod.key] = "behind a pod of the queue that wants the same resources (StrictFIFO)"
                continue
            fw = self.engine.framework_for(pod)
            verdict = self._verdicts.get(pod.uid)
            if verdict is not None and not full and not fw.wakes(verdict.plugin, pod, changes):
                held[pod.key] = verdict.reason
                if self.strategy == "StrictFIFO":
                    blocked |= wants
                continue
            evaluated += 1
            st = fw.run_pre_enqueue(pod)
            if not st.ok:
                reason = f"{st.plugin}: {st.message}" if st.plugin else st.message
                held[pod.key] = reason
                self._verdicts[pod.uid] = _Verdict(st.plugin or "", reason)
                if self.strategy == "StrictFIFO":
                    blocked |= wants
                continue
            self._verdicts.pop(pod.uid, None)
            try:
                self.engine.handle.writer.remove_scheduling_gate(pod.namespace, pod.name, self.gate, uid=pod.uid)
            except WriteError as exc:
                held[pod.key] = f"removing the gate failed: {exc}"
                continue
            admitted.append(pod.key)
            log.info("admitted", extra={"pod": pod.key, "gate": self.gate})
        metrics = self.engine.metrics
        if metrics is not None:
            metrics.admission_evaluations.labels("evaluated").inc(evaluated)
            metrics.admission_evaluations.labels("skipped").inc(len(gated) - evaluated)
        self.last = AdmissionResult(admitted, held, evaluated)
        return self.last

    def run_forever(self, interval: float, leading: Callable[[], bool], resync: float = 60.0) -> None:
        """Admit after cluster changes (at most every ``interval`` seconds) and evaluate every gated
        pod every ``resync`` seconds; leader only."""
        seen, last, last_full = -1, float("-inf"), float("-inf")
        while not self._stop.wait(min(0.2, interval)):
            changes, now = self.engine.cache.change_count(), time.monotonic()
            full = now - last_full >= resync
            if not full and (changes == seen or now - last < interval):
                continue
            if not leading():
                self._seq = None  # a new leader starts with a full pass
                continue
            seen, last = changes, now
            if full:
                last_full = now
            try:
                self.run_once(full=full)
            except Exception:  # noqa: BLE001 - the loop must survive anything
                log.exception("admission pass failed")

    def stop(self) -> None:
        self._stop.set()
