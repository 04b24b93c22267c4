"""`runner ops`: the operators the DSL accepts, from DALI's schemas."""
from __future__ import annotations

from runner import console
from runner.dsl.argtypes import describe_type, enum_default_name
from runner.dsl.catalog import load_catalog
from runner.errors import ConfigError


def register(sub) -> None:
    p = sub.add_parser("ops", help="list DSL operators, or show one operator's arguments")
    p.add_argument("name", nargs="?", help="an operator, e.g. decoders.image_random_crop")
    p.add_argument("--filter", help="only names containing this text")
    p.set_defaults(handler=run)


def run(args) -> int:
    if args.name:
        print_op(args.name)
    else:
        print_ops(args.filter)
    return 0


def _first_sentence(text: str, limit: int = 90) -> str:
    line = " ".join(text.split()).split(". ")[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."


def print_ops(contains: str | None) -> None:
    cat = load_catalog()
    names = [n for n in cat.names() if not contains or contains in n]
    rows = [[n, ", ".join(cat.ops[n].backends), _first_sentence(cat.ops[n].doc)] for n in names]
    console.out.print(console.table(f"{len(rows)} operators (DALI fn names; `runner ops NAME` for arguments)",
                                    ["operator", "devices", "what it does"], rows, justify_numbers=False))


def _python_note(op) -> str:
    if not op.python:
        return ""
    what = ("runner's composition of DALI operators" if op.name.startswith("augment.")
            else "runner's reader over DALI's readers.tfrecord" if op.name == "readers.tfrecord"
            else "DALI Python policy")
    return f"  ({what}" + ("; needs conditionals, enabled automatically)" if op.conditionals else ")")


def print_op(name: str) -> None:
    cat = load_catalog()
    op = cat.get(name.removeprefix("fn."))
    if op is None:
        raise ConfigError(cat.unknown_message(name), file="command line")
    inputs = f"{op.min_inputs}" if op.min_inputs == op.max_inputs else f"{op.min_inputs}-{op.max_inputs}"
    console.out.print(f"[bold]{op.name}[/]  devices: {', '.join(op.backends)}  inputs: {inputs}" + _python_note(op))
    console.out.print(" ".join(op.doc.split()))
    rows = []
    for a in sorted(op.args.values(), key=lambda a: (not a.required, a.name)):
        if a.deprecated:
            continue
        kind = describe_type(a.type) if a.type else (a.kind or a.doc)
        meaning = a.doc if a.type or a.kind else ""  # auto_aug's untyped arguments carry their annotation as doc
        rows.append([a.name + (" *" if a.required else ""), kind + (" | stream" if a.tensor else ""),
                     "required" if a.required else (enum_default_name(a.type, a.default) or ""), _first_sentence(meaning)])
    console.out.print(console.table("arguments (* required; 'stream': also takes an operator output)",
                                    ["argument", "type", "default", "meaning"], rows, justify_numbers=False))
