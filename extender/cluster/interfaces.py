"""What a cluster source delivers and to whom.

A ClusterSource lists everything once into a ClusterEvents sink, calls ``mark_synced``, then keeps
delivering changes until ``stop``. ``extender.cache.ClusterCache`` is the sink in production.
Writes go through ``extender.framework.handle.ClusterWriter`` (the same object may be both).
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol


class ClusterEvents(Protocol):
    def upsert_node(self, raw: Mapping[str, Any]) -> None: ...

    def remove_node(self, name: str) -> None: ...

    def upsert_pod(self, raw: Mapping[str, Any]) -> Any: ...

    def remove_pod(self, raw: Mapping[str, Any]) -> None: ...

    def upsert_pdb(self, raw: Mapping[str, Any]) -> None: ...

    def remove_pdb(self, raw: Mapping[str, Any]) -> None: ...

    def upsert_pod_group(self, raw: Mapping[str, Any]) -> None:
        """A ``scheduling.x-k8s.io`` PodGroup (the whole object; the sink keeps what it needs)."""

    def remove_pod_group(self, raw: Mapping[str, Any]) -> None: ...

    def mark_synced(self) -> None: ...


class ClusterSource(Protocol):
    def start(self, sink: ClusterEvents) -> None:
        """Deliver the initial state, mark the sink synced, and follow changes (may return at once
        and follow from a background thread)."""

    def stop(self, timeout: float | None = None) -> None:
        """Stop delivering events, within about ``timeout`` seconds (None: the source's own
        default) for a source with threads."""
