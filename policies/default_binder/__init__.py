"""DefaultBinder: binds through the cluster writer (a Binding with the pod UID as precondition)."""
