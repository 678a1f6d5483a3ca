"""simulate(): a short ``kube-extender simulate`` run with the plugins under test enabled.

The emulated kube-scheduler (queue, in-tree filters and scores, the extender verbs, asynchronous
binding, preemption) schedules a workload against kube-extender in-process, in virtual time, as
``kube-extender simulate`` does; the result is its report::

    result = simulate(SPEC, config=CONFIG, cluster=cluster_yaml(nodes), workload=WORKLOAD)
    assert result.placements["ml/train-0"] == "a100-node"
    assert result.pending == {}

``config``, ``cluster`` and ``workload`` are each a path to a file, YAML text, or (config and
workload) a mapping, in the formats the command reads. With no spec given, the plugins are the
installed ones (entry points), exactly as the command finds them: that is how to check a package
once it is installed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import io
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

from extender.app import checked, create_app
from extender.cli import sim_wiring
from extender.config.model import load_config
from extender.framework.registration import PluginSpec
from extender.testing.kit.harness import registry_of
from extender.sim import cli as sim_cli

Source = str | Path | Mapping[str, Any]


class SimulationError(RuntimeError):
    """The run was refused (a bad configuration, cluster or workload): the command's message."""


@dataclass
class SimulationResult:
    report: dict[str, Any]
    """report.json: ``summary``, ``bound``, ``pending``, ``preempted``, ``utilization``, ..."""
    text: str
    """What the command printed."""

    @property
    def placements(self) -> dict[str, str]:
        """``namespace/name`` -> node, of every pod that was bound (those that completed or
        were preempted since included)."""
        out = {p["pod"]: p["node"] for key in ("bound", "completed", "preempted") for p in self.report[key]}
        return dict(sorted(out.items()))

    @property
    def pending(self) -> dict[str, str]:
        """``namespace/name`` -> why, of every pod left pending."""
        return {p["pod"]: p["reason"] for p in self.report["pending"]}


def _file(into: Path, name: str, source: Source | None) -> str | None:
    if source is None:
        return None
    if isinstance(source, Path):
        return str(source)
    path = into / name
    if isinstance(source, str):
        if "\n" not in source and Path(source).is_file():
            return source
        path.write_text(source)
    else:
        path.write_text(yaml.safe_dump(dict(source), sort_keys=False))
    return str(path)


def simulate(*specs: PluginSpec, config: Source | None = None, cluster: str | Path | None = None,
             workload: Source | None = None, seed: int = 0, out: str | Path | None = None) -> SimulationResult:
    """Run the workload (default: the shipped sample) on the cluster (default: the demo cluster)
    with the ExtenderConfiguration ``config`` (it enables the plugins), ``specs`` registered
    besides the built-in plugins (none: the installed plugins). ``out``: where report.json and
    friends go (default: a temporary directory, removed). Raises SimulationError when the
    command refuses its input."""
    with tempfile.TemporaryDirectory(prefix="kube-extender-sim-") as tmp:
        where = Path(tmp)
        argv = ["simulate", "--seed", str(seed), "--quiet", "--out", str(out or where / "out")]
        for flag, name, source in (("--config", "config.yaml", config), ("--cluster", "cluster.yaml", cluster),
                                   ("--workload", "workload.yaml", workload)):
            path = _file(where, name, source)
            if path is not None:
                argv += [flag, path]
        wiring = sim_wiring()
        if specs:
            registry = registry_of(specs)
            wiring = dataclasses.replace(
                wiring, load_config=lambda path: checked(load_config(path), registry),
                create_app=functools.partial(create_app, registry=registry))
        parser = argparse.ArgumentParser(prog="kube-extender")
        sim_cli.add_parser(parser.add_subparsers(dest="command"))
        stdout, stderr = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = sim_cli.run(parser.parse_args(argv), wiring)
        if code != 0:
            raise SimulationError(stderr.getvalue().strip() or f"simulate exited {code}")
        report = json.loads((Path(out or where / "out") / "report.json").read_text())
        return SimulationResult(report, stdout.getvalue())
