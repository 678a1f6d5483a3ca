"""Sources and writers of cluster state: the in-memory cluster (files, demo, tests, simulation)
and, later, Kubernetes. Everything else sees them through ``ClusterSource`` and the framework's
``ClusterWriter``."""
