"""What the tool calls of a run do and where their values came from: categories, grants,
provenance, the records and limits a task names (read by `scope_escalation`, `tool_guard`,
`deception` and the guard)."""
