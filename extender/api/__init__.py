"""The only Flask and wire-format code: schemas of ``k8s.io/kube-scheduler/extender/v1``, the
verb routes, the debug endpoints and JSON error handling."""
