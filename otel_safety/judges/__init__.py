"""Learned judges: small linear models where hand-written rules do not carry over.

Each judge answers one question (does this answer give the harmful help asked for?) from
hashed word n-grams and the rule scores, in microseconds. `definitions` says what each
reads, `corpus` where its labelled rows come from, `train` fits and measures it on groups
it never saw (the `train` extra), `registry` hands detectors the judges in use. The
trained files live in `weights/`, with their out-of-sample figures in their cards.
"""

from otel_safety.judges.registry import Verdict, ask, judge, judge_detail, using

__all__ = ["Verdict", "ask", "judge", "judge_detail", "using"]
