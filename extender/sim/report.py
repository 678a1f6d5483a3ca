"""What a simulation did: pods, reasons, utilization, latency, throughput - as JSON, text and SVG.

:func:`build_report` turns a finished :class:`~extender.sim.scheduler.Scheduler` into a plain
JSON-able dict (the ``report.json`` format); :func:`render_text` and :func:`render_svg` present
it. Utilization comes from the scheduler's own accounting (cpu, memory, pods and every extended
resource a node advertises); for the extender's managed resources the extender's
``/debug/snapshot`` numbers are used when given, and any disagreement with the scheduler's own
accounting is listed under ``discrepancies`` (the two caches should agree once binds settle).
Resources a plugin accounts per device (DeviceShare) come from the snapshot alone - nodes do not
advertise them, and a device held whole counts as fully used, which no sum of requests says -
and every device is listed with its use (``devices``).

Preempted pods are those kube-scheduler's preemption deleted and those the extender evicted
itself (ManagedPreemption): the emulator sees the latter only as deletions, so they are told
apart from finished pods by the extender's ``Preempted`` Event on the pod, whose ``related``
object is the preemptor (``cluster_events``, as ``MemoryCluster.events`` records them).

The SVG is hand-written (no plotting dependency): one row per node, one bar per resource,
filled by usage (green -> amber -> red, over-allocation in dark red with a "!"), bars of the
managed resources split per pod (hover for the pod name), totals in the title. A PNG is
written next to it only if ``cairosvg`` happens to be importable.
"""

from __future__ import annotations

import colorsys
import json
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence
from xml.sax.saxutils import escape

from extender.framework.resources import format_milli, milli
from extender.sim.client import CallSample
from extender.sim.records import RunSummary
from extender.sim.scheduler import Scheduler

BASIC = ("cpu", "memory", "pods")


def _percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * pct // 100))
    return ordered[int(rank) - 1]


def latency_table(samples: Iterable[CallSample]) -> dict[str, dict[str, Any]]:
    by_verb: dict[str, list[CallSample]] = {}
    for s in samples:
        by_verb.setdefault(s.verb, []).append(s)
    out = {}
    for verb in ("filter", "prioritize", "preempt", "bind"):
        rows = by_verb.get(verb)
        if not rows:
            continue
        secs = [r.seconds for r in rows]
        out[verb] = {"calls": len(rows), "errors": sum(1 for r in rows if not r.ok),
                     "p50Ms": round(_percentile(secs, 50) * 1000, 3), "p99Ms": round(_percentile(secs, 99) * 1000, 3),
                     "maxMs": round(max(secs) * 1000, 3)}
    return out


def _display(resource: str, amount: int) -> str:
    """Human units: cores for cpu, Gi for memory and storage, whole counts otherwise."""
    if resource in ("memory", "ephemeral-storage"):
        gib = amount / 1000 / 2**30
        return f"{round(gib, 1):g}Gi" if gib < 100 else f"{gib:.0f}Gi"
    if resource == "pods":
        return str(amount // 1000)
    if resource == "cpu":
        return f"{round(amount / 1000, 2):g}"
    return format_milli(amount)


def _managed_from_snapshot(snapshot: Mapping[str, Any] | None) -> dict[str, dict[str, dict[str, int]]]:
    """node -> resource -> {allocatable, allocated} from the extender's /debug/snapshot."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    if not snapshot:
        return out
    for node in snapshot.get("nodes") or []:
        res: dict[str, dict[str, int]] = {}
        for name, qty in (node.get("allocatable") or {}).items():
            res.setdefault(name, {})["allocatable"] = milli(qty)
        for name, qty in (node.get("allocated") or {}).items():
            res.setdefault(name, {})["allocated"] = milli(qty)
        out[node["name"]] = res
    return out


def _devices_from_snapshot(snapshot: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Per node and accounting plugin, the devices of the extender's /debug/snapshot."""
    return [{"node": node["name"], **entry} for node in (snapshot or {}).get("nodes") or []
            for entry in node.get("devices") or []]


def _evicted_by_extender(events: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Pod uid -> the preemptor's key, from ``Preempted`` Events that name it as ``related``."""
    return {e["uid"]: e["related"]["object"] for e in events
            if e.get("reason") == "Preempted" and e.get("uid") and isinstance(e.get("related"), Mapping)}


def build_report(scheduler: Scheduler, summary: RunSummary, *, managed: Sequence[str] = (),
                 extender_snapshot: Mapping[str, Any] | None = None,
                 cluster_events: Iterable[Mapping[str, Any]] = (),
                 extender_quota: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The report of a finished run (JSON-able). ``managed`` names the extender's managed
    resources; ``extender_snapshot`` is its /debug/snapshot document, when reachable;
    ``extender_quota`` its /debug/quota document (quota use per namespace, when quotas are on);
    ``cluster_events`` the Events recorded in the cluster (to find the extender's evictions)."""
    traces = list(scheduler.traces.values())
    evicted = _evicted_by_extender(cluster_events)

    def state(t: Any) -> str:
        return "preempted" if t.state == "completed" and t.uid in evicted else str(t.state)

    bound = sorted((t for t in traces if t.state == "bound"), key=lambda t: t.key)
    pending = sorted((t for t in traces if t.state == "pending"), key=lambda t: t.key)
    preempted = sorted((t for t in traces if state(t) == "preempted"), key=lambda t: t.key)
    completed = sorted((t for t in traces if state(t) == "completed"), key=lambda t: t.key)
    deleted = sorted((t for t in traces if t.state == "deleted"), key=lambda t: t.key)
    queue_state = {qp.uid: qp.state for qp in scheduler.pending()}

    reasons: dict[str, list[str]] = {}
    for t in pending:
        text = t.message or ("waiting for its scheduling gates to be removed" if t.gated else "not tried yet")
        reasons.setdefault(text, []).append(t.key)

    ext_nodes = _managed_from_snapshot(extender_snapshot)
    devices = _devices_from_snapshot(extender_snapshot)
    by_device = {(d["node"], r) for d in devices for r in d.get("resources") or ()}
    managed = list(managed) or sorted({r for n in ext_nodes.values() for r in n})
    nodes_out = []
    totals: dict[str, dict[str, Any]] = {}
    discrepancies = []
    for node in sorted(scheduler.cache.nodes(), key=lambda n: n.name):
        resources: dict[str, dict[str, Any]] = {}
        names = [r for r in managed if r in node.allocatable or node.requested.get(r) or (node.name, r) in by_device]
        names += [r for r in BASIC if r in node.allocatable]
        names += sorted(r for r in node.allocatable if r not in names and "/" in r)
        for r in names:
            alloc = node.allocatable.get(r, 0)
            used = node.pod_count * 1000 if r == "pods" else node.requested.get(r, 0)
            source = "scheduler"
            ext = ext_nodes.get(node.name, {}).get(r)
            if r in managed and ext is not None:
                per_device = (node.name, r) in by_device
                if not per_device and (ext.get("allocated", 0) != used or ext.get("allocatable", alloc) != alloc):
                    discrepancies.append({"node": node.name, "resource": r,
                                          "extender": format_milli(ext.get("allocated", 0)),
                                          "scheduler": format_milli(used)})
                alloc, used = ext.get("allocatable", alloc), ext.get("allocated", 0)
                source = "extender devices" if per_device else "extender"
            pods = []
            if r not in BASIC:
                pods = [{"pod": p.key, "amount": p.requests.get(r, 0)} for p in
                        sorted(node.pods.values(), key=lambda p: p.key) if p.requests.get(r, 0)]
            resources[r] = {"allocatable": alloc, "allocated": used, "display": f"{_display(r, used)}/{_display(r, alloc)}",
                            "percent": round(100 * used / alloc, 1) if alloc else (100.0 if used else 0.0),
                            "source": source, "pods": pods}
            tot = totals.setdefault(r, {"allocatable": 0, "allocated": 0})
            tot["allocatable"] += alloc
            tot["allocated"] += used
        nodes_out.append({"name": node.name, "pods": node.pod_count, "resources": resources})
    for r, tot in totals.items():
        tot["display"] = f"{_display(r, tot['allocated'])}/{_display(r, tot['allocatable'])}"
        tot["percent"] = round(100 * tot["allocated"] / tot["allocatable"], 1) if tot["allocatable"] else 0.0

    bound_count = len(bound) + len(completed) + sum(1 for t in preempted if t.bound_at is not None)
    return {
        "summary": {
            "pods": len(traces), "bound": len(bound), "pending": len(pending), "preempted": len(preempted),
            "completed": len(completed), "deleted": len(deleted), "cycles": summary.cycles,
            "bindFailures": summary.bind_failures, "wallSeconds": round(summary.wall_seconds, 3),
            "virtualSeconds": round(summary.virtual_seconds, 3), "endReason": summary.reason,
            "version": scheduler.cfg.version, "seed": scheduler.cfg.seed,
        },
        "throughput": {
            "podsBound": bound_count,
            "podsPerWallSecond": round(bound_count / summary.wall_seconds, 1) if summary.wall_seconds > 0 else None,
            "podsPerVirtualSecond": (round(bound_count / summary.virtual_seconds, 3)
                                     if summary.virtual_seconds > 0 else None),
        },
        "bound": [{"pod": t.key, "node": t.node, "attempts": t.attempts, "boundBy": t.bound_by,
                   "boundAt": round(t.bound_at - scheduler.clock.start, 3) if t.bound_at is not None else None}
                  for t in bound],
        "pending": [{"pod": t.key, "attempts": t.attempts, "reason": t.message, "nominatedNodeName": t.nominated,
                     "gated": t.gated, "queue": queue_state.get(t.uid, "")} for t in pending],
        "pendingReasons": [{"reason": r, "pods": pods} for r, pods in
                           sorted(reasons.items(), key=lambda kv: (-len(kv[1]), kv[0]))],
        "preempted": [{"pod": t.key, "node": t.node, "by": t.preempted_by or evicted.get(t.uid, ""),
                       "via": "extender" if t.uid in evicted else "kube-scheduler"} for t in preempted],
        "completed": [{"pod": t.key, "node": t.node} for t in completed],
        "deleted": [{"pod": t.key} for t in deleted],
        "utilization": {"managedResources": managed, "source": "extender /debug/snapshot" if ext_nodes else "scheduler",
                        "nodes": nodes_out, "totals": totals, "discrepancies": discrepancies},
        "devices": devices,
        "quota": dict((extender_quota or {}).get("namespaces") or {}),
        "latency": latency_table(scheduler.stats.snapshot()),
        "extenders": [{"urlPrefix": e.name, "filterVerb": e.spec.filter_verb, "prioritizeVerb": e.spec.prioritize_verb,
                       "preemptVerb": e.spec.preempt_verb, "bindVerb": e.spec.bind_verb, "weight": e.spec.weight,
                       "nodeCacheCapable": e.spec.node_cache_capable, "ignorable": e.spec.ignorable}
                      for e in scheduler.extenders],
        "preemptions": [{"pod": c.pod, "attempt": c.attempt, **(c.preemption or {})}
                        for c in scheduler.cycles if c.preemption and c.preemption.get("result") == "preempted"],
    }


# ---- text ------------------------------------------------------------------------------------------


def _table(rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def render_text(report: Mapping[str, Any]) -> str:
    s = report["summary"]
    tp = report["throughput"]
    lines = [f"Simulation (kube-scheduler {s['version']} behaviour, seed {s['seed']}): {s['pods']} pods - "
             f"{s['bound']} bound, {s['pending']} pending, {s['preempted']} preempted, {s['completed']} completed"
             + (f", {s['deleted']} deleted" if s["deleted"] else "")]
    lines.append(f"  {s['cycles']} scheduling cycles, {s['bindFailures']} bind failures; "
                 f"{s['virtualSeconds']:g} s virtual, {s['wallSeconds']:g} s wall ({s['endReason']})")
    if report["bound"]:
        lines += ["", f"Bound ({len(report['bound'])}):"]
        lines += _table([[b["pod"], b["node"], f"attempts {b['attempts']}",
                          f"at {b['boundAt']:g}s" if b["boundAt"] is not None else "", f"by {b['boundBy']}"]
                         for b in report["bound"]])
    if report["pending"]:
        lines += ["", f"Pending ({len(report['pending'])}):"]
        for group in report["pendingReasons"]:
            pods = group["pods"]
            shown = ", ".join(pods[:6]) + (f", ... ({len(pods)} pods)" if len(pods) > 6 else "")
            lines.append(f"  {shown}")
            lines.append(f"    {group['reason']}")
    if report["preempted"]:
        lines += ["", f"Preempted ({len(report['preempted'])}):"]
        lines += _table([[p["pod"], f"on {p['node']}", f"by {p['by']}",
                          "(evicted by the extender)" if p.get("via") == "extender" else ""]
                         for p in report["preempted"]])
    if report["completed"]:
        lines += ["", f"Completed ({len(report['completed'])}): " + ", ".join(c["pod"] for c in report["completed"])]
    util = report["utilization"]
    resources: list[str] = []
    for node in util["nodes"]:
        for r in node["resources"]:
            if r not in resources:
                resources.append(r)
    if util["nodes"]:
        lines += ["", f"Utilization (managed resources from {util['source']}):"]
        rows = [["node", *resources]]
        for node in util["nodes"]:
            rows.append([node["name"], *[f"{node['resources'][r]['display']} ({node['resources'][r]['percent']:g}%)"
                                         if r in node["resources"] else "-" for r in resources]])
        rows.append(["total", *[f"{util['totals'][r]['display']} ({util['totals'][r]['percent']:g}%)"
                                for r in resources]])
        lines += _table(rows)
        for d in util["discrepancies"]:
            lines.append(f"  ! {d['node']} {d['resource']}: extender accounts {d['extender']}, "
                         f"scheduler {d['scheduler']}")
    if report.get("devices"):
        lines += ["", "Devices (used/total per device; a device held whole is fully used):"]
        rows = []
        for entry in report["devices"]:
            for i, d in enumerate(entry["devices"]):
                origin = ", ".join(x for x in (d.get("product"), entry["source"]) if x)
                where = f"{entry['node']} ({origin})" if i == 0 else ""
                state = "whole" if d["exclusive"] else ("unhealthy" if not d["healthy"] else "")
                rows.append([where, f"#{d['id']}", f"{d['memoryMiB']['used']}/{d['memoryMiB']['total']} MiB",
                             f"{d['compute']['used']}/{d['compute']['total']}% compute", state,
                             ", ".join(d["pods"])])
        lines += _table(rows)
    if report.get("quota"):
        lines += ["", "Quota use per namespace (extender /debug/quota):"]
        rows = [["namespace", "resource", "min", "max", "used", "borrowed", "lent", "pending"]]
        for ns, per in report["quota"].items():
            for r, q in per.items():
                rows.append([ns, r, *[q.get(k) or "-" for k in ("min", "max", "used", "borrowed", "lent", "pending")]])
        lines += _table(rows)
    if report["latency"]:
        lines += ["", "Extender calls (ms):"]
        rows = [["verb", "calls", "errors", "p50", "p99", "max"]]
        for verb, row in report["latency"].items():
            rows.append([verb, str(row["calls"]), str(row["errors"]), f"{row['p50Ms']:.2f}", f"{row['p99Ms']:.2f}",
                         f"{row['maxMs']:.2f}"])
        lines += _table(rows)
    per_wall = f"{tp['podsPerWallSecond']:g} pods/s wall" if tp["podsPerWallSecond"] is not None else "-"
    per_virtual = (f", {tp['podsPerVirtualSecond']:g} pods/s virtual" if tp["podsPerVirtualSecond"] is not None else "")
    lines += ["", f"Throughput: {tp['podsBound']} pods bound, {per_wall}{per_virtual}"]
    return "\n".join(lines) + "\n"


# ---- SVG --------------------------------------------------------------------------------------------


def usage_colour(percent: float) -> str:
    """Green (idle) -> amber -> red (full); dark red when over-allocated."""
    if percent > 100:
        return "#7f0000"
    p = max(0.0, min(percent, 100.0)) / 100
    hue = 130 * (1 - p)
    return _hsl(hue, 0.62, 0.45 if p < 0.5 else 0.47)


def _hsl(h: float, s: float, lightness: float) -> str:
    r, g, b = colorsys.hls_to_rgb(h / 360, lightness, s)
    return f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}"


def render_svg(report: Mapping[str, Any], title: str = "Utilization after the simulation") -> str:
    util = report["utilization"]
    s = report["summary"]
    nodes = util["nodes"]
    resources: list[str] = []
    for node in nodes:
        for r in node["resources"]:
            if r not in resources:
                resources.append(r)
    bar_w, bar_h, gap, pad = 420, 16, 6, 24
    name_w = max([len(n["name"]) for n in nodes] + [8]) * 9 + 16  # 14px bold
    res_w = max([len(r) for r in resources] + [4]) * 7 + 12  # 11px
    label_w = name_w + res_w
    text_w = 200
    totals = util["totals"]
    subtitle = " · ".join(f"{r} {totals[r]['display']} ({totals[r]['percent']:g}%)" for r in resources if r in totals)
    counts = (f"{s['bound']} bound · {s['pending']} pending · {s['preempted']} preempted · {s['completed']} completed"
              f" — {s['pods']} pods, {s['virtualSeconds']:g} s simulated")
    width = max(pad * 2 + label_w + bar_w + text_w, pad * 2 + int(len(subtitle) * 7.2), pad * 2 + len(counts) * 8)
    header = 118
    row_h = max(1, len(resources)) * (bar_h + gap) + 14
    height = header + len(nodes) * row_h + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif">',
           f'<title>{escape(title)}: {escape(counts)}</title>',
           f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
           f'<text x="{pad}" y="32" font-size="20" font-weight="bold" fill="#202124">{escape(title)}</text>',
           f'<text x="{pad}" y="56" font-size="14" fill="#202124">{escape(counts)}</text>',
           f'<text x="{pad}" y="78" font-size="13" fill="#3c4043">{escape(subtitle)}</text>']
    # legend
    lx, ly = pad, 100
    out.append(f'<text x="{lx}" y="{ly}" font-size="11" fill="#5f6368">usage:</text>')
    for i, pct in enumerate((0, 25, 50, 75, 100)):
        x = lx + 44 + i * 62
        out.append(f'<rect x="{x}" y="{ly - 10}" width="14" height="12" rx="2" fill="{usage_colour(pct)}"/>')
        out.append(f'<text x="{x + 18}" y="{ly}" font-size="11" fill="#5f6368">{pct}%</text>')
    x = lx + 44 + 5 * 62
    out.append(f'<rect x="{x}" y="{ly - 10}" width="14" height="12" rx="2" fill="{usage_colour(101)}"/>')
    out.append(f'<text x="{x + 18}" y="{ly}" font-size="11" fill="#5f6368">over-allocated</text>')
    y = header
    for i, node in enumerate(nodes):
        if i % 2 == 0:
            out.append(f'<rect x="{pad - 8}" y="{y - 4}" width="{width - 2 * pad + 16}" height="{row_h - 4}" '
                       'fill="#f6f8fa" rx="4"/>')
        out.append(f'<text x="{pad}" y="{y + bar_h - 2}" font-size="14" font-weight="bold" fill="#202124">'
                   f'{escape(node["name"])}</text>')
        plural = "" if node["pods"] == 1 else "s"
        out.append(f'<text x="{pad}" y="{y + bar_h + 14}" font-size="11" fill="#5f6368">{node["pods"]} pod{plural}'
                   '</text>')
        for j, r in enumerate(resources):
            by = y + j * (bar_h + gap)
            x0 = pad + label_w
            res = node["resources"].get(r)
            out.append(f'<text x="{x0 - 8}" y="{by + bar_h - 4}" font-size="11" fill="#5f6368" '
                       f'text-anchor="end">{escape(r)}</text>')
            out.append(f'<rect x="{x0}" y="{by}" width="{bar_w}" height="{bar_h}" rx="3" fill="#e3e6ea"/>')
            if res is None:
                out.append(f'<text x="{x0 + bar_w + 8}" y="{by + bar_h - 4}" font-size="12" fill="#9aa0a6">'
                           'not offered</text>')
                continue
            pct = res["percent"]
            colour = usage_colour(pct)
            fill_w = bar_w * min(pct, 100) / 100
            if fill_w > 0:
                out.append(f'<rect x="{x0}" y="{by}" width="{fill_w:.1f}" height="{bar_h}" rx="3" fill="{colour}">'
                           f'<title>{escape(node["name"])} {escape(r)}: {escape(res["display"])} ({pct:g}%)</title>'
                           '</rect>')
            alloc = res["allocatable"]
            if res["pods"] and alloc:
                offset = 0
                for p in res["pods"][:-1] if len(res["pods"]) > 1 else []:
                    offset += p["amount"]
                    sx = x0 + bar_w * min(offset, alloc) / alloc
                    out.append(f'<line x1="{sx:.1f}" y1="{by + 1}" x2="{sx:.1f}" y2="{by + bar_h - 1}" '
                               'stroke="#ffffff" stroke-width="2"/>')
                offset = 0
                for p in res["pods"]:
                    px = x0 + bar_w * min(offset, alloc) / alloc
                    pw = bar_w * min(p["amount"], max(alloc - offset, 0)) / alloc
                    offset += p["amount"]
                    if pw > 0:
                        out.append(f'<rect x="{px:.1f}" y="{by}" width="{pw:.1f}" height="{bar_h}" fill="none">'
                                   f'<title>{escape(p["pod"])}: {escape(_display(r, p["amount"]))} {escape(r)}'
                                   '</title></rect>')
            mark = " !" if pct > 100 else ""
            out.append(f'<text x="{x0 + bar_w + 8}" y="{by + bar_h - 3}" font-size="12" fill="#202124">'
                       f'{escape(res["display"])} ({pct:g}%){mark}</text>')
        y += row_h
    foot = (f'{s["cycles"]} scheduling cycles · kube-scheduler {s["version"]} behaviour · seed {s["seed"]} · '
            f'managed resources from {util["source"]} · hover a bar for the pods')
    out.append(f'<text x="{pad}" y="{height - 16}" font-size="11" fill="#5f6368">{escape(foot)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


class OutputError(Exception):
    """The output directory cannot be created or written; the message names it."""


def prepare_out_dir(out_dir: str | Path) -> Path:
    """Create ``out_dir`` (and its parents) if missing and check that files can be created in it,
    so that a simulation does not run only to fail writing its report.

    Raises :class:`OutputError` ("DIR: not a directory", "DIR: cannot write: <reason>")."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out}: not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise OutputError(f"{out}: cannot write: {exc.strerror or exc}") from exc
    return out


def write_outputs(report: Mapping[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """report.json, report.txt, utilization.svg (and utilization.png when cairosvg is importable)
    in ``out_dir``, created if missing; returns the files written by kind.

    Raises :class:`OutputError` naming the directory when it cannot be created or written."""
    out = prepare_out_dir(out_dir)
    paths = {"json": out / "report.json", "text": out / "report.txt", "svg": out / "utilization.svg"}
    svg = render_svg(report)
    try:
        paths["json"].write_text(json.dumps(report, indent=2, sort_keys=False, default=_json_default) + "\n")
        paths["text"].write_text(render_text(report))
        paths["svg"].write_text(svg)
    except OSError as exc:
        raise OutputError(f"{out}: cannot write: {exc.strerror or exc}") from exc
    try:
        import cairosvg  # type: ignore[import-not-found]
    except ImportError:
        return paths
    png = out / "utilization.png"
    cairosvg.svg2png(bytestring=svg.encode(), write_to=str(png))
    paths["png"] = png
    return paths


def _json_default(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
