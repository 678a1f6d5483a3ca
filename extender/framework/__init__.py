"""The plugin API that policies program against.

Nothing in this package imports Flask, marshmallow or the Kubernetes client: plugins see typed
views over raw dicts, Status values, a CycleState and a Handle onto the engine.

A plugin outside this repository imports only the names listed in ``__all__``, from this
package itself (``from extender.framework import Status``): they are the stable plugin API,
versioned by ``API_VERSION``, and ``tests/unit/test_plugin_api.py`` pins them, so a change is
deliberate. The submodules are the API's layout, not part of it: they may be split or renamed in
any release. ``docs/writing-a-policy.md`` lists every name with its use.
"""

from extender.framework.clock import Clock
from extender.framework.cycle_state import CycleState
from extender.framework.durations import parse_duration
from extender.framework.elastic_quota import QuotaSpec
from extender.framework.events import CAPACITY_EVENTS, Change, ClusterEvent
from extender.framework.handle import (ClusterWriter, Handle, ReservationsView, SnapshotView, WaitingPodsView,
                                       WaitingPodView, WriteError)
from extender.framework.interfaces import (EXTENSION_POINTS, MAX_NODE_SCORE, MIN_NODE_SCORE, BindPlugin,
                                           CapacityReporter, FilterPlugin, NodeCapacity, PermitPlugin, Plugin,
                                           PostBindPlugin, PostFilterPlugin, PreBindPlugin, PreEnqueuePlugin,
                                           PreemptionPlugin, PreFilterPlugin, PreFilterResult, PreScorePlugin,
                                           QueueSortPlugin, QuotaReporter, ReservePlugin, ScorePlugin, Victim)
from extender.framework.node_constraints import node_excluded
from extender.framework.pod_group import GROUP_LABEL, GroupCount, MemberState, PodGroupSpec, group_of
from extender.framework.registration import ArgsError, PluginSpec, no_args, schema_parser
from extender.framework.resources import QuantityError, format_milli, milli, parse_quantity
from extender.framework.status import SKIP, SUCCESS, Code, PluginError, Status
from extender.framework.views import NodeInfo, PodInfo

API_VERSION = "1.2"
"""The plugin API's version, ``MAJOR.MINOR``: MINOR grows when names or optional methods are
added (a plugin written for 1.0 runs on 1.3), MAJOR when a name goes or a contract changes (a
plugin must be checked against the new one). A plugin may refuse to load on a MAJOR it does not
know: ``API_VERSION.split(".")[0] == "1"``."""

__all__ = [
    "API_VERSION",
    # registration
    "ArgsError", "PluginSpec", "no_args", "schema_parser",
    # verdicts
    "Code", "PluginError", "SKIP", "SUCCESS", "Status",
    # what plugins see
    "Clock", "CycleState", "Handle", "NodeInfo", "PodInfo", "SnapshotView", "ClusterWriter", "WriteError",
    "WaitingPodView", "WaitingPodsView", "ReservationsView", "PodGroupSpec", "GROUP_LABEL", "group_of",
    "GroupCount", "MemberState", "QuotaSpec", "node_excluded",
    # extension points
    "Plugin", "PreEnqueuePlugin", "QueueSortPlugin", "PreFilterPlugin", "PreFilterResult", "FilterPlugin",
    "PostFilterPlugin", "PreScorePlugin", "ScorePlugin", "ReservePlugin", "PermitPlugin", "PreBindPlugin",
    "BindPlugin", "PostBindPlugin", "PreemptionPlugin", "Victim", "CapacityReporter", "NodeCapacity",
    "QuotaReporter",
    "EXTENSION_POINTS", "MAX_NODE_SCORE", "MIN_NODE_SCORE",
    # queueing hints
    "CAPACITY_EVENTS", "Change", "ClusterEvent",
    # quantities and durations
    "QuantityError", "format_milli", "milli", "parse_quantity", "parse_duration",
]
