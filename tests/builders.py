"""The test kit's builders (``extender.testing.kit.builders``), under the name the project's
tests have always imported them by."""

from extender.testing.kit.builders import (GPU, NodeBuilder, PodBuilder, PodGroupBuilder, cluster_objects,
                                           make_node, make_pod, make_pod_group)

__all__ = ["GPU", "NodeBuilder", "PodBuilder", "PodGroupBuilder", "cluster_objects", "make_node", "make_pod",
           "make_pod_group"]
