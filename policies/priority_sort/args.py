"""PrioritySort takes no args."""
