"""`runner optimizers`: the names `optimizer.name` accepts (timm.optim's factory)."""
from __future__ import annotations

from runner import console


def register(sub) -> None:
    p = sub.add_parser("optimizers", help="list the optimizers optimizer.name accepts (timm.optim's factory)")
    p.add_argument("filter", nargs="?", help="only names containing this text, or matching it as a glob (lamb*)")
    p.set_defaults(handler=run)


def run(args) -> int:
    from runner.optim.optimizers import optimizer_infos, optimizer_names

    names = optimizer_names(args.filter)
    rows = []
    for name in names:
        info = optimizer_infos()[name]
        keys = "(needs apex or bitsandbytes and CUDA)" if info.parameters is None else \
            ", ".join(sorted(info.parameters & {"momentum", "nesterov", "betas", "eps"}))
        rows.append([name, info.description, keys])
    console.out.print(console.table(f"{len(rows)} optimizers" + (f" matching '{args.filter}'" if args.filter else "")
                                    + " (other constructor arguments: optimizer.kwargs)",
                                    ["optimizer", "what it is", "optimizer.* keys it takes"], rows,
                                    justify_numbers=False))
    return 0
