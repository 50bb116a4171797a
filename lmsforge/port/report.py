"""What a port tells its reviewer: the risk table before it starts, PORT-REPORT.md at the end."""

from __future__ import annotations

import re
from pathlib import Path

from lmsforge import git
from lmsforge.port import state as port_state
from lmsforge.port.state import PortState
from lmsforge.series import manifest as series_mod, patchfile, worktree


def upstream_renames(repo: Path, a: str, b: str, paths: set[str]) -> dict[str, str]:
    """Which of PATHS upstream renamed between A and B (old path -> new path)."""
    deleted = git.out(["diff", "--name-only", "-z", "--no-renames", "--diff-filter=D", a, b,
                       "--", *sorted(paths)], repo).split("\0") if paths else []
    if not any(deleted):
        return {}  # nothing the series touches went away: no rename search over the whole tree
    fields = git.out(["diff", "--name-status", "-z", "-M", "--diff-filter=R", a, b],
                     repo).split("\0")
    renames = {}
    for status, old, new in zip(fields[0::3], fields[1::3], fields[2::3]):
        if status.startswith("R") and old in paths:
            renames[old] = new
    return renames


def risk_table(repo: Path, a: str, b: str, series: series_mod.Series,
               shared_history: bool) -> tuple[list[dict[str, object]], dict[str, list[str]]]:
    """Per patch, what upstream changed in its files between A and B; and the renames it meets."""
    created: set[str] = set()  # files an earlier patch of the series adds: not upstream's
    touched: list[tuple[series_mod.PatchEntry, list[str]]] = []
    for entry in series.patches:
        parsed = patchfile.parse(series.folder / entry.file)
        touched.append((entry, [f.path for f in parsed.files
                                if not f.new_file and f.path not in created]))
        created.update(f.path for f in parsed.files if f.new_file)
    renames = upstream_renames(repo, a, b, {p for _, paths in touched for p in paths})
    rows: list[dict[str, object]] = []
    renamed: dict[str, list[str]] = {}
    for entry, upstream_files in touched:
        commits = 0
        lines = 0
        binary = 0  # numstat has no line count for a binary file ("-"): counted apart
        for path in upstream_files:
            pair = [path, renames[path]] if path in renames else [path]
            numstat = git.out(["diff", "--numstat", "-M", a, b, "--", *pair], repo)
            for line in numstat.splitlines():
                added, removed, _ = line.split("\t", 2)
                if added == "-":
                    binary += 1
                else:
                    lines += int(added) + int(removed)
            if shared_history:
                commits += int(git.out(["rev-list", "--count", f"{a}..{b}", "--", *pair],
                                       repo) or 0)
        moves = [f"{old} → {renames[old]}" for old in upstream_files if old in renames]
        if moves:
            renamed[entry.id] = moves
        rows.append({"patch": entry.file, "upstream_files": len(upstream_files),
                     "upstream_lines_changed": lines,
                     "upstream_commits": commits if shared_history else None,
                     "upstream_binary_files": binary,
                     "risk": _risk(upstream_files, lines, binary), "renamed": moves})
    return rows, renamed


def _risk(upstream_files: list[str], lines: int, binary: int = 0) -> str:
    if not upstream_files:
        return "none (new files only)"
    if binary:
        # git cannot merge a binary file: a patch that changes one upstream changed conflicts.
        return (f"high ({binary} binary file{'s' if binary > 1 else ''} changed upstream"
                f"{f', and {lines} lines' if lines else ''})")
    if lines == 0:
        return "none (files unchanged upstream)"
    return "low" if lines < 50 else "medium" if lines < 500 else "high"


def commits_by_patch_id(tree: Path, base: str, branch: str) -> dict[str, str]:
    fmt = f"%H %(trailers:key={series_mod.PATCH_ID_TRAILER},valueonly,separator=%x2C)"
    commits = {}
    for line in git.out(["log", f"--format={fmt}", f"{base}..{branch}"], tree).splitlines():
        commit, _, patch_id = line.partition(" ")
        if patch_id.strip():
            commits[patch_id.strip()] = commit
    return commits


_RANGE_DIFF_HEAD = re.compile(r"^\d+:(\s+\S+ [!=] )\d+:")
_HUNK_NUMBERS = re.compile(rb"^@@ [^@]* @@", re.M)
_INDEX_LINE = re.compile(rb"^index [0-9a-f]+\.\.[0-9a-f]+.*\n", re.M)


def _patch_texts(tree: Path, commits: list[str]) -> dict[str, tuple[str, bytes]]:
    """Short id and message + diff of each commit, with what range-diff ignores taken out."""
    if not commits:
        return {}
    out = git.run(["show", "--no-color", "--format=%x00%H %h%n%B", "-p", *commits], tree).stdout
    texts = {}
    for chunk in out.split(b"\0")[1:]:
        head, _, body = chunk.partition(b"\n")
        commit, short = head.decode().split()
        texts[commit] = (short, _INDEX_LINE.sub(b"", _HUNK_NUMBERS.sub(b"@@", body)))
    return texts


def range_diff(tree: Path, state: PortState) -> str:
    """`git range-diff` of each patch against its port, paired by Lms-Patch-Id.

    A whole-range range-diff pairs commits by how alike their diffs are, so a patch whose
    resolution moved its hunks to other files (a hook folded into another file on tag B) shows
    up as one patch removed and an unrelated one added, with nothing to review. The trailer
    says which commits are the same patch, so each pair is compared on its own. Pairs whose
    message and diff are the same but for line numbers get range-diff's `=` line without
    running it (a long series has mostly those).
    """
    branch_b = worktree.branch_name(state.framework, state.to_tag)
    on_b = commits_by_patch_id(tree, state.to_commit, branch_b)
    return _paired(tree, [(p.commit_on_a, on_b.get(p.id),
                           f"{p.status}: {_one_line(p.note)}") for p in state.patches])


def range_diff_with_previous(tree: Path, state: PortState) -> str:
    """Each patch of the previous port (--previous) against the same patch of this one."""
    assert state.previous is not None
    previous = dict(state.previous.get("commits_to") or {})
    branch_b = worktree.branch_name(state.framework, state.to_tag)
    on_b = commits_by_patch_id(tree, state.to_commit, branch_b)
    ids = [p.id for p in state.patches] + [i for i in previous if i not in on_b]
    return _paired(tree, [(previous.get(i), on_b.get(i),
                           "not in the previous port" if i not in previous else
                           "not in this port") for i in ids if i in previous or i in on_b])


def _paired(tree: Path, pairs: list[tuple[str | None, str | None, str]]) -> str:
    """Range-diff lines for (left commit, right commit, why one is missing) in order."""
    texts = _patch_texts(tree, [c for pair in pairs for c in pair[:2] if c])
    parts = []
    left_position = right_position = 0
    for left, right, missing in pairs:
        left_position += left is not None
        right_position += right is not None
        if left is None or right is None:
            commit = left or right
            assert commit is not None
            subject = git.out(["log", "-1", "--format=%s", commit], tree)
            side = (f"{left_position}:  {commit[:8]} < -:  --------" if right is None else
                    f"-:  -------- > {right_position}:  {commit[:8]}")
            parts.append(f"{side} {subject} ({missing})\n")
            continue
        (short_a, text_a), (short_b, text_b) = texts[left], texts[right]
        if text_a == text_b:
            subject = text_a.split(b"\n", 1)[0].decode(errors="replace")
            parts.append(f"{left_position}:  {short_a} = {right_position}:  {short_b} "
                         f"{subject}\n")
            continue
        proc = git.run(["range-diff", "--no-color", "--creation-factor=999",
                        f"{left}^..{left}", f"{right}^..{right}"], tree, check=False)
        text = proc.stdout.decode(errors="replace")
        parts.append(_RANGE_DIFF_HEAD.sub(f"{left_position}:\\g<1>{right_position}:", text,
                                          count=1))
    return "".join(parts)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def cell(text: object) -> str:
    """TEXT safe inside a Markdown table cell: one line, pipes escaped."""
    return _one_line(str(text)).replace("|", "\\|")


def write_report(path: Path, state: PortState, tree: Path, files_on_b: dict[str, str],
                 resolutions_recorded: int) -> None:
    """PORT-REPORT.md. FILES_ON_B maps patch ids to their exported file names."""
    lines = [f"# Port of the {state.framework} LMS series from {state.from_tag} to "
             f"{state.to_tag}", "",
             f"- from: {state.from_tag} ({state.from_commit}), series hash "
             f"{state.from_series_hash}",
             f"- to: {state.to_tag} ({state.to_commit}, {state.identity_b.get('kind')} source)",
             f"- upstream history between the trees: "
             f"{'yes' if state.shared_history else 'no (archives)'}",
             f"- resolutions recorded by this port (saved to the shared rerere cache): "
             f"{resolutions_recorded}"]
    if state.previous:
        lines.append(f"- guided by the previous port of this series: "
                     f"{cell(state.previous['folder'])} (series hash "
                     f"{str(state.previous['series_hash'])[:16]}, ported from the series of "
                     f"{state.from_tag} with hash "
                     f"{str(state.previous['from_series_hash'])[:16]}); `guided` patches took "
                     "what it decided, by the rules of `lmsforge/port/guide.py`")
    lines += ["", "## Patches", "",
              "| patch | file in this series | outcome | file in the series of "
              f"{cell(state.from_tag)} | note |", "|---|---|---|---|---|"]
    for p in state.patches:
        lines.append(f"| {p.id} | {files_on_b.get(p.id, '— (not in this series)')} | "
                     f"{p.status} | {cell(p.file)} | {cell(p.note)} |")
    lines += ["", "## Time", "", *time_lines(state)]
    lines += ["", "## Risk table (what upstream changed in each patch's files)", "",
              f"| patch | file in the series of {cell(state.from_tag)} | upstream files | "
              "lines changed A→B | upstream commits | risk | renamed upstream |",
              "|---|---|---|---|---|---|---|"]
    for p, row in zip(state.patches, state.risk):
        commits = row["upstream_commits"] if row["upstream_commits"] is not None else "n/a"
        renamed = "; ".join(row.get("renamed") or []) or "—"  # type: ignore[arg-type]
        lines.append(f"| {p.id} | {cell(row['patch'])} | {row['upstream_files']} | "
                     f"{row['upstream_lines_changed']} | {commits} | {row['risk']} | "
                     f"{cell(renamed)} |")
    lines += ["", "## Range diff (each patch on A against its port on B, paired by "
              "`Lms-Patch-Id`)", "", "```",
              range_diff(tree, state).rstrip(), "```", ""]
    if state.previous:
        lines += ["## Range diff against the previous port (each patch as the previous port "
                  "left it against this port, by `Lms-Patch-Id`)", "", "```",
                  range_diff_with_previous(tree, state).rstrip(), "```", ""]
    path.write_text("\n".join(lines))


def time_lines(state: PortState) -> list[str]:
    """Wall time of the port's own commands and of the hand work between a stop and the
    command that went on, per patch (what the next port of the series may save)."""
    tool = state.tool_seconds + port_state.command_seconds()
    by_hand = [p for p in state.patches if p.hand_seconds]
    lines = [f"- the port's own commands: {_duration(tool)}",
             f"- by hand, from each stop to the command that went on: "
             f"{_duration(sum(p.hand_seconds for p in by_hand))}"
             + (" (no stop)" if not by_hand else "")]
    lines += [f"  - {p.id}: {_duration(p.hand_seconds)} ({p.status})" for p in by_hand]
    return lines


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"
