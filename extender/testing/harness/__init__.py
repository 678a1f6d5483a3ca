"""A harness that runs the emulated kube-scheduler against kube-extender over a real (fake) API server.

``extender.sim`` alone runs kube-scheduler's behaviour against an in-memory cluster that the
extender shares: both always see the same state at the same instant. A real cluster does not
work like that: kube-scheduler and the extender each follow the API server through their own
watch, and either may see a change first. This harness puts everything on the wire:

* a :class:`~extender.testing.fakeapi.FakeApiServer` (real HTTP, list/watch, Bindings);
* one or more kube-extender replicas with the production wiring (``create_kube_app``: list+watch
  source, fenced writer, admission, nudges, leader election), in this process or as
  ``kube-extender serve --cluster kube`` processes (:mod:`.extenders`);
* the emulated kube-scheduler (``extender.sim.Scheduler`` on a ``RealClock``, version 1.29 or
  1.30) whose cluster is an :class:`ApiClusterView`: its own informer and its own writes
  (Binding, pod status, events), with a ``kube-scheduler/...`` User-Agent (:mod:`.view`);
* a :class:`Recorder` hooked synchronously into the API server's writes (:mod:`.observe`).

Build a scenario::

    from extender.testing.harness import Harness, node, pod, priority_class

    with Harness(objects=[node("n1", gpus=1), pod("holder", 1, node="n1")],
                 scheduler_delay=0.0, extender_delay=0.3) as h:   # the extender's watch 300 ms behind
        h.create_pod(pod("waiter", 1))
        h.wait_until(lambda: h.pod("waiter").rejections, timeout=5)
        h.delete_pod("holder")
        assert h.wait_until(lambda: h.pod("waiter").bound_at is not None, timeout=5)

**Delays** are watch delivery delays at the API server (``FakeApiServer.delay_watches``): each
watch event reaches kube-scheduler's informer ``scheduler_delay`` seconds after it was committed,
and each extender replica's ``extender_delay`` seconds after (a number, or a callable drawn per
event for jitter; order is always kept; :meth:`Harness.set_delays` changes them mid-run). Writes
and lists are not delayed. They model the gap between the two informers that the in-memory
emulator cannot: "scheduler first" (0 / 300 ms) is the order in which kube-scheduler retries a
pod from a fresher view than the extender's.

**Time is wall time.** Everything runs on real threads and a real clock: keep delays to tens or
hundreds of milliseconds and scenarios to a few seconds, and assert outcomes with generous
bounds (a pod is bound within a few seconds), never speed. kube-scheduler's own timings are the
real ones (1 s initial backoff, 30 s / 5 min unschedulable flush) unless ``scheduler=`` changes
them. Seeded workloads (and ``seed=`` for the scheduler's ties) keep runs repeatable where
wall time allows.

**What is observed** (times in seconds since the harness started, managed quantities in
milli-units):

* per pod (:meth:`Harness.pod`, :attr:`Harness.lives`, a :class:`PodLife`): creation, priority,
  managed requests, gates and when they were removed, every failed scheduling attempt with
  whether the extender rejected nodes in it (from the scheduler's cycle records), the binding
  time and node (when the API server stored it), when it was deleted or finished;
* every release of capacity (:attr:`Harness.releases`): a bound pod deleted or terminal, with
  its node, time and the managed resources it freed;
* the capacity invariant (:attr:`Harness.violations`): per node, the managed requests of bound,
  non-terminal pods never exceed allocatable, checked at every write - and with DeviceShare in
  a profile, per device, from the nodes' inventories and the pods' device assignments
  (:mod:`.devices`; a bound pod asking for device resources without an assignment is a
  violation, so seed running pods with theirs);
* the ledger invariant (:attr:`Harness.leaks`): no pod that is not bound ever carries the
  extender's allocation or device assignment annotation;
* API requests by (User-Agent, verb, resource) (:meth:`Harness.request_counts`).

Extender replicas: ``replicas=2`` runs two with leader election (short lease timings) behind a
:class:`ServiceTransport` that routes to the ready one; :meth:`Harness.kill_extender` crashes one
(SIGKILL for processes; an in-process one stops writing at once) and
:meth:`Harness.restart_extender` brings it back.

Workloads built on it: :mod:`.churn` (how long freed capacity waits) and :mod:`.soak` (thousands
of mixed pods from :mod:`.soak_workload` under API faults, kills and failovers, checked from the
API server's objects).

Not emulated: kubelets (bound pods stay Pending unless seeded bound, and never finish by
themselves: delete them, or patch their phase), graceful deletion (unless the API server is
built for it), the controllers that would recreate deleted pods.
"""

from extender.testing.harness.extenders import InProcessExtender, ProcessExtender, ServiceTransport
from extender.testing.harness.harness import Harness, HarnessError
from extender.testing.harness.devices import DeviceAccounting
from extender.testing.harness.objects import ADMISSION_GATE, GPU, node, pod, priority_class
from extender.testing.harness.observe import Leak, PodLife, Recorder, Rejection, Release, Violation
from extender.testing.harness.view import ApiClusterView, scheduler_user_agent

__all__ = [
    "ADMISSION_GATE",
    "ApiClusterView",
    "DeviceAccounting",
    "GPU",
    "Harness",
    "HarnessError",
    "InProcessExtender",
    "Leak",
    "PodLife",
    "ProcessExtender",
    "Recorder",
    "Rejection",
    "Release",
    "ServiceTransport",
    "Violation",
    "node",
    "pod",
    "priority_class",
    "scheduler_user_agent",
]
