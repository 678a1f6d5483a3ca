"""Upstream's ``TestSchedulerExtender`` (§8.1 in ``extender.sim``), through the emulator.

machine1..5 (pods capacity 32); three test extenders as in upstream - ext1 (weight 3,
non-cache) keeps machine1/2/3 and favours machine2; ext2 (weight 4, non-cache, the binder,
managedResources foo.com/bar ignoredByScheduler) keeps machine2/3/5 and favours machine3; ext3
(weight 10, nodeCacheCapable) keeps machine1/2/3 and scores machine2 50 (internal weight 5) -
plus kube-extender itself as a fourth, nodeCacheCapable extender with no managedResources on the
scheduler side (so it is interested in every pod) and no bind verb (only one binder is allowed).
The pod only limits foo.com/bar, which no node advertises and NodeResourcesFit ignores.

Expected: machine2, by the extender arithmetic 10·3·10 + 1·4·10 + 50·10·10 = 5340 against
machine3's 1·3·10 + 10·4·10 + 5·10·10 = 930; kube-extender scores both nodes alike (the pod
requests none of its managed resources) and the in-tree scores are equal on identical nodes, so
the assertion is on each term, not only on the winner.
"""

from __future__ import annotations

from builders import make_node, make_pod
from simkit import FakeExtender, OurServer, favour, only, scheduler_for

from extender.sim.client import CallableTransport


def machines() -> list[dict]:
    nodes = []
    for i in range(1, 6):
        node = make_node(f"machine{i}").obj()
        node["status"]["allocatable"] = node["status"]["capacity"] = {"pods": "32"}
        nodes.append(node)
    return nodes


def test_scheduler_extender_integration_scenario() -> None:
    ours = OurServer(machines())
    cluster = ours.cluster
    ext1 = FakeExtender("extender1", [only("machine1", "machine2", "machine3")], [(favour("machine2"), 1)])
    ext2 = FakeExtender("extender2", [only("machine2", "machine3", "machine5")], [(favour("machine3"), 1)],
                        binder=cluster.bind)
    ext3 = FakeExtender("extender3", [only("machine1", "machine2", "machine3")], [(favour("machine2"), 5)],
                        node_cache_capable=True)
    entries = [
        ({"urlPrefix": "http://ext1.test/", "filterVerb": "filter", "prioritizeVerb": "prioritize", "weight": 3,
          "nodeCacheCapable": False}, CallableTransport(ext1)),
        ({"urlPrefix": "http://ext2.test/", "filterVerb": "filter", "prioritizeVerb": "prioritize", "bindVerb": "bind",
          "weight": 4, "nodeCacheCapable": False,
          "managedResources": [{"name": "foo.com/bar", "ignoredByScheduler": True}]}, CallableTransport(ext2)),
        ({"urlPrefix": "http://ext3.test/", "filterVerb": "filter", "prioritizeVerb": "prioritize", "weight": 10,
          "nodeCacheCapable": True}, CallableTransport(ext3)),
        (ours.entry(bindVerb=None, managedResources=[], weight=1), ours.transport),
    ]
    scheduler = scheduler_for(cluster, entries)
    pod = make_pod("extender-test-pod").limits_only(**{"foo.com/bar": 1}).obj()
    cluster.add_pod(pod)

    summary = scheduler.run()

    assert summary.binds == 1 and summary.bind_failures == 0
    bound = cluster.get_pod("default", "extender-test-pod")
    assert bound is not None and bound["spec"]["nodeName"] == "machine2"

    (cycle,) = scheduler.cycles
    assert cycle.outcome == "scheduled" and cycle.node == "machine2"
    assert cycle.feasible == ["machine2", "machine3"]  # ext1 ∩ ext2 ∩ ext3 ∩ kube-extender
    scores = cycle.scores
    assert scores is not None and cycle.totals is not None

    def extender_part(node: str, url: str) -> int:
        return scores[node].get(f"extender:{url}", 0)

    ext_sum = {n: sum(v for k, v in scores[n].items() if k.startswith("extender:http://ext")) for n in scores}
    assert ext_sum == {"machine2": 5340, "machine3": 930}
    assert extender_part("machine2", "http://ext1.test/") == 10 * 3 * 10
    assert extender_part("machine2", "http://ext2.test/") == 1 * 4 * 10
    assert extender_part("machine2", "http://ext3.test/") == 50 * 10 * 10
    assert extender_part("machine3", "http://ext1.test/") == 1 * 3 * 10
    assert extender_part("machine3", "http://ext2.test/") == 10 * 4 * 10
    assert extender_part("machine3", "http://ext3.test/") == 5 * 10 * 10
    ours_url = ours.config.extender.url_prefix
    assert f"extender:{ours_url}" in scores["machine2"]  # it answered, and alike for both nodes
    assert extender_part("machine2", ours_url) == extender_part("machine3", ours_url)
    in_tree = {n: sum(v for k, v in scores[n].items() if not k.startswith("extender:")) for n in scores}
    assert in_tree["machine2"] == in_tree["machine3"]
    assert cycle.totals["machine2"] - cycle.totals["machine3"] == 5340 - 930

    # the chain: each extender only saw the survivors of the previous ones, in the right mode
    assert [len(a["Nodes"]["items"]) for v, a in ext1.calls if v == "filter"] == [5]
    (filter2,) = [a for v, a in ext2.calls if v == "filter"]
    assert [n["metadata"]["name"] for n in filter2["Nodes"]["items"]] == ["machine1", "machine2", "machine3"]
    assert filter2["NodeNames"] is None
    (filter3,) = [a for v, a in ext3.calls if v == "filter"]
    assert filter3["NodeNames"] == ["machine2", "machine3"] and filter3["Nodes"] is None
    (our_filter,) = ours.calls("filter")
    assert our_filter.json()["NodeNames"] == ["machine2", "machine3"]
    # the binder bound it with the pod's UID; nobody else was asked to bind
    assert [a for v, a in ext2.calls if v == "bind"] == [
        {"PodName": "extender-test-pod", "PodNamespace": "default", "PodUID": pod["metadata"]["uid"],
         "Node": "machine2"}]
    assert "bind" not in ext1.verbs() + ext3.verbs() and not ours.calls("bind")
    # kube-extender learnt the placement from the cluster watch, like a non-binder must (§5.4)
    node = next(n for n in ours.app.test_client().get("/debug/snapshot?node=machine2").get_json()["nodes"])
    assert [p["pod"] for p in node["pods"]] == ["default/extender-test-pod"]

    # then deleted, as upstream does
    cluster.delete_pod("default", "extender-test-pod")
    assert scheduler.cache.snapshot().get("machine2").pods == {}  # type: ignore[union-attr]
    node = ours.app.test_client().get("/debug/snapshot?node=machine2").get_json()["nodes"][0]
    assert node["pods"] == []
