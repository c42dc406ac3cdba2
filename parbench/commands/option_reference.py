"""The option reference of every `parbench` command, as markdown, built from the real parser."""

from __future__ import annotations

import argparse
import re

from parbench.commands.parser import parser

__all__ = ["REGENERATE", "markdown"]

REGENERATE = "python -m parbench.commands.option_reference > docs/options.md"
SWEEPS = " (comma list sweeps)"


def _text(text: str | None) -> str:
    """One line of markdown table text: whitespace collapsed, `|` escaped."""
    return re.sub(r"\s+", " ", text or "").strip().replace("|", "\\|")


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    if "%(" in text:  # argparse's own expansion, as --help does it
        text = text % {**vars(action), "prog": ""}
    return _text(text)


def _option(action: argparse.Action) -> str:
    """The option as --help's usage names it: `--balance tutorial|time|params[,...]`."""
    if not action.option_strings:  # a positional argument
        name = str(action.metavar or action.dest)
        return f"{name} ..." if action.nargs in ("+", "*") else name
    flags = ", ".join(action.option_strings)
    if action.nargs == 0:  # a switch
        return flags
    if action.metavar is not None:
        value = action.metavar
    elif action.choices is not None:
        value = "{" + ",".join(map(str, action.choices)) + "}"
    else:
        value = action.dest.upper()
    return f"{flags} {value}"


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 and action.default is False:
        return "off"
    if action.default is None or action.default == argparse.SUPPRESS or action.required:
        return ""
    return f"`{_text(str(action.default))}`" if str(action.default) else ""


def _commands(root: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of every command, in the order `parbench --help` gives."""
    found = []
    for action in root._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            found += [(name, helps.get(name) or "", sub) for name, sub in action.choices.items()]
    return found


def _table(sub: argparse.ArgumentParser, seen: dict[str, tuple[str, str, str]]) -> list[str]:
    """The table of `sub`'s options; an option as an earlier command has it (same help but for
    the comma list, same default) is named after the table instead, and `seen` grows."""
    rows, same = [], []
    for action in sub._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        key = _option(action).replace("[,...]", "")
        help_text, default = _help(action), _default(action)
        first = seen.get(key)
        if help_text and first and first[1:] == (help_text.replace(SWEEPS, ""), default):
            same.append((key, first[0]))
            continue
        seen.setdefault(key, (sub.prog.split()[-1], help_text.replace(SWEEPS, ""), default))
        required = " (required)" if action.required and action.option_strings else ""
        rows.append(f"| `{_text(_option(action))}` | {help_text}{required} | {default} |")
    lines = ["| option | meaning | default |", "|---|---|---|", *rows] if rows else []
    for command in dict.fromkeys(first for _, first in same):
        names = ", ".join(f"`{key}`" for key, first in same if first == command)
        lines += ["", f"Also {names}: as for [`parbench {command}`](#parbench-{command}), "
                      "with one value where that command sweeps a comma list."]
    return lines or ["No options."]


def markdown() -> str:
    """docs/options.md: every command's purpose, then a table of its options."""
    root = parser()
    commands = _commands(root)
    seen: dict[str, tuple[str, str, str]] = {}
    lines = [f"<!-- Generated from parbench's argument parser by `{REGENERATE}`; do not edit. -->",
             "",
             "# Command-line options",
             "",
             f"Generated from `parbench`'s own argument parser (`{REGENERATE}`): the text is "
             "what `parbench COMMAND --help` prints, and `tests/test_docs.py` fails when this "
             "page is stale. A blank default is none, or one that depends on the machine or "
             "the other options, as the meaning says. The strategies' options (`--split-size`, "
             "`--world-size`, ...) come from the strategies' own `Options` and name the "
             "strategies that take them; a strategy ignores the ones it does not take.",
             "",
             _text(root.description),
             "",
             "| command | what it does |",
             "|---|---|"]
    lines += [f"| [`parbench {name}`](#parbench-{name}) | {_text(summary)} |"
              for name, summary, _ in commands]
    for name, summary, sub in commands:
        lines += ["", f"## parbench {name}", ""]
        description = _text(sub.description)
        lines += [description or _text(summary)[:1].upper() + _text(summary)[1:] + ".", ""]
        lines += _table(sub, seen)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
