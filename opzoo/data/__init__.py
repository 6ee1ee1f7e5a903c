"""opzoo.data: PDE trajectory files, offline generators and the pretraining mixture.

Reading (lazy, any supported layout, auto-detected)::

    src = open_source("file.h5")              # TrajectorySource, shape (N, *S, T, C)
    window = src.read(sample=0, t_start=0, t_stop=11)   # np.float32 [*S, 11, C]

Writing the canonical layout (``data`` ``[N, *S, T, C]`` + attributes)::

    write_canonical("out.h5", array, fields=["u"], pde="heat", dt=0.1)
    with CanonicalWriter("big.h5", n, (64, 64), 50, ["vorticity"]) as w: w.append(block)

Generating (``ns``, ``diffusion-reaction``, ``swe``, ``burgers``, ``darcy``)::

    generate("ns", "ns.h5", n=100, res=64, nu=1e-3, seed=0, device="cpu")

Training data: ``WindowDataset`` / ``MixtureDataset`` items are dicts with ``x`` ``[*R, t_in, C_max]``,
``y`` ``[*R, t_out, C_max]``, ``mask`` ``[C_max]`` bool, ``dataset`` int64; ``BalancedSampler``
draws them by dataset weight, seeded and DDP-aware; ``TrajectoryDataset`` gives whole trajectories
``[*R, T, C_max]`` for rollout evaluation. ``make_mixture`` / ``make_trajectory_sets`` build both
from a list of ``DataSpec``.
"""


from opzoo._lazy import lazy_exports
from opzoo.data.errors import DataFormatError, GeneratorError, NonFiniteDataError, UnknownLayoutError

# imported on first use (PEP 562): the readers need h5py, the generators and datasets torch, and
# `opzoo --help` builds the `opzoo data` parser without either. name -> the module that defines it.
_LAZY = {
    **dict.fromkeys(["CanonicalWriter", "write_canonical"], "opzoo.data.canonical"),
    "convert_to_canonical": "opzoo.data.convert",
    **dict.fromkeys(["TrajectoryDataset", "WindowDataset", "train_test_split"], "opzoo.data.datasets"),
    **dict.fromkeys(["GENERATORS", "generate", "make_generator"], "opzoo.data.generators"),
    "inspect_file": "opzoo.data.inspect",
    **dict.fromkeys(["DataSpec", "MixtureDataset", "make_mixture", "make_trajectory_sets"], "opzoo.data.mixture"),
    **dict.fromkeys(["LAYOUTS", "SourceInfo", "TrajectorySource", "detect_layout", "open_source"], "opzoo.data.readers"),
    "BalancedSampler": "opzoo.data.sampler",
    **dict.fromkeys(["pad_channels", "resize"], "opzoo.data.transforms"),
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())


__all__ = [
    "BalancedSampler",
    "CanonicalWriter",
    "DataFormatError",
    "DataSpec",
    "GENERATORS",
    "GeneratorError",
    "LAYOUTS",
    "MixtureDataset",
    "NonFiniteDataError",
    "SourceInfo",
    "TrajectoryDataset",
    "TrajectorySource",
    "UnknownLayoutError",
    "WindowDataset",
    "convert_to_canonical",
    "detect_layout",
    "generate",
    "inspect_file",
    "make_generator",
    "make_mixture",
    "make_trajectory_sets",
    "open_source",
    "pad_channels",
    "resize",
    "train_test_split",
    "write_canonical",
]
