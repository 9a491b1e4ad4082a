"""Windows command lines (PowerShell and cmd.exe) as the simple commands rules match on.

POSIX parsing would eat the backslashes of `C:\\Users\\dana` and miss `;`-less PowerShell
pipelines, so a script that reads as Windows is split here instead: at `;`, `&&`, `||`,
`&` and `|`, quotes kept together, no backslash escapes. Programs come out lower-cased with
`.exe` dropped and PowerShell aliases resolved (`rm`, `del`, `ri` are `remove-item`), and
paths are rewritten to the POSIX shapes the path rules know (`$env:USERPROFILE\\.aws` is
`~/.aws`, `C:\\` is `/`).
"""

from __future__ import annotations

import regex

from otel_safety.analysis.calls.shell import SimpleCommand
from otel_safety.analysis.pattern_cache import compiled

_WINDOWS_TOOL = compiled(r"(?:^|_)(?:powershell|pwsh|windows|cmd_exe)(?:_|$)")
_WINDOWS_TEXT = compiled(
    r"""^\s*(?:powershell|pwsh|cmd)(?:\.exe)?\b|\$env:\w+|%\w+%|\b[A-Za-z]:\\
    |\b(?:Get|Set|New|Remove|Add|Invoke|Start|Stop|Register|Clear|Format|Out|Copy|Move)-[A-Z][A-Za-z]+\b""",
    regex.VERBOSE,
)
_SPLIT = compiled(r"""("[^"]*"|'[^']*')|(\&\&|\|\||[;&|\n])""")
_WORD = compiled(r'"([^"]*)"|\'([^\']*)\'|(\S+)')
_ALIASES = {
    "rm": "remove-item",
    "del": "remove-item",
    "erase": "remove-item",
    "ri": "remove-item",
    "rd": "remove-item",
    "rmdir": "remove-item",
    "gc": "get-content",
    "type": "get-content",
    "cat": "get-content",
    "iwr": "invoke-webrequest",
    "curl": "invoke-webrequest",
    "wget": "invoke-webrequest",
    "irm": "invoke-restmethod",
    "iex": "invoke-expression",
    "gci": "get-childitem",
    "ls": "get-childitem",
    "dir": "get-childitem",
    "ac": "add-content",
    "sc": "set-content",
    "saps": "start-process",
    "start": "start-process",
    "copy": "copy-item",
    "cp": "copy-item",
    "move": "move-item",
    "mv": "move-item",
}
_HOME = compiled(
    r"^(?:\$env:USERPROFILE|\$env:HOMEPATH|\$HOME|%USERPROFILE%|%HOMEPATH%|~)", regex.IGNORECASE
)
_DRIVE = compiled(r"^[A-Za-z]:(?=/|$)")


def looks_windows(tool: str, script: str) -> bool:
    return bool(_WINDOWS_TOOL.search(tool)) or bool(_WINDOWS_TEXT.search(script[:2000]))


def parse_windows(script: str) -> list[SimpleCommand]:
    """Every command of a PowerShell or cmd.exe line, nested `cmd /c` and `-Command` too."""
    commands: list[SimpleCommand] = []
    previous: SimpleCommand | None = None
    for segment, operator in _segments(script):
        words = _words(segment)
        if not words:
            continue
        program = _program(words[0])
        args = words[1:]
        if program in ("cmd", "powershell", "pwsh") and args:
            inner = _inner_script(program, args)
            if inner:
                commands.extend(parse_windows(inner))
                continue
        command = SimpleCommand(
            program=program,
            args=args,
            raw=segment.strip(),
            upstream=previous.raw if operator == "|" and previous else None,
        )
        commands.append(command)
        previous = command
    return commands


def windows_path(path: str) -> str:
    """`$env:USERPROFILE\\.ssh\\id_rsa` -> `~/.ssh/id_rsa`; `C:\\Windows` -> `/Windows`."""
    path = path.strip().strip("'\"").replace("\\", "/")
    path = _HOME.sub("~", path)
    return _DRIVE.sub("", path) or "/"


def _segments(script: str) -> list[tuple[str, str]]:
    """(segment, the operator before it)."""
    pieces: list[tuple[str, str]] = []
    current, operator = [], ""
    position = 0
    for match in _SPLIT.finditer(script):
        if match.group(1):  # a quoted stretch: part of the current segment
            continue
        current.append(script[position : match.start()])
        pieces.append(("".join(current), operator))
        current, operator = [], match.group(2).strip() or ";"
        position = match.end()
    current.append(script[position:])
    pieces.append(("".join(current), operator))
    return pieces


def command_paths(command: SimpleCommand) -> list[tuple[str, str]]:
    """(path, read|write|delete|delete_tree) for the cmdlets and cmd built-ins that use them."""
    program, args = command.program, command.args
    named = _named(args)
    positional = [a for a in args if not a.startswith(("-", "/")) or _looks_path(a)]
    positional = [a for a in positional if a not in named.values() or a in _path_values(named)]
    paths = [named[k] for k in ("-path", "-literalpath", "-filepath") if k in named] or positional[
        :1
    ]
    found: list[tuple[str, str]] = []
    if program == "remove-item":
        recursive = any(a.lower() in ("-recurse", "/s", "-r") for a in args)
        targets = [named[k] for k in ("-path", "-literalpath") if k in named] or [
            a for a in args if not a.startswith(("-", "/")) or _looks_path(a)
        ]
        found = [(t, "delete_tree" if recursive else "delete") for t in targets]
    elif program in ("get-content", "more", "select-string", "import-csv", "get-item", "findstr"):
        found = [(p, "read") for p in paths]
    elif program in ("add-content", "set-content", "out-file", "new-item"):
        found = [(p, "write") for p in paths]
    elif program in ("copy-item", "move-item", "xcopy", "robocopy"):
        found = [(p, "read") for p in positional[:-1]] + [(p, "write") for p in positional[-1:]]
    elif program in ("invoke-webrequest", "invoke-restmethod"):
        found = [(named[k], "read") for k in ("-infile",) if k in named]
        found += [(named[k], "write") for k in ("-outfile",) if k in named]
    return [(windows_path(p), mode) for p, mode in found if p]


def _named(args: list[str]) -> dict[str, str]:
    named = {}
    for index, arg in enumerate(args[:-1]):
        if arg.startswith("-") and not args[index + 1].startswith("-"):
            named[arg.lower()] = args[index + 1]
    return named


def _path_values(named: dict[str, str]) -> set[str]:
    return {v for k, v in named.items() if k in ("-path", "-literalpath", "-filepath")}


def _looks_path(word: str) -> bool:
    return word.startswith("/") and ("/" in word[1:] or len(word) == 1)


def _words(segment: str) -> list[str]:
    words = []
    for match in _WORD.finditer(segment):
        words.append(next(g for g in match.groups() if g is not None))
    return words


def _program(word: str) -> str:
    """Lower-cased, `.exe` dropped; aliases resolved only for bare names (`curl` is
    PowerShell's Invoke-WebRequest, `curl.exe` the real curl)."""
    name = word.replace("\\", "/").rsplit("/", 1)[-1].lower()
    if name.endswith(".exe"):
        return name.removesuffix(".exe")
    return _ALIASES.get(name, name)


def _inner_script(program: str, args: list[str]) -> str | None:
    flags = ("/c", "/k") if program == "cmd" else ("-c", "-command", "-encodedcommand", "-e")
    for index, arg in enumerate(args):
        if arg.lower() in flags:
            return " ".join(args[index + 1 :])
    if program != "cmd" and args and not args[0].startswith("-"):
        return " ".join(args)
    return None
