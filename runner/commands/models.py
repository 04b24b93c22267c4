"""`runner models`: the names `model.name` accepts."""
from __future__ import annotations

from runner import console


def register(sub) -> None:
    p = sub.add_parser("models", help="list the models model.name accepts")
    p.add_argument("filter", nargs="?", help="only names containing this text, or matching it as a glob (resnet*)")
    p.set_defaults(handler=run)


def run(args) -> int:
    print_models(args.filter)
    return 0


def print_models(pattern: str | None) -> None:
    from runner.models import MODELS

    names = MODELS.names(pattern)
    title = f"{len(names)} models" + (f" matching '{pattern}'" if pattern else "")
    console.out.print(console.table(f"{title} (torchvision architectures, randomly initialised; model.kwargs "
                                    "passes their constructor's arguments)", ["model"], [[n] for n in names]))
