"""NodeResources: managed extended resources per node (filter, score, reserve, preemption)."""
