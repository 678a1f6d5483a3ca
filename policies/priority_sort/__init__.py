"""PrioritySort: QueueSort by priority (descending), then creation time."""
