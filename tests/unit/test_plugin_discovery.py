"""Plugins installed as packages (entry-point group ``kube_extender.plugins``): found at start-up
next to the built-in ones, listed with their package, and refused in one line naming the package
when they clash, do not load, fail to build or get args they do not accept."""

from __future__ import annotations

import itertools
import json
import textwrap
from pathlib import Path
from typing import Any, Iterator

import pytest
from builders import make_node
from conftest import config_of

from extender import cli
from extender.app import create_app, plugin_registry
from extender.cluster.memory import MemoryCluster
from extender.config.model import ConfigError
from extender.framework import PluginSpec
from extender.runtime import discovery
from extender.runtime.registry import DuplicatePluginError, PluginLoadError

_modules = itertools.count()

GOOD = '''
from marshmallow import Schema, fields
from extender.framework import PluginSpec, Status, schema_parser

class Args(Schema):
    limit = fields.Integer(load_default=3)

class Fussy:
    name = "{name}"
    def __init__(self, args, handle):
        if args["limit"] > 5:
            raise ValueError("limit above 5 is not supported")
        self.limit = args["limit"]
    def filter(self, state, pod, node):
        return Status()

SPEC = PluginSpec("{name}", Fussy, schema_parser(Args), "A plugin from a package.")
'''


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """install(package, {entry point name: module source with {name}}, value=...) puts a
    distribution with those entry points on sys.path, as pip would."""
    monkeypatch.syspath_prepend(str(tmp_path))
    discovery.discovered.cache_clear()

    def put(package: str, plugins: dict[str, str], attr: str = "SPEC", version: str = "1.2.3") -> None:
        lines = []
        for ep, source in plugins.items():
            module = f"plugin_pkg_{next(_modules)}"
            (tmp_path / f"{module}.py").write_text(textwrap.dedent(source.replace("{name}", ep)))
            lines.append(f"{ep} = {module}:{attr}")
        info = tmp_path / f"{package.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text("[kube_extender.plugins]\n" + "\n".join(lines) + "\n")

    yield put
    discovery.discovered.cache_clear()


def enabled(name: str, args: dict[str, Any] | None = None) -> Any:
    return config_of(profiles=[{"schedulerName": "default-scheduler",
                                "plugins": {"filter": {"enabled": [{"name": name}]}},
                                "pluginConfig": [{"name": name, "args": args or {}}]}])


def app_with(config: Any) -> Any:
    return create_app(config, source=MemoryCluster({"Node": [make_node("n1").obj()], "Pod": []}), background=False)


def test_an_installed_plugin_is_registered_with_its_package_and_runs_when_enabled(install: Any) -> None:
    install("acme-fussy", {"Fussy": GOOD})
    registry = plugin_registry()
    assert "Fussy" in registry and "NodeResources" in registry
    origin = registry.origin("Fussy")
    assert (origin.package, origin.version) == ("acme-fussy", "1.2.3")
    app = app_with(enabled("Fussy", {"limit": 4}))
    points = app.test_client().get("/debug/config").get_json()["profiles"][0]["extensionPoints"]
    assert "Fussy" in points["filter"]


def test_debug_config_and_the_plugins_command_describe_every_plugin(install: Any,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    install("acme-fussy", {"Fussy": GOOD})
    listed = {p["name"]: p for p in app_with(config_of()).test_client().get("/debug/config").get_json()["plugins"]}
    fussy = listed["Fussy"]
    assert (fussy["package"], fussy["version"], fussy["extensionPoints"]) == ("acme-fussy", "1.2.3", ["filter"])
    assert fussy["args"]["properties"] == {"limit": {"type": "integer", "default": 3}}
    assert listed["Gang"]["package"] == "kube-extender" and "permit" in listed["Gang"]["extensionPoints"]
    assert cli.main(["plugins", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == list(listed.values())
    assert cli.main(["plugins"]) == 0
    text = capsys.readouterr().out
    assert "Fussy  (acme-fussy 1.2.3)\n  A plugin from a package.\n" in text
    assert "  extension points: filter\n  args:\n    limit: integer, default 3\n" in text


WITH_DEFAULTS = '''
import datetime, decimal
from marshmallow import Schema, fields
from extender.framework import PluginSpec, Status, schema_parser

class Args(Schema):
    limit = fields.Integer(data_key="limit", attribute="max_limit", load_default=3)
    wait = fields.TimeDelta(load_default=datetime.timedelta(seconds=90))
    since = fields.DateTime(load_default=datetime.datetime(2026, 1, 2, 3, 4, 5))
    share = fields.Decimal(load_default=decimal.Decimal("0.25"))
    tags = fields.List(fields.String(), load_default=("a", "b"))

class Timed:
    name = "{name}"
    def __init__(self, args, handle):
        pass
    def filter(self, state, pod, node):
        return Status()

SPEC = PluginSpec("{name}", Timed, schema_parser(Args))
'''


def test_defaults_json_cannot_hold_are_listed_as_the_args_would_be_written(
        install: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """A third-party plugin's defaults are Python values (a timedelta, a datetime, a Decimal):
    the description gives them as a config file would write them, never a serialization error."""
    install("acme-timed", {"Timed": WITH_DEFAULTS})
    expected = {"limit": {"type": "integer", "default": 3}, "wait": {"type": "number", "default": 90}, "since": {"type": "string", "default": "2026-01-02T03:04:05"},
                "share": {"type": "number", "default": 0.25},
                "tags": {"type": "array", "items": {"type": "string"}, "default": ["a", "b"]}}
    assert cli.main(["plugins", "--json"]) == 0
    listed = {p["name"]: p for p in json.loads(capsys.readouterr().out)}
    assert listed["Timed"]["args"]["properties"] == expected
    assert cli.main(["plugins"]) == 0
    assert "    wait: number, default 90.0\n" in capsys.readouterr().out
    reply = app_with(config_of()).test_client().get("/debug/config")
    assert reply.status_code == 200
    assert {p["name"]: p for p in reply.get_json()["plugins"]}["Timed"]["args"]["properties"] == expected


@pytest.mark.parametrize("plugins, attr, message", [
    ({"NodeResources": GOOD}, "SPEC", "plugin 'NodeResources' of package acme-broken 1.2.3 clashes with plugin "
                                      "'NodeResources' of package kube-extender"),
    ({"Broken": "import no_such_module_anywhere\n"}, "SPEC",
     "plugin 'Broken' of package acme-broken 1.2.3 (entry point Broken = plugin_pkg_"),
    ({"Broken": "SPEC = object()\n"}, "SPEC", "is a object, not an extender.framework.PluginSpec"),
    ({"Broken": GOOD.replace('PluginSpec("{name}"', 'PluginSpec("Other"')}, "SPEC",
     "is named 'Other' in its PluginSpec: the entry point's name must be the plugin's name"),
], ids=["clash with a built-in", "import fails", "not a PluginSpec", "names differ"])
def test_a_package_that_cannot_be_registered_stops_start_up_in_one_line_naming_it(
        install: Any, capsys: pytest.CaptureFixture[str], plugins: dict[str, str], attr: str, message: str) -> None:
    install("acme-broken", plugins, attr)
    with pytest.raises(PluginLoadError) as refused:
        plugin_registry()
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert cli.main(["plugins"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("kube-extender: plugin ") and message in err[0]


def test_two_packages_with_one_plugin_name_clash_naming_both(install: Any) -> None:
    install("acme-one", {"Twin": GOOD})
    install("acme-two", {"Twin": GOOD})
    with pytest.raises(DuplicatePluginError, match="plugin 'Twin' of package acme-two 1.2.3 clashes with plugin "
                                                   "'Twin' of package acme-one 1.2.3"):
        plugin_registry()


@pytest.mark.parametrize("args, where, message", [
    ({"limit": "many"}, "profiles[0].pluginConfig[Fussy].args.limit",
     "Not a valid integer. (plugin Fussy of package acme-fussy 1.2.3)"),
    ({"limit": 9}, "profiles[0].plugins.filter.enabled[0].name",
     "plugin Fussy of package acme-fussy 1.2.3 could not be built: ValueError: limit above 5 is not supported"),
], ids=["args do not validate", "the factory fails"])
def test_bad_args_or_a_failing_factory_are_configuration_problems_naming_the_package(
        install: Any, args: dict[str, Any], where: str, message: str) -> None:
    install("acme-fussy", {"Fussy": GOOD})
    with pytest.raises(ConfigError) as refused:
        app_with(enabled("Fussy", args))
    assert refused.value.problems == [(where, message)]


@pytest.mark.parametrize("name, valid, invalid", [
    ("NodeResources", {"scoringStrategy": {"type": "LeastAllocated", "resources": [{"name": "x/y", "weight": 3}]}},
     {"scoringStrategy": {"type": "Spread"}}),
    ("NodeResources", {}, {"scoringStrategy": {"resources": [{"name": "x/y", "weight": 101}]}}),
    ("DeviceShare", {"countResource": "example.com/gpu"}, {"countResource": ""}),
    ("DefaultBinder", {}, {"anything": 1}),
    ("Gang", {"permitTimeout": "3s"}, {"permitTimeou": "3s"}),
], ids=["enum", "range", "length", "no args", "unknown key"])
def test_the_derived_args_schemas_are_json_schemas_that_agree_with_the_parsers(
        name: str, valid: dict[str, Any], invalid: dict[str, Any]) -> None:
    import jsonschema

    from extender.framework import ArgsError
    from extender.runtime.catalog import args_schema

    spec = plugin_registry().get(name)
    assert spec is not None
    schema = args_schema(spec)
    assert schema is not None
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid(valid)
    spec.parse_args(valid)
    assert not validator.is_valid(invalid)
    with pytest.raises(ArgsError):
        spec.parse_args(invalid)


class _Scorer:
    name = "S"

    def score(self, state: Any, pod: Any, node: Any) -> int:
        return 0


def _annotated(args: Any, handle: Any) -> _Scorer:
    return _Scorer()


@pytest.mark.parametrize("spec, points, args", [
    (PluginSpec("S", _Scorer), ["score"], {"type": "object", "properties": {}, "additionalProperties": False}),
    (PluginSpec("S", _annotated, parse_args=dict), ["score"], None),
    (PluginSpec("S", lambda args, handle: _Scorer(), parse_args=dict, args_schema={"type": "object"}), None,
     {"type": "object"}),
], ids=["a class", "a function annotated with its class", "a lambda, args described by the spec"])
def test_points_and_args_are_told_without_building_the_plugin_or_not_at_all(
        spec: PluginSpec, points: list[str] | None, args: dict[str, Any] | None) -> None:
    from extender.runtime.catalog import args_lines, describe
    from extender.runtime.registry import Registry

    (entry,) = describe(Registry([spec]))
    assert (entry["extensionPoints"], entry["args"]) == (points, args)
    if args is None:
        assert args_lines(args) == ["    (not described: the plugin's args parser gives no schema)"]
