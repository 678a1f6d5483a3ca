"""The plugin API that policies program against.

Nothing in this package imports Flask, marshmallow or the Kubernetes client: plugins see typed
views over raw dicts, Status values, a CycleState and a Handle onto the engine.
"""

from extender.framework.cycle_state import CycleState
from extender.framework.status import Code, Status, SUCCESS

__all__ = ["Code", "CycleState", "Status", "SUCCESS"]
