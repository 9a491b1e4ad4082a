"""Flatten a shell script into the simple commands it would run.

Agents hand shells whole scripts: chains, pipes, substitutions, here-documents and wrappers
such as `sudo`, `xargs` or `bash -c '...'`. A rule that judges commands has to see every
program that would actually start, so this module peels those layers off and returns one
`SimpleCommand` per program. It knows shell syntax only, nothing about what a program means,
and it never raises: input it cannot make sense of degrades to a plain whitespace split.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field

from otel_safety.analysis.calls.shell_variables import assignments, expand
from otel_safety.analysis.memo import content_memo

__all__ = ["MAX_DEPTH", "TOO_DEEP", "SimpleCommand", "parse_commands", "remote_command"]

MAX_DEPTH = 6
"""How many layers of `bash -c`, `$(...)` and wrappers are unpacked before giving up."""
TOO_DEEP = "(nested too deep)"
"""The program of a command nested past MAX_DEPTH, left unread: no program has the name,
so no rule matches it, and a guard can tell the script hides what it runs."""

# Private-use characters nobody types, and not whitespace to shlex or str.split: _MARK tags
# a redirection operator so it survives word splitting, _HOLE stands in for a substitution
# (whose own spaces and quotes would otherwise split the word around it) until after it.
_MARK = "\ue000"
_HOLE = "\ue001"
_HOLE_REF = re.compile(_HOLE + r"(\d+)" + _HOLE)
# Runs without any character the scanner acts on, by quote state, escaped pairs included
# ("$" and "#" act only sometimes, so they end a run and are looked at one by one).
_PLAIN_RUN = {
    "": re.compile(r"(?:[^\\$`'\"<>#\n;|&()]+|\\.)+", re.DOTALL),
    "'": re.compile(r"[^']+"),
    '"': re.compile(r'(?:[^\\$`"]+|\\.)+', re.DOTALL),
}
# Empty quotes and empty backtick substitutions, one after another.
_EMPTY_QUOTES = re.compile(r"(?:''|\"\"|``)+")
# A backtick substitution's body: up to the closing backtick, a backslash escaping one char.
_BACKTICK_BODY = re.compile(r"(?:[^`\\]+|\\.?)*", re.DOTALL)
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[[^\]]*\])?\+?=")
_REDIRECT = re.compile(r"&>>|&>|>>|>\||>&|<<<|<<-|<<|<>|<&|>|<")
_OUTPUT_OPS = frozenset({">", ">>", ">|", "&>", "&>>", ">&", "<>"})
_RESERVED = frozenset(
    {"!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "esac"}
)
SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh", "ash", "mksh", "fish"})
# ssh's options that take a value: the word after them is not the host.
_SSH_VALUE_OPTIONS = frozenset("bcDEeFIiJLlmOopQRSWw")
_SHELL_VALUE_OPTIONS = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})
_STDOUT_WRITERS = frozenset({"echo", "printf"})
_CONTAINER_CLIS = frozenset({"docker", "podman", "nerdctl", "docker-compose"})
# `docker exec`'s options that take a value: the word after them is not the container.
_EXEC_VALUE_OPTIONS = frozenset(
    {"-e", "--env", "--env-file", "-u", "--user", "-w", "--workdir", "--detach-keys", "--index"}
)

# Programs that run another program given in their arguments: the options that take a
# value (so the value is not mistaken for the program) and how many positional arguments
# come before the program (`timeout 10 CMD`).
_WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
    "sudo": (
        frozenset(
            {
                "-u",
                "-g",
                "-h",
                "-p",
                "-C",
                "-D",
                "-r",
                "-t",
                "-T",
                "-U",
                "--user",
                "--group",
                "--host",
                "--prompt",
                "--close-from",
                "--chdir",
                "--role",
                "--type",
                "--command-timeout",
                "--other-user",
            }
        ),
        0,
    ),
    "doas": (frozenset({"-u", "-C"}), 0),
    "env": (frozenset({"-u", "-C", "--unset", "--chdir"}), 0),
    "nohup": (frozenset(), 0),
    "exec": (frozenset({"-a"}), 0),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "ionice": (frozenset({"-c", "-n", "-p", "-P", "-u", "--class", "--classdata"}), 0),
    "timeout": (frozenset({"-s", "-k", "--signal", "--kill-after"}), 1),
    "time": (frozenset({"-f", "-o", "--format", "--output"}), 0),
    "command": (frozenset(), 0),
    "builtin": (frozenset(), 0),
    "stdbuf": (frozenset({"-i", "-o", "-e"}), 0),
    "setsid": (frozenset(), 0),
    "chroot": (frozenset({"--userspec", "--groups"}), 1),
    "busybox": (frozenset(), 0),
    "xargs": (
        frozenset(
            {
                "-I",
                "-L",
                "-n",
                "-P",
                "-s",
                "-d",
                "-E",
                "-a",
                "--arg-file",
                "--delimiter",
                "--max-args",
                "--max-lines",
                "--max-procs",
                "--max-chars",
                "--eof",
            }
        ),
        0,
    ),
    "watch": (frozenset({"-n", "--interval"}), 0),
}


@dataclass(frozen=True, slots=True)
class SimpleCommand:
    """One program a script would start, with its words after quote removal.

    `raw` is the source text the command came from (for a wrapped program, the whole
    wrapper line), `output_redirects` the files its output is written to, `stdin` the text
    fed to it when the script spells it out (here-document, here-string, `echo ... |`), and
    `upstream` the line of the pipeline stage whose output it reads (`curl ... | bash`).
    """

    program: str
    args: list[str]
    raw: str
    output_redirects: list[str] = field(default_factory=list)
    stdin: str | None = None
    upstream: str | None = None

    @property
    def line(self) -> str:
        """Program and arguments joined by single spaces, for pattern matching."""
        return " ".join([self.program, *self.args])


@content_memo
def parse_commands(script: str, *, _depth: int = 0) -> list[SimpleCommand]:
    """Every simple command in `script`, outer wrappers first, then what they run (parsed
    once: several detectors read the same scripts; the list is shared, not to be
    changed)."""
    if not script or not script.strip():
        return []
    if _depth > MAX_DEPTH:
        return [SimpleCommand(TOO_DEEP, [], script)]
    try:
        return _parse(script, _depth)
    except Exception:  # last resort: a judging rule must get an answer, not a traceback
        words = script.split()
        return [SimpleCommand(posixpath.basename(words[0]) or words[0], words[1:], script)]


def _parse(script: str, depth: int) -> list[SimpleCommand]:
    # A shell reading a script drops NUL bytes: `rm\0 -rf /` runs `rm -rf /`.
    text = script.replace("\r\n", "\n").replace("\\\n", "").replace("\0", "")
    commands: list[SimpleCommand] = []
    previous: SimpleCommand | None = None
    scanner = _Scanner(text)
    # What the script's own assignments set, in order; IFS as the shell starts with it, so
    # `rm${IFS}-rf${IFS}/` splits where the shell splits it.
    variables: dict[str, str] = {"IFS": " "}
    for segment in scanner.scan():
        for inner in segment.substitutions:
            commands.extend(parse_commands(inner, _depth=depth + 1))
        segment.text = expand(segment.text, variables)
        if "=" in segment.text:
            assignments(_words(segment.text), variables, _HOLE)
        piped = previous if segment.op == "|" else None
        built = _build(segment, scanner.holes, piped, depth)
        commands.extend(built)
        previous = built[0] if built else None
    return commands


@dataclass
class _Segment:
    text: str  # words with markers and holes, for splitting
    raw: str  # the same stretch of the source, for people
    op: str  # control operator that came before this segment ("" at the start)
    substitutions: list[str] = field(default_factory=list)
    heredocs: list[str] = field(default_factory=list)


class _Scanner:
    """One quote-aware pass that cuts a script at its control operators."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.segments: list[_Segment] = []
        self.holes: list[str] = []  # source text of each substitution, by hole number
        self._buf: list[str] = []
        self._subs: list[str] = []
        self._op = ""
        self._start = 0  # where the current segment begins in the source
        self._comment = -1  # where a comment cut the current segment short
        self._pending_heredocs: list[tuple[int, str, bool]] = []

    def scan(self) -> list[_Segment]:
        text = self.text
        quote = ""
        while self.pos < len(text):
            plain = _PLAIN_RUN[quote].match(text, self.pos)
            if plain:  # a run that holds no syntax is taken whole: one step, not one per char
                self._buf.append(plain.group())
                self.pos = plain.end()
                continue
            empty = None if quote else _EMPTY_QUOTES.match(text, self.pos)
            if empty:  # "" '' `` mean nothing to the cut: taken whole too, however many
                self._buf.append(empty.group())
                self.pos = empty.end()
                continue
            char = text[self.pos]
            nxt = text[self.pos + 1 : self.pos + 2]
            if quote == "'":
                quote = "" if char == "'" else quote
                self._take(1)
            elif char == "\\":
                self._take(2)
            elif char == "$" and nxt == "(":
                self._substitution()
            elif char == "`":
                self._backtick()
            elif quote == '"':
                quote = "" if char == '"' else quote
                self._take(1)
            elif char in "'\"":
                quote = char
                self._take(1)
            else:
                self._unquoted(char, nxt)
        self._cut("", 0)
        return self.segments

    def _unquoted(self, char: str, nxt: str) -> None:
        if char in "<>" and nxt == "(":
            self._substitution()
        elif char == "#" and self._at_word_start():
            end = self.text.find("\n", self.pos)
            self._comment = self.pos
            self.pos = len(self.text) if end < 0 else end
        elif char == "\n":
            self._cut("\n", 1)
            self._read_heredocs()
            self._start = self.pos
        elif char == ";":
            self._cut(";", 1)
        elif char == "|":
            self._cut("||" if nxt == "|" else "|", 2 if nxt and nxt in "|&" else 1)
        elif char == "&" and nxt == "&":
            self._cut("&&", 2)
        elif char in "<>" or (char == "&" and nxt == ">"):
            self._redirect()
        elif char == "&":
            self._cut("&", 1)
        elif char in "()":
            self._cut(";", 1)
        else:
            self._take(1)

    def _take(self, width: int) -> None:
        self._buf.append(self.text[self.pos : self.pos + width])
        self.pos += width

    def _at_word_start(self) -> bool:
        return not self._buf or self._buf[-1][-1:].isspace()

    def _cut(self, op: str, width: int) -> None:
        """End the current segment at an operator `width` characters long."""
        text = "".join(self._buf).strip()
        if text:
            end = self._comment if self._comment >= 0 else self.pos
            raw = self.text[self._start : end].strip()
            self.segments.append(_Segment(text, raw, self._op, self._subs))
        # An empty segment (a pipe continued on the next line) keeps the operator before it.
        self._op = op if text or not self._op else self._op
        self._buf, self._subs = [], []
        self.pos += width
        self._start, self._comment = self.pos, -1

    def _hole(self, source: str) -> None:
        self._buf.append(f"{_HOLE}{len(self.holes)}{_HOLE}")
        self.holes.append(source)

    def _substitution(self) -> None:
        start = self.pos + 2
        close = _closing_paren(self.text, start)
        inner = self.text[start:close]
        if not (self.text[self.pos] == "$" and inner.startswith("(")):  # $((...)) is arithmetic
            self._subs.append(inner)
        self._hole(self.text[self.pos : close + 1])
        self.pos = close + 1

    def _backtick(self) -> None:
        end = min(_BACKTICK_BODY.match(self.text, self.pos + 1).end(), len(self.text))
        self._subs.append(self.text[self.pos + 1 : end].replace("\\`", "`"))
        self._hole(self.text[self.pos : end + 1])
        self.pos = end + 1

    def _redirect(self) -> None:
        match = _REDIRECT.match(self.text, self.pos)
        op = match.group(0) if match else self.text[self.pos]
        self.pos += len(op)
        self._drop_descriptor_number()
        self._buf.append(f" {_MARK}{op} ")
        if op in ("<<", "<<-"):
            delimiter = self._heredoc_delimiter()
            self._pending_heredocs.append((len(self.segments), delimiter, op == "<<-"))

    def _drop_descriptor_number(self) -> None:
        """A file-descriptor number written against the operator (`2>`) belongs to it: drop
        the digits that end the buffer when a space (or nothing) comes before them. The
        buffer holds runs, so the digits may end one entry and fill the ones after it."""
        buf = self._buf
        if not buf:
            return
        index, cut = len(buf) - 1, 0
        while index >= 0:
            entry = buf[index]
            cut = len(entry)
            while cut and entry[cut - 1].isdigit():
                cut -= 1
            if cut:
                break
            index -= 1
        if index == len(buf) - 1 and cut == len(buf[-1]):  # no digits at the end
            return
        if index < 0:  # nothing but digits: the segment starts with them
            buf.clear()
        elif buf[index][cut - 1].isspace():
            buf[index] = buf[index][:cut]
            del buf[index + 1 :]

    def _heredoc_delimiter(self) -> str:
        while self.pos < len(self.text) and self.text[self.pos] in " \t":
            self.pos += 1
        start = self.pos
        while self.pos < len(self.text) and not (
            self.text[self.pos].isspace() or self.text[self.pos] in ";&|<>()"
        ):
            self.pos += 1
        word = self.text[start : self.pos]
        self._buf.append(word)
        return word.replace("\\", "").strip("'\"")

    def _read_heredocs(self) -> None:
        for index, delimiter, strip_tabs in self._pending_heredocs:
            body: list[str] = []
            while self.pos < len(self.text):
                end = self.text.find("\n", self.pos)
                end = len(self.text) if end < 0 else end
                line = self.text[self.pos : end]
                self.pos = end + 1
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break
                body.append(line)
            if index < len(self.segments):
                self.segments[index].heredocs.append("\n".join(body))
        self._pending_heredocs.clear()


def _closing_paren(text: str, start: int) -> int:
    """Index of the `)` closing a group opened just before `start`, or len(text)."""
    depth, quote, index = 1, "", start
    while index < len(text):
        char = text[index]
        if char == "\\" and quote != "'":
            index += 2
            continue
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"`":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return index
        index += 1
    return len(text)


def _words(text: str) -> list[str]:
    try:
        return split_words(text)
    except ValueError:  # unbalanced quotes: keep going with what a human would read
        return [word.strip("'\"") for word in text.split() if word.strip("'\"")]


# One piece of a POSIX shell word: a run of empty quotes (one piece, however long), a
# single-quoted run, a double-quoted run, a run of escaped characters, plain characters; or
# the blanks between words.
_PIECE = re.compile(
    r"""((?:''|"")+)|'([^']*)'|"((?:[^"\\]|\\.)*)"|((?:\\.)+)|([^ \t\r\n'"\\]+)|([ \t\r\n]+)""",
    re.DOTALL,
)
_QUOTED_ESCAPE = re.compile(r'\\(["\\])')  # inside "...", only \" and \\ are escapes
_BLANKS = re.compile(r"[ \t\r\n]+")


# One unquoted brace list in a word, as bash expands it: `{rm,-rf,/}` is three words,
# `/{etc,home}` two paths. (`${X:-a,b}` is a variable's default, not a list.)
# (Possessive runs, the first item without a comma: one way to match, linear in the word.)
_BRACE_LIST = re.compile(r"((?:[^{}$]|\$(?!\{))*+)\{([^{}\s,]*+,[^{}\s]*+)\}([^{}]*+)")
_MAX_BRACE_WORDS = 64


def _braced(word: str) -> list[str]:
    """The words an unquoted word's brace list expands to (the word alone when it has none)."""
    found = _BRACE_LIST.fullmatch(word) if "{" in word and "," in word else None
    if found is None:
        return [word]
    head, items, tail = found.groups()
    parts = items.split(",")
    if len(parts) > _MAX_BRACE_WORDS:
        return [word]
    return [expanded for part in parts if (expanded := f"{head}{part}{tail}")]


# `$(echo rm)`, `` `echo rm` ``: a substitution that only prints its own words.
_ECHO = re.compile(
    r"(?:\$\(|`)\s*+(?:echo|printf)\s++((?:[^$`()|;&<>\\]|\\.)*+)(?:\)|`)", re.DOTALL
)


def _echo_output(source: str) -> list[str]:
    """The words a substitution that only echoes literal words puts in its place, or none."""
    found = _ECHO.fullmatch(source)
    if found is None:
        return []
    words = _words(found.group(1))
    return [word for word in words if not word.startswith("-")][:_MAX_BRACE_WORDS]


def split_words(text: str) -> list[str]:
    """`shlex.split(text)` (POSIX mode) in one linear pass: shlex grows each word a
    character at a time, which costs the square of a long word's length. An unquoted brace
    list is expanded as the shell expands it (`_braced`)."""
    if "'" not in text and '"' not in text and "\\" not in text:  # no quoting: blanks cut
        return [braced for word in _BLANKS.split(text) if word for braced in _braced(word)]
    words: list[str] = []
    current: list[str] = []
    in_word = False
    quoted = False  # a quote or escape in the word: no brace list in it is expanded
    position = 0
    for piece in _PIECE.finditer(text):
        if piece.start() != position:
            break  # an unclosed quote or a trailing backslash
        position = piece.end()
        empty, single, double, escaped, plain, blanks = piece.groups()
        if blanks is not None:
            if in_word:
                word = "".join(current)
                words.extend([word] if quoted else _braced(word))
                current, in_word, quoted = [], False, False
            continue
        in_word = True
        quoted = quoted or plain is None
        if empty is not None:
            continue
        if double is not None:
            current.append(_QUOTED_ESCAPE.sub(r"\1", double) if "\\" in double else double)
        else:
            current.append(single if single is not None else escaped[1::2] if escaped else plain)
    if position != len(text):
        raise ValueError("No closing quotation")
    if in_word:
        word = "".join(current)
        words.extend([word] if quoted else _braced(word))
    return words


def _build(
    segment: _Segment, holes: list[str], piped: SimpleCommand | None, depth: int
) -> list[SimpleCommand]:
    def refill(word: str) -> list[str]:
        if _HOLE not in word:
            return [word]
        whole = _HOLE_REF.fullmatch(word)
        if whole is not None and (echoed := _echo_output(holes[int(whole.group(1))])):
            return echoed  # `$(echo rm) -rf /` runs rm
        return [_HOLE_REF.sub(lambda m: holes[int(m.group(1))], word)]

    words = [part for word in _words(segment.text) for part in refill(word)]
    words, redirects, stdin = _split_redirects(words)
    if stdin is None and segment.heredocs:
        stdin = segment.heredocs[0]
    if stdin is None and piped is not None:
        stdin = _output_of(piped)
    upstream = piped.line if piped is not None else None
    return _command(words, segment.raw, redirects, stdin, depth, upstream)


def _split_redirects(words: list[str]) -> tuple[list[str], list[str], str | None]:
    """Drop redirections from the words; keep output targets and any here-string."""
    kept: list[str] = []
    outputs: list[str] = []
    stdin: str | None = None
    index = 0
    while index < len(words):
        word = words[index]
        if not word.startswith(_MARK):
            kept.append(word)
            index += 1
            continue
        op = word[len(_MARK) :]
        target = words[index + 1] if index + 1 < len(words) else ""
        index += 2
        if op == "<<<":
            stdin = target
        elif op in (">&", "<&") and (target.isdigit() or target == "-"):
            continue  # fd duplication (2>&1), not a file
        elif op in _OUTPUT_OPS and target:
            outputs.append(target)
    return kept, outputs, stdin


def _output_of(command: SimpleCommand) -> str | None:
    """What a pipeline stage prints, when the script itself spells it out."""
    if command.program in _STDOUT_WRITERS:
        args = [a for a in command.args if a not in ("-e", "-n", "-E")]
        return " ".join(args).replace("\\n", "\n")
    files = [a for a in command.args if not a.startswith("-")]
    if command.program == "cat" and not files:
        return command.stdin
    return None


def _command(
    words: list[str],
    raw: str,
    redirects: list[str],
    stdin: str | None,
    depth: int,
    upstream: str | None = None,
) -> list[SimpleCommand]:
    if depth > MAX_DEPTH:
        return [SimpleCommand(TOO_DEEP, [], raw)] if words else []
    index = 0
    while index < len(words) and (words[index] in _RESERVED or _ASSIGNMENT.match(words[index])):
        index += 1
    if index >= len(words):
        # `> /etc/passwd` alone empties the file as `: > /etc/passwd` does
        return [SimpleCommand(":", [], raw, redirects, stdin, upstream)] if redirects else []
    program = posixpath.basename(words[index]) or words[index]
    command = SimpleCommand(program, words[index + 1 :], raw, redirects, stdin, upstream)
    return [command, *_nested(command, depth)]


def _nested(command: SimpleCommand, depth: int) -> list[SimpleCommand]:
    """The commands a command runs on behalf of the script."""
    program, args = command.program, command.args
    if program in SHELLS:
        script, reads_stdin = _shell_script(args)
        if script is None and reads_stdin:
            script = command.stdin
        return parse_commands(script or "", _depth=depth + 1)
    if program == "eval":
        return parse_commands(" ".join(args), _depth=depth + 1)
    if program == "ssh":
        remote = remote_command(command)
        return parse_commands(remote, _depth=depth + 1) if remote else []
    if program in ("kubectl", "oc") and "exec" in args and "--" in args:
        # `kubectl exec pod -- rm -rf /` runs its command in the container, as ssh does
        inner = args[args.index("--") + 1 :]
        return _command(inner, command.raw, [], None, depth + 1) if inner else []
    if program in _CONTAINER_CLIS:
        inner = _container_exec(args)
        return _command(inner, command.raw, [], command.stdin, depth + 1) if inner else []
    if program == "su":
        return parse_commands(_option_value(args, ("-c", "--command")) or "", _depth=depth + 1)
    if program == "find":
        return [
            found
            for inner in _find_exec(args)
            for found in _command(inner, command.raw, [], None, depth + 1)
        ]
    if program not in _WRAPPERS:
        return []
    inner = _unwrap(program, args)
    if not inner:
        return []
    if program == "watch":  # watch hands its arguments to `sh -c`
        return parse_commands(" ".join(inner), _depth=depth + 1)
    if program == "xargs":  # `echo / | xargs rm -rf`, `xargs rm -rf <<< /`: the words it
        # reads are its operands
        stdin = command.stdin
        inner = inner + (_echoed(command.upstream) if stdin is None else _words(stdin))
    return _command(inner, command.raw, [], command.stdin, depth + 1, command.upstream)


def _container_exec(args: list[str]) -> list[str] | None:
    """The command `docker exec [options] CONTAINER CMD...` runs in the container (also
    `docker container exec`, `docker compose exec SERVICE CMD`, podman, nerdctl)."""
    index = 0
    while index < len(args) and args[index] in ("container", "compose", "-f", "--file"):
        index += 2 if args[index] in ("-f", "--file") else 1
    if index >= len(args) or args[index] != "exec":
        return None
    index += 1
    while index < len(args) and args[index].startswith("-"):
        option = args[index]
        index += 2 if option in _EXEC_VALUE_OPTIONS else 1
        if option == "--":
            break
    return args[index + 1 :] or None  # after the container


def _echoed(upstream: str | None) -> list[str]:
    """The words an `echo` (or `printf`) upstream of a pipe writes, as `xargs` splits them;
    none for any other program, whose output is not known."""
    words = _words(upstream or "")
    if not words or words[0] not in ("echo", "printf"):
        return []
    return [word for word in words[1:] if not word.startswith("-")]


def remote_command(command: SimpleCommand) -> str | None:
    """The script an `ssh` command runs on the remote host (`ssh -p 22 host 'df -h'`), or
    None: another program, or an ssh that only opens a session or a tunnel."""
    if command.program != "ssh":
        return None
    args, index = command.args, 0
    while index < len(args) and args[index].startswith("-") and args[index] != "--":
        option = args[index]
        takes_value = len(option) == 2 and option[1] in _SSH_VALUE_OPTIONS
        index += 2 if takes_value else 1
    if index < len(args) and args[index] == "--":
        index += 1
    rest = args[index + 1 :]  # after the host
    return " ".join(rest) or None


def _shell_script(args: list[str]) -> tuple[str | None, bool]:
    """(the `-c` script, whether the shell reads its script from stdin)."""
    command_mode = False
    index = 0
    while index < len(args):
        arg = args[index]
        if arg in ("--", "-"):
            index += 1
            break
        if arg in _SHELL_VALUE_OPTIONS:
            index += 2
            continue
        if len(arg) > 1 and arg[0] in "-+":
            command_mode = command_mode or (not arg.startswith("--") and "c" in arg[1:])
            index += 1
            continue
        break
    rest = args[index:]
    if command_mode:
        return (rest[0] if rest else None), False
    return None, not rest


def _option_value(args: list[str], names: tuple[str, ...]) -> str | None:
    for index, arg in enumerate(args):
        if arg in names and index + 1 < len(args):
            return args[index + 1]
        for name in names:
            if name.startswith("--") and arg.startswith(name + "="):
                return arg[len(name) + 1 :]
    return None


def _find_exec(args: list[str]) -> list[list[str]]:
    """The commands given to find's -exec/-execdir/-ok/-okdir, each ended by ; or +."""
    found: list[list[str]] = []
    index = 0
    while index < len(args):
        if args[index] in ("-exec", "-execdir", "-ok", "-okdir"):
            end = index + 1
            while end < len(args) and args[end] not in (";", "+"):
                end += 1
            if end > index + 1:
                found.append(args[index + 1 : end])
            index = end
        index += 1
    return found


def _unwrap(program: str, args: list[str]) -> list[str] | None:
    """The words of the program a wrapper runs, or None when it runs none."""
    value_options, positionals = _WRAPPERS[program]
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            index += 1
            break
        if program == "env" and _ASSIGNMENT.match(arg):
            index += 1
            continue
        if program == "env" and arg in ("-S", "--split-string") and index + 1 < len(args):
            return _words(args[index + 1]) + args[index + 2 :]
        if program == "command" and arg in ("-v", "-V"):
            return None  # a lookup, not a run
        if not arg.startswith("-") or arg == "-":
            break
        index += 2 if arg in value_options else 1
    return args[index + positionals :] or None
