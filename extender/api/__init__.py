"""The only Flask and wire-format code: schemas of ``k8s.io/kube-scheduler/extender/v1``, the
verbs, the probes and debug views, JSON error handling, and the HTTP layers in front of them (the
gevent worker's, gunicorn's gthread worker with JSON errors)."""
