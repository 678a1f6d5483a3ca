"""The binding cycle (the bind verb) and the upkeep of what it writes.

* ``bind`` (concurrent, unbounded in kube-scheduler): find the pod, re-validate the node against
  current state - capacity the queue holds against it counted - and assume it atomically ->
  Reserve -> Permit (maybe wait) -> PreBind (+ the allocation ledger annotation) -> Bind ->
  PostBind -> finish_binding. Any failure: Unreserve in reverse order, forget, return the error
  text - but a Binding that may have been stored keeps its capacity held (``_unconfirmed``), and
  the pod's next bind sends that Binding again (``_send_again``). Idempotent: already bound or
  assumed on the same node is success; a second bind of a pod whose bind is in flight waits for
  the first one's result. A bound pod of higher priority clears the nominations it displaced.
* ``collect_orphans``: allocation annotations of reservations that expired unbound are removed,
  and Bindings of unknown outcome are settled by reading their pods (``settle_unconfirmed``).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Mapping

from extender.cache.cache import AssumeError
from extender.framework import ledger
from extender.framework.cycle_state import CycleState
from extender.framework.handle import WriteError
from extender.framework.status import Code, Status
from extender.framework.views import PodInfo, pod_key
from extender.metrics import Metrics
from extender.queue.unschedulable import by_plugin
from extender.runtime.context import VerbContext
from extender.runtime.explain import ExplainLog, Verdict
from extender.runtime.framework import Framework
from extender.runtime.handle import EngineHandle
from extender.runtime.pods import RecentPods
from extender.runtime.profiles import Profiles

log = logging.getLogger(__name__)

SETTLE_AFTER_SECONDS = 5.0
"""How long a Binding of unknown outcome is held before a read of its pod may confirm it."""

RELEASE_AFTER_SECONDS = 60.0
"""How long before a read of the pod unbound may release the hold: kube-apiserver's default
request timeout - a Binding may still be stored until then (a slow admission webhook, etcd)."""

_HELD = "its capacity on {node} stays held until the cluster shows the pod (bound or not) or the hold expires"


@dataclass
class _BindFlight:
    node: str
    done: threading.Event = field(default_factory=threading.Event)
    result: str = ""


class BindingCycle(VerbContext):
    """Binds (one cycle per pod at a time, concurrent across pods) and removes orphaned
    allocations."""

    def __init__(self, handle: EngineHandle, profiles: Profiles, pods: RecentPods, explain: ExplainLog,
                 metrics: Metrics | None = None) -> None:
        super().__init__(handle, profiles, pods, explain, metrics)
        self._inflight: dict[str, _BindFlight] = {}
        self._inflight_lock = threading.Lock()

    def bind(self, namespace: str, name: str, uid: str, node: str) -> str:
        """Run the binding cycle; returns "" on success, else the error text for ``Error``."""
        with self._inflight_lock:
            flight = self._inflight.get(uid)
            owner = flight is None
            if flight is None:
                flight = self._inflight[uid] = _BindFlight(node)
        if not owner:
            if flight.node != node:
                return f"pod {pod_key(namespace, name)} is being bound to node {flight.node}"
            if not flight.done.wait(self.handle.permit_budget()):  # answered while kube-scheduler still waits
                return f"pod {pod_key(namespace, name)}: an earlier bind to {node} is still in progress"
            return flight.result
        result = "internal error"
        try:
            result = self._bind(namespace, name, uid, node)
        except Exception as exc:  # noqa: BLE001 - reported in Error, never a crash
            log.exception("bind failed", extra={"pod": pod_key(namespace, name), "node": node})
            result = f"internal error while binding: {type(exc).__name__}: {exc}"
        finally:
            flight.result = result
            flight.done.set()
            with self._inflight_lock:
                self._inflight.pop(uid, None)
        self.explain.record(pod_key(namespace, name),
                            Verdict("bind", uid, self.handle.clock.now(), [node] if not result else [],
                                    outcome="bound" if not result else "failed", error=result))
        return result

    def _find_pod(self, namespace: str, name: str, uid: str) -> PodInfo | str:
        key = pod_key(namespace, name)
        pending = self.cache.pending_pod(namespace, name)
        if pending is not None:
            if pending.uid == uid:
                return pending
            return (f"pod {key} has UID {pending.uid}, not {uid}: it was deleted and re-created; "
                    "refusing to bind the new pod")
        seen = self.pods.get(uid)
        if seen is not None and seen.key == key:
            return seen
        return f"pod {key} (UID {uid}) is not known to the extender"

    def _bind(self, namespace: str, name: str, uid: str, node: str) -> str:
        key = pod_key(namespace, name)
        unsettled = self.cache.unconfirmed(uid)
        if unsettled is not None:
            if node != unsettled[0].node_name:
                return (f"pod {key} may be bound to {unsettled[0].node_name} already (the outcome of its Binding "
                        f"there is unknown): not binding it to {node}")
            sent = ledger.of_pod(unsettled[1], self.handle.annotation_prefix)
            if sent is not None and sent.term != self.handle.term():
                return (f"pod {key}: its Binding to {unsettled[0].node_name} of unknown outcome was decided in "
                        f"leader term {sent.term}, now {self.handle.term()}: not sent again (it stays held until "
                        "its outcome is known)")
            if self.cache.pause_unconfirmed(uid):
                return self._send_again(unsettled[0], unsettled[1])
            # the hold ended between the look and the pause (its TTL, the watch): bound as any pod
        # A reservation held only by an allocation annotation (from before a restart or leader
        # change, never bound) is no binding: assume() takes it over atomically below.
        existing = None if self.cache.is_ledger_reservation(uid) else self.cache.pod(uid)
        if existing is not None:
            if existing.node_name == node:
                return ""
            return f"pod {key} is already assigned to node {existing.node_name}"
        found = self._find_pod(namespace, name, uid)
        if isinstance(found, str):
            return found
        pod = found
        fw = self.profiles.framework_for(pod)
        state = CycleState()
        self.cache.cleanup_expired()
        _, st = fw.run_pre_filter(state, pod, self.cache.snapshot())
        if not st.ok:
            return f"pod {key} cannot be bound: {st.message}"
        term = self.handle.term()  # the view the node is judged on is this term's
        try:
            st = self.cache.assume(pod, node,
                                   check=lambda info: fw.run_filter_node(state, pod, self.queue.with_held(info, pod)))
        except AssumeError as exc:
            return f"cannot bind pod {key} to {node}: {exc}"
        if not st.ok:
            return f"node {node} no longer fits pod {key}: {st.message}"
        try:
            failed = self._reserve_to_bind(fw, state, pod, node, term)
        except BaseException:  # a failure no plugin reported: the pod must not stay assumed for ever
            try:
                fw.run_unreserve(state, pod, node)
            finally:
                self.cache.forget(pod.uid)
            raise
        if failed:
            return failed
        self.cache.finish_binding(pod.uid)
        self.queue.schedulable(pod.uid)
        fw.run_post_bind(state, pod, node)
        self._clear_displaced_nominations(pod, node)
        return ""

    def _reserve_to_bind(self, fw: Framework, state: CycleState, pod: PodInfo, node: str, term: int) -> str:
        """Reserve, Permit, PreBind (and the allocation record), Bind for ``pod`` assumed on
        ``node`` in leader term ``term``: "" when bound, else the error - after Unreserve and
        forgetting the pod. Nothing is written in a later term (leadership lost and won back
        during a Permit wait): another leader may have given the node's capacity away meanwhile,
        unseen by the view this bind was decided on; the writer's fence only asks whether this
        process leads now. A pod whose bind failed with nothing holding its capacity gets its
        admission hold back (``SchedulingQueue.assumed``)."""
        hold_again = self.queue.assumed(pod, node)
        error = self._bind_assumed(fw, state, pod, node, term)
        if error and self.cache.pod(pod.uid) is None:  # failed, and nothing holds its capacity
            hold_again()  # (a Binding of unknown outcome holds it as the allocation sent)
        return error

    def _bind_assumed(self, fw: Framework, state: CycleState, pod: PodInfo, node: str, term: int) -> str:
        key = pod.key
        st = fw.run_reserve(state, pod, node)
        if not st.ok:
            self.cache.forget(pod.uid)
            return f"reserve failed for pod {key} on {node}: {by_plugin(st)}"
        for phase in ("permit", "preBind", "bind"):
            if phase != "permit" and self.handle.term() != term:
                st = Status(Code.ERROR, (f"leadership changed while binding (term {term}, now {self.handle.term()})",),
                            plugin="extender")
            elif phase == "permit":
                st = fw.run_permit(state, pod, node)
                if st.code is Code.WAIT:
                    st = fw.wait_on_permit(pod)
            elif phase == "preBind":
                st = fw.run_pre_bind(state, pod, node)
                if st.ok:
                    st = self._record_allocation(state, pod, node)
            else:
                st = fw.run_bind(state, pod, node)
                if isinstance(st.error, WriteError) and st.error.uncertain:
                    seen = self.cache.pod(pod.uid)
                    if seen is not None and seen.node_name == node and not self.cache.is_assumed(pod.uid):
                        return ""  # the watch showed it bound there meanwhile: the Binding was stored
                    return self._unconfirmed(fw, state, pod, node, st)
            if not st.ok:
                fw.run_unreserve(state, pod, node)
                self.cache.forget(pod.uid)
                # a victim rejected in Permit is recorded going (``eviction.evict``); it is on no
                # node now, and kept going it would count as leaving wherever it binds next
                self.handle.evictions.discard(pod.uid)
                return f"{phase} failed for pod {key} on {node}: {by_plugin(st)}"
        return ""

    def _unconfirmed(self, fw: Framework, state: CycleState, pod: PodInfo, node: str, st: Status) -> str:
        """A Binding that may have been stored, nobody can tell (``WriteError.uncertain``): the
        capacity stays held as the allocation the Binding carried (``ClusterCache.keep_unconfirmed``)
        - released, a second pod could be placed on what the pod may hold -, the plugins
        unreserve as for any failed bind (``binding_outcome_unknown`` set), and kube-scheduler is
        told the bind failed: it retries the pod, whose next bind sends the same Binding again
        (``_send_again``), unless the watch or the upkeep's read (``settle_unconfirmed``) settles
        it first."""
        held = self.cache.keep_unconfirmed(pod.uid, {k: v for k, v in state.pod_annotations.items() if v is not None})
        state.binding_outcome_unknown = held
        fw.run_unreserve(state, pod, node)
        error = f"bind failed for pod {pod.key} on {node}: {by_plugin(st)}"
        if not held:
            return error
        log.warning("binding outcome unknown: capacity kept", extra={"pod": pod.key, "node": node})
        return f"{error}; {_HELD.format(node=node)}"

    def _send_again(self, pod: PodInfo, annotations: Mapping[str, str]) -> str:
        """kube-scheduler retries a pod whose Binding's outcome is unknown: that Binding is sent
        again - the same node and annotations, which the hold keeps - rather than a new cycle,
        which could choose other devices than a stored first Binding did. Stored (now or before):
        the hold becomes an ordinary assumption. A conflict (the pod gone, bound elsewhere,
        another UID): released. Unknown again: held, its wait and TTL from now. Refused otherwise
        (throttled, an admission webhook, a 5xx read back unbound, not the leader): that says
        nothing of the first Binding - held as it was. The hold does not expire while the
        Binding is under way (the caller paused the hold: ``pause_unconfirmed``). ``_bind``
        refuses another node while the first Binding may stand (filter offers only its node
        meanwhile)."""
        node = pod.node_name
        try:
            self.handle.writer.bind(pod.namespace, pod.name, pod.uid, node, annotations)
        except WriteError as exc:
            if exc.uncertain:  # this one too may land late: a read must wait as long again
                self.cache.renew_unconfirmed(pod.uid)
            elif exc.conflict:
                self.cache.forget(pod.uid)
                return f"bind failed for pod {pod.key} on {node}: {exc}"
            else:
                self.cache.resume_unconfirmed(pod.uid)
            return f"bind failed for pod {pod.key} on {node}: {exc}; {_HELD.format(node=node)}"
        except BaseException:
            self.cache.resume_unconfirmed(pod.uid)
            raise
        self.cache.confirm_written(pod.uid)
        self.queue.schedulable(pod.uid)
        self._clear_displaced_nominations(pod, node)
        return ""

    def settle_unconfirmed(self, min_age: float = SETTLE_AFTER_SECONDS,
                           release_age: float = RELEASE_AFTER_SECONDS) -> int:
        """Read each pod whose Binding's outcome has been unknown for ``min_age`` seconds (on the
        leader, from the upkeep loop): bound where held - the hold becomes an ordinary assumption
        the watch confirms -; unbound, gone or bound elsewhere - released, and kube-scheduler may
        place the pod anew - but only once the hold is ``release_age`` old (a read cannot tell a
        Binding not stored from one the API server is still storing; the TTL, when shorter, ends
        the hold first); unreadable: held still. A bind of the pod in flight is waited for, not
        raced. Returns how many were settled."""
        settled = 0
        for pod, _ in self.cache.unconfirmed_holds(older_than=min_age):
            with self._inflight_lock:
                if pod.uid in self._inflight:
                    continue  # its bind is settling it
                flight = self._inflight[pod.uid] = _BindFlight(
                    pod.node_name, result=f"pod {pod.key}: the outcome of its Binding to {pod.node_name} is "
                                          "still unknown; try again")  # "" only once it is seen bound
            try:
                now = self.cache.unconfirmed(pod.uid)
                if now is None or now[0].node_name != pod.node_name or not self.cache.pause_unconfirmed(pod.uid):
                    # settled meanwhile (a bind of it, the watch or the TTL between the list and this look)
                    flight.result = f"pod {pod.key}: its hold on {pod.node_name} ended meanwhile; try again"
                    continue
                try:
                    node = self.handle.writer.bound_node(pod.namespace, pod.name, pod.uid)
                except BaseException as exc:
                    self.cache.resume_unconfirmed(pod.uid)
                    if not isinstance(exc, WriteError):
                        raise
                    log.info("binding outcome still unknown", extra={"pod": pod.key, "error": str(exc)})
                    continue
                if node == pod.node_name:
                    self.cache.confirm_written(pod.uid)
                    flight.result = ""
                elif self.cache.unconfirmed_age(pod.uid) < release_age:
                    self.cache.resume_unconfirmed(pod.uid)  # the Binding may still be stored
                    continue
                else:
                    self.cache.forget(pod.uid)
                    # kube-scheduler may hold the pod back for want of that node (filter offered it
                    # nothing else): no cluster event says it may go anywhere now, so it is touched
                    self.queue.requeue_after(pod, 0)
                    flight.result = f"pod {pod.key}: its earlier Binding to {pod.node_name} was not stored; try again"
                settled += 1
                log.info("binding outcome settled", extra={"pod": pod.key, "node": pod.node_name,
                                                           "bound": node == pod.node_name})
            finally:
                flight.done.set()
                with self._inflight_lock:
                    self._inflight.pop(pod.uid, None)
        return settled

    def _clear_displaced_nominations(self, bound: PodInfo, node: str) -> None:
        """A pod of higher priority took capacity on ``node``: nominations of lower-priority pods
        that no longer fit there are cleared (they may preempt elsewhere), as the seeds define."""
        info = self.cache.snapshot().get(node)
        if info is None:
            return
        for nominee in sorted(self.queue.nominated(node), key=lambda p: -p.priority):
            if nominee.priority >= bound.priority:
                continue
            fw = self.profiles.framework_for(nominee)
            state = CycleState()
            _, st = fw.run_pre_filter(state, nominee, self.cache.snapshot())
            if st.ok:
                st = fw.run_filter_node(state, nominee, self.queue.with_held(info, nominee))
            if not st.code.is_rejection:
                continue
            try:
                self.handle.writer.set_nominated_node(nominee.namespace, nominee.name, None)
                self.handle.writer.record_event(nominee.raw, type_="Normal", reason="NominationCleared",
                                                message=f"pod {bound.key} of higher priority took the capacity "
                                                        f"held on {node}")
            except WriteError as exc:
                log.warning("clearing a nomination failed", extra={"pod": nominee.key, "error": str(exc)})

    def _record_allocation(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        """Add the allocation ledger entry to the annotations PreBind wants on the pod; the Bind
        plugin carries them all on the Binding, one write. A Binding cannot remove annotations,
        so removals PreBind asked for are one merge patch first (a second write, only then)."""
        if pod.requests:
            entry = ledger.Allocation(node, dict(pod.requests), self.handle.term(), self.handle.clock.now(),
                                      dict(state.allocation_extra))
            try:
                state.pod_annotations[ledger.key(self.handle.annotation_prefix)] = ledger.encode(entry)
            except (TypeError, ValueError) as exc:  # a detail JSON cannot carry
                return Status(Code.ERROR, (f"a PreBind plugin's allocation detail cannot be recorded: {exc}",),
                              plugin="ledger", error=exc)
        removed = [k for k, v in state.pod_annotations.items() if v is None]
        if not removed:
            return Status()
        try:
            self.handle.writer.patch_pod_metadata(pod.namespace, pod.name, annotations=dict.fromkeys(removed),
                                                  uid=pod.uid)
        except WriteError as exc:
            return Status(Code.ERROR, (f"removing annotations failed: {exc}",), plugin="ledger", error=exc)
        return Status()

    def collect_orphans(self) -> int:
        """Release expired reservations and remove their allocation annotations from pods that are
        still unbound (orphans of a crash, a lost bind reply or a deposed leader). Call on the
        leader only. Bindings of unknown outcome are settled first (``settle_unconfirmed``).
        Returns how many annotations were removed."""
        self.settle_unconfirmed()
        self.cache.cleanup_expired()
        removed = 0
        annotation = ledger.key(self.handle.annotation_prefix)
        for gone in self.cache.take_expired():
            current = self.cache.pending_pod(gone.namespace, gone.name)
            if current is None or current.uid != gone.uid:
                continue
            self.queue.requeue_after(current, 0)  # its release is no cluster event: have it tried again
            if annotation not in current.annotations:
                continue
            try:
                self.handle.writer.patch_pod_metadata(gone.namespace, gone.name, annotations={annotation: None},
                                                      resource_version=current.resource_version or None,
                                                      uid=current.uid)
            except WriteError as exc:
                log.warning("orphan allocation not removed", extra={"pod": gone.key, "error": str(exc)})
                continue
            removed += 1
            log.info("orphan allocation removed", extra={"pod": gone.key, "node": gone.node_name})
        if removed and self.metrics is not None:
            self.metrics.orphans.inc(removed)
        return removed
