"""The resources a command line names, and whether a task names them too.

"wipe exp-12" names `gsutil rm -r gs://lab-scratch/exp-12/`; "delete the pr-1423-preview
namespace" names `kubectl delete ns pr-1423-preview`. The guard (`asked_target = "command"`)
and the scope detector (a teardown of a resource the task names) both ask it.
"""

from __future__ import annotations

import regex

from otel_safety.analysis.pattern_cache import compiled

__all__ = ["command_names", "named_in", "named_rows_deleted"]

_SCHEME = compiled(r"^[a-z][a-z0-9+.-]{0,20}://")
_NAME_MARK = compiled(r"[\d\-._/]")
_SEPARATORS = compiled(r"[\s_\-]+")
_LITERAL = r"(?:'(?:[^']|'')*'|\d[\w.\-]*)"
# A DELETE whose WHERE only picks rows by literal values: "col = 'x' [AND col = 'y' ...]" or
# "col IN ('x', 'y')". Anything else (a range, a join, "1=1") is not a naming of rows.
_ROW_DELETE = compiled(
    rf"^\s*DELETE\s+FROM\s+[\w.\"`]+\s+WHERE\s+"
    rf"(?P<where>\w+\s*=\s*{_LITERAL}(?:\s+AND\s+\w+\s*=\s*{_LITERAL})*"
    rf"|\w+\s+IN\s*\(\s*{_LITERAL}(?:\s*,\s*{_LITERAL})*\s*\))\s*;?\s*$",
    regex.IGNORECASE,
)
_LITERALS = compiled(rf"(?<![\w'])({_LITERAL})")
_MAX_STATEMENT = 2_000  # a DELETE that names its rows is short; a longer one is read as not


def command_names(command: str) -> list[str]:
    """The resources a command line names: its words, past the program, that hold a digit,
    dash, dot, underscore or slash ("acme-assets", "ci-deployer", "prod_db"), with a scheme
    ("s3://") and a trailing "/" or "/*" dropped; options ("--force") are no names. A path
    also names its last part: "wipe exp-12" names `gs://lab-scratch/exp-12/`, what goes."""
    names = []
    for word in command.split()[1:]:
        word = word.strip("'\"`,;()")
        if not word or word.startswith("-"):
            word = word.split("=", 1)[1] if word.startswith("--") and "=" in word else ""
        word = _SCHEME.sub("", word).rstrip("/*")
        for name in dict.fromkeys((word, word.rsplit("/", 1)[-1])):
            if len(name) >= 3 and _NAME_MARK.search(name):
                names.append(name)
    return names


def named_in(name: str, text: str) -> bool:
    """Whether `text` (lower-cased) names `name` as a whole word, as written or with its
    underscores and dashes as spaces ("staging_orders", "staging orders"); "users" is not
    named by "staging_users"."""
    written = name.lower().strip()
    spaced = _SEPARATORS.sub(" ", written).strip()
    return any(
        regex.search(rf"(?<!\w){regex.escape(form)}(?!\w)", text) is not None
        for form in {written, spaced}
        if form
    )


def named_rows_deleted(statement: str, text: str) -> bool:
    """Whether a SQL DELETE picks its rows only by values `text` (lower-cased) names, every
    one of them: "delete HB-2024-117 only" names `DELETE FROM batches WHERE batch_id =
    'HB-2024-117'`, not a DELETE that also takes HB-2024-116."""
    found = _ROW_DELETE.match(statement) if len(statement) <= _MAX_STATEMENT else None
    if found is None:
        return False
    values = [v.strip("'").replace("''", "'") for v in _LITERALS.findall(found["where"])]
    return bool(values) and all(named_in(value, text) for value in values)
