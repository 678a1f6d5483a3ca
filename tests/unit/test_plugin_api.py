"""The plugin API (``extender.framework``'s public names) is pinned: adding, removing or renaming
a name fails here until API_VERSION, this list and docs/writing-a-policy.md say so together."""

from __future__ import annotations

import re
from pathlib import Path

import extender.framework as api

PINNED = {
    "API_VERSION": "1.2",
    "names": sorted([
        "API_VERSION", "ArgsError", "PluginSpec", "no_args", "schema_parser",
        "Code", "PluginError", "SKIP", "SUCCESS", "Status",
        "Clock", "CycleState", "Handle", "NodeInfo", "PodInfo", "SnapshotView", "ClusterWriter", "WriteError",
        "WaitingPodView", "WaitingPodsView", "ReservationsView", "PodGroupSpec", "GROUP_LABEL", "group_of",
        "GroupCount", "MemberState", "QuotaSpec", "node_excluded",
        "Plugin", "PreEnqueuePlugin", "QueueSortPlugin", "PreFilterPlugin", "PreFilterResult", "FilterPlugin",
        "PostFilterPlugin", "PreScorePlugin", "ScorePlugin", "ReservePlugin", "PermitPlugin", "PreBindPlugin",
        "BindPlugin", "PostBindPlugin", "PreemptionPlugin", "Victim", "CapacityReporter", "NodeCapacity",
        "QuotaReporter", "EXTENSION_POINTS", "MAX_NODE_SCORE", "MIN_NODE_SCORE",
        "CAPACITY_EVENTS", "Change", "ClusterEvent",
        "QuantityError", "format_milli", "milli", "parse_quantity", "parse_duration",
    ]),
}
GUIDE = Path(__file__).resolve().parents[2] / "docs" / "writing-a-policy.md"


def test_the_public_names_and_the_version_are_the_pinned_ones() -> None:
    assert api.API_VERSION == PINNED["API_VERSION"]
    assert sorted(api.__all__) == PINNED["names"]
    assert len(set(api.__all__)) == len(api.__all__)


def test_every_public_name_is_importable_from_the_package_itself() -> None:
    missing = [name for name in api.__all__ if not hasattr(api, name)]
    assert missing == []


def test_the_guide_documents_exactly_the_public_names() -> None:
    """The guide's table of the API: one row per name, in backticks, first column."""
    text = GUIDE.read_text()
    section = text.split("## The plugin API", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `([A-Za-z_]+)`", section, flags=re.M)
    assert sorted(documented) == PINNED["names"]
    assert f"API_VERSION` is `{PINNED['API_VERSION']}`" in section
