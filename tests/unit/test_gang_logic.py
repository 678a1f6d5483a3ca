"""Gang's pure rules (policies/gang/logic.py): group and size, and who is planned where."""

from __future__ import annotations

from typing import Any

import pytest
from builders import GPU, make_pod_group

from extender.framework.pod_group import GROUP_LABEL, PodGroupSpec
from extender.framework.views import NodeInfo, PodInfo
from policies.gang import logic

KEY = "kube-extender.io/pod-group-min-member"


def pod(name: str, gpus: int = 1, *, created: str = "t1", node: str = "", size: int | None = None,
        namespace: str = "default", group: str | None = "g") -> PodInfo:
    meta: dict[str, Any] = {"labels": {GROUP_LABEL: group} if group else {}}
    if size is not None:
        meta["annotations"] = {KEY: str(size)}
    return PodInfo(uid=f"u-{name}", namespace=namespace, name=name, creation_timestamp=created,
                   node_name=node, requests={GPU: gpus} if gpus else {}, raw={"metadata": meta})


def node(name: str, gpus: int) -> NodeInfo:
    return NodeInfo(name, None, allocatable={GPU: gpus})


def fits(member: PodInfo, info: NodeInfo) -> bool:
    return all(info.free(r) >= need for r, need in member.requests.items())


def spec(min_member: int, timeout: Any = None) -> PodGroupSpec:
    group = make_pod_group("g").min_member(min_member)
    if timeout is not None:
        group = group.timeout(timeout)
    parsed = PodGroupSpec.from_raw(group.obj())
    assert parsed is not None
    return parsed


# ---- the group and its size ----------------------------------------------------------------------

@pytest.mark.parametrize("member, group", [
    (pod("a"), ("default", "g")),
    (pod("a", namespace="ns", group="train"), ("ns", "train")),
    (pod("a", group=None), None),
    (pod("a", group=""), None),
])
def test_a_pods_group_is_its_label_in_its_namespace(member: PodInfo, group: logic.Group | None) -> None:
    assert logic.group_key(member) == group


@pytest.mark.parametrize("members, size", [
    ([], None),
    ([(("t1", "a"), {})], None),
    ([(("t1", "a"), {"k": "0"}), (("t2", "b"), {"k": "x"}), (("t3", "c"), {"k": "-2"})], None),
    ([(("t2", "b"), {"k": "8"}), (("t1", "a"), {"k": "4"})], 4),   # the oldest that states one, in any order
    ([(("t1", "a"), {"k": "bad"}), (("t2", "b"), {"k": " 6 "})], 6),
    ([(("t1", "b"), {"k": "3"}), (("t1", "a"), {"k": "5"})], 5),    # same age: by uid
])
def test_min_member_is_stated_by_the_oldest_member(members: list[Any], size: int | None) -> None:
    assert logic.min_member(members, "k") == size


@pytest.mark.parametrize("group_spec, members, size", [
    (spec(5), [pod("a", size=3)], 5),
    (None, [pod("b", created="t2", size=8), pod("a", created="t1", size=4)], 4),
    (None, [pod("a")], None),
], ids=["the PodGroup wins", "else the oldest member's annotation", "else unknown"])
def test_the_size_comes_from_the_pod_group_else_the_members(group_spec: PodGroupSpec | None,
                                                           members: list[PodInfo], size: int | None) -> None:
    assert logic.needed(group_spec, members, KEY) == size


@pytest.mark.parametrize("group_spec, timeout", [(spec(2, 20), 20.0), (spec(2), 3.0), (None, 3.0)],
                         ids=["the PodGroup's", "PodGroup without one", "no PodGroup"])
def test_the_permit_timeout_is_the_pod_groups_else_the_default(group_spec: PodGroupSpec | None,
                                                                timeout: float) -> None:
    assert logic.permit_timeout(group_spec, 3.0) == timeout


# ---- who is planned ------------------------------------------------------------------------------

@pytest.mark.parametrize("asking, members, count, planned", [
    (pod("a0"), [], 3, ["a0", "a0", "a0"]),
    (pod("a0"), [pod("a1", created="t2"), pod("a2", created="t3")], 3, ["a0", "a1", "a2"]),
    (pod("a0"), [pod("a1", node="n1"), pod("a2")], 2, ["a0", "a2"]),
    (pod("a0"), [pod("launcher", gpus=0), pod("w1")], 3, ["a0", "w1"]),
    (pod("a0"), [pod("a1", gpus=4), pod("a2", gpus=2)], 3, ["a1", "a2", "a0"]),
    (pod("a0"), [pod("a2", created="t3"), pod("a1", created="t2")], 2, ["a0", "a1"]),
    (pod("a0"), [pod("a0")], 2, ["a0", "a0"]),
], ids=["copies of the asking member for members not created yet", "existing members planned with their own requests",
        "placed members need no slot", "members asking for nothing need no slot but count",
        "largest first", "oldest members first when there are more than slots", "the asking member once"])
def test_who_a_plan_places(asking: PodInfo, members: list[PodInfo], count: int, planned: list[str]) -> None:
    assert [m.name for m in logic.wanted(asking, members, count)] == planned


# ---- where they go -------------------------------------------------------------------------------

@pytest.mark.parametrize("nodes, members, placements, missing", [
    ({"n1": 2, "n2": 4}, [1, 1, 1, 1, 1], ["n2", "n2", "n2", "n2", "n1"], 0),
    ({"n1": 2, "n2": 2}, [1, 1, 1], ["n1", "n1", "n2"], 0),
    ({"n1": 3, "n2": 3}, [2, 2, 1], ["n1", "n2", "n2"], 0),
    ({"n1": 4, "n2": 4}, [1] * 10, ["n1"] * 4 + ["n2"] * 4, 2),
    ({"n1": 1}, [2, 1], [], 2),
    ({}, [1], [], 1),
], ids=["roomiest node first", "ties by name", "a node is left once the next member does not fit it",
        "what does not fit is counted", "a member that fits nowhere stops the plan", "no nodes"])
def test_where_a_plan_places(nodes: dict[str, int], members: list[int], placements: list[str], missing: int) -> None:
    wanted = [pod(f"m{i}", gpus) for i, gpus in enumerate(members)]
    got, left = logic.place(wanted, [node(n, g) for n, g in nodes.items()], {GPU: 1}, fits)
    assert [n for n, _ in got] == placements and left == missing
    assert [m.name for _, m in got] == [m.name for m in wanted[:len(got)]], "members are placed in their order"


def test_a_plan_counts_the_members_placed_before_on_the_same_node() -> None:
    asked: list[tuple[str, int]] = []

    def recording(member: PodInfo, info: NodeInfo) -> bool:
        asked.append((member.name, info.requested.get(GPU, 0)))
        return fits(member, info)

    logic.place([pod("a", 2), pod("b", 1), pod("c", 1)], [node("n1", 3)], {GPU: 1}, recording)
    assert asked == [("a", 0), ("b", 2), ("c", 3)]


def test_copies_of_one_member_each_take_their_own_room() -> None:
    """Members not created yet are planned as copies of the asking one: each copy is accounted on
    its node, not one replacing the other."""
    copies = logic.wanted(pod("a0"), [], 3)
    placements, missing = logic.place(copies, [node("n1", 2), node("n2", 1)], {GPU: 1}, fits)
    assert [n for n, _ in placements] == ["n1", "n1", "n2"] and missing == 0
    assert logic.place(copies, [node("n1", 2)], {GPU: 1}, fits)[1] == 1
