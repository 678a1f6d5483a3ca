"""AcceleratorModel: a kube-extender policy. Pods name the accelerator models they accept; nodes
say which model they carry with a label; among the nodes that fit, the cheapest model wins.

``logic`` holds the rules (pure functions), ``args`` the configuration, ``plugin`` the adapter
to kube-extender's plugin API and the ``SPEC`` the entry point names.
"""
