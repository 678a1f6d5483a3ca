"""ManagedPreemption: extender-driven preemption for resources kube-scheduler cannot see."""
