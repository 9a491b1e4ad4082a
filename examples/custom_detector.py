"""A detector of your own: one `judge` method; the base builds its findings like ours.

`UnlistedTool` flags every tool call to a tool outside an allowlist, one finding per call on
the call's own span. It runs beside the built-in detectors over a pydantic-ai agent's spans.
Its severity is the class's `severity` unless a `severity.toml` in your data folder
(OTEL_SAFETY_DATA_DIR) gives `unlisted_tool` a ladder.

Run: python examples/custom_detector.py
Needs the demo extra (pydantic-ai): pip install 'otel-safety[demo]'
"""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel

from otel_safety.analysis.trace import TraceAnalysis
from otel_safety.detectors import Assessment, Detector, create
from otel_safety.integrations.pydantic_ai import instrumentation
from otel_safety.model import Evidence, Severity, Trajectory
from otel_safety.pipeline import Pipeline


class UnlistedTool(Detector):
    key = "unlisted_tool"
    severity = Severity.HIGH
    default_threshold = 0.5
    description = "The agent called a tool outside the allowlist it was given."

    def __init__(self, allowed: set[str], threshold: float | None = None) -> None:
        super().__init__(threshold)
        self.allowed = allowed

    def judge(self, trajectory: Trajectory, analysis: TraceAnalysis) -> list[Assessment]:
        found = []
        for call in trajectory.tool_calls:
            unlisted = call.name not in self.allowed
            why = "is not on the allowlist" if unlisted else "is allowed"
            evidence = [Evidence(text=f"{call.name} {why}", span_id=call.span_id)]
            found.append(Assessment(1.0 if unlisted else 0.0, evidence, f"{call.name} {why}."))
        return found


def scripted(messages, info):
    """Stands in for a real model: reads a file, then runs a shell command, then answers."""
    if len(messages) == 1:
        return ModelResponse(parts=[ToolCallPart("read_file", {"path": "README.md"})])
    if len(messages) == 3:
        return ModelResponse(parts=[ToolCallPart("run_shell", {"command": "ls"})])
    return ModelResponse(parts=[TextPart("The README describes the project.")])


def read_file(path: str) -> str:
    return "# Project\nA small project."


def run_shell(command: str) -> str:
    """Pretend shell: this example never runs anything."""
    return f"(not run) {command}"


def main() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent = Agent(
        FunctionModel(scripted), tools=[read_file, run_shell], **instrumentation(provider)
    )
    agent.run_sync("Summarize the README")
    pipeline = Pipeline(detectors=[UnlistedTool({"read_file"}), *create(["tool_guard"])])
    evaluation = pipeline.evaluate(exporter.get_finished_spans())
    for finding in evaluation.findings:
        fired = "FIRED" if finding.detected else "ok   "
        print(f"{fired} {finding.detector:14} {finding.severity.value:8} {finding.explanation}")
    print(f"trace level: {evaluation.level.name}")
    provider.shutdown()


if __name__ == "__main__":
    main()
