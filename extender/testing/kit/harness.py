"""PluginHarness: a plugin inside a real kube-extender, asked the four extender verbs.

The harness builds the app ``kube-extender serve`` builds (``create_app``: the cluster cache, the
engine, a Framework per profile with the default plugins) over an in-memory cluster and a fake
clock, with the plugins under test registered and enabled at every extension point they
implement. It then asks what kube-scheduler asks, and returns verdicts instead of wire replies::

    h = PluginHarness(SPEC, args={"AcceleratorModel": {"prices": {"A100": 3}}},
                      nodes=[make_node("n1").labels(**{"nvidia.com/gpu.product": "A100"}).alloc(gpu=4).obj()])
    pod = make_pod("p").req(gpu=1).obj()
    verdict = h.filter(pod)          # verdict.feasible, verdict.rejected["n2"].plugin / .reasons
    scores = h.prioritize(pod)       # {"n1": 100, ...}: the extender's 0..100 (before the wire's 0..10)
    kept = h.preempt(pod)            # {"n1": ["default/victim"]}: the victims the extender would evict
    binding = h.bind(pod, "n1")      # binding.outcome: "bound", "failed" (binding.error) or "waiting"

A bind whose pod waits in Permit comes back ``waiting`` (``binding.waiting_for`` names the
plugins); it ends when the plugins allow it (another bind, say), or when the test moves the fake
clock past its deadline with ``advance``. ``binding.result()`` waits for the end. Like every
kube-extender bind, a Permit wait also lasts at most the bind's budget in real time
(``extender.httpTimeout`` minus a second: 4 s by default), so allow it or ``advance`` soon after.

Nothing here is a mock: Filter runs over the cache's snapshot with held capacity counted, a bind
assumes the pod, runs Reserve, Permit, PreBind, Bind and PostBind and writes the Binding to the
in-memory cluster (``h.cluster``), and a failure unreserves, as in production.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from extender.app import builtin_registry, create_app
from extender.cluster.memory import MemoryCluster
from extender.config.model import parse_config
from extender.framework.clock import FakeClock
from extender.framework.registration import PluginSpec
from extender.framework.status import Status
from extender.runtime.engine import Candidate
from extender.runtime.registry import Registry
from extender.testing.kit.builders import cluster_objects

SETTLE_SECONDS = 30.0
"""How long (real time) the harness waits for a bind to finish or to start waiting in Permit,
and for a released bind to finish, before it declares the plugin stuck."""


def registry_of(specs: Sequence[PluginSpec]) -> Registry:
    """The plugins under test, to register besides the built-in ones (which may be among them)."""
    builtins = builtin_registry()
    return Registry([s for s in specs if builtins.get(s.name) is not s])


class HarnessError(RuntimeError):
    """The harness could not do what it was asked (a bind that neither ends nor waits)."""


@dataclass
class FilterVerdict:
    """The filter verb's answer, per node: ``feasible`` names the nodes that pass, in the order
    asked; ``rejected`` maps every other node to the Status that rejected it (``.plugin`` names
    the plugin, ``.reasons`` its texts, ``.code`` UNSCHEDULABLE or UNSCHEDULABLE_AND_UNRESOLVABLE).
    ``error``: a plugin failed (the whole answer is an error, as on the wire). ``nominated``: the
    node a PostFilter plugin nominated when nothing fit."""

    feasible: list[str] = field(default_factory=list)
    rejected: dict[str, Status] = field(default_factory=dict)
    error: str = ""
    nominated: str | None = None

    def reasons(self, node: str) -> tuple[str, ...]:
        """Why ``node`` was rejected (empty when it was not)."""
        st = self.rejected.get(node)
        return st.reasons if st is not None else ()


class Binding:
    """One bind verb in flight. ``outcome``: ``bound``, ``failed`` (``error`` says why, as the
    wire's Error would), or ``waiting`` in Permit (``waiting_for`` names the plugins)."""

    def __init__(self, harness: PluginHarness, pod: Mapping[str, Any], node: str) -> None:
        meta = pod["metadata"]
        self.namespace = str(meta.get("namespace") or "default")
        self.name = str(meta["name"])
        self.uid = str(meta.get("uid") or "")
        self.node = node
        self._harness = harness
        self._error: str | None = None
        self._thread = threading.Thread(target=self._run, name=f"bind {self.namespace}/{self.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self._error = self._harness.engine.bind(self.namespace, self.name, self.uid, self.node)

    @property
    def outcome(self) -> str:
        if self._thread.is_alive():
            return "waiting"
        return "bound" if self._error == "" else "failed"

    @property
    def error(self) -> str:
        """The bind's error text ("" when bound or still waiting)."""
        return self._error or ""

    @property
    def waiting_for(self) -> list[str]:
        """The Permit plugins the pod waits for (empty when it does not wait)."""
        wp = self._harness.engine.handle.waiting_pods.get(self.uid)
        return wp.pending_plugins() if wp is not None and self._thread.is_alive() else []

    def result(self, timeout: float = SETTLE_SECONDS) -> str:
        """Wait (real time) for the bind to end; its outcome."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise HarnessError(f"the bind of {self.namespace}/{self.name} did not end within {timeout:g} s")
        return self.outcome

    def _settle(self) -> None:
        """Return once the bind has ended or its pod waits in Permit with its plugins decided."""
        deadline = time.monotonic() + SETTLE_SECONDS
        while self._thread.is_alive():
            if self.waiting_for:
                return
            if time.monotonic() > deadline:
                raise HarnessError(f"the bind of {self.namespace}/{self.name} neither ended nor waited in Permit "
                                   f"within {SETTLE_SECONDS:g} s")
            time.sleep(0.001)

    def __repr__(self) -> str:
        return f"Binding({self.namespace}/{self.name} -> {self.node}: {self.outcome}{': ' + self.error if self.error else ''})"


class PluginHarness:
    """``specs``: the plugins under test. ``args``: plugin name -> its ``pluginConfig`` args.
    ``plugins``: the profile's ``plugins`` section (default: each spec under ``multiPoint``, next
    to the default plugins PrioritySort, NodeResources and DefaultBinder). ``config``: more
    ExtenderConfiguration keys (``managedResources``, ``extender``, ...; default managed resource:
    ``example.com/gpu``). ``nodes``, ``pods``, ``pod_groups``: the cluster (builders' dicts).
    Raises ConfigError as ``kube-extender serve`` would refuse the configuration."""

    def __init__(self, *specs: PluginSpec, args: Mapping[str, Mapping[str, Any]] | None = None,
                 nodes: Sequence[dict[str, Any]] = (), pods: Sequence[dict[str, Any]] = (),
                 pod_groups: Sequence[dict[str, Any]] = (), plugins: Mapping[str, Any] | None = None,
                 config: Mapping[str, Any] | None = None, clock: FakeClock | None = None) -> None:
        self.clock = clock or FakeClock()
        self.cluster = MemoryCluster(cluster_objects(list(nodes), list(pods), list(pod_groups)))
        profile: dict[str, Any] = {
            "schedulerName": "default-scheduler",
            "plugins": dict(plugins) if plugins is not None else
            {"multiPoint": {"enabled": [{"name": s.name} for s in specs]}},
            "pluginConfig": [{"name": name, "args": dict(a)} for name, a in (args or {}).items()]}
        raw = {"apiVersion": "kube-extender.io/v1alpha1", "kind": "ExtenderConfiguration", "profiles": [profile],
               **(config or {})}
        self.config = parse_config(raw, "<PluginHarness>")
        self.app = create_app(self.config, source=self.cluster, clock=self.clock, registry=registry_of(specs),
                              background=False)
        self.engine = self.app.extensions["kube_extender"].engine
        self._bindings: list[Binding] = []

    # ---- the cluster ------------------------------------------------------------------------

    def add(self, *objects: dict[str, Any]) -> None:
        """Add nodes, pods or pod groups to the cluster (by their shape: a pod has ``spec.containers``,
        a pod group ``kind: PodGroup``; the rest are nodes)."""
        for obj in objects:
            if obj.get("kind") == "PodGroup":
                self.cluster.add_pod_group(obj)
            elif "containers" in (obj.get("spec") or {}):
                self.cluster.add_pod(obj)
            else:
                self.cluster.add_node(obj)

    def node_names(self) -> list[str]:
        return sorted(n["metadata"]["name"] for n in self.cluster.nodes())

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod as the cluster holds it now (``spec.nodeName`` set once bound), or None."""
        return self.cluster.get_pod(namespace, name)

    def _ensure(self, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        if self.cluster.get_pod(str(meta.get("namespace") or "default"), meta["name"]) is None:
            self.cluster.add_pod(pod)

    # ---- the verbs --------------------------------------------------------------------------

    def filter(self, pod: dict[str, Any], nodes: Sequence[str] | None = None) -> FilterVerdict:
        """The filter verb for ``pod`` over ``nodes`` (default: every node of the cluster)."""
        names = list(nodes) if nodes is not None else self.node_names()
        outcome = self.engine.filter(pod, names)
        meta = pod["metadata"]
        verdicts = self.engine.explain.get(f"{meta.get('namespace') or 'default'}/{meta['name']}") or {}
        last = verdicts.get("filter")
        rejected = dict(last.rejected) if last is not None else {}
        feasible = set(outcome.feasible)
        return FilterVerdict([n for n in names if n in feasible], rejected, outcome.error, outcome.nominated)

    def prioritize(self, pod: dict[str, Any], nodes: Sequence[str] | None = None) -> dict[str, int]:
        """The prioritize verb: node -> 0..100, the weighted average of the profile's Score
        plugins (the wire scales it to kube-scheduler's 0..10). Raises EngineError when a Score
        plugin fails."""
        names = list(nodes) if nodes is not None else self.node_names()
        return dict(self.engine.prioritize(pod, names))

    def preempt(self, pod: dict[str, Any],
                victims: Mapping[str, Sequence[dict[str, Any]]] | None = None) -> dict[str, list[str]]:
        """The preempt verb: for each candidate node, the victims (``namespace/name``) the extender
        would evict for ``pod``; nodes it drops are absent. ``victims``: node -> the pods
        kube-scheduler proposes there (default: on every node, the pods bound to it of lower
        priority than ``pod``, as its dry run proposes them)."""
        if victims is None:
            priority = int((pod.get("spec") or {}).get("priority") or 0)
            proposed: dict[str, list[dict[str, Any]]] = {}
            for p in self.cluster.pods():
                node = (p.get("spec") or {}).get("nodeName")
                if node and int(p["spec"].get("priority") or 0) < priority:
                    proposed.setdefault(node, []).append(p)
            victims = proposed
        keys = {str(v["metadata"].get("uid")): f"{v['metadata'].get('namespace') or 'default'}/{v['metadata']['name']}"
                for vs in victims.values() for v in vs}
        candidates = {node: Candidate([(str(v["metadata"].get("uid")), v) for v in vs]) for node, vs in victims.items()}
        decisions = self.engine.preempt(pod, candidates)
        return {node: [keys.get(uid, uid) for uid in d.victims] for node, d in decisions.items()}

    def bind(self, pod: dict[str, Any], node: str) -> Binding:
        """The bind verb for ``pod`` (added to the cluster first if it is not there) on ``node``.
        Returns once the bind has ended or the pod waits in Permit."""
        self._ensure(pod)
        binding = Binding(self, pod, node)
        self._bindings.append(binding)
        binding._settle()
        return binding

    def schedule(self, pod: dict[str, Any]) -> Binding | None:
        """One scheduling attempt as kube-scheduler makes it with this extender alone: filter,
        prioritize the feasible nodes, bind to the best (ties: the first by name). None when no
        node passes filter (``filter`` says why)."""
        self._ensure(pod)
        feasible = self.filter(pod).feasible
        if not feasible:
            return None
        scores = self.prioritize(pod, feasible)
        return self.bind(pod, min(feasible, key=lambda n: (-scores.get(n, 0), n)))

    # ---- time -------------------------------------------------------------------------------

    def waiting(self) -> dict[str, list[str]]:
        """Pods waiting in Permit now: ``namespace/name`` -> the plugins they wait for."""
        return {wp.pod.key: wp.pending_plugins() for wp in self.engine.handle.waiting_pods if wp.pending_plugins()}

    def advance(self, seconds: float) -> None:
        """Move the fake clock on; pods whose Permit deadline has passed time out (their binds
        fail, unreserved), and the harness waits for those binds to end."""
        self.clock.advance(seconds)
        expired = {wp.pod.uid for wp in list(self.engine.handle.waiting_pods) if wp.expire()}
        for binding in self._bindings:
            if binding.uid in expired:
                binding.result()
