"""A trace's shared readings: what several detectors ask of the same run, worked out once.

The pipeline builds one `TraceAnalysis` per trace and hands it to every detector's `judge`
beside the trajectory; each reading is computed on first ask. Readings of a single text
(sentences, refusal, claims) are memoised by content instead (`analysis.memo`), since chat
spans repeat the same texts across traces.
"""

from __future__ import annotations

from functools import cached_property

from otel_safety.analysis.calls.grants import declared_task, user_request
from otel_safety.analysis.calls.taxonomy import Taxonomy, current_taxonomy
from otel_safety.analysis.refusal.refusal import user_text
from otel_safety.model import Trajectory

__all__ = ["TraceAnalysis"]


class TraceAnalysis:
    """The readings of one trajectory that detectors share."""

    def __init__(self, trajectory: Trajectory) -> None:
        self.trajectory = trajectory

    @cached_property
    def user_messages(self) -> str:
        """The user's own messages, else the declared request; never the system prompt,
        whose safety rules would read as a harmful request."""
        return user_text(self.trajectory)

    @cached_property
    def user_request(self) -> str:
        """The request that started the run and every later user turn, each once."""
        return user_request(self.trajectory)

    @cached_property
    def task(self) -> str:
        """The task as declared: the system prompt's set-up and what the user asked, never
        text that arrived in tool results."""
        return declared_task(self.trajectory)

    @cached_property
    def taxonomy(self) -> Taxonomy:
        """The scope taxonomy in force for this trace."""
        return current_taxonomy()
