"""Profiles: plugins per extension point from defaults, multiPoint, enabled and disabled."""

from __future__ import annotations

import pytest
from fakes import fake, spec_of
from test_framework import handle

from extender.runtime.profile import PluginRef, PluginSet, ProfileError, ProfileSpec, build_framework, resolve
from extender.runtime.registry import DuplicatePluginError, Registry

SORT = fake("Sort", {"queueSort"})
FIT = fake("Fit", {"filter", "score", "reserve"})
EXTRA = fake("Extra", {"filter"})
BINDER = fake("Binder", {"bind"})
REGISTRY = Registry([spec_of(p) for p in (SORT, FIT, EXTRA, BINDER)])
DEFAULTS = PluginSet((PluginRef("Sort"), PluginRef("Fit"), PluginRef("Binder")))


def names(spec: ProfileSpec, point: str) -> list[tuple[str, int]]:
    return [(p.name, w) for p, w in resolve(spec, DEFAULTS, REGISTRY, handle())[point]]


@pytest.mark.parametrize("plugins, point, expected", [
    pytest.param({}, "filter", [("Fit", 1)], id="defaults at every point they implement"),
    pytest.param({}, "reserve", [("Fit", 1)], id="defaults reserve"),
    pytest.param({"filter": PluginSet((PluginRef("Extra"),))}, "filter", [("Fit", 1), ("Extra", 1)],
                 id="enabled appends after defaults"),
    pytest.param({"filter": PluginSet((PluginRef("Extra"), PluginRef("Fit")))}, "filter", [("Extra", 1), ("Fit", 1)],
                 id="re-enabled default takes the configured position"),
    pytest.param({"filter": PluginSet((), ("Fit",))}, "filter", [], id="disabled default"),
    pytest.param({"filter": PluginSet((), ("Fit",))}, "score", [("Fit", 1)], id="disabling one point keeps others"),
    pytest.param({"score": PluginSet((PluginRef("Fit", 5),), ("*",))}, "score", [("Fit", 5)],
                 id="star disables defaults, weight from config"),
    pytest.param({"multiPoint": PluginSet((PluginRef("Extra"),))}, "filter", [("Fit", 1), ("Extra", 1)],
                 id="multiPoint enables where implemented"),
    pytest.param({"multiPoint": PluginSet((), ("Fit",))}, "reserve", [], id="multiPoint disabled everywhere"),
])
def test_resolution(plugins: dict, point: str, expected: list) -> None:
    assert names(ProfileSpec("s", plugins), point) == expected


@pytest.mark.parametrize("plugins, path_part", [
    pytest.param({"bind": PluginSet((PluginRef("Extra"),))}, "plugins.bind.enabled[0]", id="point not implemented"),
    pytest.param({"filter": PluginSet((PluginRef("Nope"),))}, "plugins.filter.enabled[0]", id="unknown plugin"),
    pytest.param({"queueSort": PluginSet((), ("Sort",))}, "plugins.queueSort", id="no queue sort"),
    pytest.param({"score": PluginSet((PluginRef("Fit", 0),))}, "plugins.score", id="weight zero"),
])
def test_invalid_profiles_name_the_key(plugins: dict, path_part: str) -> None:
    with pytest.raises(ProfileError) as err:
        resolve(ProfileSpec("s", plugins), DEFAULTS, REGISTRY, handle(), path="profiles[0]")
    assert err.value.path.startswith("profiles[0].") and path_part in err.value.path


def test_two_queue_sorts_rejected() -> None:
    other = fake("Sort2", {"queueSort"})
    reg = REGISTRY.merged(Registry([spec_of(other)]))
    with pytest.raises(ProfileError, match="exactly one QueueSort"):
        resolve(ProfileSpec("s", {"queueSort": PluginSet((PluginRef("Sort2"),))}), DEFAULTS, reg, handle())


def test_registering_a_name_twice_fails_loudly() -> None:
    with pytest.raises(DuplicatePluginError):
        Registry([spec_of(SORT), spec_of(SORT)])


def test_build_framework_wires_points() -> None:
    fw = build_framework(ProfileSpec("gpu"), DEFAULTS, REGISTRY, handle())
    assert fw.describe()["filter"] == ["Fit"] and fw.describe()["bind"] == ["Binder"]
    assert fw.profile_name == "gpu"


def test_args_for_a_plugin_no_point_enables_are_parsed_and_said(caplog: pytest.LogCaptureFixture) -> None:
    """Args that would be ignored until the plugin is enabled: judged (a bad key is a problem,
    tests/unit/test_config.py) and, when fine, a warning names the plugin."""
    with caplog.at_level("WARNING", logger="extender.runtime.profile"):
        resolve(ProfileSpec("s", {}, {"Extra": {}, "Fit": {}}), DEFAULTS, REGISTRY, handle(), path="profiles[0]")
        # disabled by name: the args are there on purpose (a chart giving every profile the same)
        resolve(ProfileSpec("s", {"multiPoint": PluginSet((), ("Extra",))}, {"Extra": {}}), DEFAULTS, REGISTRY,
                handle(), path="profiles[1]")
    said = [(r.getMessage(), getattr(r, "plugin", None)) for r in caplog.records]
    assert said == [("profiles[0].pluginConfig[Extra]: args for plugin Extra, which no extension point enables",
                     "Extra")]
