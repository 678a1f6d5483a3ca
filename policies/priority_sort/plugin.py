"""PrioritySort plugin: adapts ``logic.less`` to QueueSort."""

from __future__ import annotations

from typing import Any

from extender.framework.handle import Handle
from extender.framework.views import PodInfo
from extender.framework.registration import PluginSpec
from policies.priority_sort import logic

NAME = "PrioritySort"


class PrioritySort:
    name = NAME

    def __init__(self, args: Any, handle: Handle) -> None:
        self.handle = handle

    def less(self, a: PodInfo, b: PodInfo) -> bool:
        return logic.less(a, b)


SPEC = PluginSpec(NAME, PrioritySort, description="Queue order: priority, then creation time.")
