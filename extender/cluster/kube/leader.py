"""Leader election on a coordination.k8s.io/v1 Lease, with fencing.

The algorithm of client-go's leaderelection, with optimistic concurrency (every write is a PUT
carrying the resourceVersion read; 409 means someone else wrote first, so we lost that round):

* A candidate takes the lease when it has no holder, or when the lease has not changed for
  ``lease_duration`` seconds *as observed on this process's monotonic clock* (never comparing
  clocks across machines). Taking it over increments ``leaseTransitions``: that is the **term**.
* The holder renews every ``retry_period``. ``is_leader()`` is true only while the last
  successful renewal is younger than ``renew_deadline``. Because ``renew_deadline <
  lease_duration``, a holder that cannot renew stops considering itself leader (and so stops
  writing: the writer is fenced by ``is_leader``) before any other candidate may take over.
* On losing leadership the process keeps following the cluster (its cache stays warm) and goes
  back to candidacy.
* A term counts only once the process's view is current: with ``caught_up`` (the cluster
  source's "every watch is open"), ``is_leader()`` stays false after winning until it first
  holds. The previous leader's last writes happened before the takeover; a watch that is away
  at that moment (broken, backing off) has not delivered them, and a leader acting on that view
  would give the same capacity twice. Once caught up, the term stays counted (a later broken
  watch delays only what others change, never this process's own writes).
"""

from __future__ import annotations

import logging
import math
import socket
import threading
import uuid
from datetime import datetime, timezone
from typing import Any, Callable, Mapping
from urllib.parse import quote

from extender.cluster.kube.client import ApiError, KubeClient
from extender.framework.clock import Clock, SystemClock

log = logging.getLogger(__name__)


def _micro_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


class LeaderElector:
    def __init__(self, client: KubeClient, *, name: str, namespace: str, identity: str | None = None,
                 lease_duration: float = 15.0, renew_deadline: float = 10.0, retry_period: float = 2.0,
                 clock: Clock | None = None, on_change: Callable[[bool], None] | None = None,
                 caught_up: Callable[[], bool] | None = None) -> None:
        if not 0 < retry_period < renew_deadline < lease_duration:
            raise ValueError("need 0 < retryPeriod < renewDeadline < leaseDuration")
        self.client = client
        self.name = name
        self.namespace = namespace
        self.identity = identity or default_identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.clock = clock or SystemClock()
        self.on_change = on_change
        self.caught_up = caught_up
        self._term_current = False
        """The view was current at some moment of the term held now."""
        self._current_after = float("-inf")
        """Monotonic time before which the term held now is not current (a released lease taken)."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._holding = False
        self._renewed_at = float("-inf")
        self._term = 0
        self._observed: tuple[str, str] | None = None  # (resourceVersion, holder) last seen
        self._observed_at = 0.0
        self._was_leader = False

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{quote(self.namespace, safe='')}/leases/{quote(self.name, safe='')}"

    # ---- what the rest of the process asks --------------------------------------------------

    def _holds(self) -> bool:
        """Holding the lease, renewed within the deadline (lock held)."""
        return self._holding and self.clock.monotonic() - self._renewed_at < self.renew_deadline

    def is_leader(self) -> bool:
        with self._lock:
            holding = self._holds()
            if not holding or self._term_current:
                return holding
            if self.clock.monotonic() < self._current_after:
                return False
            term = self._term
        if self.caught_up is not None and not self.caught_up():
            return False
        with self._lock:
            if self._term == term:
                self._term_current = True
        return True

    def term(self) -> int:
        with self._lock:
            return self._term

    def holder(self) -> str:
        with self._lock:
            return self._observed[1] if self._observed else ""

    # ---- loop ---------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="leader-election", daemon=True)
        self._thread.start()

    def stop(self, release: bool = True, timeout: float | None = None) -> None:
        """Stop competing: wait for the loop's round in flight (``timeout`` seconds; default a
        retry period and 5 s), then give the lease up if held and ``release``."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.retry_period + 5 if timeout is None else timeout)
        with self._lock:
            holding = self._holds()
        if release and holding:
            self._release()
        self._notify()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.try_acquire_or_renew()
            self._notify()
            self._stop.wait(self.retry_period)

    def _notify(self) -> None:
        now = self.is_leader() and not self._stop.is_set()
        if now != self._was_leader:
            self._was_leader = now
            log.info("leadership changed", extra={"leader": now, "identity": self.identity, "term": self.term()})
            if self.on_change is not None:
                try:
                    self.on_change(now)
                except Exception:  # noqa: BLE001
                    log.exception("leadership callback failed")

    def _spec(self, now_wall: float, transitions: int, acquire: str | None) -> dict[str, Any]:
        """The Lease's spec this holder writes. ``leaseDurationSeconds`` is whole seconds, rounded
        up: a standby waits what it says, and this holder's writes may land until leaseDuration
        after its renewal (client-go truncates; 2.5 s written as 2 let a standby lead early)."""
        return {"holderIdentity": self.identity, "leaseDurationSeconds": math.ceil(self.lease_duration),
                "acquireTime": acquire or _micro_time(now_wall), "renewTime": _micro_time(now_wall),
                "leaseTransitions": transitions}

    def try_acquire_or_renew(self) -> bool:
        """One round; returns whether this process holds the lease afterwards."""
        now = self.clock.monotonic()
        wall = self.clock.now()
        try:
            lease = self.client.get(self.path)
            seen = self.clock.monotonic()  # what the read shows is dated by its answer (client-go's observedTime)
        except ApiError as exc:
            if exc.status != 404:
                log.warning("reading the lease failed", extra={"error": str(exc)})
                return self._lost_round()
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(wall, 1, None)}
            try:
                created = self.client.post(
                    f"/apis/coordination.k8s.io/v1/namespaces/{quote(self.namespace, safe='')}/leases", body)
            except ApiError as exc2:
                log.info("creating the lease failed", extra={"error": str(exc2)})
                return self._lost_round()
            return self._won(created, now, 1)
        spec = lease.get("spec") or {}
        meta = lease.get("metadata") or {}
        holder = str(spec.get("holderIdentity") or "")
        observed = (str(meta.get("resourceVersion") or ""), holder)
        with self._lock:
            if observed != self._observed:
                self._observed = observed
                self._observed_at = seen
            observed_at = self._observed_at
        transitions = int(spec.get("leaseTransitions") or 0)
        settle = 0.0
        if holder == self.identity:
            new_spec = {**spec, **self._spec(wall, transitions, spec.get("acquireTime"))}
            term = transitions
        elif holder and seen - observed_at < self._lasts(spec):
            return self._lost_round(keep=False)
        else:
            new_spec = self._spec(wall, transitions + 1, None)
            term = transitions + 1
            # a lease released cleanly is free at once; one that expired gave the watches
            # leaseDuration - renewDeadline after the old leader's last write to bring it here:
            # a release takeover waits as long, so the view holds the old leader's last Bindings
            settle = 0.0 if holder else max(0.0, self.lease_duration - self.renew_deadline)
        try:
            updated = self.client.put(self.path, {**lease, "spec": new_spec})
        except ApiError as exc:
            if exc.status == 409:
                log.info("lost the lease race", extra={"identity": self.identity})
            else:
                log.warning("writing the lease failed", extra={"error": str(exc)})
            return self._lost_round()
        return self._won(updated, now, term, settle)

    def _lasts(self, spec: Mapping[str, Any]) -> float:
        """How long another holder's lease lasts after a renewal seen: the leaseDurationSeconds it
        wrote (as client-go's standby; a holder on older settings - a rolling update changing
        them - passes its write fence that long), this process's own when it wrote none."""
        written = spec.get("leaseDurationSeconds")
        return float(written) if type(written) is int and written > 0 else self.lease_duration

    def _won(self, lease: Any, at: float, term: int, settle: float = 0.0) -> bool:
        meta = (lease or {}).get("metadata") or {}
        with self._lock:
            if not self._holds() or term != self._term:
                self._term_current = False  # a new term (or one that lapsed): current only once caught up
                self._current_after = at + settle
            self._holding = True
            self._renewed_at = at
            self._term = term
            self._observed = (str(meta.get("resourceVersion") or ""), self.identity)
            self._observed_at = at
        return True

    def _lost_round(self, keep: bool = True) -> bool:
        """A round that did not renew. Keep ``holding`` (until renew_deadline runs out) only when
        the lease may still be ours; when someone else holds it, let go at once."""
        with self._lock:
            if not keep:
                self._holding = False
            return self._holds()

    def _release(self) -> None:
        """Give the lease up on a clean shutdown, so a standby takes over without waiting. This
        process stops leading first: once the empty holder is written a standby may lead at
        once, and no write of ours may pass the fence (``is_leader``) after that."""
        with self._lock:
            self._holding = False
        try:
            lease = self.client.get(self.path)
            if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            spec = {**lease["spec"], "holderIdentity": "", "leaseDurationSeconds": 1}
            self.client.put(self.path, {**lease, "spec": spec})
        except ApiError as exc:
            log.info("releasing the lease failed", extra={"error": str(exc)})
