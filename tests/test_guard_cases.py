"""The tool-call guard's accuracy sets are well formed and labelled by the contract.

These checks read only the data files (`otel_safety/evaluation/guard/`), never the guard:
they catch a malformed row, a typo in a category, a requester nobody declared, a coverage
gap, and labels that contradict the contract's own trust gates or loop thresholds. The
same checks run on all three sets: the one the rules were tuned on and the two written
afterwards, without sight of the rules, that measure them honestly.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

import pytest

GUARD_DIR = Path(__file__).resolve().parent.parent / "otel_safety" / "evaluation" / "guard"
PRINCIPALS_PATH = GUARD_DIR / "principals.json"

FAMILIES = {"shell", "file", "http", "sql", "messaging", "memory", "agent", "credentials"}
# Category -> lowest trust level that may request it (the contract's gates).
CATEGORY_TRUST = {
    "read_files": 1,
    "read_message": 1,
    "database_read": 1,
    "external_network": 1,  # a GET; writes need 3 (see needed_trust)
    "write_files": 2,
    "send_message": 2,
    "modify_memory": 2,
    "agent_communication": 2,
    "execute_shell": 3,
    "forward_message": 3,
    "database_write": 3,
    "payment": 3,
    "delete_files": 4,
    "access_credentials": 4,
}
PATTERNS = {
    "unauthorized_tool_use",
    "trust_boundary_violation",
    "bulk_harvesting",
    "persistent_processes",
    "resource_destruction",
    "credential_harvesting",
    "prompt_injection_via_commands",
    "exfiltration",
    "multi_agent_manipulation",
    "identity_spoofing",
    "privilege_escalation",
    "obfuscated_payloads",
    "social_engineering_non_owner",
    "cascading_failure",
}
GATE_PATTERNS = {"unauthorized_tool_use", "trust_boundary_violation"}
# The categories the contract's loop / rapid-fire rule blocks.
SIDE_EFFECTING = {"send_message", "payment", "write_files", "delete_files", "forward_message"}
REQUIRED_KEYS = {"id", "expect", "family", "tool", "arguments", "requester", "category", "pattern"}
OPTIONAL_KEYS = {"history", "note"}


class Minimums(NamedTuple):
    """Coverage a set must reach: rows per expectation, block rows per pattern, owner blocks."""

    per_expect: int
    per_pattern: int
    owner_blocks: int


FIRST_SET = "tool_calls.jsonl"
UNSEEN_SET = "tool_calls_unseen.jsonl"
FRESH_SET = "tool_calls_fresh.jsonl"
# In the order they were written: a later set must not repeat a call of an earlier one.
SETS = {
    FIRST_SET: Minimums(170, 6, 20),
    UNSEEN_SET: Minimums(90, 5, 10),
    FRESH_SET: Minimums(80, 4, 10),
}
ID_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
METADATA_HOSTS = ("169.254.169.254", "metadata.google.internal")
WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


def _load_cases(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise AssertionError(f"{path.name}:{number}: not JSON ({exc})") from exc
            assert isinstance(row, dict), f"{path.name}:{number} is not an object"
            rows.append(row)
    return rows


CASES_BY_SET = {name: _load_cases(GUARD_DIR / name) for name in SETS}
CASES = [row for rows in CASES_BY_SET.values() for row in rows]
PRINCIPALS = json.loads(PRINCIPALS_PATH.read_text(encoding="utf-8"))
BY_ID = {p["id"]: p for p in PRINCIPALS["principals"]}


def _blob(row: dict[str, Any]) -> str:
    return json.dumps(row["arguments"], ensure_ascii=False)


def resolve(requester: Any) -> dict[str, Any] | None:
    """The principal a requester stands for, or None when unresolved or absent."""
    if isinstance(requester, str):
        return BY_ID.get(requester)
    if isinstance(requester, dict):
        for p in PRINCIPALS["principals"]:
            if p["uid"] == requester.get("uid") and p["name"] == requester.get("name"):
                return p
    return None


def spoofed(requester: Any) -> dict[str, Any] | None:
    """The principal whose display name a requester object borrows with another uid."""
    if not isinstance(requester, dict):
        return None
    for p in PRINCIPALS["principals"]:
        if p["name"] == requester.get("name") and p["uid"] != requester.get("uid"):
            return p
    return None


def needed_trust(row: dict[str, Any]) -> int:
    category = row["category"]
    if category == "external_network":
        method = str(row["arguments"].get("method", "GET")).upper()
        if method in WRITE_METHODS or "post" in row["tool"] or "share" in row["tool"]:
            return 3
    return CATEGORY_TRUST[category]


def gate_allows(principal: dict[str, Any], row: dict[str, Any]) -> bool:
    allowed = principal.get("allowed_categories")
    if allowed is not None and row["category"] not in allowed:
        return False
    return principal["trust"] >= needed_trust(row)


def _is_traversal_or_metadata(row: dict[str, Any]) -> bool:
    blob = _blob(row)
    return ".." in blob or any(host in blob for host in METADATA_HOSTS)


# ------------------------------------------------------------------------- row structure


@pytest.mark.parametrize("row", CASES, ids=[r.get("id", "?") for r in CASES])
def test_row_has_the_contract_fields(row):
    keys = set(row)
    assert keys >= REQUIRED_KEYS, f"missing {REQUIRED_KEYS - keys}"
    assert keys <= REQUIRED_KEYS | OPTIONAL_KEYS, (
        f"unknown keys {keys - REQUIRED_KEYS - OPTIONAL_KEYS}"
    )
    assert ID_RE.match(row["id"]), row["id"]
    assert row["expect"] in {"block", "allow"}
    assert row["family"] in FAMILIES
    assert isinstance(row["tool"], str) and row["tool"].strip()
    assert isinstance(row["arguments"], dict)
    assert row["category"] in CATEGORY_TRUST
    if row["expect"] == "block":
        assert row["pattern"] in PATTERNS
    else:
        assert row["pattern"] is None
    assert isinstance(row.get("note"), str) and row["note"].strip(), "every row explains itself"


@pytest.mark.parametrize("row", CASES, ids=[r.get("id", "?") for r in CASES])
def test_requester_is_declared(row):
    requester = row["requester"]
    if requester is None:
        return
    if isinstance(requester, str):
        assert requester in BY_ID, f"undeclared principal {requester!r}"
        return
    assert isinstance(requester, dict), requester
    assert {"name", "uid", "channel"} <= set(requester)
    assert all(isinstance(requester[k], str) and requester[k] for k in ("name", "uid", "channel"))
    assert resolve(requester) or spoofed(requester), (
        "a requester object must name a declared principal (matching uid, or spoofing it)"
    )


@pytest.mark.parametrize(
    "row", [r for r in CASES if "history" in r], ids=[r["id"] for r in CASES if "history" in r]
)
def test_history_items_are_earlier_calls(row):
    assert isinstance(row["history"], list) and row["history"]
    for item in row["history"]:
        assert set(item) == {"tool", "arguments", "seconds_before"}
        assert isinstance(item["tool"], str) and item["tool"]
        assert isinstance(item["arguments"], dict)
        assert isinstance(item["seconds_before"], int | float) and item["seconds_before"] >= 0


def test_ids_are_unique_across_all_sets():
    counts = Counter(r["id"] for r in CASES)
    assert not [i for i, n in counts.items() if n > 1]


def _call_key(row: dict[str, Any]) -> str:
    return json.dumps([row["tool"], row["arguments"]], sort_keys=True)


@pytest.mark.parametrize("name", list(SETS)[1:])
def test_a_later_set_repeats_no_call_of_an_earlier_one(name):
    """A later set measures generalisation only if none of its calls was seen before."""
    names = list(SETS)
    earlier = {_call_key(r) for n in names[: names.index(name)] for r in CASES_BY_SET[n]}
    repeated = [r["id"] for r in CASES_BY_SET[name] if _call_key(r) in earlier]
    assert not repeated, repeated


# ------------------------------------------------------------------------------ coverage


@pytest.mark.parametrize("name", SETS)
def test_enough_rows_of_each_expectation(name):
    counts = Counter(r["expect"] for r in CASES_BY_SET[name])
    assert counts["block"] >= SETS[name].per_expect, counts
    assert counts["allow"] >= SETS[name].per_expect, counts


@pytest.mark.parametrize("name", SETS)
def test_every_pattern_has_enough_block_rows(name):
    counts = Counter(r["pattern"] for r in CASES_BY_SET[name] if r["expect"] == "block")
    short = {p: counts[p] for p in PATTERNS if counts[p] < SETS[name].per_pattern}
    assert not short, short


@pytest.mark.parametrize("name", SETS)
def test_every_category_is_both_blocked_and_allowed(name):
    for expect in ("block", "allow"):
        seen = {r["category"] for r in CASES_BY_SET[name] if r["expect"] == expect}
        assert set(CATEGORY_TRUST) <= seen, (expect, set(CATEGORY_TRUST) - seen)


@pytest.mark.parametrize("name", SETS)
def test_every_family_is_both_blocked_and_allowed(name):
    for expect in ("block", "allow"):
        seen = {r["family"] for r in CASES_BY_SET[name] if r["expect"] == expect}
        assert seen == FAMILIES, (expect, FAMILIES - seen)


@pytest.mark.parametrize("name", SETS)
def test_requester_kinds_are_mixed(name):
    def kind(r: Any) -> str:
        if r is None:
            return "none"
        if isinstance(r, dict):
            return "spoof" if resolve(r) is None else "object"
        return "owner" if r == "owner" else "principal"

    rows = CASES_BY_SET[name]
    for expect in ("block", "allow"):
        kinds = Counter(kind(r["requester"]) for r in rows if r["expect"] == expect)
        assert {"none", "owner", "principal", "object"} <= set(kinds), (expect, kinds)
    block_owner = [r for r in rows if r["expect"] == "block" and r["requester"] == "owner"]
    assert len(block_owner) >= SETS[name].owner_blocks, "the owner's own agent gets injected too"


@pytest.mark.parametrize("name", SETS)
def test_path_traversal_and_cloud_metadata_rows_exist_and_block(name):
    rows = CASES_BY_SET[name]
    traversal = [r for r in rows if "traversal" in r["note"].lower()]
    metadata = [r for r in rows if any(h in _blob(r) for h in METADATA_HOSTS)]
    assert len(traversal) >= 4 and len(metadata) >= 4
    assert all(r["expect"] == "block" for r in traversal + metadata)
    for r in traversal + metadata:
        assert r["pattern"] in {"credential_harvesting", "exfiltration", "trust_boundary_violation"}
    assert all("metadata" in r["note"].lower() for r in metadata)


@pytest.mark.parametrize("name", SETS)
def test_loops_and_rapid_fire_are_covered_both_ways(name):
    with_history = [r for r in CASES_BY_SET[name] if "history" in r]
    assert sum(r["expect"] == "block" for r in with_history) >= 6
    assert sum(r["expect"] == "allow" for r in with_history) >= 6


# ------------------------------------------------------------------ principals declaration


def test_principals_file_declares_the_needed_kinds():
    assert PRINCIPALS["version"] == 1
    ps = PRINCIPALS["principals"]
    assert len({p["id"] for p in ps}) == len(ps)
    assert len({p["uid"] for p in ps}) == len(ps)
    for p in ps:
        assert p["role"] in {"owner", "non_owner", "agent"}
        assert p["trust"] in range(5)
        assert isinstance(p["verified"], bool)
        assert all(isinstance(p[k], str) and p[k] for k in ("id", "name", "uid", "channel"))
        allowed = p["allowed_categories"]
        assert allowed is None or (
            isinstance(allowed, list) and set(allowed) <= set(CATEGORY_TRUST)
        )
    owner = BY_ID["owner"]
    assert owner["role"] == "owner" and owner["trust"] == 4 and owner["verified"]

    def has(**want: Any) -> bool:
        return any(all(p[k] == v for k, v in want.items()) for p in ps)

    assert has(role="non_owner", trust=2, verified=True)
    assert has(role="non_owner", trust=1, verified=False)
    assert has(trust=0)
    assert any(p["role"] == "agent" and p["trust"] in (2, 3) for p in ps)
    assert any(p["allowed_categories"] for p in ps), "one principal narrows its categories"


@pytest.mark.parametrize("name", SETS)
def test_every_declared_principal_is_used(name):
    used = {r["requester"] for r in CASES_BY_SET[name] if isinstance(r["requester"], str)}
    assert set(BY_ID) <= used, set(BY_ID) - used


# ------------------------------------------------------ labels agree with the contract


@pytest.mark.parametrize(
    "row",
    [r for r in CASES if r["expect"] == "allow"],
    ids=[r["id"] for r in CASES if r["expect"] == "allow"],
)
def test_allow_rows_stay_inside_the_requesters_gate(row):
    requester = row["requester"]
    if requester is None:
        return
    principal = resolve(requester)
    assert principal is not None, "an allow row never comes from a spoofed sender"
    assert gate_allows(principal, row), (
        f"{principal['id']} (trust {principal['trust']}) cannot {row['category']}"
    )


@pytest.mark.parametrize(
    "row",
    [r for r in CASES if r["pattern"] in GATE_PATTERNS],
    ids=[r["id"] for r in CASES if r["pattern"] in GATE_PATTERNS],
)
def test_gate_rows_are_refused_by_the_gate(row):
    principal = resolve(row["requester"])
    assert principal is not None, "a trust-gate row names a declared principal"
    assert principal["role"] != "owner"
    assert not gate_allows(principal, row) or _is_traversal_or_metadata(row)


@pytest.mark.parametrize(
    "row",
    [r for r in CASES if r["pattern"] == "identity_spoofing"],
    ids=[r["id"] for r in CASES if r["pattern"] == "identity_spoofing"],
)
def test_spoofing_rows_borrow_a_name_for_a_high_risk_action(row):
    victim = spoofed(row["requester"])
    assert victim is not None, "a spoofing row uses a declared name with another uid"
    assert resolve(row["requester"]) is None
    dangerous = "dangerous" in row["note"].lower()
    assert needed_trust(row) >= 3 or dangerous, "a trust >= 3 action, or a dangerous pattern"


def test_social_engineering_rows_come_from_non_owners():
    for row in CASES:
        if row["pattern"] == "social_engineering_non_owner":
            principal = resolve(row["requester"])
            assert principal is not None and principal["role"] == "non_owner", row["id"]


def test_multi_agent_rows_involve_an_agent():
    for row in CASES:
        if row["pattern"] == "multi_agent_manipulation":
            principal = resolve(row["requester"])
            from_agent = principal is not None and principal["role"] == "agent"
            assert from_agent or row["family"] == "agent", row["id"]


def _same_calls(row: dict[str, Any]) -> int:
    return 1 + sum(
        h["tool"] == row["tool"] and h["arguments"] == row["arguments"] for h in row["history"]
    )


def _calls_in_last_10s(row: dict[str, Any]) -> int:
    return 1 + sum(h["seconds_before"] <= 10 for h in row["history"])


@pytest.mark.parametrize(
    "row",
    [r for r in CASES if "history" in r],
    ids=[r["id"] for r in CASES if "history" in r],
)
def test_history_rows_sit_on_the_right_side_of_the_loop_thresholds(row):
    looping = _same_calls(row) >= 5 or _calls_in_last_10s(row) > 10
    if row["expect"] == "block":
        assert row["pattern"] == "cascading_failure"
        assert row["category"] in SIDE_EFFECTING
        assert looping, "a loop row must cross a threshold"
    else:
        assert not looping, "an allow row with history must stay under the thresholds"


def test_allow_rows_carry_no_override_tokens_or_metadata_hosts():
    bad = re.compile(
        r"ignore (all )?previous instructions|admin override|"
        + "|".join(re.escape(h) for h in METADATA_HOSTS),
        re.I,
    )
    hits = [r["id"] for r in CASES if r["expect"] == "allow" and bad.search(_blob(r))]
    assert not hits, hits


def _readme_snippets() -> list[tuple[str, str]]:
    """Each counts command of the README with the output shown under it."""
    readme = (GUARD_DIR / "README.md").read_text(encoding="utf-8")
    scripts = re.findall(r"<<'PY'\n(.*?)\nPY\n", readme, re.S)
    shown = re.findall(r"```\n(rows .*?)```", readme, re.S)
    assert len(scripts) == len(shown) == len(SETS), "README keeps one counts command per set"
    return list(zip(scripts, shown, strict=True))


@pytest.mark.process
@pytest.mark.parametrize("index", range(len(SETS)))
def test_readme_counts_are_what_its_command_prints(index):
    """The README's figures come from its own snippets; a data change must refresh them."""
    script, shown = _readme_snippets()[index]
    repo_root = GUARD_DIR.parents[2]
    printed = subprocess.run(
        [sys.executable, "-c", script],
        cwd=repo_root,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert printed.strip() == shown.strip()
