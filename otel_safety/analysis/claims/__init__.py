"""Claims of completed actions in an answer, and the tool calls and results that back or
refute them (read by `deception` and the deception monitor)."""
