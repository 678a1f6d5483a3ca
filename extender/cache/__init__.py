"""The cluster cache (nodes, pods, assumed pods; its change log and label indexes) and the
per-request snapshot taken from it."""

from extender.cache.cache import AssumeError, ClusterCache
from extender.cache.snapshot import Snapshot

__all__ = ["AssumeError", "ClusterCache", "Snapshot"]
