"""ManagedPreemption takes no args; enable it at ``postFilter`` in a profile to turn it on."""
