"""DefaultBinder takes no args."""
