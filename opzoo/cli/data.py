"""``opzoo data generate`` and ``opzoo data inspect``: parse the arguments, call :mod:`opzoo.data`."""

from __future__ import annotations

import argparse
from typing import Sequence

from ..console import FIELDS_HELP, fields_of, parse_overrides
from ..errors import OpzooError

_DTYPES = ("float32", "float64")
# the names of opzoo.data.generators.GENERATORS and opzoo.data.readers.LAYOUTS, so that building this
# parser imports neither torch nor h5py (tests/data/test_cli.py checks they match)
GENERATOR_KINDS = ("burgers", "darcy", "diffusion-reaction", "ns", "swe")
LAYOUT_NAMES = ("array", "canonical", "fno-mat", "pdebench-cfd", "pdebench-groups", "pdebench-tensor", "the-well")


def _generator_options(items: Sequence[str]) -> dict:
    """``--set KEY=VALUE`` generator options (JSON values); dashes in keys become underscores."""
    return {k.replace("-", "_"): v for k, v in parse_overrides(items).items()}


def cmd_data_generate(args: argparse.Namespace) -> int:
    from ..data.generators import generate

    options = _generator_options(args.set or [])
    for name in ("res", "nu", "steps"):
        value = getattr(args, name)
        if value is not None:
            options[name] = value
    import torch

    options["dtype"] = getattr(torch, args.dtype)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    try:
        path = generate(
            args.kind, args.out, args.n, seed=args.seed, batch_size=args.batch_size,
            progress=not args.quiet, overwrite=args.force, device=args.device, **options,
        )
    except (TypeError, FileExistsError, ValueError) as exc:  # an option the generator does not take, OUT exists, ...
        raise OpzooError(f"{args.kind}: {exc}") from None
    print(f"wrote {args.n} trajectories to {path}")
    return 0


def cmd_data_inspect(args: argparse.Namespace) -> int:
    from ..data.inspect import inspect_file

    try:
        print(inspect_file(args.file, layout=args.layout, max_samples=args.max_samples, fields=fields_of(args)))
    except FileNotFoundError as exc:
        raise OpzooError(str(exc)) from None
    return 0


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``data`` (``generate``, ``inspect``) to the ``opzoo`` command's sub-parsers."""
    data = subparsers.add_parser("data", help="generate and inspect PDE trajectory files")
    data.set_defaults(func=lambda args: (data.print_help(), 2)[1])
    commands = data.add_subparsers(dest="data_command", metavar="{generate,inspect}")

    gen = commands.add_parser(
        "generate",
        help="generate a canonical HDF5 file of PDE trajectories",
        description="Generate trajectories offline (seeded, CPU or GPU) into a canonical HDF5 file. "
        "Kinds: " + ", ".join(sorted(GENERATOR_KINDS)) + ".",
    )
    gen.add_argument("kind", choices=sorted(GENERATOR_KINDS), help="PDE family")
    gen.add_argument("--n", type=int, required=True, help="number of trajectories")
    gen.add_argument("--out", required=True, help="output .h5 file (written atomically)")
    gen.add_argument("--res", type=int, default=None, help="output grid points per axis (kind default)")
    gen.add_argument("--nu", type=float, default=None, help="viscosity (ns: 1e-3, 1e-4, 1e-5; burgers: 0.1)")
    gen.add_argument("--steps", type=int, default=None, help="recorded time intervals (kind default)")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda")
    gen.add_argument("--dtype", choices=sorted(_DTYPES), default="float64", help="solver precision (file is float32)")
    gen.add_argument("--batch-size", type=int, default=8, help="trajectories solved at once")
    gen.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    gen.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="any other generator option, e.g. --set solver_res=256"
    )
    gen.add_argument("--force", action="store_true", help="replace OUT if it exists")
    gen.add_argument("--quiet", action="store_true", help="no progress bar")
    gen.set_defaults(func=cmd_data_generate)

    ins = commands.add_parser("inspect", help="print layout, shapes, fields, time steps and statistics of a file")
    ins.add_argument("file")
    ins.add_argument("--layout", default=None, help=f"force a layout: {', '.join(sorted(LAYOUT_NAMES))}, or array:<axes> "
                                                     f"for a .npy/.npz/.pt in another order, e.g. array:NTXYC "
                                                     f"(default: detected)")
    ins.add_argument("--max-samples", type=int, default=None, help="statistics over at most this many samples")
    ins.add_argument("--fields", help=FIELDS_HELP)
    ins.set_defaults(func=cmd_data_inspect)

