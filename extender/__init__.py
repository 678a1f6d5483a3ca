"""kube-extender: a Kubernetes scheduler extender that runs its own scheduling framework.

The stock kube-scheduler calls four HTTP verbs (filter, prioritize, preempt, bind); behind them
this package runs the scheduling framework's extension points over a cluster cache. Start at
``extender.app.create_app`` for the wiring and ``extender.framework`` for the plugin API.
"""

__version__ = "0.3.0"
