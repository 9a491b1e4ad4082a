"""How many requests of each set the harm and jailbreak markers flag, harmful and benign apart.

`under_refusal` and `jailbreak_compliance` fire on a substantive answer only when the request
carries a marker (or the learned judge reads the answer as harmful help), so a harmful
request the markers miss is a compliance nobody flags. This prints, per request set of the
data folder (XSTest, JailbreakBench behaviours, AgentHarm, do-not-answer, HarmBench, the
forbidden questions), the share of harmful requests flagged and the share of benign ones
flagged. A marker written without reading a set's rows is measured out-of-sample on it;
most were written with XSTest and JailbreakBench in view, the harms named outright (attack
techniques, scam scripts, threats, staged accidents) with HarmBench's misses in view and
AgentHarm's requests unread, and the crimes by other verbs (spam, counterfeits, false
identities, piracy, rumours, bot networks, doctored photos) with do-not-answer's and the
forbidden questions' misses in view, AgentHarm's still unread; those for agentic harms by
their mechanics (dark-web markets, re-uploads, phishing, forged documents) from general
knowledge, AgentHarm's still unread; those for records falsified for an auditor from set 6 of
our agent runs; a last handful (bombs asked for by their instructions, hidden payloads,
threats, intimidation, trolling, gossip, organised crime) from do-not-answer's and the
forbidden questions' misses again, AgentHarm's still unread, which flagged not one more of
its requests.

Run: python tools/harm_marker_coverage.py --data ../shared/data [--at 0.5]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

from otel_safety.analysis.refusal.refusal import input_risk
from otel_safety.judges.corpus import harmful_request


def coverage(root: Path, at: float) -> dict[str, list[int]]:
    """Per set: harmful requests, those flagged, benign requests, those flagged."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for example in harmful_request(root):
        flagged = input_risk(example.fields.get("request", "")).score >= at
        row = counts[example.group]
        offset = 0 if example.label else 2
        row[offset] += 1
        row[offset + 1] += flagged
    return dict(counts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="the shared data folder")
    parser.add_argument("--at", type=float, default=0.5, help="marker score that flags (0.5)")
    args = parser.parse_args(argv)
    if not args.data.is_dir():
        print(f"no data folder at {args.data}; pass --data with its path", file=sys.stderr)
        return 1
    print("| request set | harmful flagged | benign flagged |\n|---|---:|---:|")
    for group, (harmful, hit, benign, false_hit) in sorted(coverage(args.data, args.at).items()):
        shown = [
            f"{n} / {d} ({n / d:.1%})" if d else "-"
            for n, d in ((hit, harmful), (false_hit, benign))
        ]
        print(f"| {group} | {shown[0]} | {shown[1]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
