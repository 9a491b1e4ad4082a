"""The two RE2 rewrites of detector patterns read syntax through one lexer and write what they
always wrote.

`re2_syntax.translate` (exact on ASCII text) and `relax.relax` (a superset prefilter) once
walked `regex` syntax with two parsers of the same shape; both now read tokens from
`regex_tokens.Lexer`. tests/data/regex_rewrites.json holds, for every packaged pattern, a
digest of what the two separate walkers wrote (the translation, the reason RE2 cannot take
the pattern, the relaxed forms with and without anchors): every pattern the detectors
compile today must still give the same digest.

A data-file change adds patterns the file does not know: they are skipped, and the file may
be brought up to date with `python tests/test_regex_rewrites.py` (after a data change, or
in the commit of a deliberate change to a rewrite, whose message names what it changed;
never to wave through a change nobody meant).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections import OrderedDict
from pathlib import Path

import pytest
import regex

from otel_safety import detectors as detector_registry
from otel_safety.analysis import linear
from otel_safety.analysis.re2_syntax import translate, untranslatable
from otel_safety.analysis.regex_tokens import (
    CLASS,
    COUNT,
    ESCAPE,
    GROUP,
    ITEM_END,
    Lexer,
    group_end,
)
from otel_safety.analysis.relax import relax
from otel_safety.behavior import monitor

DIGESTS = Path(__file__).parent / "data" / "regex_rewrites.json"


def _key(source: str, flags: int) -> str:
    return hashlib.sha256(f"{int(flags)}:{source}".encode()).hexdigest()[:20]


def rewrites(source: str, flags: int) -> list:
    """What both rewrites write for a pattern (an exception's type where one is raised)."""
    answers: list = []
    for rewrite in (
        lambda: (lambda t: None if t is None else [t.source, t.dollar_at_end])(
            translate(source, flags)
        ),
        lambda: untranslatable(source, flags),
        lambda: relax(source, flags),
        lambda: relax(source, flags, keep_anchors=True),
    ):
        try:
            answers.append(["ok", rewrite()])
        except Exception as exc:  # what was raised is part of the answer
            answers.append(["raised", type(exc).__name__])
    return answers


def digest(source: str, flags: int) -> str:
    return hashlib.sha256(json.dumps(rewrites(source, flags)).encode()).hexdigest()[:20]


def packaged_patterns(data_dir: Path) -> dict[tuple[str, int], regex.Pattern]:
    """Every pattern the detectors compile from their packaged data, by (source, flags)."""
    compiled: dict[tuple[str, int], regex.Pattern] = {}
    original = regex.compile

    def recording(pattern, flags=0, *args, **kwargs):
        found = original(pattern, flags, *args, **kwargs)
        if isinstance(pattern, str):
            compiled[(found.pattern, int(found.flags))] = found
        return found

    regex.compile = recording
    try:
        detector_registry.create()
        linear.compile_pending()  # the packaged patterns that wait for their first search
    finally:
        regex.compile = original
    return compiled


def test_every_packaged_pattern_is_rewritten_as_the_separate_walkers_did(monkeypatch, tmp_path):
    monkeypatch.setenv("OTEL_SAFETY_DATA_DIR", str(tmp_path))  # compiled afresh, not cached
    monkeypatch.setenv("OTEL_SAFETY_PATTERN_CACHE", "off")  # every compile recorded
    # nor shared with monitors an earlier test built (behaviour monitors share their rules)
    monkeypatch.setattr(monitor, "_COMPILED_RULES", OrderedDict())
    known = json.loads(DIGESTS.read_text(encoding="utf-8"))
    patterns = packaged_patterns(tmp_path)
    checked = 0
    for source, flags in patterns:
        expected = known.get(_key(source, flags))
        if expected is None:
            continue  # a pattern added to the data since the digests were taken
        checked += 1
        assert digest(source, flags) == expected, (source[:200], flags, rewrites(source, flags))
    assert checked >= 2000, f"only {checked} packaged patterns have a recorded digest"


def test_the_lexer_reads_escapes_classes_groups_and_counts_whole():
    lexer = Lexer(r"\x41\p{Greek}[^a\]\d-](?P<n>a){2,}(?=\w)\12")
    tokens = []
    while lexer.more():
        tokens.append(lexer.next())
    kinds = [(t.kind, t.char, t.argument) for t in tokens]
    assert kinds[0] == (ESCAPE, "x", "41")
    assert kinds[1] == (ESCAPE, "p", "{Greek}")
    assert tokens[2].kind == CLASS and tokens[2].argument is True  # negated
    assert [(i.kind, i.char) for i in tokens[2].items] == [
        ("char", "a"),
        ("escape", "]"),
        ("escape", "d"),
        ("dash", "-"),
    ]
    assert kinds[3] == (GROUP, "named", "n")
    assert kinds[6] == (COUNT, "", ("2", ",", ""))
    assert kinds[7] == (GROUP, "lookaround", "(?=")
    assert kinds[-1] == (ESCAPE, "1", "2")  # a backreference keeps all its digits


def test_a_class_that_never_closes_ends_with_an_end_item():
    token = Lexer(r"[ab\q").next()
    assert token.items[-1].kind == ITEM_END
    assert translate(r"[ab") is None and relax(r"[ab") is None


def test_group_end_skips_nested_groups_classes_and_escapes():
    source = r"(?=a(b[)]\))c)d"
    assert source[group_end(source, 0) :] == "d"
    assert group_end("(ab", 0) is None


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        (r"(?<!x)y", "lookaround (?<!...)"),
        (r"(a)\1", "backreference"),
        (r"(?>ab)", "atomic group"),
        (r"a{2}{3}", "repeated quantifier"),
        (r"[[:alpha:]]", "nested set or POSIX class"),
        (r"\p{Greek Extended}", "property"),
    ],
)
def test_what_re2_cannot_take_is_named(source, reason):
    assert untranslatable(source) == reason


def _write_digests() -> None:
    """Record the digests of every packaged pattern (run after a data change only)."""
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as empty:
        os.environ["OTEL_SAFETY_DATA_DIR"] = empty
        os.environ["OTEL_SAFETY_PATTERN_CACHE"] = "off"  # every compile recorded, as in the test
        patterns = packaged_patterns(Path(empty))
    digests = {_key(s, f): digest(s, f) for s, f in sorted(patterns)}
    DIGESTS.parent.mkdir(exist_ok=True)
    DIGESTS.write_text(json.dumps(digests, indent=0, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{len(digests)} digests written to {DIGESTS}", file=sys.stderr)


if __name__ == "__main__":
    _write_digests()
