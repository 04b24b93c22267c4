"""`runner models`: the names `model.name` accepts."""
from __future__ import annotations

from rich.markup import escape

from runner import console


def register(sub) -> None:
    p = sub.add_parser("models", help="list the models model.name accepts (torchvision's, and timm's when installed)")
    p.add_argument("filter", nargs="?", help="only names containing this text, or matching it as a glob "
                                             "(resnet*, 'timm/convnext*')")
    p.set_defaults(handler=run)


def run(args) -> int:
    print_models(args.filter)
    return 0


def print_models(pattern: str | None) -> None:
    from runner.models.zoo import TIMM_EXTRA, model_sources, timm_models

    rows = model_sources(pattern)
    title = f"{len(rows)} models" + (f" matching '{escape(pattern)}'" if pattern else "")
    console.out.print(console.table(f"{title} (randomly initialised; model.kwargs passes their constructor's "
                                    "arguments)", ["model", "source"], [list(r) for r in rows],
                                    justify_numbers=False))
    if timm_models() is None:
        console.out.print(f"timm's models (model.name: timm/<name>) are listed once timm is installed: {TIMM_EXTRA}.",
                          markup=False)
    elif any(source == "timm" for _, source in rows):
        console.out.print("A timm model may carry one of its pretrained tags, e.g. timm/resnet50.a1_in1k: the tag's "
                          "configuration (classifier, mean, std), still randomly initialised; model.init loads its "
                          "weights from a file.", markup=False)
