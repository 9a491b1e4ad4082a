"""What one tool call does, read once: its action categories and every command, SQL
statement, path, URL and text in its arguments, in the shapes the rules match on."""

from __future__ import annotations

import json
import posixpath
import shlex
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from itertools import islice
from typing import Any
from urllib.parse import unquote, urlsplit

import regex

from otel_safety.analysis.calls.actions import cli_line
from otel_safety.analysis.calls.arguments import tool_arguments
from otel_safety.analysis.calls.shell import MAX_DEPTH, TOO_DEEP, SimpleCommand, parse_commands
from otel_safety.analysis.calls.taxonomy import current_taxonomy
from otel_safety.analysis.calls.tool_names import normalize_name
from otel_safety.analysis.encoded import decoded_payloads
from otel_safety.analysis.pattern_cache import compiled
from otel_safety.guard.data import GuardData
from otel_safety.guard.windows import command_paths as windows_command_paths
from otel_safety.guard.windows import looks_windows, parse_windows
from otel_safety.json_flat import read_flat
from otel_safety.mapping.values import MAX_TEXT_CHARS, Notes, bounded

# What the guard reads of a call; what lies past it is recorded in `CallView.unread`, and the
# rules do not let such a call pass unchecked. One character less than the pipeline keeps of a
# field: a value the mapping cut (`echo aaaa...; rm -rf /` cut before its end) is then never
# taken, on a trace, for one the guard read whole.
_MAX_TEXT = MAX_TEXT_CHARS - 1
_MAX_VALUES = 1_000
_MAX_KEYS = 2_000  # argument names the rules read of a call (every value is named still)
_URL = compiled(r"\b(?:https?|ftp|wss?)://[^\s'\"<>`)]+", regex.IGNORECASE)
_RECIPIENT_SEPARATORS = compiled(r"[,;\s]+")
_SQL_COMMENTS = compiled(r"--[^\n]*|/\*.*?\*/", regex.DOTALL)
_SQL_READS = compiled(
    r"^\s*(?:SELECT|SHOW|DESCRIBE|DESC|EXPLAIN|VALUES|TABLE|WITH\b(?!.*\b(?:INSERT|UPDATE|DELETE)\b))\b",
    regex.IGNORECASE | regex.DOTALL,
)
# Statements that neither read nor write data: they do not make a call a write.
_SQL_CONTROL = compiled(
    r"^\s*(?:BEGIN|COMMIT|ROLLBACK|END|START\s+TRANSACTION|SAVEPOINT|RELEASE|SET|USE)\b(?!\s*\()",
    regex.IGNORECASE,
)
# A statement's first word, after any comments and transaction or session statements
# (`/* x */ DROP TABLE t`, `BEGIN; DELETE FROM t; COMMIT;`, `SET search_path ...; DROP ...`).
_SQL_START = compiled(
    r"^(?>\s|--[^\n]*+|/\*.*?\*/)*+(?:SELECT|INSERT|UPDATE|DELETE|DROP|CREATE|ALTER|TRUNCATE|"
    r"GRANT|REVOKE|WITH|SHOW|DESCRIBE|EXPLAIN|MERGE|REPLACE|COPY|VACUUM|ATTACH|PRAGMA|BEGIN|"
    r"START\s+TRANSACTION|SET|USE|CALL|EXEC|EXECUTE|DECLARE|LOCK|RENAME|UPSERT|COMMIT|ROLLBACK)\b",
    regex.IGNORECASE | regex.DOTALL,
)
_CODE_SPAN = compiled(r"```(?:\w+)?\n(.*?)```|`([^`\n]{3,})`", regex.DOTALL)
_RUN_PHRASE = compiled(
    r"\b(?:run|execute|exec|type|paste)\s*:?\s+((?:sudo\s+)?[a-z][\w.-]*\s[^\n]{2,})",
    regex.IGNORECASE,
)
_CODE_TOOL = compiled(
    r"(?:^|_)(?:python|repl|code|interpreter|jupyter|notebook|ipython|javascript|node|ruby)(?:_|$)"
)
# A code tool that says it runs shell ("run_shell_code"), or is told to ("language": "bash").
_SHELL_NAME = compiled(r"(?:^|_)(?:shell|bash|sh|zsh|terminal|cmd|console|powershell)(?:_|$)")
_SHELL_LANGUAGES = frozenset({"bash", "sh", "shell", "zsh", "console", "powershell", "pwsh", "cmd"})
_LANGUAGE_KEYS = frozenset({"language", "lang", "kernel", "runtime"})
# Shell lines inside notebook code: `!rm -rf /`, `%system ...`, `%sx ...`, a `%%bash` cell.
_NOTEBOOK_SHELL = compiled(
    r"^[ \t]*(?:!|%(?:system|sx)\b)(.+)$|^%%(?:bash|sh|script\s+\S+)[^\n]*\n((?s:.*))",
    regex.MULTILINE,
)
_CODE_RUNNERS = frozenset({"mongosh", "mongo", "osascript"})
_HOME_EXPRESSION = compiled(
    r"""os\.path\.expanduser\(\s*['"]~['"]\s*\)|(?:pathlib\.)?Path\.home\(\)|require\(\s*['"]os['"]\s*\)\.homedir\(\)
    |\bos\.homedir\(\)|\bDir\.home\b|\bos\.environ\[\s*['"]HOME['"]\s*\]|\bprocess\.env\.HOME\b|\$ENV\{HOME\}""",
    regex.VERBOSE,
)
_CODE_STRING = compiled(r"""(['"])([^'"\n]{2,300})\1""")
_PATHLIKE = compiled(r"^(?:~|/|\.{1,2}/|\.[\w-]+$|[A-Za-z]:\\)")
_CODE_COMMAND = compiled(
    r"""(?:os\.system|os\.popen|subprocess\.(?:run|call|Popen|check_output|check_call)|exec(?:Sync)?|spawn|\bsystem|\bIO\.popen|%x)\(\s*\[?\s*(?:f|r|b)?(['"])(.+?)\1""",
    regex.DOTALL,
)
_SQL_CLIENTS = {
    "psql": ("-c", "--command"),
    "mysql": ("-e", "--execute"),
    "sqlite3": (),
    "bq": (),
    "snowsql": ("-q", "--query"),
    "duckdb": ("-c",),
}
_PROGRAM_KEYS = ("command", "cmd", "program", "executable", "binary")
_ARGV_KEYS = ("args", "argv", "arguments")
_WRITING_NAME = compiled(
    r"(?:^|_)(?:post|put|patch|delete|upload|send|submit|create|update|write)(?:_|$)"
)
_COMMAND_KEYS = frozenset({"cmd", "command", "argv", "args", "commands", "script", "steps"})
_COMMANDS_KEYS = frozenset({"commands", "steps", "scripts"})  # a list of whole commands
_DELETERS = frozenset({"rm", "rmdir", "unlink", "shred", "srm", "wipe"})
_WRITERS_LAST = frozenset({"cp", "mv", "install", "ln", "rsync"})
_EVERYTHING = ({}, "{}", "*", "", [], "1=1", "true")
_FILTER_KEYS = frozenset({"filter", "query", "where", "selector", "match", "conditions"})
_HOST_IN_URL = compiled(r"^[a-z][\w+.-]*://(?:[^/@\s]*@)?([^/:?#\s]+)", regex.IGNORECASE)
_REMOTE_TARGET = compiled(r"^(?:[\w.-]+@)?([\w-]+(?:\.[\w-]+)+):")
_EMAIL = compiled(r"[\w.+-]+@([\w-]+(?:\.[\w-]+)+)")
_LIMIT_KEYS = frozenset(
    {
        "top",
        "max_items",
        "per_page",
        "page_limit",
        "limit",
        "max_results",
        "count",
        "n",
        "top_k",
        "page_size",
        "num",
        "max",
        "size",
        "num_results",
        "max_count",
        "k",
    }
)
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_LOOKS_LIKE_COMMAND = compiled(
    r"^\s*(?:sudo\s+)?(?:rm|curl|wget|bash|sh|nc|chmod|chown|dd|mkfs|crontab|python\d*|perl|"
    r"echo|cat|scp|rsync|ssh|base64|eval|kill|shutdown|reboot|systemctl|useradd|passwd)\b"
)
_MESSAGING = frozenset({"send_message", "agent_communication", "forward_message"})
_RECURSIVE_FLAGS = frozenset({"recursive", "recurse", "force", "all", "skip_trash"})
_RECURSIVE_OPTION = compiled(r"^-(?:[a-zA-Z]*[rR][a-zA-Z]*)$|^--recursive$")
# Tests that pick some files out of a tree: a find without one takes all (`-type f` only
# says which kind of entry: `find ~ -type f -delete` empties the home folder).
_FIND_FILTERS = frozenset(
    {"-name", "-iname", "-path", "-ipath", "-regex", "-mtime", "-mmin", "-newer", "-size", "-empty"}
)
INTERPRETERS = frozenset(
    {"python", "python3", "python2", "node", "perl", "ruby", "php", "deno", "bun", "awk", "gawk"}
)
# A path that names a whole system or home: a delete tool given it removes everything.
_WHOLE = compiled(r"^\s*(?:/+|~/?|\$\{?HOME\}?/?|[A-Za-z]:\\?)\s*$")
# A program started from code with its words as a list (`subprocess.run(['rm', '-rf', '/'])`,
# `spawn('rm', ['-rf', '/'])`): its words, quoted, for the shell reader.
_CODE_ARGV = compiled(
    r"""(?:subprocess\.(?:run|call|Popen|check_output|check_call)\(\s*|\b(?:spawn|spawnSync|execFile|execFileSync)\(\s*(['"])([^'"\n]{1,200})\1\s*,\s*)\[([^\]\n]{1,2000})\]"""
)
_QUOTED = compiled(r"""(['"])(.*?)\1""")
# A crontab line's command, after its five time fields or an @-schedule
# (possessive, and starting only where a field starts: a long run of digits is read once).
_CRON_COMMAND = compiled(r"(?:@\w++|(?<![\d*/,-])(?:[\d*/,-]++\s++){5})([^'\"\n]{2,})")
_READERS = frozenset(
    {
        "cat",
        "tac",
        "less",
        "more",
        "head",
        "tail",
        "grep",
        "egrep",
        "fgrep",
        "rg",
        "ag",
        "strings",
        "xxd",
        "od",
        "hexdump",
        "base64",
        "tar",
        "zip",
        "gzip",
        "openssl",
        "gpg",
        "source",
        ".",
        "scp",
        "rsync",
        "sftp",
        "curl",
        "wget",
        "nc",
        "ncat",
        "vi",
        "vim",
        "nano",
        "emacs",
        "sed",
        "awk",
        "jq",
        "yq",
        "cut",
        "sort",
        "uniq",
        "wc",
        "diff",
        "md5sum",
        "sha256sum",
        "file",
        "stat",
        "sqlite3",
        "mysql",
        "psql",
        "cp",
        "mv",
        "ln",
        "find",
        "ls",
        "du",
        "tree",
        "dd",
        "shred",
        "zcat",
        "bzcat",
        "xzcat",
        "unzip",
    }
)
_CODE_DELETE = compiled(
    r"""(?:rmtree|os\.remove|os\.unlink|os\.rmdir|os\.removedirs|unlink|rmSync|rmdirSync|rm_rf|rm_r|remove_dir_all|FileUtils\.rm_rf)\(\s*(?:Path\()?\s*(['"])([^'"]+)\1"""
)
_CODE_OPEN = compiled(
    r"""(?:open|readFileSync|readFile|read_text|read_bytes|File\.read|Path)\(\s*(['"])([^'"]+)\1"""
)
_MENTIONED_PATH = compiled(r"(?<![\w/.])((?:~|/(?:home|root|etc|Users|var|srv))/[\w./-]+)")


@dataclass
class CallView:
    tool: str
    name: str
    categories: list[str]
    commands: list[SimpleCommand] = field(default_factory=list)
    pipes: list[str] = field(default_factory=list)
    sql: list[str] = field(default_factory=list)
    paths: list[tuple[str, str]] = field(default_factory=list)  # (path, read|write|delete)
    urls: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    values: list[str] = field(default_factory=list)
    limits: list[int] = field(default_factory=list)
    recipients: int = 0
    decoded: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)  # argument names set to true
    scripts: list[str] = field(default_factory=list)  # shell scripts as given
    keys: list[str] = field(default_factory=list)  # every argument name, nested ones too
    empty_filter: bool = False  # a filter/query/where argument that selects everything
    hosts: list[str] = field(default_factory=list)  # where the call sends or fetches
    # What was not read: (what, how much, whether it is something the call runs)
    unread: list[tuple[str, int, bool]] = field(default_factory=list)
    code_read: set[str] = field(default_factory=set)  # the program sources read already


def view_call(tool: str, arguments: Any, data: GuardData) -> CallView:
    """Read the call once; every rule then matches on the parts it cares about."""
    name = normalize_name(tool or "") or "unknown"
    # Bounded as the pipeline reads arguments (nesting read flat, a value that holds itself
    # read once, bytes decoded), but with every character kept: the guard reads the call whole.
    arguments = bounded(arguments, Notes(), "arguments", cap_text=False)
    primary = tool_category(name, data)
    arguments = _named_positionals(arguments, name, primary)
    args = _as_command_line(arguments if isinstance(arguments, list) else tool_arguments(arguments))
    items, unread_keys = _items(args)
    view = CallView(tool=str(tool or ""), name=name, categories=[primary])
    keys = data.arguments
    if unread_keys:
        runs = primary == "execute_shell" or any(  # a shell tool runs every value it is given
            k in keys["shell"] or k in keys["code"] or k in keys["sql"] for k in unread_keys
        )
        view.unread.append((f"values past the first {_MAX_VALUES:,}", len(unread_keys), runs))
    shell_given = any(k in keys["shell"] for k, _ in items)
    sql_given = any(k in keys["sql"] and _SQL_START.match(v) for k, v in items)
    if primary == "execute_shell" and sql_given and not shell_given:
        primary = "database_read"  # "execute_query" with SQL: the statements decide
        view.categories = [primary]

    scripts = [v for k, v in items if k in keys["shell"]]
    cli = current_taxonomy().cli_tools.get(name)
    if cli is not None:
        # A tool named after a CLI ("kubectl", "aws_cli") runs that CLI with its arguments,
        # its "command" argument too ("ec2 authorize-..." is `aws ec2 authorize-...`).
        primary = "execute_shell"
        view.categories = [primary]
        scripts = [cli_line(cli, [v]) for v in scripts] or [cli_line(cli, [v for _, v in items])]
    if primary == "execute_shell" and not scripts:
        scripts = [v for k, v in items if k not in keys["code"]] or [v for _, v in items]
    code = [v for k, v in items if k in keys["code"]]
    shell_code = _SHELL_NAME.search(name) or any(
        k in _LANGUAGE_KEYS and v.strip().lower() in _SHELL_LANGUAGES for k, v in items
    )
    if shell_code:
        code, scripts = [], scripts + code
    elif primary == "execute_shell" and _CODE_TOOL.search(name):
        code, scripts = code + scripts, []
    for script in scripts:
        _add_script(view, script)
    for snippet in code:
        _add_code(view, snippet)
        if not _python_source(snippet):  # "rm -rf /" handed to a code runner runs as shell
            _add_script(view, snippet, embedded=True)

    sql_texts = [v for k, v in items if k in keys["sql"] and _SQL_START.match(v)]
    if primary in ("database_read", "database_write"):
        sql_texts = sql_texts or [v for _, v in items if _SQL_START.match(v)]
    for text in sql_texts:
        view.sql.extend(_statements(text, view))

    view.flags = [key for key, value in _booleans(args) if value]
    view.keys = sorted(set(_keys(args)))
    view.empty_filter = _selects_everything(args)
    path_mode = {"read_files": "read", "write_files": "write", "delete_files": "delete"}.get(
        primary, "read"
    )
    if path_mode == "delete" and any(f in _RECURSIVE_FLAGS for f in view.flags):
        path_mode = "delete_tree"
    method = next((v.upper() for k, v in items if k in keys["method"]), None)
    has_body = isinstance(args, Mapping) and any(
        normalize_name(str(k)) in keys["body"] for k in islice(args, _MAX_KEYS)
    )
    for key, value in items:
        if key in keys["path"]:
            path = _local_path(value)
            whole = path_mode == "delete" and _WHOLE.match(path)
            view.paths.append((path, "delete_tree" if whole else path_mode))
        if key in keys["url"]:
            view.urls.append(value)
        view.urls.extend(_URL.findall(value))
        if key in keys["recipients"]:
            view.recipients += len([r for r in _RECIPIENT_SEPARATORS.split(value) if r])
        if (
            key not in keys["shell"]
            and key not in keys["code"]
            and key not in keys["body"]
            and len(value) < 300
        ):
            view.values.append(value)
        if key in keys["shell"] or key in keys["code"]:
            view.texts.append(value[:_MAX_TEXT])  # what is cut is recorded as code run
        else:
            view.texts.append(_read(view, value, f"argument {key or '(the call)'!r}"))
    for key, value in _numbers(args):
        if key in _LIMIT_KEYS:
            view.limits.append(value)
    view.recipients = max(view.recipients, _listed_recipients(args, keys["recipients"]))

    if primary in _MESSAGING:
        for _, text in items:
            for script in _embedded_commands(text):
                _add_script(view, script, embedded=True)
            view.paths.extend((path, "read") for path in _MENTIONED_PATH.findall(text))

    for text in dict.fromkeys(view.texts):  # each once: a script is often its argument too
        is_script = text in scripts
        for plain in decoded_payloads(text):
            view.decoded.append(plain)
            if is_script or _LOOKS_LIKE_COMMAND.match(plain):
                _add_script(view, plain, embedded=True)
            elif "(" in plain:
                _add_code(view, plain)
    view.texts = list(dict.fromkeys([*view.texts, *view.decoded]))
    view.hosts = _hosts(view, [v for k, v in items if k in keys["recipients"]])

    extra: list[str] = []
    if primary in ("database_read", "database_write") and view.sql:
        writes = any(_writes(s) for s in view.sql)
        view.categories = ["database_write" if writes else "database_read"]
    if primary in ("web_read", "external_network"):
        reading = (method in _READ_METHODS or method is None) and not (
            (has_body and method != "GET") or _WRITING_NAME.search(name)
        )
        view.categories = ["web_read" if reading else "external_network"]
    if scripts:
        extra.append("execute_shell")
        extra.extend(_command_categories(view.commands, data))
    if view.sql:
        extra.append("database_write" if any(_writes(s) for s in view.sql) else "database_read")
    for category in extra:
        if category not in view.categories:
            view.categories.append(category)
    view.categories.sort(key=data.needed_trust, reverse=True)
    return view


def only_reads(view: CallView, data: GuardData) -> bool:
    """A shell tool's call whose every command only reads (`git status`, `ls -la`, a find
    that deletes nothing: the scope taxonomy's read-only commands) and writes no file: a
    loop or a burst of such calls changes nothing, so the guard does not pace it as one."""
    if not view.commands:  # before the taxonomy is looked up: most calls run no command
        return False
    readonly = current_taxonomy().readonly_commands
    return (
        tool_category(view.name, data) == "execute_shell"
        and not view.sql
        and not view.recipients
        and not any(mode != "read" for _, mode in view.paths)
        and all(
            not command.output_redirects and any(p.search(command.line) for p in readonly)
            for command in view.commands
        )
    )


def tool_category(name: str, data: GuardData) -> str:
    """The category a tool's name puts it in: leftmost word wins, then the longest entry."""
    memo = data.name_memo
    if name not in memo:
        if len(memo) > 4096:
            memo.clear()
        best: tuple[int, int, str] | None = None
        for category, patterns in data.tools.items():
            for pattern in patterns:
                match = pattern.search(name)
                if match:
                    key = (match.start(), -(match.end() - match.start()), category)
                    best = key if best is None or key < best else best
        category = best[2] if best else "other"
        if any(p.search(name) for p in data.database_products):
            writes = any(p.search(name) for p in data.database_writes)
            category = "database_write" if writes else "database_read"
        memo[name] = (category,)
    return memo[name][0]


def _read(view: CallView, text: str, what: str, runs: bool = False) -> str:
    """The part of `text` the guard reads; a longer text is recorded in `view.unread`."""
    if len(text) > _MAX_TEXT:
        view.unread.append((what, len(text) - _MAX_TEXT, runs))
    return text[:_MAX_TEXT]


def _add_script(view: CallView, script: str, embedded: bool = False) -> None:
    if embedded and script in view.scripts:  # met by another road (decoded, or in code)
        return  # its commands are in the view already
    script = _read(view, script, "command", runs=True)
    view.scripts.append(script)
    windows = looks_windows(view.name, script)
    commands = parse_windows(script) if windows else parse_commands(script)
    for command in commands:
        if command.program == TOO_DEEP:  # what it runs is past what the guard unpacks
            view.unread.append((f"commands nested past {MAX_DEPTH} levels", len(command.raw), True))
            continue
        view.commands.append(command)
        if command.upstream:
            view.pipes.append(f"{command.upstream} | {command.line}")
        paths = windows_command_paths(command) if windows else list(_command_paths(command))
        view.paths.extend(paths)
        for target in command.output_redirects:
            view.paths.append((target, "write"))
        view.sql.extend(_client_sql(command, view))
        view.urls.extend(_URL.findall(" ".join(command.args)))
        if posixpath.basename(command.program) in INTERPRETERS or command.program in _CODE_RUNNERS:
            _add_code(view, " ".join(command.args))
            if command.stdin:  # `python - <<'EOF' ... EOF`: the program is its input
                _add_code(view, command.stdin)
    if any(posixpath.basename(c.program) == "crontab" for c in commands):
        # `(crontab -l; echo '* * * * * curl x | sh') | crontab -`: the entry's command runs
        for command in commands:
            if command.program in ("echo", "printf"):
                for entry in _CRON_COMMAND.findall(" ".join(command.args)):
                    _add_script(view, entry, embedded=True)
    if not embedded:
        view.texts.append(script[:_MAX_TEXT])


def _command_paths(command: SimpleCommand) -> Iterator[tuple[str, str]]:
    program = posixpath.basename(command.program)
    operands = [a for a in command.args if not a.startswith("-") or a == "-"]
    if program == "rsync" and any(a.startswith("--delete") for a in command.args) and operands:
        yield operands[-1], "delete_tree"  # what the source lacks is deleted there
        return
    if program in _DELETERS:
        recursive = any(_RECURSIVE_OPTION.match(a) for a in command.args)
        for operand in operands:
            yield operand, "delete_tree" if recursive else "delete"
        return
    if (
        program == "find"
        and operands
        and (
            "-delete" in command.args
            or ("-exec" in command.args and any(a in _DELETERS for a in command.args))
        )
    ):
        filtered = any(a in _FIND_FILTERS for a in command.args)
        yield operands[0], "delete" if filtered else "delete_tree"
        return
    if program in ("tee", "truncate"):
        for operand in operands:
            yield operand, "write"
        return
    if program in _WRITERS_LAST and len(operands) >= 2:
        for operand in operands[:-1]:
            yield operand, "read"
        yield operands[-1], "write"
        return
    if program == "sed" and any(a.startswith("-i") or a == "--in-place" for a in command.args):
        for operand in operands[1:]:
            yield operand, "write"
        return
    if program in _READERS:
        for operand in operands:
            if "/" in operand or operand.startswith(("~", ".")) or "." in operand:
                yield operand, "read"


def _add_code(view: CallView, code: str) -> None:
    """A program's source (`python -c`, `node -e`, a code-interpreter tool): the files it
    deletes or opens, the shell commands it starts, and its text for the text rules."""
    code = _HOME_EXPRESSION.sub("'~'", _read(view, code, "code", runs=True))
    if code in view.code_read:  # met by another road: what it does is in the view already
        return
    view.code_read.add(code)
    view.texts.append(code)
    for match in _CODE_DELETE.finditer(code):
        view.paths.append((match.group(2), "delete_tree"))
    for match in _CODE_OPEN.finditer(code):
        view.paths.append((match.group(2), "read"))
    for match in _CODE_STRING.finditer(code):
        literal = match.group(2)
        if _PATHLIKE.match(literal):
            view.paths.append((literal, "read"))
        elif _URL.match(literal):
            view.urls.append(literal)
    for match in _CODE_COMMAND.finditer(code):
        _add_script(view, match.group(2), embedded=True)
    for match in _NOTEBOOK_SHELL.finditer(code):
        _add_script(view, match.group(1) or match.group(2), embedded=True)
    for match in _CODE_ARGV.finditer(code):
        words = ([match.group(2)] if match.group(2) else []) + [
            word for _, word in _QUOTED.findall(match.group(3))
        ]
        if words:
            _add_script(view, shlex.join(words), embedded=True)


def _python_source(code: str) -> bool:
    """Whether `code` compiles as Python (it is never run); a notebook's `!` and `%` lines
    are left out, as `_add_code` reads them as shell."""
    try:
        compile(_NOTEBOOK_SHELL.sub("", code), "<tool call>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _client_sql(command: SimpleCommand, view: CallView) -> list[str]:
    program = posixpath.basename(command.program)
    if program not in _SQL_CLIENTS:
        return []
    flags = _SQL_CLIENTS[program]
    texts = []
    for index, arg in enumerate(command.args):
        if arg in flags and index + 1 < len(command.args):
            texts.append(command.args[index + 1])
        elif _SQL_START.match(arg):
            texts.append(arg)
    if command.stdin and _SQL_START.match(command.stdin):
        texts.append(command.stdin)
    return [s for text in texts for s in _statements(text, view)]


def _writes(statement: str) -> bool:
    return not (_SQL_READS.match(statement) or _SQL_CONTROL.match(statement))


def _statements(text: str, view: CallView) -> list[str]:
    text = _SQL_COMMENTS.sub(" ", _read(view, text, "SQL", runs=True))
    return [" ".join(part.split()) for part in text.split(";") if part.strip()]


def _command_categories(commands: list[SimpleCommand], data: GuardData) -> list[str]:
    found = []
    for command in commands:
        line = command.line
        for category, patterns in data.commands.items():
            if category not in found and any(p.search(line) for p in patterns):
                found.append(category)
    return found


def _embedded_commands(text: str) -> list[str]:
    """Commands a message asks someone (often another agent) to run."""
    found = [m.group(1) or m.group(2) for m in _CODE_SPAN.finditer(text)]
    found.extend(m.group(1) for m in _RUN_PHRASE.finditer(text))
    return [f for f in found if f and f.strip()]


def _items(args: Any) -> tuple[list[tuple[str, str]], list[str]]:
    """(normalised key, string) for every textual argument, argv lists joined, up to
    `_MAX_VALUES`; and the keys of the textual values past that, which are not read."""
    if isinstance(args, str):
        return [("", args)], []
    items: list[tuple[str, str]] = []
    unread: list[str] = []
    stack: deque[tuple[str, Any]] = deque([("", args)])
    while stack:
        key, value = stack.popleft()
        if isinstance(value, str):
            if len(items) < _MAX_VALUES:
                items.append((key, value))
            else:
                unread.append(key)
        elif isinstance(value, Mapping):
            stack.extend((normalize_name(str(k)), v) for k, v in value.items())
        elif isinstance(value, list | tuple):
            if value and all(isinstance(v, str) for v in value) and key in _COMMAND_KEYS:
                if len(items) < _MAX_VALUES:
                    items.append((key, _command_list(value, plural=key in _COMMANDS_KEYS)))
                else:
                    unread.append(key)
            else:
                stack.extend((key, v) for v in value)
    return items, unread


def _named_items(args: Mapping[Any, Any]) -> Iterator[tuple[Any, Any]]:
    """A mapping's first `_MAX_KEYS` items: each name costs a normalisation."""
    return islice(args.items(), _MAX_KEYS)


def _keys(args: Any) -> Iterator[str]:
    """Every argument name, nested ones too, up to `_MAX_KEYS`."""
    return islice(_all_keys(args), _MAX_KEYS)


def _all_keys(args: Any) -> Iterator[str]:
    if isinstance(args, Mapping):
        for key, value in args.items():
            yield normalize_name(str(key))
            yield from _all_keys(value)
    elif isinstance(args, list | tuple):
        for item in args[:50]:
            yield from _all_keys(item)


def _selects_everything(args: Any) -> bool:
    """A filter argument that is present and empty (`{}`, `"{}"`, `"*"`): every record."""
    if not isinstance(args, Mapping):
        return False
    for key, value in _named_items(args):
        if normalize_name(str(key)) in _FILTER_KEYS and value in _EVERYTHING:
            return True
    return False


def _hosts(view: CallView, recipients: list[str]) -> list[str]:
    """Where the call talks to: URL hosts, `host:path` copy targets, recipient domains."""
    hosts = [m.group(1).lower() for url in view.urls if (m := _HOST_IN_URL.match(url))]
    for command in view.commands:
        hosts.extend(m.group(1).lower() for a in command.args if (m := _REMOTE_TARGET.match(a)))
    hosts.extend(m.group(1).lower() for text in recipients for m in _EMAIL.finditer(text))
    return list(dict.fromkeys(hosts))


def _booleans(args: Any) -> Iterator[tuple[str, bool]]:
    if isinstance(args, Mapping):
        for key, value in _named_items(args):
            if isinstance(value, bool):
                yield normalize_name(str(key)), value
            elif isinstance(value, Mapping):
                yield from _booleans(value)


def _as_command_line(args: Any) -> Any:
    """`["rm", "-rf", "x"]`, `{"command": "rm", "args": ["-rf", "x"]}` and `{"cmd": "rm",
    "args": "-rf x"}` as one command."""
    if isinstance(args, list) and args and all(isinstance(a, str) for a in args):
        return {"command": shlex.join(args)}
    if isinstance(args, Mapping):
        program = next((args[k] for k in _PROGRAM_KEYS if isinstance(args.get(k), str)), None)
        rest = next((args[k] for k in _ARGV_KEYS if isinstance(args.get(k), list | str)), None)
        merged = {k: v for k, v in args.items() if k not in _PROGRAM_KEYS + _ARGV_KEYS}
        if program and isinstance(rest, str):  # "args": "-rf /" is the rest of the line
            return {**merged, "command": f"{program} {rest}"}
        if program and rest is not None and all(isinstance(a, str) for a in rest):
            return {**merged, "command": shlex.join([program, *rest])}
    return args


def _named_positionals(arguments: Any, name: str, primary: str) -> Any:
    """Arguments given without names (a string, a list of strings, or such a list as JSON
    text, as model tool calls arrive) under the name the tool's kind reads them by: the
    command of a shell tool, the SQL of a database tool, the path of a file tool, the
    source of a code tool. `["rm -rf /"]` is a command line, not one quoted word."""
    if isinstance(arguments, str) and arguments.lstrip().startswith("["):
        try:
            decoded = json.loads(arguments)
        except RecursionError:  # nested past the parser: its values, read flat
            decoded = [v for v in read_flat(arguments).values() if isinstance(v, str)]
        except ValueError:
            decoded = None
        if isinstance(decoded, list):  # bounded as the call's own arguments are
            arguments = bounded(decoded, Notes(), "arguments", cap_text=False)
    if isinstance(arguments, str):
        if isinstance(tool_arguments(arguments), dict):  # JSON of an object: named already
            return arguments
        values = [arguments]
    elif isinstance(arguments, list) and arguments and all(isinstance(a, str) for a in arguments):
        values = arguments
    else:
        return arguments
    if primary in ("database_read", "database_write") or (
        primary == "execute_shell" and all(_SQL_START.match(v) for v in values)
    ):
        return {"query": ";\n".join(values)}
    if primary == "execute_shell":
        if _CODE_TOOL.search(name) and not _SHELL_NAME.search(name):
            return {"code": "\n".join(values)}
        return {"command": _command_list(values)}
    if primary in ("read_files", "write_files", "delete_files"):
        return {"path": values if len(values) > 1 else values[0]}
    return arguments


def _local_path(value: str) -> str:
    """A path given as a `file://` URL (`file:///etc/shadow`) as the path it names."""
    if value[:7].lower() != "file://":
        return value
    return unquote(urlsplit(value).path) or value


def _command_list(items: list[str], plural: bool = False) -> str:
    """An argv (["bash", "-lc", "rm -rf x"]) quoted back together, or a list of whole
    commands (["cd src", "make"]) one per line; under a plural name ("commands": ["ls",
    "rm -rf /"]) always commands."""
    if plural or len(items) == 1 or any(" " in item.strip() for item in items[:-1]):
        return "\n".join(items)
    return shlex.join(items)


def _numbers(args: Any) -> Iterator[tuple[str, int]]:
    if isinstance(args, Mapping):
        for key, value in _named_items(args):
            if isinstance(value, int) and not isinstance(value, bool):
                yield normalize_name(str(key)), value
            elif isinstance(value, str) and value.isdecimal() and len(value) < 10:
                yield normalize_name(str(key)), int(value)
            elif isinstance(value, Mapping):
                yield from _numbers(value)


def _listed_recipients(args: Any, keys: frozenset[str]) -> int:
    if not isinstance(args, Mapping):
        return 0
    return sum(
        len(value)
        for key, value in _named_items(args)
        if normalize_name(str(key)) in keys and isinstance(value, list)
    )
