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

A pass runs when the cluster changes (the cache generation moved) or every ``interval`` seconds.
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


class Admitter:
    def __init__(self, engine: Engine, gate: str, strategy: str = "BestEffortFIFO") -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}")
        self.engine = engine
        self.gate = gate
        self.strategy = strategy
        self.last: AdmissionResult = AdmissionResult([], {})
        self._stop = threading.Event()

    def gated(self) -> list[PodInfo]:
        """Pending pods carrying the extender's gate, in the default profile's QueueSort order."""
        pods = [p for p in self.engine.cache.pending_pods()
                if any(isinstance(g, dict) and g.get("name") == self.gate
                       for g in (p.raw.get("spec") or {}).get("schedulingGates") or ())]
        return self.engine.frameworks[self.engine.default_profile].sorted_queue(pods)

    def run_once(self) -> AdmissionResult:
        admitted: list[str] = []
        held: dict[str, str] = {}
        blocked: set[str] = set()
        for pod in self.gated():
            wants = set(pod.requests)
            if self.strategy == "StrictFIFO" and wants & blocked:
                held[pod.key] = "behind a pod of the queue that wants the same resources (StrictFIFO)"
                continue
            st = self.engine.framework_for(pod).run_pre_enqueue(pod)
            if not st.ok:
                held[pod.key] = f"{st.plugin}: {st.message}" if st.plugin else st.message
                if self.strategy == "StrictFIFO":
                    blocked |= wants
                continue
            try:
                self.engine.handle.writer.remove_scheduling_gate(pod.namespace, pod.name, self.gate, uid=pod.uid)
            except WriteError as exc:
                held[pod.key] = f"removing the gate failed: {exc}"
                continue
            admitted.append(pod.key)
            log.info("admitted", extra={"pod": pod.key, "gate": self.gate})
        self.last = AdmissionResult(admitted, held)
        return self.last

    def run_forever(self, interval: float, leading: Callable[[], bool]) -> None:
        """Admit after every cluster change, and at least every ``interval`` seconds; leader only."""
        seen, last = -1, float("-inf")
        while not self._stop.wait(0.2):
            changes, now = self.engine.cache.change_count(), time.monotonic()
            if changes == seen and now - last < interval:
                continue
            seen, last = changes, now
            if leading():
                try:
                    self.run_once()
                except Exception:  # noqa: BLE001 - the loop must survive anything
                    log.exception("admission pass failed")

    def stop(self) -> None:
        self._stop.set()
