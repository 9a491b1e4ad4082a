"""Glue for agent frameworks; each module imports its framework lazily (an extra)."""
