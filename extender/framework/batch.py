"""The batch protocol: Filter and Score over many candidate nodes at once, on columns.

kube-scheduler sends hundreds or thousands of candidate names per pod, twice (filter, then
prioritize), and a per-node Python call costs ~1-2 us: at 5,000 names that alone is most of the
time the extender adds to every pod's scheduling cycle. A plugin that also implements
``filter_batch`` / ``score_batch`` is instead handed the candidates as row numbers into
``NodeColumns`` - the snapshot's managed-resource capacity as numpy arrays, one row per node - and
answers with array operations. The runtime uses a plugin's batch method when it has one and its
per-node ``filter`` / ``score`` otherwise (per node, in configured plugin order), so plugins with
only the per-node protocol keep working and the results are the same either way: a batch method
must decide exactly what its per-node method decides, node by node (the property test in
``tests/unit/test_batch_path.py`` holds the built-in ones to it).

numpy because it is the well-kept, ubiquitous tool for exactly this (int64 arrays, masks, fancy
indexing), with wheels for every platform the image targets.

Amounts are int64 milli-units. A column whose values (or a request) do not fit comfortably in
int64 is not offered (``column`` returns None): the plugin then returns None and the runtime
falls back to the per-node path, which computes with Python ints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import AbstractSet, Callable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np
import numpy.typing as npt

from extender.framework.cycle_state import CycleState
from extender.framework.status import Code, Status
from extender.framework.views import NodeInfo, PodInfo

Rows = npt.NDArray[np.intp]
Ints = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

EXACT_LIMIT = 1 << 56
"""Amounts below this (in absolute value) are held in int64 columns; products with the score
scale (x 100) and sums of two still fit in int64, so array arithmetic equals Python's."""


@dataclass(frozen=True, slots=True)
class Column:
    """One managed resource over every node row: ``allocatable`` (0 where the node does not
    offer it), ``offered`` (the node lists it in allocatable) and ``requested`` (the accounted
    pods' requests)."""

    allocatable: Ints
    offered: Mask
    requested: Ints


class NodeColumns(Protocol):
    """A snapshot's nodes as columns (read-only: never write into the arrays)."""

    rowspace: object
    """Rows mean the same nodes in every NodeColumns with the same ``rowspace`` (this object):
    a node keeps its row while it exists, a new node takes a new row. A plugin that keeps
    per-row state of its own keys it by this."""

    def column(self, resource: str) -> Column | None:
        """The resource's column; None when an amount is out of int64 range (use the per-node
        path). A resource no node offers or requests has a column of zeros."""

    def rows_of(self, names: Sequence[str]) -> Rows:
        """Row per name, -1 for a name the snapshot does not hold."""

    def generations(self, rows: Rows) -> Ints:
        """The ``NodeInfo.generation`` of each row's node: a row whose generation is unchanged
        holds the very same NodeInfo (pods, labels, annotations)."""

    def names_at(self, rows: Rows) -> list[str]:
        """The node names of ``rows`` (rows of nodes the snapshot holds), in order."""


@dataclass(frozen=True, slots=True)
class Batch:
    """The candidates of one Filter or Score call: ``rows[k]`` is candidate position k's row in
    ``columns``. Positions are what batch methods answer in."""

    columns: NodeColumns
    rows: Rows
    nodes: Callable[[str], NodeInfo | None] | None = None
    """The snapshot's NodeInfo by name (for what columns do not hold); None: not offered."""
    held: AbstractSet[str] = frozenset()
    """Nodes holding capacity against the pod (nominated pods, reservation slots): the columns'
    requested amounts count it, a NodeInfo from ``nodes`` does not. A plugin that reads more
    than the columns returns None when a candidate is among them (the runtime then calls its
    per-node ``filter``, on the NodeInfo with the held pods added)."""

    def __len__(self) -> int:
        return len(self.rows)


@dataclass(frozen=True, slots=True)
class Rejection:
    """Candidates rejected for one reason: ``positions`` (into the Batch, ascending), the
    ``code`` and the reply's ``reason`` text (kube-scheduler's wording, the same for all of
    them), and ``status_at(position)``: the very Status the per-node ``filter`` returns for that
    node (with its per-node detail), made only when someone asks (the explain endpoint)."""

    positions: Rows
    code: Code
    reason: str
    status_at: Callable[[int], Status]


@runtime_checkable
class BatchFilterPlugin(Protocol):
    name: str

    def filter_batch(self, state: CycleState, pod: PodInfo, batch: Batch) -> list[Rejection] | None:
        """The rejected candidates, grouped by reason (disjoint groups; positions not in any
        group fit); None: cannot answer in batch (the runtime calls ``filter`` per node)."""


@runtime_checkable
class BatchScorePlugin(Protocol):
    name: str

    def score_batch(self, state: CycleState, pod: PodInfo, batch: Batch) -> Ints | None:
        """Every candidate's score (int64, aligned with ``batch.rows``), exactly what ``score``
        returns per node; None: cannot answer in batch (the runtime scores per node). Not used
        for a plugin with ``normalize_score`` (see ``BatchNormalizedScorePlugin``)."""


@runtime_checkable
class BatchNormalizedScorePlugin(Protocol):
    name: str

    def score_batch_normalized(self, state: CycleState, pod: PodInfo, batch: Batch) -> Ints | None:
        """For a plugin with ``normalize_score``: every candidate's score after NormalizeScore
        (int64, aligned with ``batch.rows``) - exactly what ``score`` per node, then
        ``normalize_score`` over those scores, give; None: per node."""


def fits_exactly(amounts: Mapping[str, int]) -> bool:
    """Every amount is within the columns' exact range."""
    return all(-EXACT_LIMIT < v < EXACT_LIMIT for v in amounts.values())
