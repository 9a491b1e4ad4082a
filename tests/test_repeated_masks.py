"""A trace's resent histories are masked for their new messages only, with exactly the result
of masking each whole: the secrets found, where, and how many."""

from __future__ import annotations

import json
import random

import pytest

from otel_safety import repeated_masks
from otel_safety.analysis.secrets import mask
from otel_safety.repeated_masks import SEAM, RepeatedTextMasker

SECRETS = [
    "sk-abcdefghijklmnopqrstuvwx",
    "AKIAIOSFODNN7EXAMPLE",
    "4111 1111 1111 1111",
    "xoxb-123456789012-1234567890123-abcdefghijklmnopqrstuvwx",
    "https://deploy:hunter2hunter2@git.example.com/repo.git",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
]
PRIVATE_KEY = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7"


def _message(rng: random.Random, number: int) -> dict:
    """A message whose text may start or end with a secret (right at the seam)."""
    filler = " ".join(
        rng.choice(["the", "report", "sent", "to", "Bob", "at", "noon"])
        for _ in range(rng.randint(20, 200))
    )
    secret = rng.choice([*SECRETS, ""])
    content = rng.choice([f"{secret} {filler}", f"{filler} {secret}", f"{filler} token={number}"])
    if rng.random() < 0.2:  # a keyed number right before the element's closing brace
        return {"role": "tool", "token": rng.randint(10**8, 10**9)}
    return {"role": rng.choice(["user", "assistant", "tool"]), "content": content}


def _histories(seed: int, compact: bool) -> list[str]:
    rng = random.Random(seed)
    history: list[dict] = []
    sent = []
    separators = (",", ":") if compact else (", ", ": ")
    for number in range(80):
        history.append(_message(rng, number))
        sent.append(json.dumps(history, separators=separators))
    return sent


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("compact", [False, True], ids=["spaced", "compact"])
def test_masking_resent_histories_equals_masking_each_whole(seed, compact):
    masker = RepeatedTextMasker()
    for text in _histories(seed, compact):
        assert masker.mask(text) == mask(text)


def test_most_of_a_resent_history_is_not_read_again(monkeypatch):
    """Secrets inside messages' text (as they come) end before the message does: each
    history is read around its seam and for its new messages only."""
    scanned: list[int] = []
    original = repeated_masks.secret_spans

    def counting(text: str) -> list[tuple[int, int]]:
        scanned.append(len(text))
        return original(text)

    monkeypatch.setattr(repeated_masks, "secret_spans", counting)
    masker = RepeatedTextMasker()
    history: list[dict] = []
    sent = []
    for number in range(80):
        text = f"reply {number} " + "the report was sent to Bob at noon " * 20 + SECRETS[number % 6]
        history.append({"role": "tool", "content": text})
        sent.append(json.dumps(history))
    for text in sent:
        scanned.clear()
        assert masker.mask(text) == mask(text)
    # The last history: its new message and a few windows read, not its 58,000 characters.
    assert sum(scanned) <= 6 * SEAM + len(json.dumps(history[-1])) + 2 < len(sent[-1]) / 8


def test_a_secret_across_the_seam_and_an_open_private_key_are_masked_whole():
    masker = RepeatedTextMasker()
    first = json.dumps([{"role": "user", "content": "x " * SEAM + PRIVATE_KEY}])
    second = first[:-1] + ', {"role": "user", "content": "more"}]'
    for text in (first, second):
        assert masker.mask(text) == mask(text)
    assert "MIIE" not in masker.mask(second)[0]


def test_values_that_are_not_growing_arrays_are_masked_as_they_are():
    masker = RepeatedTextMasker()
    long_text = "token=abcdef " + "word " * SEAM
    for text in ("token=abcdef", long_text, long_text + " more", "[" + long_text, "[1]"):
        assert masker.mask(text) == mask(text)


def test_a_match_that_crosses_the_seam_is_found_as_in_the_whole(monkeypatch):
    """No packaged pattern matches across "}, {": this one (from X to the next Y) does, and
    only the check around the seam can see it: without it the secret would stay."""
    import regex

    from otel_safety.analysis.secrets import masked_at

    crossing = regex.compile(r"X[^a]*Y")

    def spans(text: str) -> list[tuple[int, int]]:
        return [m.span() for m in crossing.finditer(text)]

    monkeypatch.setattr(repeated_masks, "secret_spans", spans)
    monkeypatch.setattr(repeated_masks, "mask", lambda text: masked_at(text, spans(text)))
    masker = RepeatedTextMasker()
    first = json.dumps([{"role": "user", "content": "word " * SEAM}, {"n": "X"}])
    second = first[:-1] + ', {"n": "Y"}]'
    for text in (first, second):
        assert masker.mask(text) == masked_at(text, spans(text))
    assert "Y" not in masker.mask(second)[0]


def test_a_value_the_closing_bracket_completes_is_masked_as_in_the_whole():
    """`"token":12}]`: the keyed-value pattern needs four characters, and only the closing
    bracket makes them (a contrived value, but masking must not depend on where it is cut)."""
    masker = RepeatedTextMasker()
    first = json.dumps([{"role": "user", "content": "word " * SEAM}, {"token": 12}])
    second = first[:-1] + ', {"token": 34}]'
    for text in (first, second):
        assert masker.mask(text) == mask(text)
    assert mask(second)[1] > 0
