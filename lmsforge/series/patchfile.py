"""Read one ``git format-patch`` file and check that it is whole, naming any damage precisely.

A truncated download or a hand edit usually breaks a hunk's line counts; ``git am`` then says only
"corrupt patch at line N". We check every hunk against its ``@@ -a,b +c,d @@`` header first so the
error names the file, the hunk and the line.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path

from lmsforge.errors import UsageError

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_DIFF = re.compile(r"^diff --git a/(.+) b/(.+)$")
_TRAILER = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):\s*(.+)$")
# every header line of a file's diff that names a path git writes or reads in the tree
_PATH_HEADER = re.compile(r"^(?:--- |\+\+\+ |rename from |rename to |copy from |copy to )(.+)$")
_SYMLINK_MODE = "120000"


@dataclass
class FileChange:
    path: str
    new_file: bool = False
    deleted: bool = False
    added: int = 0
    removed: int = 0
    hunks: list[int] = field(default_factory=list)  # new-side start line of each hunk
    named: list[str] = field(default_factory=list)  # every path its headers name, as written
    mode: str = ""  # the new mode, when the diff sets one
    link_target: str | None = None  # what a symlink the diff writes points to


@dataclass
class PatchFile:
    path: Path
    subject: str
    message: str  # the commit message (subject, body, trailers) as git would record it
    trailers: dict[str, str]
    files: list[FileChange]

    @property
    def added(self) -> int:
        return sum(f.added for f in self.files)

    @property
    def removed(self) -> int:
        return sum(f.removed for f in self.files)

    def hunk_number(self, path: str, line: int) -> int | None:
        """Which hunk (1-based) of PATH starts nearest at or before LINE (git am's error line)."""
        for change in self.files:
            if change.path == path and change.hunks:
                best = 1
                for number, start in enumerate(change.hunks, 1):
                    if start <= line:
                        best = number
                return best
        return None

    def outside_the_tree(self) -> list[str]:
        """What this patch would write outside the work tree: a path that is absolute or climbs
        with `..`, or a symlink that points out of the tree (a later patch, or a build, could
        write through it). git refuses the first at `git am` time, but only as a failed apply
        that reads like a porting problem; the second it takes."""
        found = [f"patch writes outside the tree: {p}" for change in self.files
                 for p in dict.fromkeys(change.named) if _escapes(p)]
        for change in self.files:
            target = change.link_target
            if target is not None and (target.startswith("/") or
                                       _escapes(posixpath.join(posixpath.dirname(change.path),
                                                               target))):
                found.append(f"patch adds a symlink pointing outside the tree: {change.path} -> "
                             f"{target}")
        return found


def _escapes(path: str) -> bool:
    """Whether PATH (relative to the top of the tree) names something outside it."""
    normal = posixpath.normpath(path)
    return path.startswith("/") or normal == ".." or normal.startswith("../")


def _header_path(text: str) -> str | None:
    """The tree path in a `---`/`+++`/rename/copy header: without git's quotes and its a/ or b/
    prefix; None for /dev/null."""
    text = text.rstrip("\t")
    if len(text) >= 2 and text.startswith('"') and text.endswith('"'):
        text = text[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
    if text == "/dev/null":
        return None
    return text[2:] if text.startswith(("a/", "b/")) else text


def _corrupt(path: Path, line: int, what: str) -> UsageError:
    return UsageError(f"{path.name} line {line}: {what}; the patch file is damaged: restore it "
                      "from git (`git checkout -- <file>`) or re-export the series")


def parse(path: Path) -> PatchFile:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{path.name}: not UTF-8 text; restore the file from git") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror})") from None
    lines = text.split("\n")
    if not lines or not lines[0].startswith("From "):
        raise _corrupt(path, 1, "does not start with a `From <commit>` line of git format-patch")
    subject, body_start = _read_headers(path, lines)
    message_lines: list[str] = []
    i = body_start
    while i < len(lines) and lines[i] != "---":
        message_lines.append(lines[i])
        i += 1
    if i == len(lines):
        raise _corrupt(path, len(lines), "no `---` line after the commit message")
    body = "\n".join(message_lines).strip("\n")
    trailers = {}
    for line in reversed(body.split("\n")):
        match = _TRAILER.match(line)
        if not match:
            break
        trailers.setdefault(match.group(1), match.group(2).strip())
    files = _read_diff(path, lines, i + 1)
    if not files:
        raise _corrupt(path, i + 1, "no `diff --git` section: the patch changes nothing")
    message = subject + ("\n\n" + body if body else "")
    return PatchFile(path, subject, message, trailers, files)


def _read_headers(path: Path, lines: list[str]) -> tuple[str, int]:
    subject_parts: list[str] = []
    in_subject = False
    for number, line in enumerate(lines[1:], 2):
        if line == "":
            if not subject_parts:
                raise _corrupt(path, number, "no `Subject:` header")
            subject = " ".join(subject_parts)
            subject = re.sub(r"^\[PATCH[^\]]*\]\s*", "", subject)
            return subject, number  # the body starts after the blank line
        if line.startswith("Subject: "):
            subject_parts.append(line[len("Subject: "):].strip())
            in_subject = True
        elif in_subject and line.startswith((" ", "\t")):
            subject_parts.append(line.strip())
        else:
            in_subject = False
    raise _corrupt(path, len(lines), "headers never end")


def _read_diff(path: Path, lines: list[str], start: int) -> list[FileChange]:
    files: list[FileChange] = []
    current: FileChange | None = None
    i = start
    while i < len(lines):
        line = lines[i]
        diff = _DIFF.match(line)
        if diff:
            current = FileChange(diff.group(2), named=[diff.group(1), diff.group(2)])
            files.append(current)
        elif current is not None and line.startswith("new file mode"):
            current.new_file = True
            current.mode = line.split()[-1]
        elif current is not None and line.startswith("new mode "):
            current.mode = line.split()[-1]
        elif current is not None and not current.hunks and _PATH_HEADER.match(line):
            named = _header_path(_PATH_HEADER.match(line).group(1))
            if named is not None:
                current.named.append(named)
        elif current is not None and line.startswith("deleted file mode"):
            current.deleted = True
        elif line.startswith("@@"):
            if current is None:
                raise _corrupt(path, i + 1, "hunk before any `diff --git` line")
            i = _read_hunk(path, lines, i, current)
            continue
        elif line.startswith("base-commit: ") or line == "-- ":
            break
        i += 1
    return files


def _read_hunk(path: Path, lines: list[str], i: int, change: FileChange) -> int:
    """Consume one hunk starting at lines[i]; return the index after it."""
    match = _HUNK.match(lines[i])
    number = len(change.hunks) + 1
    if not match:
        raise _corrupt(path, i + 1, f"hunk {number} of {change.path} has a malformed `@@` header")
    old_count = int(match.group(2)) if match.group(2) is not None else 1
    new_count = int(match.group(4)) if match.group(4) is not None else 1
    change.hunks.append(int(match.group(3)))
    header_line = i + 1
    old_seen = new_seen = 0
    i += 1
    while old_seen < old_count or new_seen < new_count:
        if i >= len(lines):
            break
        line = lines[i]
        if line.startswith("\\"):  # "\ No newline at end of file"
            i += 1
            continue
        tag = line[:1]
        if tag == " ":
            old_seen += 1
            new_seen += 1
        elif tag == "-":
            old_seen += 1
            change.removed += 1
        elif tag == "+":
            new_seen += 1
            change.added += 1
            if change.mode == _SYMLINK_MODE and change.link_target is None:
                change.link_target = line[1:]  # a symlink's content is its target
        elif line == "" and i == len(lines) - 1:
            break  # end of file
        else:
            break
        i += 1
    if old_seen != old_count or new_seen != new_count:
        raise _corrupt(
            path, header_line,
            f"hunk {number} of {change.path} is truncated or edited: its header promises "
            f"{old_count} old and {new_count} new lines, the file has {old_seen} and {new_seen}")
    while i < len(lines) and lines[i].startswith("\\"):
        i += 1
    return i
