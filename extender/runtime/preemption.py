"""The preempt verb: kube-scheduler's candidates, refined so the managed resources really fit.

Victims of equal or higher priority are never named; ``preemptionPolicy: Never`` preempts
nothing; a candidate the Preemption plugins cannot make room on is dropped; the PDB violation
count kube-scheduler sent is adjusted by what the plugins changed.
"""

from __future__ import annotations

from typing import Any, Mapping

from extender.framework.cycle_state import CycleState
from extender.framework.interfaces import Victim
from extender.framework.resources import QuantityError
from extender.framework.status import Code, Status
from extender.framework.views import PodInfo
from extender.runtime.context import VerbContext
from extender.runtime.explain import Verdict
from extender.runtime.outcomes import NOT_IN_CACHE, Candidate, EngineError, InvalidRequest, PreemptDecision


class Preemption(VerbContext):
    """Refines kube-scheduler's preemption candidates with the Preemption plugins."""

    def preempt(self, raw_pod: Mapping[str, Any], candidates: Mapping[str, Candidate]) -> dict[str, PreemptDecision]:
        """Keep the candidates where evicting lower-priority victims lets the pod fit; never name a
        victim of equal or higher priority; nothing at all for ``preemptionPolicy: Never``."""
        pod = self.pods.parse(raw_pod)
        if pod.preemption_policy == "Never":
            return {}
        fw = self.profiles.framework_for(pod)
        snapshot = self.cache.snapshot()
        state = CycleState()
        out: dict[str, PreemptDecision] = {}
        dropped: dict[str, Status] = {}
        # the cycle's PreFilter first, as kube-scheduler's preemption reuses its cycle's state:
        # Filter plugins asked "would it fit then?" find their data and SKIPs; a pod no node can
        # take (unresolvable) is preempted for nowhere, as kube-scheduler excludes such nodes
        _, st = fw.run_pre_filter(state, pod, snapshot)
        if st.code is Code.ERROR:
            raise EngineError(st.message)
        unresolvable = st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        if unresolvable:
            dropped = dict.fromkeys(candidates, st)
        for node_name, cand in ({} if unresolvable else candidates).items():
            node = snapshot.get(node_name)
            if node is None:
                dropped[node_name] = NOT_IN_CACHE
                continue
            victims: list[Victim] = []
            for uid, raw in cand.victims:
                known = node.pods.get(uid)
                if known is None and raw is not None:
                    try:
                        known = PodInfo.from_pod(raw, self.handle.managed_resources)
                    except (ValueError, QuantityError, TypeError, AttributeError) as exc:
                        raise InvalidRequest(f"NodeNameToVictims[{node_name}]: {exc}") from exc
                if known is not None and known.priority >= pod.priority:
                    continue
                victims.append(Victim(uid, known))
            if not victims:
                dropped[node_name] = Status.unresolvable("no victims of lower priority than the preemptor")
                continue
            chosen, st = fw.run_preemption(state, pod, node, victims)
            if st.code is Code.ERROR:
                raise EngineError(st.message)
            if not st.ok or not chosen:
                dropped[node_name] = st if not st.ok else Status.unresolvable("no victims left")
                continue
            out[node_name] = PreemptDecision([v.uid for v in chosen],
                                             self._pdb_count(cand.num_pdb_violations, victims, chosen))
        self.explain.record(pod.key, Verdict("preempt", pod.uid, self.handle.clock.now(), sorted(out), dropped,
                                             outcome=f"{len(out)} of {len(candidates)} candidates kept"))
        return out

    def _pdb_count(self, proposed_count: int, proposed: list[Victim], chosen: list[Victim]) -> int:
        """kube-scheduler's count for its proposal, adjusted by what the plugins changed: the
        violations among the victims the extender knows, chosen minus proposed (counted as
        kube-scheduler counts them: it deletes its victims, no Eviction)."""
        def violations(vs: list[Victim]) -> int:
            return len(self.handle.pdb_violations([v.pod for v in vs if v.pod is not None], evicting=False))
        delta = violations(chosen) - violations(proposed)
        return max(0, proposed_count + delta)
