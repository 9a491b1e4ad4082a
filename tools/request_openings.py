"""Count the words that open requests people write to assistants, outside BIPIA.

The injection judge's off-topic request feature (`otel_safety/analysis/injection/injection_form.py`)
recognises a request by its opening verb. Its verbs are the imperatives this prints with a
count of at least two, read from the data folder's request sets other than BIPIA (the one
the feature is measured on): XSTest, JailbreakBench behaviours, AgentHarm, do-not-answer,
HarmBench and the forbidden questions, and AgentDojo's user tasks; and from our own 600
everyday requests (`otel_safety/evaluation/requests/everyday.jsonl`: writing, coding,
cooking, travel, scheduling, sentiment and tagging, trivia, role-play ..., written by a hand
that read no rule), since the sets above ask mostly for harm or for an agent's errands.

Run: python tools/request_openings.py --data ../shared/data [--least 2]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import Counter
from pathlib import Path

from otel_safety.analysis.injection.injection_form import REQUEST_VERBS
from otel_safety.judges.corpus import harmful_request

EVERYDAY = Path(__file__).resolve().parents[1] / "otel_safety/evaluation/requests/everyday.jsonl"


def requests(root: Path) -> list[str]:
    """Every distinct request of the sets above."""
    texts = [example.fields["request"] for example in harmful_request(root)]
    for path in sorted((root / "agentdojo").glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            next(handle, None)  # header line
            for line in handle:
                for message in json.loads(line).get("messages") or []:
                    content = message.get("content")
                    if message.get("role") == "user" and isinstance(content, str):
                        texts.append(content)
    with EVERYDAY.open(encoding="utf-8") as handle:
        texts += [json.loads(line)["request"] for line in handle if line.strip()]
    return list(dict.fromkeys(texts))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="../shared/data", help="the labelled data folder")
    parser.add_argument("--least", type=int, default=2, help="openings counted at least")
    args = parser.parse_args(argv)
    texts = requests(Path(args.data))
    openings = Counter(text.split()[0].lower().strip(",.:!") for text in texts if text.split())
    print(f"{len(texts)} distinct requests; openings with at least {args.least}:")
    for word, count in openings.most_common():
        if count < args.least:
            break
        mark = "  (a request verb)" if word in REQUEST_VERBS else ""
        print(f"{count:5d}  {word}{mark}")
    missing = sorted(verb for verb in REQUEST_VERBS if openings[verb] < args.least)
    if missing:
        print(f"request verbs opening fewer than {args.least}: {', '.join(missing)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
