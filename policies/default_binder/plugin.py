"""DefaultBinder plugin: Bind through ``handle.writer.bind``, carrying the annotations PreBind
wants on the pod (``CycleState.pod_annotations``, the allocation ledger entry included) on the
Binding: one API write per bound pod."""

from __future__ import annotations

from typing import Any

from extender.framework.cycle_state import CycleState
from extender.framework.handle import Handle, WriteError
from extender.framework.status import Status
from extender.framework.views import PodInfo
from extender.framework.registration import PluginSpec
from policies.default_binder import logic

NAME = "DefaultBinder"


class DefaultBinder:
    name = NAME

    def __init__(self, args: Any, handle: Handle) -> None:
        self.handle = handle

    def bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        try:
            annotations = {k: v for k, v in state.pod_annotations.items() if v is not None}
            self.handle.writer.bind(pod.namespace, pod.name, pod.uid, node_name, annotations)
        except WriteError as exc:
            return Status.failure(logic.describe_failure(exc, pod.key, node_name), exc)
        return Status()


SPEC = PluginSpec(NAME, DefaultBinder, description="Bind with a Binding carrying the pod UID and annotations.")
