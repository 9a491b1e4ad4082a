"""Which labelled rows stand or fall together, for the bootstrap intervals.

Rows made from one request are not independent draws: XSTest asks each prompt of three
models, JailbreakBench each behaviour of four models and several attacks, AgentDojo each
task (a user task, with or without an injection task) of eleven model runs and again in
other attack strings, BIPIA each context clean and attacked, AgentHarm each behaviour in
four wordings and as its benign twin. Resampling rows one by one treats them as new
evidence each and narrows the intervals; resampling these clusters whole does not.
"""

from __future__ import annotations

from otel_safety.evaluation.cases import Case

__all__ = ["cluster_of"]


def cluster_of(case: Case) -> str:
    """The unit a case is resampled with: what was asked, whoever answered it."""
    if case.dataset == "xstest":
        return f"xstest:{case.case_id.split(':')[2]}"
    if case.dataset == "jailbreakbench" and case.meta.get("goal"):
        return f"jailbreakbench:{case.meta['goal']}"
    if (case.meta.get("derived_from") or case.dataset) == "agentdojo" and case.meta.get("task"):
        return f"agentdojo:{case.meta['task']}"
    if case.dataset == "bipia":
        return ":".join(case.case_id.split(":")[:3])  # bipia:<task>:<context number>
    if case.dataset == "agentharm":
        split, behaviour = case.case_id.split(":")[1], case.case_id.split(":")[-1]
        return f"agentharm:{split}:{behaviour.split('-')[0]}"  # twins share the id
    return case.case_id
