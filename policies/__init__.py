"""Built-in policies, each a plugin package: ``plugin.py`` (thin adapter), ``logic.py`` (pure
rules), ``args.py`` (schema of its pluginConfig args) and ``README.md``. Policies import only the
plugin API (``extender.framework``) of kube-extender's code; the app hands their specs to the
runtime.

``builtin_specs()`` is the one list of built-in plugins; ``DEFAULT_PLUGINS`` names what a profile
runs when the configuration says nothing (multiPoint: every point each plugin implements).
"""

from __future__ import annotations

from extender.framework.registration import PluginSpec


def builtin_specs() -> list[PluginSpec]:
    from policies.capacity_quota.plugin import SPEC as capacity_quota
    from policies.default_binder.plugin import SPEC as default_binder
    from policies.device_share.plugin import SPEC as device_share
    from policies.gang.plugin import SPEC as gang
    from policies.node_resources.plugin import SPEC as node_resources
    from policies.preemption.plugin import SPEC as managed_preemption
    from policies.priority_sort.plugin import SPEC as priority_sort

    return [priority_sort, node_resources, default_binder, device_share, managed_preemption, gang,
            capacity_quota]


DEFAULT_PLUGINS = ("PrioritySort", "NodeResources", "DefaultBinder")
