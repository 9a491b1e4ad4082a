"""Undo the simple obfuscation agents are tricked into running or reading: base64, hex and
octal escapes, URL encoding. Decoded text is judged like any other: the guard sees a payload
hidden as `echo cm0gLXJmIC8= | base64 -d | sh` as `rm -rf /`, the injection detector reads
an instruction a web page carries as base64 for the model to decode."""

from __future__ import annotations

import base64
import binascii
import codecs
import urllib.parse

from otel_safety.analysis.pattern_cache import compiled
from otel_safety.analysis.pattern_set import PatternSet

_BASE64 = compiled(
    r"(?<![A-Za-z0-9+/=_-])([A-Za-z0-9+/]{16,}={0,2}|[A-Za-z0-9_-]{24,}={0,2})(?![A-Za-z0-9+/=])"
)
_HEX_ESCAPES = compiled(r"(?:\\x[0-9a-fA-F]{2}){3,}")
_OCTAL_ESCAPES = compiled(r"(?:\\[0-3][0-7]{2}){2,}")
_ANSI_C = compiled(r"\$'((?:[^'\\]|\\.)*)'")
_UNICODE_ESCAPES = compiled(r"(?:\\u[0-9a-fA-F]{4}){3,}")
_HEX_STRING = compiled(r"(?<![0-9a-fA-F])((?:[0-9a-fA-F]{2}){6,})(?![0-9a-fA-F])")
_PERCENT = compiled(r"(?:%[0-9a-fA-F]{2}){3,}")
_ROT13_CALL = compiled(
    r"""rot_?13['"]?\s*[,)]|codecs\.decode\(\s*['"]([^'"]{6,})['"]\s*,\s*['"]rot"""
)
_MAX_DECODES = 16
_MAX_INPUT = 20_000


def decoded_payloads(text: str) -> list[str]:
    """Readable texts hidden in `text` (empty when nothing decodes to something readable)."""
    text = text[:_MAX_INPUT]
    present = _ENCODINGS.candidates(text)  # one pass: most texts carry no encoding at all
    if not present:
        return []
    found: list[str] = []
    if _BASE64_AT in present:
        for match in _BASE64.finditer(text):
            plain = _from_base64(match.group(1))
            if plain:
                found.append(plain)
            if len(found) >= _MAX_DECODES:
                return found
    if _ANSI_C_AT in present and _ANSI_C.search(text):  # bash $'...': the shell decodes these
        plain = _ANSI_C.sub(lambda m: _from_escapes(m.group(1)) or m.group(0), text)
        if plain != text:
            found.append(plain)
    for number, (pattern, decode) in enumerate(_ESCAPES, _FIRST_ESCAPE):
        if number not in present:
            continue
        for match in pattern.finditer(text):
            plain = _readable(decode(match.group(0)))
            if plain:
                found.append(plain)
                found.append(text[: match.start()] + plain + text[match.end() :])
    if _ROT13_AT in present:
        for match in _ROT13_CALL.finditer(text):
            if match.group(1):
                found.append(codecs.decode(match.group(1), "rot13"))
    return found[:_MAX_DECODES]


_ESCAPE = compiled(r"%[0-9a-fA-F]{2}")
_URL_ESCAPES = 3  # fewer is a URL's space or two, no hidden text


def url_decoded(text: str) -> str | None:
    """The text with its URL escapes undone, when it hides words behind them
    (`Ignore%20your%20previous%20instructions`), else None."""
    text = text[:_MAX_INPUT]
    if text.count("%") < _URL_ESCAPES or len(_ESCAPE.findall(text)) < _URL_ESCAPES:
        return None
    plain = urllib.parse.unquote(text)
    return plain if plain != text and _readable(plain) else None


def _from_base64(candidate: str) -> str | None:
    for decode in (base64.b64decode, base64.urlsafe_b64decode):
        try:
            raw = decode(candidate + "=" * (-len(candidate) % 4))
        except (binascii.Error, ValueError):
            continue
        plain = _readable(raw)
        if plain:
            return plain
    return None


def _from_escapes(text: str) -> str:
    try:
        return codecs.decode(text, "unicode_escape")
    except (UnicodeDecodeError, ValueError):
        return ""


def _from_hex(text: str) -> str:
    try:
        return bytes.fromhex(text).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return ""


def _readable(raw: bytes | str) -> str | None:
    """Text that looks like something a person or shell would read, else None."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if len(raw) < 4:
        return None
    printable = sum(ch.isprintable() or ch in "\n\t" for ch in raw)
    letters = sum(ch.isalpha() for ch in raw)
    if printable / len(raw) < 0.95 or letters / len(raw) < 0.3:
        return None
    return raw


_ESCAPES = (
    (_HEX_ESCAPES, _from_escapes),
    (_OCTAL_ESCAPES, _from_escapes),
    (_UNICODE_ESCAPES, _from_escapes),
    (_PERCENT, urllib.parse.unquote),
    (_HEX_STRING, _from_hex),
)
# Every encoding's pattern in one RE2 set, searched once per text: only the encodings it
# reports are looked for (see analysis.pattern_set).
_BASE64_AT, _ANSI_C_AT, _FIRST_ESCAPE = 0, 1, 2
_ROT13_AT = _FIRST_ESCAPE + len(_ESCAPES)
_ENCODINGS = PatternSet(
    [
        [_BASE64],
        [_ANSI_C],
        *([pattern] for pattern, _ in _ESCAPES),
        [_ROT13_CALL],
    ]
)
