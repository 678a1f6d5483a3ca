"""The batch path of filter and prioritize: the candidates as rows of the snapshot's columns.

``filter_names`` and ``score_names`` decide what ``Framework.run_filter`` / ``run_score`` decide
over the same candidates - the same feasible names in input order, the same Status per rejected
name, the same scores - but hand each plugin that implements the batch protocol
(``extender.framework.batch``) all candidates at once, and answer the reply's dicts without a
Python loop over nodes. Plugins with only the per-node protocol are called per node, in their
configured place. Capacity held on candidates against the pod comes in as columns with the held
amounts added (``held``): batch plugins see it there, per-node plugins on the adjusted NodeInfo.
Candidates the engine must adjust in a way columns do not say (the pod's own reservation, holds
judged per node) are filtered per node, through ``Framework.run_filter``, on the adjusted
NodeInfo. When PreFilter allowed few of the candidates (a gang member steered to its slot's node),
those few are filtered per node and the rest excluded as one group. Rejected names are answered
as ``NodeTexts`` (groups sharing a text), their Statuses made only when read.
``tests/unit/test_batch_path.py`` proves both paths equal over random clusters.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import AbstractSet, Callable, Iterator, NamedTuple, Sequence, overload

import numpy as np

from extender.cache.columns import Columns
from extender.cache.snapshot import Snapshot
from extender.framework.batch import Batch, Ints, Mask, Rejection, Rows
from extender.framework.cycle_state import CycleState
from extender.framework.interfaces import MAX_NODE_SCORE
from extender.framework.status import Code, Status
from extender.framework.views import NodeInfo, PodInfo
from extender.runtime.framework import Framework, _crash, _invalid_score, _status
from extender.runtime.outcomes import MadeOnRead, NodeTexts


def _reply_text(st: Status) -> str:
    """What the filter reply says for a node rejected with ``st`` (as ``SchedulingCycle.filter`` does)."""
    return st.reasons[0] if len(st.reasons) == 1 else st.message


def _shared(st: Status) -> Callable[[int], Status]:
    return lambda _position: st


class _Group(NamedTuple):
    positions: Rows
    code: Code
    text: str
    status_at: Callable[[int], Status]
    known: bool
    """Its positions are rows of nodes the snapshot holds (not the unknown names)."""


class LazyStatuses(MadeOnRead[Status]):
    """Name -> Status of every rejected candidate, made on first use (by ``make``): the reply
    needs only the grouped texts, and the per-node statuses are read only when someone asks why
    (explain log, PostFilter, the rejection event)."""

    __slots__ = ("_maker",)

    def __init__(self, make: Callable[[], dict[str, Status]]) -> None:
        super().__init__()
        self._maker: Callable[[], dict[str, Status]] | None = make

    def _make(self) -> dict[str, Status]:
        assert self._maker is not None
        made, self._maker = self._maker(), None  # what it closed over is freed
        return made


def _statuses(names: Sequence[str], groups: list[_Group]) -> dict[str, Status]:
    made: dict[str, Status] = {}
    for g in groups:
        status_at = g.status_at
        for k in g.positions.tolist():
            made[names[k]] = status_at(k)
    return made


@dataclass
class BatchFilter:
    """What ``SchedulingCycle.filter`` needs of the Filter phase: ``feasible`` names in input order, every
    rejected name's Status, and the reply's ``failed`` (UNSCHEDULABLE) and ``unresolvable``
    name -> text maps."""

    feasible: list[str]
    rejected: Mapping[str, Status]
    failed: NodeTexts
    unresolvable: NodeTexts


_NO_TEXTS = NodeTexts()
"""No rejected name (shared: read-only)."""


def _names_at(names: Sequence[str], positions: Rows) -> list[str]:
    return list(map(names.__getitem__, positions.tolist()))


def filter_names(fw: Framework, state: CycleState, pod: PodInfo, snapshot: Snapshot, names: list[str], *,
                 allowed: frozenset[str] | None, adjusted: AbstractSet[str], adjust: Callable[[NodeInfo], NodeInfo],
                 unknown: Status, excluded: Status,
                 held: tuple[Columns, AbstractSet[str]] | None = None) -> BatchFilter | None:
    """The Filter phase over ``names``: an unknown name gets ``unknown``, a name PreFilter left out
    of ``allowed`` (None: every name) gets ``excluded``, a name in ``adjusted`` is filtered per
    node on ``adjust(its NodeInfo)``, the rest in batch (see the module docstring) - or, when
    ``allowed`` holds at most a quarter as many names, per node (``_filter_steered``). ``held``: the
    snapshot's columns with the capacity held against the pod added, and the names where it is
    (a per-node plugin sees those on ``adjust(its NodeInfo)``). None when a plugin failed or
    answered an Error: the engine then runs the per-node path, which reports the failure as it
    always does (that path is the one place errors are handled)."""
    columns, shifted = held if held is not None else (snapshot.columns(), frozenset())
    if allowed is not None and 4 * len(allowed) <= len(names):
        return _filter_steered(fw, state, pod, snapshot, names, allowed, columns, unknown, excluded,
                               adjusted, adjust, shifted)
    rows = columns.rows_of(names)
    n = len(names)
    groups: list[_Group] = []
    rejected = np.zeros(n, dtype=np.bool_)

    def add(positions: Rows, code: Code, text: str, status_at: Callable[[int], Status], known: bool = True) -> None:
        if len(positions):
            groups.append(_Group(positions, code, text, status_at, known))
            rejected[positions] = True

    def add_statuses(positions: Sequence[int], statuses: Sequence[Status]) -> None:
        """Per-node verdicts, grouped by the (shared) Status objects plugins return."""
        by: dict[int, tuple[Status, list[int]]] = {}
        for k, st in zip(positions, statuses):
            by.setdefault(id(st), (st, []))[1].append(k)
        for st, ks in by.values():
            add(np.array(ks, dtype=np.intp), st.code, _reply_text(st), _shared(st))

    missing = rows < 0
    if missing.any():
        add(np.flatnonzero(missing), unknown.code, _reply_text(unknown), _shared(unknown), known=False)
    if allowed is not None:
        out = np.flatnonzero(~missing & ~_among(rows, columns.rows_of(list(allowed)), columns.size))
        add(out, excluded.code, _reply_text(excluded), _shared(excluded))
    decided = rejected  # rejected, or filtered per node (adjusted): no batch plugin looks at them
    if adjusted:
        special = np.flatnonzero(~rejected & _among(rows, columns.rows_of(list(adjusted)), columns.size))
        if len(special):
            get = snapshot.getter()
            infos = []
            for k in special.tolist():
                info = get(names[k])
                assert info is not None  # its row is known
                infos.append(adjust(info))
            result = fw.run_filter(state, pod, infos)
            if any(st.code is Code.ERROR for st in result.rejected.values()):
                return None
            rejected_special = [(k, result.rejected[info.name]) for k, info in zip(special.tolist(), infos)
                                if info.name in result.rejected]
            add_statuses([k for k, _ in rejected_special], [st for _, st in rejected_special])
            decided = rejected.copy()
            decided[special] = True  # the feasible ones too
    # the positions left to decide; None while that is all of them (the common case: a plugin's
    # batch is then the request's rows themselves, its positions the request's)
    live: Rows | None = np.flatnonzero(~decided) if groups or decided is not rejected else None
    plugins = [p for p in fw.filter_plugins if p.name not in state.skip_filter]
    get = snapshot.getter()
    settled = len(groups)  # the groups ``live`` leaves out
    for p in plugins:
        if len(groups) > settled:  # the last plugin rejected some: what is left to decide
            live = np.flatnonzero(~rejected) if live is None else live[~rejected[live]]
            settled = len(groups)
        if live is not None and not len(live):
            break
        t0 = time.perf_counter()
        try:
            found: list[Rejection] | None = None
            batch_method = getattr(p, "filter_batch", None)
            if batch_method is not None:
                found = batch_method(state, pod, Batch(columns, rows if live is None else rows[live], get, shifted))
            if found is not None:
                for r in found:
                    if live is None:
                        add(r.positions, r.code, r.reason, r.status_at)
                    else:
                        add(live[r.positions], r.code, r.reason, _at(r.status_at, live))
            else:
                statuses = []
                positions = []
                for k in range(n) if live is None else live.tolist():
                    info = get(names[k])
                    assert info is not None
                    if info.name in shifted:
                        info = adjust(info)
                    st = p.filter(state, pod, info)
                    if st.code is not Code.SUCCESS:
                        positions.append(k)
                        statuses.append(st if st.plugin == p.name else st.with_plugin(p.name))
                add_statuses(positions, statuses)
        except Exception:  # noqa: BLE001 - the per-node path fails the same way and reports it
            return None
        finally:
            fw._observe(p.name, "Filter", time.perf_counter() - t0)
    if any(g.code is not Code.UNSCHEDULABLE and g.code is not Code.UNSCHEDULABLE_AND_UNRESOLVABLE for g in groups):
        return None  # an error, or a code no Filter may answer: the per-node path reports it
    if not groups:
        feasible = names.copy()
        snapshot.columns().remember(feasible, rows)
        return BatchFilter(feasible, LazyStatuses(dict), _NO_TEXTS, _NO_TEXTS)
    kept_rows = rows[~rejected]
    feasible = columns.names_at(kept_rows)
    snapshot.columns().remember(feasible, kept_rows)
    failed: list[tuple[Sequence[str], str, bool]] = []
    unresolvable: list[tuple[Sequence[str], str, bool]] = []
    plain = columns.names_plain()
    for g in groups:
        (unresolvable if g.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE else failed).append(
            (columns.names_at(rows[g.positions]), g.text, plain) if g.known else
            (_names_at(names, g.positions), g.text, False))
    return BatchFilter(feasible, LazyStatuses(lambda: _statuses(names, groups)),
                       NodeTexts(failed) if failed else _NO_TEXTS,
                       NodeTexts(unresolvable) if unresolvable else _NO_TEXTS)


def _filter_steered(fw: Framework, state: CycleState, pod: PodInfo, snapshot: Snapshot, names: list[str],
                    allowed: frozenset[str], columns: Columns, unknown: Status, excluded: Status,
                    adjusted: AbstractSet[str], adjust: Callable[[NodeInfo], NodeInfo],
                    shifted: AbstractSet[str]) -> BatchFilter | None:
    """``filter_names`` when PreFilter allowed few of many names (Gang steers a member to its
    slot's node): one C-level pass tells whether every name is known, another finds where the
    allowed ones are; those are filtered per node (``Framework.run_filter``, as the per-node path
    does: for a handful of nodes that is cheaper than array operations, and it decides the same by
    definition), and every other name is excluded - one group of the reply's ``NodeTexts``, the
    request's list with the few others cut out: no map of 500 names is made."""
    known = columns.index.__contains__
    missing = [] if all(map(known, names)) else list(itertools.filterfalse(known, names))
    at = _positions(names, allowed.difference(missing) if missing else allowed)
    get = snapshot.getter()
    infos = []
    for name in at:
        info = get(name)
        assert info is not None  # a known name
        infos.append(adjust(info) if name in adjusted or name in shifted else info)
    result = fw.run_filter(state, pod, infos)
    if any(st.code is Code.ERROR for st in result.rejected.values()):
        return None
    cut = [k for ks in at.values() for k in ks]
    if missing:
        cut += [k for ks in _positions(names, frozenset(missing)).values() for k in ks]
    rest = _without(names, sorted(cut))
    failed: list[tuple[Sequence[str], str, bool]] = []
    unresolvable: list[tuple[Sequence[str], str, bool]] = []

    def into(code: Code) -> list[tuple[Sequence[str], str, bool]]:
        return unresolvable if code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE else failed

    plain = columns.names_plain()  # every name but the missing ones is one the index holds
    into(excluded.code).append((rest, _reply_text(excluded), plain))
    into(unknown.code).append((missing, _reply_text(unknown), False))
    for name, st in result.rejected.items():
        into(st.code).append(([name] * len(at[name]), _reply_text(st), plain))  # each time it is named
    fits = result.feasible
    if len(fits) == 1 and len(at[fits[0]]) == 1:
        feasible = fits  # one node, named once
    else:  # in input order, repeats included
        feasible = [names[k] for k in sorted(k for name in fits for k in at[name])]

    def statuses() -> dict[str, Status]:
        made = dict.fromkeys(rest, excluded)
        made.update(dict.fromkeys(missing, unknown))
        made.update(result.rejected)
        return made
    return BatchFilter(feasible, LazyStatuses(statuses), NodeTexts(failed), NodeTexts(unresolvable))


_SCANNED = 8
"""Up to this many names are looked for in a request's list by scanning it once each (C-level,
no hashing); more in one pass through a set."""


def _positions(names: list[str], wanted: AbstractSet[str]) -> dict[str, list[int]]:
    """Where each name of ``wanted`` is in ``names``, ascending (absent names left out)."""
    found: dict[str, list[int]] = {}
    if len(wanted) <= _SCANNED:
        for name in wanted:
            k = -1
            try:
                while True:
                    k = names.index(name, k + 1)
                    found.setdefault(name, []).append(k)
            except ValueError:
                pass
    else:
        for k, name in enumerate(names):
            if name in wanted:
                found.setdefault(name, []).append(k)
    return found


def _without(names: list[str], cut: list[int]) -> list[str]:
    """``names`` without the positions ``cut`` (ascending), in order (a copy)."""
    out: list[str] = []
    start = 0
    for k in cut:
        out += names[start:k]
        start = k + 1
    out += names[start:]
    return out


def _among(rows: Rows, wanted: Rows, size: int) -> Mask:
    """Which of ``rows`` (-1: unknown, never among) are in ``wanted`` (rows of ``size``): one
    mask over the rows instead of ``np.isin``'s sort."""
    mask = np.zeros(size + 1, np.bool_)  # the last entry stands for -1
    mask[wanted] = True
    mask[-1] = False
    return mask[rows]


def _at(status_at: Callable[[int], Status], live: Rows) -> Callable[[int], Status]:
    """A plugin's ``status_at`` (positions in its batch, ``live``) as one taking request
    positions (``live`` is ascending)."""
    return lambda k: status_at(int(np.searchsorted(live, k)))


def score_names(fw: Framework, state: CycleState, pod: PodInfo, snapshot: Snapshot,
                names: list[str]) -> tuple[Ints, Status]:
    """``Framework.run_score`` over the known names of ``names``, as one int64 array aligned
    with ``names`` (0 for names the snapshot does not hold), or an error status."""
    columns = snapshot.columns()
    rows = columns.rows_of(names)
    known = np.flatnonzero(rows >= 0)
    all_known = len(known) == len(names)
    batch = Batch(columns, rows if all_known else rows[known], snapshot.getter())
    nodes_made: list[list[NodeInfo]] = []

    def nodes() -> list[NodeInfo]:
        if not nodes_made:
            get = snapshot.getter()
            nodes_made.append([get(name) for name in (names if all_known else _names_at(names, known))])  # type: ignore[misc]
        return nodes_made[0]

    for pre in fw.pre_score_plugins:
        try:
            st = _status(pre.pre_score(state, pod, nodes()), "PreScore")
        except Exception as exc:  # noqa: BLE001
            return np.zeros(0, np.int64), _crash(pre.name, "PreScore", exc)
        if st.code is Code.SKIP:
            state.skip_score.add(pre.name)
        elif not st.ok:
            return np.zeros(0, np.int64), st.with_plugin(pre.name)
    weighted: list[tuple[Ints, int]] = []
    for p, weight in fw.score_plugins:
        if p.name in state.skip_score:
            continue
        t0 = time.perf_counter()
        try:
            scores = None
            if getattr(p, "normalize_score", None) is None:
                batch_method = getattr(p, "score_batch", None)
            else:  # a batch that also normalizes, or none: per node, Score then NormalizeScore
                batch_method = getattr(p, "score_batch_normalized", None)
            if batch_method is not None:
                scores = batch_method(state, pod, batch)
                if scores is not None and len(scores) and (scores.min() < 0 or scores.max() > MAX_NODE_SCORE):
                    scores = None  # out of range: let the per-node path name the culprit
            if scores is None:
                ordered = nodes()
                by_name, st = Framework._plugin_scores(p, state, pod, ordered)
                if not st.ok:
                    return np.zeros(0, np.int64), st
                invalid = _invalid_score(p.name, by_name, dict.fromkeys(n.name for n in ordered))
                if invalid is not None:
                    return np.zeros(0, np.int64), invalid
                scores = np.fromiter(map(by_name.__getitem__, (n.name for n in ordered)), np.int64, len(ordered))
        except Exception as exc:  # noqa: BLE001
            return np.zeros(0, np.int64), _crash(p.name, "Score", exc)
        finally:
            fw._observe(p.name, "Score", time.perf_counter() - t0)
        weighted.append((scores, weight))
    weight_sum = sum(weight for _, weight in weighted)  # as Framework's weighted average:
    if not weight_sum:
        total = np.zeros(len(batch), np.int64)  # no weight, no score
    elif len(weighted) == 1:
        total = weighted[0][0]  # one plugin: its scores as they are
    else:
        total = np.zeros(len(batch), np.int64)
        for scores, weight in weighted:
            total += scores * weight
        total //= weight_sum
    if all_known:
        return total, Status()
    out = np.zeros(len(names), np.int64)
    out[known] = total
    return out, Status()


class Priorities(Sequence[tuple[str, int]]):
    """What prioritize answers: (name, score 0..100) per candidate, in input order - held as the
    names and one int64 array (``scores``), so the reply is made from the array (see
    ``extender.api.wire.prioritize_reply``) without a tuple per node."""

    def __init__(self, names: Sequence[str], scores: Ints) -> None:
        self.names = names
        self.scores = scores

    def __len__(self) -> int:
        return len(self.names)

    @overload
    def __getitem__(self, i: int) -> tuple[str, int]: ...

    @overload
    def __getitem__(self, i: slice) -> list[tuple[str, int]]: ...

    def __getitem__(self, i: int | slice) -> tuple[str, int] | list[tuple[str, int]]:
        if isinstance(i, slice):
            return list(zip(self.names[i], self.scores[i].tolist()))
        return self.names[i], int(self.scores[i])

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return zip(self.names, self.scores.tolist())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"Priorities({list(self)!r})"
