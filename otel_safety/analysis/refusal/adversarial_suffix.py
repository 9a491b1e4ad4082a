"""Machine-optimised prompt suffixes: the token soup gradient searches append to a request.

Attacks such as GCG search for a suffix that makes a model comply, and what they find reads
like no human sentence: symbols, brackets left open, capitals mid-word, letters run into
digits. The refusal family counts such a tail as a jailbreak attempt of its own (weighted by
`adversarial_suffix_weight` in `data/jailbreak.toml`).
"""

from __future__ import annotations

from otel_safety.analysis.pattern_cache import compiled

__all__ = ["adversarial_suffix"]

_TICKS = compiled(r"`[^`\n]*`")
_ODD_CHARS = frozenset('[]{}()<>\\|$^*=~`#@_!"')
_BRACKETS = frozenset("[]{}()<>\\|$^")
_INNER_MARKS = frozenset(".,!?;:")
_SENTENCE_MARKS = frozenset('.!?:"')
_DIGITS = frozenset("0123456789")
_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_ALNUM = _DIGITS | _LETTERS
_SUFFIX_HEAD = 24  # words before a suspected suffix that must read as plain language


def adversarial_suffix(text: str) -> str:
    """A machine-optimised tail: a plain request whose last words turn into token soup
    ("... a human body Herezak({[HTMLsvg readers | Sure] Sure,].["): symbols, brackets left
    open, capitals mid-sentence, letters run into digits, the way gradient searches write and
    people do not. Inline code is ignored, and code on its own lines never qualifies, since
    only a last line that opens with plain words is considered."""
    line = _TICKS.sub(" ", text[-2000:].rstrip().rsplit("\n", 1)[-1])
    tokens = line.split()[-(16 + _SUFFIX_HEAD) :]
    if len(tokens) < 12:
        return ""
    tail = tokens[-16:]
    odd = [_oddness(token, tokens[len(tokens) - len(tail) + i - 1]) for i, token in enumerate(tail)]
    brackety = [not _BRACKETS.isdisjoint(token) for token in tail]
    plain = [_plain(token) for token in tokens]
    for window in (8, 12, 16):
        if len(tokens) < window + 4:
            break
        head = plain[-(window + _SUFFIX_HEAD) : -window]
        quoted = " ".join(tokens[-window:])
        if (
            sum(odd[-window:]) >= 0.3 * window
            and sum(brackety[-window:]) >= 2
            and sum(head) >= max(4, 0.6 * len(head))
            and _unbalanced(line)
        ):
            return quoted
    return ""


def _oddness(token: str, previous: str) -> float:
    """1 for a token no sentence would hold (symbols, inner punctuation or capitals, letters
    run into digits, bare punctuation), 0.5 for a capital mid-sentence, else 0."""
    if not _ODD_CHARS.isdisjoint(token) or not _INNER_MARKS.isdisjoint(token[1:-1]):
        return 1.0
    if _ALNUM.isdisjoint(token):
        return 1.0
    if not _DIGITS.isdisjoint(token) and not _LETTERS.isdisjoint(token):
        return 1.0
    rest = token[1:]
    if rest != rest.lower() and token != token.upper():
        return 1.0  # "HTMLsvg", "youArray"
    if token[0].isupper() and previous[-1] not in _SENTENCE_MARKS:
        return 0.5
    return 0.0


def _plain(token: str) -> bool:
    word = token.rstrip(".,;:!?").replace("'", "")
    return word.isalpha() and (len(word) == 1 or word[1:].islower())


def _unbalanced(text: str) -> bool:
    pairs = ("()", "[]", "{}")
    return any(text.count(a) != text.count(b) for a, b in pairs) or text.count('"') % 2 == 1
