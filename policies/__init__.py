"""Built-in policies, each a plugin package: ``plugin.py`` (thin adapter), ``logic.py`` (pure
rules), ``args.py`` (schema of its pluginConfig args) and ``README.md``.

``builtin_registry()`` is the one list of built-in plugin names; ``DEFAULT_PLUGINS`` is what a
profile runs when the configuration says nothing (multiPoint: every point each plugin implements).
"""

from __future__ import annotations

from extender.runtime.profile import PluginRef, PluginSet
from extender.runtime.registry import Registry


def builtin_registry() -> Registry:
    from policies.default_binder.plugin import SPEC as default_binder
    from policies.device_share.plugin import SPEC as device_share
    from policies.gang.plugin import SPEC as gang
    from policies.node_resources.plugin import SPEC as node_resources
    from policies.preemption.plugin import SPEC as managed_preemption
    from policies.priority_sort.plugin import SPEC as priority_sort

    return Registry([priority_sort, node_resources, default_binder, device_share, managed_preemption, gang])


DEFAULT_PLUGINS = PluginSet(enabled=(PluginRef("PrioritySort"), PluginRef("NodeResources"), PluginRef("DefaultBinder")))
