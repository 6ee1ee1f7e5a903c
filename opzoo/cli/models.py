"""``opzoo list``, ``cards``, ``info``, ``verify``, ``plugins``, ``export``, ``convert`` and ``push``: parse the
arguments, call :mod:`opzoo.model_io` and the registry."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

from .._version import __version__
from ..console import parse_overrides, say
from ..errors import ConfigError


def _index():
    """The preset index (:mod:`opzoo.cli.preset_index`): read, or made once by importing the plugins. None when
    it is off (``OPZOO_NO_INDEX``), and in a process whose plugin host is already running (a notebook, a test): its
    live registry is the answer, and it may hold presets registered at run time, which must never reach the disk."""
    from ..registry.registry import live_registry
    from .preset_index import ENV_OFF, build_index, read_index

    if live_registry() is not None or os.environ.get(ENV_OFF):
        return None
    return read_index() or build_index(preset_document, announce=lambda line: print(line, file=sys.stderr))


def cmd_list(args) -> int:
    index = _index()
    if index is not None:
        from .preset_index import list_from_index

        names = list_from_index(index, args.pattern, args.pretrained, args.aliases)
    else:  # the live registry, the index off, or a plugin failed to load (its warning was printed)
        from ..model_io.builder import list_models

        names = list_models(args.pattern, pretrained=args.pretrained, include_aliases=args.aliases)
    what = "models with published weights" if args.pretrained else "models"
    if not names:
        print(f"no {what} match {args.pattern!r}")
    elif args.pretrained:  # with the weights' license, as timm's pretrained_cfg has one, and where they are
        rows = [(name, _offline_of(index, name), _license_of(index, name)) for name in names]
        width, where = max(map(len, names)), max(len(r[1]) for r in rows)
        print(f"{'preset'.ljust(width)}  {'weights here'.ljust(where)}  license")
        print("\n".join(f"{name.ljust(width)}  {off.ljust(where)}  {lic}" for name, off, lic in rows))
    else:
        print("\n".join(names))
    return 0


def _offline_of(index: dict | None, name: str) -> str:
    """Whether preset ``name``'s weights load without a network: shipped in a package, in the Hugging Face cache, or
    to be downloaded (checked without any network)."""
    if index is not None:
        src = index["presets"][index["aliases"].get(name, name)]["pretrained"] or {}
        repo, filename, page = src.get("repo_id"), src.get("filename"), src.get("download_page")
    else:
        from ..registry.registry import get_registry

        pre = get_registry().preset(name).pretrained
        repo, filename, page = (pre.repo_id, pre.filename, pre.download_page) if pre is not None else (None,) * 3
    if page is not None:
        return "download by hand (checkpoint_path=FILE)"
    if repo is None:
        return "shipped (offline)"
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo, filename or "model.safetensors")
    except Exception:  # a malformed cache entry: treat it as absent
        found = None
    return "cached (offline)" if isinstance(found, str) else "download"


def _license_of(index: dict | None, name: str) -> str:
    """The license a preset's ``pretrained_cfg`` states for its weights, or "license not stated"."""
    if index is not None:
        cfg = index["presets"][index["aliases"].get(name, name)]["pretrained_cfg"]
    else:
        from ..registry.registry import get_registry

        cfg = get_registry().preset(name).pretrained_cfg or {}
    return str(cfg.get("license") or "license not stated")


def _no_contract():
    from ..registry.contract import DataContract, Normalization

    return DataContract("none", Normalization("none", "not declared by its plugin"), other_fields="refuse")


def _preset_info(name: str, overrides: dict) -> tuple[dict, object]:
    """A registered preset (or alias), built on the meta device: no memory, no weights."""
    import torch

    from ..model_io.builder import build_preset
    from ..model_io.loading import preset_named
    from ..model_io.pretrained import source_description
    from ..registry.registry import get_registry

    preset = preset_named(name)
    with torch.device("meta"):
        model = build_preset(preset, overrides)
    src = preset.pretrained
    return {
        "name": preset.name,
        "aliases": list(preset.aliases),
        "backbone": preset.backbone,
        "plugin": preset.owner,
        "pretrained": None if src is None else {"location": src.location, "repo_id": src.repo_id,
                                                 "download_page": src.download_page,
                                                 "filename": src.filename, "revision": src.revision,
                                                 "converter": src.converter,
                                                 "description": source_description(src, preset.owner)},
        "pretrained_cfg": dict(preset.pretrained_cfg),
        "provenance": [dataclasses.asdict(f) for f in preset.provenance],
        "load_checks": [c.name for c in src.checks] if src is not None else [],
        "data_contract": (preset.contract or get_registry().contract(preset.backbone) or _no_contract()).summary(
            preset.args),
    }, model


def _saved_model_info(name: str, overrides: dict) -> tuple[dict, object]:
    """A saved model (``hf-hub:...``, ``local-dir:...`` or a directory), loaded as ``opzoo.load`` does."""
    from ..model_io.loading import load
    from ..registry.registry import get_registry

    model = load(name, **overrides)
    entry = get_registry().backbone_entry(type(model))
    return {
        "name": name,
        "aliases": [],
        "backbone": entry.name,
        "plugin": entry.owner,
        "pretrained": {"source": name, "preset": getattr(model, "preset_name", None)},
        "pretrained_cfg": dict(getattr(model, "pretrained_cfg", {}) or {}),
    }, model


def _card_results(name: str) -> list[str]:
    """The scores a saved model's card records (its ``model-index``), a line each; none for a Hub repo not on disk."""
    from huggingface_hub import ModelCard

    from ..model_io.reference import parse_model_reference

    ref = parse_model_reference(name, backbones=False)
    path = ref.path / "README.md" if ref.kind == "dir" and ref.path is not None else None
    if path is None or not path.is_file():
        return []

    try:
        results = ModelCard.load(path).data.eval_results or []
    except Exception:  # a card that does not parse has no scores to show; `opzoo info` still answers
        return []
    rows = [f"    {r.dataset_name}: {r.metric_name or r.metric_type} {r.metric_value:.4g} "
            f"({r.dataset_split or 'split not stated'})" for r in results if isinstance(r.metric_value, (int, float))]
    return ["  scores:", *rows] if rows else []


def preset_document(name: str, overrides: dict) -> dict:
    """What ``opzoo info NAME --json`` prints for a preset (built on the meta device)."""
    info, model = _preset_info(name, overrides)
    return {**info, "parameters": sum(p.numel() for p in model.parameters()), "config": model.config.to_dict()}


def cmd_info(args) -> int:
    """Config, parameter count and weights of anything ``opzoo.load`` takes: a preset name or alias,
    ``hf-hub:org/repo[@rev]``, ``local-dir:PATH`` or an existing directory."""
    overrides = parse_overrides(args.set)
    from ..model_io.reference import looks_like_path, parse_model_reference

    # a path is never a preset (the grammar's rule): the parser reads it; a preset name is answered from the index
    index = None if overrides or looks_like_path(args.name) else _index()
    if index is not None and args.name in {**index["presets"], **index["aliases"]}:
        info = index["presets"][index["aliases"].get(args.name, args.name)]
    else:
        if parse_model_reference(args.name, backbones=False).saved:
            info, model = _saved_model_info(args.name, overrides)
            info = {**info, "parameters": sum(p.numel() for p in model.parameters()), "config": model.config.to_dict()}
        else:
            info = preset_document(args.name, overrides)
    n_params = info["parameters"]
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"{info['name']}  ({info['backbone']}, from {info['plugin']})")
    if info["aliases"]:
        print(f"  aliases:    {', '.join(info['aliases'])}")
    print(f"  parameters: {n_params:,}")
    src = info["pretrained"]
    if src is None:
        weights = "none published (random init; train it with `opzoo pretrain` or `opzoo finetune --no-pretrained`)"
    elif "source" in src:
        weights = f"loaded from {src['source']}"
    else:
        weights = src["description"]
    print(f"  weights:    {weights}")
    lr = info["pretrained_cfg"].get("finetune_lr")
    if lr is not None:
        why = info["pretrained_cfg"].get("finetune_lr_source")
        print(f"  finetune lr: {lr:g} (`opzoo finetune`'s default{'; ' + why if why else ''})")
    if info.get("load_checks"):
        print(f"  load checks: {'; '.join(info['load_checks'])} (run on the real files by load(pretrained=True) "
              f"and `opzoo verify {info['name']}`)")
    if info.get("data_contract"):
        print("  data contract (how it reads your files; docs/data-contract.md, `opzoo fit` for a file):")
        for line in info["data_contract"]:
            print(f"    {line}")
    if info.get("provenance"):
        from ..registry.provenance import Fact

        print("  provenance:")
        for row in info["provenance"]:
            print(f"    {Fact(**{**row, 'alternatives': tuple(row['alternatives'])}).line()}")
    if src is not None and "source" in src:  # a saved model: what trained it, on what, and its scores
        from ..evaluation.splits import lineage_lines

        for line in lineage_lines(info["pretrained_cfg"]):
            print(line)
        for line in _card_results(args.name):
            print(line)
    print("  config:")
    for k, v in info["config"].items():
        print(f"    {k}: {json.dumps(v)}")
    return 0


def cmd_verify(args) -> int:
    """Each preset's published files against every assumption the preset makes about them."""
    from ..errors import ConfigError
    from ..model_io.verify import format_table, select_presets, verify

    if not args.names and not args.all:
        raise ConfigError("name one or more presets (names or patterns, e.g. 'well-fno-*'), or pass --all")
    rows = verify(select_presets(args.names, args.all), file=args.file)
    if args.json:
        print(json.dumps([r.__dict__ for r in rows], indent=2))
    else:
        print(format_table(rows))
        counts = {s: sum(r.status == s for r in rows) for s in ("passed", "FAILED", "not run")}
        print(f"\n{counts['passed']} passed, {counts['FAILED']} failed, {counts['not run']} not run"
              + ("; a check that did not run verified nothing: exit 1" if counts["not run"] else ""))
    # a gate on `opzoo verify` must not pass while nothing was verified: a check not run fails the command too
    return 1 if any(r.status in ("FAILED", "not run") for r in rows) else 0


def cmd_cards(args) -> int:
    """Write every preset's published card (and an index) into a directory: the repo's ``model_cards/``."""
    from ..errors import ConfigError
    from ..model_io.builder import list_models
    from ..model_io.card_catalogue import write_catalogue

    complete = not args.patterns  # a pattern writes those cards only; the whole catalogue also prunes and indexes
    names = sorted({n for pattern in args.patterns or ["*"] for n in list_models(pattern)})
    if not names:
        raise ConfigError(f"no preset matches {' '.join(args.patterns)} (`opzoo list`)")
    changed = write_catalogue(Path(args.out), names, complete, force=args.force)
    print(f"{len(names)} cards in {args.out}; {len(changed)} file(s) written or removed")
    return 0


def cmd_plugins(args) -> int:
    from ..host.plugins import get_plugin_host

    host = get_plugin_host()
    if args.json:
        print(json.dumps({"loaded": [p.__dict__ for p in host.loaded], "failed": [p.__dict__ for p in host.failed]}, indent=2))
        return 0
    from ..registry.registry import get_registry

    registry = get_registry()
    print(f"opzoo {__version__}")
    for p in host.loaded:
        print(f"  {p.distribution} {p.version}  (entry point {p.name!r})")
        for kind, what in (("reader", "data layouts (--layout)"), ("metric", "metrics")):  # what a command lists none of
            names = [n for n in registry.names(kind) if registry.owner(kind, n) == p.distribution]
            if names:
                print(f"    {what}: {', '.join(names)}")
    if not host.loaded:
        print("  no plugins loaded")
    for p in host.failed:
        print(f"  FAILED {p.distribution} {p.version}: {p.error}")
    return 0


def cmd_new_plugin(args) -> int:
    from ..plugin_template import write_plugin

    root = write_plugin(args.name, args.out, args.force)
    say(f"wrote {root}: pip install -e '{root}[test]', then run pytest in it (opzoo's conformance suite on its family, "
        f"its reader and metric); docs/plugins.md says what to change")
    return 0


def cmd_export(args) -> int:
    from ..model_io.loading import load
    from ..model_io.pretrained import resolve_weights
    from ..model_io.reference import parse_model_reference

    out = _export_out(args)
    if args.format == "repo" and args.grid:
        raise ConfigError("--grid is the grid an ONNX or pt2 export is traced and checked at: pass --format onnx|pt2 "
                          "(an opzoo repo holds the model itself)")
    if args.format == "repo":
        from ..files import claim_output_dir
        from ..model_io.repo_dir import written_by_opzoo

        claim_output_dir(out, written_by_opzoo, force=args.force, flag="OUT", what="the exported repo",
                         advice="pass --force to write the repo's config.json, model.safetensors and README.md "
                                "beside them")
    else:
        from ..model_io.graph_export import require_export_dependencies

        require_export_dependencies(args.format)  # before any download: a missing extra is said first
        if Path(out).exists() and not args.force:
            raise ConfigError(f"{out} exists: pass --force to replace it (and its .json)")
    saved = parse_model_reference(args.name, backbones=False).saved
    # a repo is written from random init unless --pretrained (as before); a deployed file runs the published weights
    # unless --no-pretrained
    default = None if args.format != "repo" else False
    pretrained, header = resolve_weights(args.name, True if saved else
                                         (default if args.pretrained is None else args.pretrained))
    print("weights: " + (header.replace("(--no-pretrained)", "(export without --pretrained)") if args.format == "repo"
                         else header))
    model = load(args.name, pretrained=pretrained, **parse_overrides(args.set))
    if args.format == "repo":
        written = model.save_pretrained(out)
        print(f"wrote {written}/config.json, model.safetensors, README.md")
        return 0
    from ..model_io.graph_export import export_model

    print(f"exporting one step of {args.name} ([B, *S, T_in, C] -> [B, *S, T_out, C]) as {args.format}, then checking "
          "it against the model")
    report = export_model(model, out, args.format, grid=args.grid, name=args.name, weights=header)
    dyn = report.dynamic
    grids = sorted({"x".join(map(str, c.grid)) for c in report.checks})
    worst = max(c.rel_l2 for c in report.checks)
    print(f"wrote {out} (and {out}.json): input x {['B', *report.input['shape']]}, output y "
          f"{['B', *report.output['shape']]}")
    traced = "x".join(map(str, report.checks[0].grid))
    print("dynamic: the batch; " + (f"the grid, in steps of {dyn['grid_step']} per axis" if dyn["grid"] else
                                    f"not the grid, fixed at {traced} ({dyn['grid_note']})"))
    checked = ("onnxruntime " + report.checked_with["onnxruntime"] + f", opset {report.checked_with['opset']}"
               if args.format == "onnx" else "torch " + report.checked_with["torch"])
    print(f"checked with {checked} against the eager model: batches {sorted({c.batch for c in report.checks})}, "
          f"grids {', '.join(grids)}; largest relative L2 difference {worst:.1e} (at most {report.tolerance:.0e})")
    for note in report.notes:
        print(f"note: {note}")
    return 0


def _export_out(args) -> str:
    if args.out and args.out_option and args.out != args.out_option:
        raise ConfigError(f"export: OUT given twice ({args.out} and --out {args.out_option}); give one")
    out = args.out or args.out_option
    if out:
        return out
    if args.format == "repo":
        raise ConfigError("export: name the repo directory to write (OUT), or pass --format onnx|pt2 for a file")
    from ..model_io.reference import parse_model_reference

    stem = parse_model_reference(args.name, backbones=False).base_model_id.replace("/", "--")  # org--repo for the Hub
    return f"{stem}.{args.format}"


def cmd_convert(args) -> int:
    from ..model_io.pretrained import convert_to_repo

    options = {**({"dataset": args.dataset} if args.dataset else {}), **parse_overrides(args.option)}
    out = convert_to_repo(args.converter, args.file, args.out, force=args.force, **options)
    print(f"converted {args.file} with {args.converter!r} -> {out}")
    return 0


def cmd_push(args) -> int:
    from ..model_io.hub import push_folder_to_hub

    info = push_folder_to_hub(args.dir, args.repo_id, private=args.private)
    print(f"pushed {args.dir} -> {getattr(info, 'commit_url', args.repo_id)}")
    return 0


def add_commands(subparsers) -> None:
    """Add the model commands to the ``opzoo`` command's sub-parsers."""
    p = subparsers.add_parser("list", help="list registered models")
    p.add_argument("pattern", nargs="?", default="*", help="fnmatch pattern, e.g. 'dpot-*'")
    p.add_argument("--aliases", action="store_true", help="also list aliases")
    p.add_argument("--pretrained", action="store_true", help="only presets with published weights (timm's "
                                                              "list_models(pretrained=True))")
    p.set_defaults(func=cmd_list)

    p = subparsers.add_parser("cards", help="write every preset's card as published on the Hub, and an index (model_cards/)")
    p.add_argument("patterns", nargs="*", default=[], help="presets (glob patterns) whose cards alone are written; "
                                                         "default: every preset, the index, and stale cards removed")
    p.add_argument("--out", default="model_cards")
    p.add_argument("--force", action="store_true", help="write into a directory that holds files opzoo did not write "
                                                        "(they are never removed)")
    p.set_defaults(func=cmd_cards)

    p = subparsers.add_parser("info", help="show a model's config, parameter count and weights")
    p.add_argument("name", help="a preset name or alias, hf-hub:org/repo[@rev], local-dir:PATH or a saved model directory")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_info)

    p = subparsers.add_parser("verify", help="download presets' published files and run every load check on them "
                                       "(a table: preset, repo, revision, check, result; exit 1 if one fails)")
    p.add_argument("names", nargs="*", help="preset names or fnmatch patterns, e.g. well-fno-* (quote it)")
    p.add_argument("--all", action="store_true", help="every preset with weights on the Hub or in a package (files "
                                                      "downloaded by hand are checked one at a time with --file)")
    p.add_argument("--file", metavar="FILE", help="check this local copy of the one named preset's weights file "
                                                  "(e.g. a file downloaded by hand) instead of fetching it")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_verify)

    p = subparsers.add_parser("plugins", help="list loaded plugins with versions, and those that failed")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_plugins)

    p = subparsers.add_parser("new-plugin", help="write a plugin package to start from: a checkpoint family, a data "
                                                 "reader and a metric, with tests that opzoo's conformance suite "
                                                 "passes as written (docs/plugins.md)")
    p.add_argument("name", help="the plugin's name, e.g. my-net: the package opzoo-my-net, the family my-net")
    p.add_argument("--out", help="the directory to write (default: ./opzoo-NAME)")
    p.add_argument("--force", action="store_true", help="write into a directory that is not empty")
    p.set_defaults(func=cmd_new_plugin)

    p = subparsers.add_parser("export", help="save a model as an opzoo repo (save_pretrained), or one step of it as "
                                             "ONNX or a torch.export program, checked against the model "
                                             "(docs/export.md)")
    p.add_argument("name", help="a preset, a saved model directory, hf-hub:org/repo or local-dir:PATH")
    p.add_argument("out", nargs="?", help="where to write (or --out): the repo directory, or the .onnx/.pt2 file "
                                          "(default for a file: NAME.onnx / NAME.pt2 here)")
    p.add_argument("--out", dest="out_option", metavar="OUT", help="as OUT")
    p.add_argument("--format", choices=("repo", "onnx", "pt2"), default="repo",
                   help="repo: an opzoo repo (default); onnx: an ONNX file, checked in onnxruntime (needs "
                        "opzoo[export]); pt2: a torch.export program, checked in torch")
    p.add_argument("--grid", nargs="+", type=int, metavar="N", help="the grid to trace and check at (default: the "
                                                                     "model's pretrained grid)")
    p.add_argument("--pretrained", action=argparse.BooleanOptionalAction, default=None,
                   help="with its published weights (default: for --format repo, random init; for onnx and pt2, the "
                        "published weights when the preset has some)")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides")
    p.add_argument("--force", action="store_true", help="write into an OUT that holds files opzoo did not write (they "
                                                        "are kept, but a config.json, model.safetensors or README.md "
                                                        "there is replaced); replace an existing .onnx/.pt2 file")
    p.set_defaults(func=cmd_export)

    p = subparsers.add_parser("convert", help="convert a foreign checkpoint into an opzoo repo")
    p.add_argument("converter", help="registered converter, e.g. 'dpot' or 'the-well'")
    p.add_argument("file", help="the foreign checkpoint (a file, or a directory for 'the-well')")
    p.add_argument("out")
    p.add_argument("--dataset", help="the data set the checkpoint was trained on, for converters that need it "
                                     "(the-well: e.g. shear_flow)")
    p.add_argument("--option", nargs="*", default=[], metavar="KEY=VALUE",
                   help="other converter options, e.g. fourier_blocks=dropped for the-well's FNO/TFNO")
    p.add_argument("--force", action="store_true", help="write into an OUT that holds files opzoo did not write (they "
                                                        "are kept, but a config.json, model.safetensors or README.md "
                                                        "there is replaced)")
    p.set_defaults(func=cmd_convert)

    p = subparsers.add_parser("push", help="upload an opzoo repo directory to the Hugging Face Hub")
    p.add_argument("dir")
    p.add_argument("repo_id")
    p.add_argument("--private", action="store_true")
    p.set_defaults(func=cmd_push)
