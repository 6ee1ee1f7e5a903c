"""opzoo.data: PDE trajectory files, offline generators and the pretraining mixture.

Reading (lazy, any supported layout, auto-detected)::

    src = open_source("file.h5")              # TrajectorySource, shape (N, *S, T, C)
    window = src.read(sample=0, t_start=0, t_stop=11)   # np.float32 [*S, 11, C]

Writing the canonical layout (``data`` ``[N, *S, T, C]`` + attributes)::

    write_canonical("out.h5", array, fields=["u"], pde="heat", dt=0.1)
    with CanonicalWriter("big.h5", n, (64, 64), 50, ["vorticity"]) as w: w.append(block)

Generating (``ns``, ``diffusion-reaction``, ``swe``, ``burgers``, ``darcy``)::

    generate("ns", "ns.h5", n=100, res=64, nu=1e-3, seed=0, device="cpu")

Training and evaluation data (the one pipeline; the trainer, eval and finetune use it)::

    trajectories = TrajectoryDataset("file.h5")            # item i: [*S, T, C], read lazily
    train, test = split_trajectories(trajectories, 0.1)    # the last 10 % for testing, same open file
    windows = WindowDataset(train, t_in=10, resolution=(64, 64), n_channels=4)   # x, y, mask, dataset
    mixture = MixtureDataset([windows, ...], weights=[1, ...])
    sampler = StepBatchSampler(mixture.window_probabilities(), 32, seed=0, start=0, stop=1000)
    frames, mask = FrameShape((64, 64), 4, 10).frames(test.read(0))   # a test trajectory for a model

``StepBatchSampler`` draws each step's global batch from (seed, step), balanced over datasets by
weight, so a resumed run and a W-rank run see exactly the batches of one uninterrupted process.
"""


from typing import TYPE_CHECKING

from opzoo._lazy import lazy_exports, typed_imports
from opzoo.data.errors import DataFormatError, GeneratorError, NonFiniteDataError, UnknownLayoutError

if TYPE_CHECKING:  # each lazy name, once: imported from its module on first use (opzoo._lazy.typed_imports)
    from opzoo.data.canonical import CanonicalWriter, write_canonical
    from opzoo.data.convert import convert_to_canonical
    from opzoo.data.datasets import TrajectoryDataset, WindowDataset, split_trajectories, train_test_split
    from opzoo.data.fingerprint import content_hash
    from opzoo.data.generators import GENERATORS, generate, make_generator
    from opzoo.data.inspect import inspect_file
    from opzoo.data.mixture import MixtureDataset
    from opzoo.data.readers import LAYOUTS, SourceInfo, TrajectorySource, detect_layout, open_source
    from opzoo.data.sampler import StepBatchSampler, collate, step_generator
    from opzoo.data.transforms import FrameShape, pad_channels, resize

_LAZY = typed_imports(__file__)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())


__all__ = ['DataFormatError', 'GeneratorError', 'NonFiniteDataError', 'UnknownLayoutError', *_LAZY]
