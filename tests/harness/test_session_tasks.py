"""tools/h200_session.sh: every task's tools exist and take every option the task passes
them, every task is described in the script's header, and every task docs/PERF.md's
"Awaiting measurement on a GPU" names exists (a renamed option or task must not cost a
GPU call)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernelwright.cli import main as cli

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "h200_session.sh"
# a command's arguments end at a redirection, the end of a case or of a command
END = re.compile(r"\s(?:>>?|2>&1|;;|;|&&|\|\|?)(?:\s|$)")


def script_lines() -> list[str]:
    """The script's lines with backslash continuations joined."""
    return SCRIPT.read_text().replace("\\\n", " ").splitlines()


def tasks() -> dict[str, list[str]]:
    """Each task of the script's `case "$task"` with the lines of its branch."""
    lines = script_lines()
    start = next(i for i, line in enumerate(lines) if line.strip() == 'case "$task" in')
    found: dict[str, list[str]] = {}
    current: list[str] = []
    for line in lines[start + 1:]:
        if line.strip() == "esac":
            break
        label = re.match(r"^    ([a-z0-9|]+)\)(.*)$", line)
        if label:
            current = [label.group(2)]
            for name in label.group(1).split("|"):
                found[name] = current
        else:
            current.append(line)
    return found


def invocations(lines: list[str]) -> list[tuple[str, list[str]]]:
    """(program, its option names) of each `python3 tools/X.py`, `python3 -m
    kernelwright.cli bench` and `sh tools/X.sh` of `lines`."""
    found = []
    for line in lines:
        for match in re.finditer(r"(?:python3|sh) (-m kernelwright\.cli bench|tools/\S+)",
                                 line):
            rest = line[match.end():]
            end = END.search(rest)
            words = (rest[:end.start()] if end else rest).split()
            found.append((match.group(1), [w.strip("\"'") for w in words
                                           if re.match(r"^[\"']?--[a-z]", w)]))
    return found


def tool_options(path: Path) -> set[str]:
    """The option strings of every add_argument call of a tool's source."""
    options: set[str] = set()
    for call in re.finditer(r"add_argument\(\s*((?:[\"'][^\"']+[\"']\s*,?\s*)+)",
                            path.read_text()):
        options.update(re.findall(r"[\"'](--?[\w-]+)[\"']", call.group(1)))
    return options


def bench_options() -> set[str]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.choices and "bench" in a.choices)
    return set(sub.choices["bench"]._option_string_actions)


TASKS = tasks()


def test_the_script_has_the_tasks_awaited():
    assert {"train", "train200", "generate", "genmodels", "accelerated", "half", "models",
            "runtimes"} <= set(TASKS)


@pytest.mark.parametrize("task", sorted(TASKS))
def test_every_tool_and_option_exists(task):
    bench = bench_options()
    calls = invocations(TASKS[task])
    for program, options in calls:
        if program.startswith("-m"):
            known = bench
        else:
            path = ROOT / program
            assert path.is_file(), f"task {task}: {program} does not exist"
            if path.suffix != ".py":
                continue
            known = tool_options(path)
        missing = [o for o in options if o not in known]
        assert not missing, f"task {task}: {program} has no option {', '.join(missing)}"


def test_the_parser_sees_the_options():
    """The check itself: the train task's options are found, and a renamed one would be
    missing."""
    (program, options), = [c for c in invocations(TASKS["train"]) if c[0].startswith("-m")]
    assert {"--train", "--size", "--steps", "--timeout", "--resume", "--out"} <= set(options)
    (_, half), = invocations(TASKS["half"])
    assert half == ["--half", "--out"] and "--halves" not in tool_options(
        ROOT / "tools" / "kernels.py")


def test_every_task_is_described_in_the_header():
    described = {m.group(1) for line in SCRIPT.read_text().splitlines()
                 if (m := re.match(r"^#   ([a-z0-9]+)\s{2}", line))}
    assert set(TASKS) == described


def test_perf_awaiting_list_names_real_tasks():
    text = (ROOT / "docs" / "PERF.md").read_text()
    section = text.split("## Awaiting measurement on a GPU", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"h200_session\.sh ((?:[a-z0-9]+=\d+ ?)+)", section)
    assert named, "the awaiting list names no task"
    for group in named:
        for item in group.split():
            task, seconds = item.split("=")
            assert task in TASKS, f"docs/PERF.md names task {task!r}, not in the script"
            assert int(seconds) <= 560
