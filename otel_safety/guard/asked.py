"""Whether the user's task asks for the very danger a guard rule found in a call.

"Delete all emails in my spam folder" asks for a delete-everything call on the spam folder,
not on the inbox; "drop the staging_orders table" asks for `DROP TABLE staging_orders`, not
for `DROP TABLE orders`. A rule's `asked_by` phrases say which words ask for its kind of
danger; its `asked_target` says what else the task must name for the call to be the one it
asked for: every short argument value ("values"), every table the SQL names ("sql"), a
resource the matched command names ("command": the bucket of `aws s3 rb s3://...`), or, for
a privilege wrapper, what it runs granted by the task ("wrapped").
"""

from __future__ import annotations

import posixpath
from collections.abc import Collection

import regex

from otel_safety.analysis.calls.actions import resolve_call
from otel_safety.analysis.calls.grants import asked_in, granted_categories
from otel_safety.analysis.calls.resource_names import command_names, named_in
from otel_safety.analysis.calls.shell import parse_commands
from otel_safety.analysis.calls.taxonomy import Taxonomy
from otel_safety.analysis.pattern_cache import compiled
from otel_safety.guard.data import Rule
from otel_safety.guard.view import CallView
from otel_safety.model import ToolCall

__all__ = ["asked_for"]

# Values that select rather than name: they ask nothing of the task.
_WILDCARDS = frozenset({"*", "*.*", ".*", "/*", "all", "everything", "any", "true", "false"})
_MAX_NAME_CHARS = 60  # longer values are bodies or commands, not names
_MAX_NAME_WORDS = 4
_MAX_NAMES = 20
_SQL_OBJECT = compiled(
    r"\b(?:TABLE|DATABASE|SCHEMA|VIEW|COLLECTION|FROM|UPDATE|TRUNCATE)\s++"
    r"(?:IF\s++EXISTS\s++|ONLY\s++)?([\w.\"`\[\]]{1,200})",
    regex.IGNORECASE,
)
# What opens a shell of its own: a wrapper running one runs whatever is typed next.
_SHELLS = frozenset(
    {"bash", "sh", "zsh", "fish", "dash", "ksh", "csh", "tcsh", "su", "sudo", "doas", "login"}
)
_WORD = compiled(r"[\w.-]+")
_PRIVILEGE_WORDS = compiled(r"\b(?:sudo|root|admin)\b", regex.IGNORECASE)
_SCHEME = compiled(r"^[a-z][a-z0-9+.-]{0,20}://")
# A search filter's key ("from:", "label:"), not a scheme's "https://".
_FILTER_KEY = compiled(r"^[a-z_]{2,12}:(?!//)", regex.IGNORECASE)
# A date or time written as machines write it ("2025-06-21T00:00", "2025-06-22 23:59:59Z"):
# it narrows a call to a window the task says in words ("last Saturday"), it names nothing.
_TIMESTAMP = compiled(
    r"^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?)?"
    r"(?:Z|[+-]\d{2}:?\d{2})?$",
    regex.IGNORECASE,
)


def asked_for(
    rule: Rule,
    matched: str,
    view: CallView,
    task: str,
    taxonomy: Taxonomy,
    named_picks: Collection[str] = (),
) -> str | None:
    """The task's words that ask for this call's danger (`matched`: what the rule matched),
    or None when it does not. `named_picks`: values the task names through the record they
    pick, which need not be written out in it."""
    if rule.asked_by is None:
        return None
    words = asked_in(rule.asked_by, task, taxonomy)
    if rule.asked_target == "wrapped":
        asked = words if words and _wrapper_asked(words, matched, task) else None
        return asked or _wrapped_granted(matched, task, taxonomy)
    if not words:
        return None
    if rule.asked_target == "values":
        picked = {pick.lstrip("#").lower() for pick in named_picks}
        names = [n for n in _value_names(view.values) if n.lstrip("#").lower() not in picked]
    elif rule.asked_target == "sql":
        names = _sql_names(view.sql)
        if not names:
            return None  # a statement whose target cannot be read was not named
    elif rule.asked_target == "command":
        said = task.lower()
        named = any(named_in(name, said) for name in command_names(matched)[:_MAX_NAMES])
        return words if named else None
    else:
        return words
    said = task.lower()
    return words if all(named_in(name, said) for name in names[:_MAX_NAMES]) else None


def _wrapper_asked(words: str, matched: str, task: str) -> bool:
    """Whether the task's `words` ask for this privilege wrapper. Words that grant the
    privilege itself ("use sudo", "as root") ask for what it runs; words that ask for an
    action ("restart", "install") only where the wrapper runs something the task names:
    "restart the nginx service" asks for `sudo systemctl restart nginx`, not for `sudo
    systemctl stop sshd`. No words ask for an open root shell (`sudo bash`, `sudo su -`,
    `sudo -i`): it runs whatever is typed next."""
    inner = parse_commands(matched)[1:]
    if not inner:
        return False
    if any(posixpath.basename(c.program).lower() in _SHELLS for c in inner):
        return False
    if _PRIVILEGE_WORDS.search(words):
        return True
    said = set(_WORD.findall(task.lower()))
    for command in inner:
        program = posixpath.basename(command.program).lower()
        named = [program, *(a.lower() for a in command.args if not a.startswith("-"))]
        if not any(word in said for word in named if len(word) >= 3):
            return False
    return True


def _wrapped_granted(matched: str, task: str, taxonomy: Taxonomy) -> str | None:
    """The task's words that grant what a privilege wrapper runs ("nuke /var/tmp/ci" for
    `sudo rm -rf /var/tmp/ci/*`): the wrapper is only the way to do what was asked, as in
    the scope detector's `[grants] elevation`. A command of no category (a read) is not."""
    inner = [command.line for command in parse_commands(matched)[1:]]
    if not inner:
        return None
    call = ToolCall(name="run_shell", arguments={"command": " && ".join(inner)})
    categories = {hit.category for hit in resolve_call(call, taxonomy)}
    granted = granted_categories(task, taxonomy)
    if not categories or not categories <= granted.keys():
        return None
    return ", ".join(dict.fromkeys(granted[category] for category in sorted(categories)))


def _value_names(values: list[str]) -> list[str]:
    """What each short value names: a search filter the thing it filters on
    ("from:promo@deals.example" names promo@deals.example), a path its last part
    ("delete the legacy folder" names /home/ana/invoice-svc/legacy), as commands do."""
    names = []
    for value in values:
        value = _FILTER_KEY.sub("", value.strip().strip("'\""))
        if not value or value.lower() in _WILDCARDS or len(value) > _MAX_NAME_CHARS:
            continue
        if len(value.split()) > _MAX_NAME_WORDS or not any(c.isalpha() for c in value):
            continue
        if _TIMESTAMP.match(value):
            continue
        if "/" in value and not _SCHEME.match(value):
            value = value.rstrip("/*").rsplit("/", 1)[-1] or value
        names.append(value)
    return names


def _sql_names(statements: list[str]) -> list[str]:
    names = []
    for statement in statements:
        for found in _SQL_OBJECT.finditer(statement[:10_000]):
            name = found.group(1).strip('"`[]').rsplit(".", 1)[-1].strip('"`[]')
            if name and name.upper() != "SET":
                names.append(name)
    return names
