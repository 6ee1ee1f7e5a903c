"""pdetransformer 0.1.11's mixed-channel PDETransformer, run in its own process by tests/pdet/test_pdet_parity.py.

``python pdetransformer_0_1_11.py JOB.json`` with ``PYTHONPATH`` set to the ``pip install --no-deps --target``
directory ``make install`` fills (``.venv/reference/pdetransformer-0.1.11``: the wheel, and the diffusers 0.33.1,
transformers 4.52.4 and huggingface_hub 0.33.0 of its time, which must not meet opzoo's newer huggingface_hub in one
process). The package ``__init__`` imports lightning, wandb and the data modules, none of which the networks need: the
model modules are imported under empty parent packages.

For each case of the job: build ``PDETransformer(**config)`` (a ``sizes`` entry registers a small ``PDEImpl`` as the
model type, as ``PDE_S`` is registered), move every weight off its init (seeded), save it with
diffusers' ``save_pretrained`` into ``out/<name>``, and write ``out/<name>/reference.safetensors``: the float32 and
float64 outputs on ``x`` (with ``labels``) and the rollout of ``VideoPipelineDirect`` (their inference path); for
separate channels, also the float32 sinusoid of the diffusion times (``t_sinusoid``) as this CPU computed it.
"""

import copy
import importlib
import json
import sys
import types
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")


HIDDEN = ("peft", "kernels")  # opzoo[lora]'s peft, and the kernels its transformers brings


def _without_peft() -> None:
    """diffusers 0.33.1 imports peft where it finds it (its LoRA loaders), and transformers 4.52.4 kernels; the ones
    opzoo's test environment has (opzoo[lora]) need a newer huggingface_hub than this process's 0.33.0.
    pdetransformer 0.1.11's networks use neither, and its environment of the time had neither: they are told they are
    not installed."""
    import importlib.util

    find_spec = importlib.util.find_spec
    importlib.util.find_spec = lambda name, package=None: None if name.split(".")[0] in HIDDEN else \
        find_spec(name, package)


_without_peft()

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402


def import_model_modules():
    root = next(Path(p) / "pdetransformer" for p in sys.path if (Path(p) / "pdetransformer" / "core").is_dir())
    for name, path in (("pdetransformer", root), ("pdetransformer.core", root / "core"),
                       ("pdetransformer.core.mixed_channels", root / "core" / "mixed_channels"),
                       ("pdetransformer.core.separate_channels", root / "core" / "separate_channels"),
                       ("pdetransformer.sampler", root / "sampler"),
                       ("pdetransformer.sampler.pipeline", root / "sampler" / "pipeline")):
        module = types.ModuleType(name)
        module.__path__ = [str(path)]
        sys.modules[name] = module
    mc = importlib.import_module("pdetransformer.core.mixed_channels.pde_transformer")
    pipeline = importlib.import_module("pdetransformer.sampler.pipeline.coupled_video")
    sc = importlib.import_module("pdetransformer.core.separate_channels.pde_transformer")
    return mc, sc, pipeline, root


def separate_rollout(model, frames, labels, steps: int, patch: int):
    """Their separate-channel inference path: ``train_supervised.MultiStepMSE(m=1, n=1).predict`` on a batch laid out
    as ``ForwardPrediction(m=1, n=1, task_idx=0)`` lays it out (per channel: the frame and a masked slot, the first
    slot's mask on, the second off), each prediction fed back. ``frames [B, C, H, W]`` -> ``[B, steps, C, H, W]``."""
    ts = importlib.import_module("pdetransformer.core.separate_channels.train_supervised")
    objective = ts.MultiStepMSE(m=1, n=1, patch_size=patch)
    b, c, h, w = frames.shape
    tokens = (h // patch) * (w // patch)
    channel_types, pde = labels
    out = []
    for _ in range(steps):
        channels = [{"data": [frames[:, k], torch.zeros_like(frames[:, k])],
                     "mask": [torch.ones(b, tokens), torch.zeros(b, tokens)],
                     "channel_id": channel_types[:, k], "pde": pde[:, k], "constants": torch.zeros(b, 1),
                     "constants_class": torch.zeros(b, 1, dtype=torch.long), "time_step_stride": torch.zeros(b),
                     "task_emb": torch.zeros(b, dtype=torch.long)} for k in range(c)]
        with torch.no_grad():
            predicted = objective.predict({"channels": channels}, model)  # per channel [B, 2, H, W]
        frames = torch.stack([p[:, 1] for p in predicted], dim=1)
        out.append(frames)
    return torch.stack(out, dim=1)


def allow_float64(module) -> None:
    """Their timestep embeddings cast to float32 and then meet the weights: cast to the weights' dtype instead."""

    def forward(self, t):
        return self.mlp(self.timestep_embedding(t, self.frequency_embedding_size).to(self.mlp[0].weight.dtype))

    module.TimestepEmbedder.forward = forward


class CastToDouble(torch.nn.Module):
    """diffusers' ``Timesteps`` (no weights) with its float32 output cast to float64, for the float64 copy."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x).double()


def run_separate(sc, case, data, folder):
    """A separate-channel case: lists per channel, as their PDETransformer.forward takes them."""
    model = sc.PDETransformer(**case["config"]).eval()
    g = torch.Generator().manual_seed(case["seed"] + 1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g) * (p.abs().mean() + 0.1))
    model.save_pretrained(folder)
    x = data[case["x"]]  # [B, C, T, H, W]
    b, c = x.shape[:2]

    def call(net, x, dtype):
        per = lambda t: list(t.unbind(1))  # noqa: E731
        cond = {k: data[f"{case['x']}_{k}"] for k in ("t", "channel_type", "pde_type", "task")}
        extra = {"simulation_time": torch.full((b, c), 0.3), "simulation_dt": torch.full((b, c), 0.01),
                 "pde_parameters": torch.rand(b, c, 2), "pde_parameters_class": torch.randint(0, 10, (b, c, 2))}
        floats = ("t", "simulation_time", "simulation_dt", "pde_parameters")
        args = {k: per(v.to(dtype) if k in floats else v) for k, v in {**cond, **extra}.items()}
        return torch.stack(net(x=per(x.to(dtype)), **args).sample, dim=1)

    with torch.no_grad():
        y32 = call(model, x, torch.float32)
    labels = (data[f"{case['x']}_channel_type"], data[f"{case['x']}_pde_type"])
    rollout = separate_rollout(model, x[:, :, 0].float(), labels, case.get("steps", 3), case["config"]["patch_size"])
    allow_float64(sc)
    double = copy.deepcopy(model).double()
    for m in double.modules():
        if isinstance(m, sc.PdeParameterEmbedder):
            m.time_proj = CastToDouble(m.time_proj)
    # the float32 sinusoid of the diffusion times their t_embedders fed the float64 copy (every level's is the same):
    # recorded, since its rounding differs between CPUs (the tests put it into opzoo's network to compare the rest)
    sinusoids = []
    hooks = [m.mlp.register_forward_pre_hook(lambda _, a: sinusoids.append(a[0]))
             for n, m in double.named_modules() if n.rsplit(".", 1)[-1].startswith("t_embedder_")]
    with torch.no_grad():
        y64 = call(double, x, torch.float64)
    for hook in hooks:
        hook.remove()
    assert all(torch.equal(s, sinusoids[0]) for s in sinusoids), "the levels' sinusoids differ"
    return {"y32": y32.contiguous(), "y64": y64.contiguous(), "rollout": rollout.contiguous(),
            "t_sinusoid": sinusoids[0].float().contiguous()}


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    mc, sc, pipeline, root = import_model_modules()
    import diffusers

    assert diffusers.__version__ == "0.33.1", diffusers.__file__
    out = Path(job["out"])
    data = load_file(job["inputs"])
    for case in job["cases"]:
        torch.manual_seed(case["seed"])
        module = sc if case.get("kind") == "separate" else mc
        if case.get("sizes"):  # a small network of their PDEImpl, registered as a model type like PDE_S
            module.PDE_models[case["config"]["type"]] = lambda sizes=case["sizes"], m=module, **kw: m.PDEImpl(
                down_factor=2, **sizes, **kw)
        folder = out / case["name"]
        if case.get("kind") == "separate":
            save_file(run_separate(sc, case, data, folder), str(folder / "reference.safetensors"))
            continue
        model = mc.PDETransformer(**case["config"]).eval()
        g = torch.Generator().manual_seed(case["seed"] + 1)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.3 * torch.randn(p.shape, generator=g) * (p.abs().mean() + 0.1))
        model.save_pretrained(folder)
        x, labels = data[case["x"]], data.get(case["labels"]) if case.get("labels") else None
        with torch.no_grad():
            y32 = model(x.float(), class_labels=labels).sample
            video = pipeline.VideoPipelineDirect(unet=model)(data=x.float(), num_frames=case["steps"],
                                                             class_labels=labels).videos
        allow_float64(mc)
        with torch.no_grad():
            y64 = copy.deepcopy(model).double()(x.double(), class_labels=labels).sample
        save_file({"y32": y32.contiguous(), "y64": y64.contiguous(), "rollout": torch.from_numpy(video).contiguous()},
                  str(folder / "reference.safetensors"))
    print(root)


if __name__ == "__main__":
    main()
