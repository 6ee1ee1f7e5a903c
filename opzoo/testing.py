"""One conformance suite for a checkpoint family (issue 57), as timm tests every model with one file: subclass
:class:`FamilyConformance` in a test module, name the family, and pytest runs every check on it.

    class TestMorph(opzoo.testing.FamilyConformance):
        family = "morph"
        tiny = {"dim": 32, "depth": 2, ...}           # a small network of the family, built for real
        other = {"dim": 64}                            # another size, for the wrong-size refusal
        def write_upstream(self, model, path, edit):   # model's weights as upstream's own file (optional)
            ...

The checks: every preset builds on the meta device with its table's parameter count; every preset has its card,
provenance and the family's data contract; `opzoo verify` answers offline (a package's weights verified, any other's
one line saying what it needs); a tiny model saved and loaded is in eval mode, and runs in float64; and,
where the family says how to write its upstream's file (:meth:`FamilyConformance.write_upstream`), the converter
reads it back exactly, and a NaN, a missing, an extra or a mis-shaped tensor, another size and a file of no family
are each refused in one line; and what the network does with its input (issue 70): every input channel and every
input frame changes the output, every output channel responds, every trainable parameter gets a gradient (except
those :attr:`FamilyConformance.no_gradient` names, each with why), and a sample's output depends neither on the other
samples of its batch nor on an earlier call. What is the family's own (parity with its upstream, its data contract's recorded
cases) stays in its own test files. Requires pytest; the 2-step fine-tune is in the slow tier.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Callable

import pytest

from .errors import OpzooError
from .registry.family import SAVE_TIME_FIELDS

DAMAGES = ("nan", "missing", "extra", "misshaped")


class FamilyConformance:
    """The checks every checkpoint family passes; a test class subclasses it (pytest collects ``Test*`` classes)."""

    family: str = ""
    tiny: dict[str, Any] = {}  # arguments over the family's first preset that make a small network
    other: dict[str, Any] = {}  # arguments over ``tiny`` that make another size of the family (its file is refused)
    grid: tuple[int, ...] | None = None  # the input grid of the tiny model (default: its config's, or 16 per axis)
    # arguments over ``tiny`` that make the network's output a function of its input alone, for the checks that run it
    # twice or compare two forms of it: a family whose upstream draws random numbers at inference sets them (Walrus's
    # jitter: {"jitter": False}); test_a_seeded_run_repeats checks the family's own defaults under a seed
    deterministic: dict[str, Any] = {}

    def write_upstream(self, model, path: Path, edit: Callable[[dict], None]) -> Path | None:
        """Write ``model``'s weights to ``path`` as the family's upstream writes its files, after ``edit(state)`` on
        the upstream-named tensors (so that a test can damage them); return the path the converter reads, or None
        when the family has no upstream format to write (the default)."""
        return None

    # ---- helpers ----------------------------------------------------------------------------------------------------
    def table(self):
        from .registry.registry import get_registry

        return get_registry().family(self.family)

    def tiny_model(self, seed: int = 0, **changes):
        import torch

        from .model_io.loading import load

        torch.manual_seed(seed)
        return load(self.table().variants[0].name, **{**self.tiny, **self.deterministic, **changes})

    def test_a_seeded_run_repeats(self):
        """With the family's own defaults (random draws at inference included), the same input under the same seed
        gives the same output."""
        import torch

        from .model_io.loading import load

        torch.manual_seed(0)
        model = load(self.table().variants[0].name, **self.tiny).double().eval()
        x = self.example_input(model).double()
        with torch.no_grad():
            torch.manual_seed(5)
            first = model(x)
            torch.manual_seed(5)
            again = model(x)
        assert torch.equal(first, again), f"{self.family}: the same input under the same seed gives another output"

    def example_input(self, model):
        """``[1, *S, T_in, C_in]`` for ``model``."""
        import torch

        c = model.config
        sizes = self.grid or getattr(c, "img_size", None) or getattr(c, "image_size", None) or 16
        sizes = [sizes] * int(getattr(c, "spatial_dims", 2)) if isinstance(sizes, int) else list(sizes)
        return torch.randn(1, *sizes, c.in_timesteps, c.in_channels, generator=torch.Generator().manual_seed(1))

    def probe(self):
        """``(model, x)``: the tiny model in float64 and eval mode, and its example input ``[1, *S, T_in, C]``."""
        model = self.tiny_model().double().eval()
        return model, self.example_input(model).double()

    @staticmethod
    def field(x, seed: int):
        """A random field over ``x``'s grid (a constant would vanish in an instance norm such as RevIN)."""
        import torch

        return torch.randn(x.shape[1:-2], generator=torch.Generator().manual_seed(seed), dtype=x.dtype)

    def upstream_file(self, tmp_path: Path, model=None, edit: Callable[[dict], None] = lambda state: None):
        import pytest

        model = model if model is not None else self.tiny_model()
        tmp_path.mkdir(parents=True, exist_ok=True)
        path = self.write_upstream(model, tmp_path / "upstream", edit)
        if path is None:
            pytest.skip(f"{type(self).__name__} does not say how to write {self.family}'s upstream file "
                        "(write_upstream)")
        return model, path

    # ---- the checks -------------------------------------------------------------------------------------------------
    def test_every_preset_builds_on_meta_with_its_tables_count(self):
        import torch

        from .model_io.loading import load

        assert self.table().variants, f"family {self.family!r} has no rows"
        for variant in self.table().variants:
            with torch.device("meta"):
                model = load(variant.name)
            count = variant.data.get("params")
            if isinstance(count, int):
                got = sum(p.numel() for p in model.parameters())
                assert got == count, f"{variant.name}: {got} parameters, its row says {count}"

    def presets(self) -> list[str]:
        """Every preset the family registers: its table's rows, and the presets its distribution registers on the
        family's backbone outside the table (a micro preset with weights in the package, an alias size)."""
        from .registry.registry import get_registry

        registry, table = get_registry(), self.table()
        owner = registry.preset(table.variants[0].name).owner
        return [n for n in registry.list_models() if registry.preset(n).family == self.family
                or (registry.preset(n).owner == owner and registry.preset(n).backbone == table.backbone)]

    def test_every_preset_with_weights_here_loads_offline_and_runs(self, monkeypatch):
        """Every preset of :meth:`presets` builds on meta; one whose weights are here without a network (in its
        package, in a directory, or in the Hugging Face cache) loads them, passing its load checks, and runs on a
        small input to a finite output. A preset whose arguments no longer fit its weights fails here."""
        import torch
        from huggingface_hub import constants

        from .errors import HubError
        from .model_io.example_input import example_input, grid_step, input_grid
        from .model_io.loading import load
        from .registry.registry import get_registry

        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
        registry, loaded = get_registry(), []
        for name in self.presets():
            with torch.device("meta"):
                meta = load(name)
            if registry.preset(name).pretrained is None:
                continue
            try:
                model = load(name, pretrained=True)
            except HubError:  # not here: a download this check does not make
                continue
            except OpzooError as e:
                pytest.fail(f"{name}: its weights are here, but the preset does not load them: {e}")
            assert not model.training, f"{name}: a pretrained load must be in eval mode"
            grid, _ = input_grid(meta, None)
            step = max(grid_step(meta), 8)
            small = [min(g, max(step, 16)) for g in grid] if getattr(meta.config, "img_size", None) is None else grid
            with torch.no_grad():
                out = model(example_input(model, 1, small))
            assert bool(torch.isfinite(out).all()), f"{name}: its published weights give a non-finite output"
            loaded.append(name)
        if not loaded:
            pytest.skip(f"{self.family}: no preset has its weights here without a network")

    def test_every_preset_has_its_card_provenance_and_the_familys_contract(self):
        from .registry.registry import get_registry

        registry, family = get_registry(), self.table()
        for variant in family.variants:
            preset = registry.preset(variant.name)
            assert preset.family == self.family and preset.card is not None, f"{variant.name}: no card"
            left = set(re.findall(r"\$\{?([A-Za-z_]\w*)", preset.card_template())) - set(SAVE_TIME_FIELDS)
            assert not left, f"{variant.name}: its card leaves ${', $'.join(sorted(left))} unfilled"
            assert all(fact.source for fact in preset.provenance), f"{variant.name}: a fact without its source"
            if preset.pretrained is not None:  # published weights: where each fact comes from, and a load check
                assert preset.provenance, f"{variant.name}: no provenance facts"
                assert preset.pretrained.checks, f"{variant.name}: its weights have no load check"
            contract = registry.contract(family.backbone, variant.name)  # the family's, or its backbone's
            assert contract is not None, (f"{variant.name}: no data contract: give the family (or its backbone) an "
                                          "opzoo.DataContract (docs/data-contract.md)")
            assert family.contract is None or contract == family.contract

    def test_verify_answers_offline(self, tmp_path, monkeypatch, capsys):
        """`opzoo verify` of the family's first preset with published weights, with no network and an empty Hugging
        Face cache: weights in a package are verified; any others get one line saying what verify needs."""
        from huggingface_hub import constants

        from .cli import main
        from .registry.registry import get_registry

        registry = get_registry()
        names = [v.name for v in self.table().variants if registry.preset(v.name).pretrained is not None]
        if not names:
            pytest.skip(f"{self.family} publishes no weights: there is nothing to verify")
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
        code = main(["verify", names[0]])
        out, err = capsys.readouterr()
        if code == 0:
            assert " 0 failed, 0 not run" in out, out
        else:
            assert len(err.strip().splitlines()) == 1, f"{names[0]}: verify offline says more than one line:\n{err}"

    def test_a_saved_tiny_model_loads_in_eval_mode_and_runs_in_float64(self, tmp_path):
        import torch

        from .model_io.loading import load

        model = self.tiny_model()
        model.save_pretrained(tmp_path / "repo")
        loaded = load(str(tmp_path / "repo"))
        assert not loaded.training, "a loaded model must be in eval mode"
        x = self.example_input(loaded)
        with torch.no_grad():
            torch.testing.assert_close(loaded(x), model.eval()(x), rtol=0, atol=0)
            y = loaded.double()(x.double())
        assert y.dtype == torch.float64 and bool(torch.isfinite(y).all())

    def test_a_new_channel_starts_as_the_adaptation_records_and_a_kept_one_keeps_its_weights(self):
        """Adapted to one channel more, the first of them new and the pretrained ones behind it (as a fit by field
        name asks): every tensor the adaptation says starts a new channel at zero holds zeros there, and every slice
        its layout keeps holds the pretrained slice it names (the fit block is written from the same record:
        :func:`opzoo.evaluation.fit.compose.adaptation_lines`)."""
        import torch

        from .contracts.io_layout import channel_correspondence
        from .model_io.adapt import adapt_model

        model = self.tiny_model()
        c = model.config
        if c.in_channels != c.out_channels or getattr(c, "subset", None):
            pytest.skip("the model maps C -> C' channels: it is not adapted to other channels")
        mapping = [None, *range(c.in_channels)]
        from .evaluation.fit import contract_of

        keys = contract_of(model).normalization.config or ()
        config = {k: [value] * (c.in_channels + 1) for k, value in zip(keys, (0.0, 1.0))
                  if getattr(c, k, None) is not None}  # the statistics (mean, std) a fit gives the new channels
        try:
            adapted = adapt_model(model, in_channels=c.in_channels + 1, out_channels=c.in_channels + 1,
                                  channel_map=mapping, config=config)
        except OpzooError as e:
            pytest.skip(f"{self.family} does not adapt to more channels: {e}")
        if adapted is model:
            return  # a model that takes any channel count: nothing of it is channel-shaped
        with channel_correspondence(mapping):
            layout = type(model).io_layout(c, adapted.config) or {}
        old, new = model.state_dict(), adapted.state_dict()
        fills = getattr(adapted, "adaptation_fills", {})
        for name, rule in layout.items():
            if rule == "resize":
                continue
            for m in rule:
                for i, j in enumerate(m.index):
                    piece = new[name].select(m.dim, i)
                    if j is None and m.fill == "zero" and len(rule) == 1:
                        assert fills.get(name) == "zero" and not torch.count_nonzero(piece), \
                            f"{name}: slice {i} of dim {m.dim} is said to start at zero, but holds other values"
                    elif j is not None and len(rule) == 1:
                        assert torch.equal(piece, old[name].select(m.dim, j)), \
                            f"{name}: slice {i} of dim {m.dim} should keep pretrained slice {j}"
        for name in set(new) - set(layout):
            assert new[name].shape == old[name].shape and torch.equal(new[name], old[name]), \
                f"{name}: not in the layout, yet changed by the adaptation"

    # ---- what the network does with its input (issue 70): a network that ignores part of it fails here ------------
    def test_every_input_channel_and_frame_changes_the_output(self):
        """Each input channel (changed in every frame) and each frame the model reads (``T_in``, every channel changed):
        a random field added there changes the output. One batch: sample 0 as given, then one per channel, then one
        per frame."""
        import torch

        model, x = self.probe()
        t_in, c_in = x.shape[-2:]
        xs = x.repeat(1 + c_in + t_in, *[1] * (x.ndim - 1))
        inputs = [f"channel {c}" for c in range(c_in)] + [f"frame {t}" for t in range(t_in)]
        for c in range(c_in):
            xs[1 + c, ..., c] += self.field(x, 1 + c).unsqueeze(-1)
        for t in range(t_in):
            xs[1 + c_in + t, ..., t, :] += torch.stack([self.field(x, 50 + t * c_in + c) for c in range(c_in)], -1)
        with torch.no_grad():
            out = model(xs)
        scale = out[0].abs().max()
        dead = [what for i, what in enumerate(inputs) if (out[1 + i] - out[0]).abs().max() <= 1e-12 * scale]
        assert not dead, (f"{self.family}: the output does not change when input {dead[0]} changes ({len(dead)} of "
                          f"{c_in} channels and {t_in} frames): the network ignores it")

    def test_every_output_channel_responds_to_the_input(self):
        import torch

        model, x = self.probe()
        changed = x + torch.stack([self.field(x, 100 + c) for c in range(x.shape[-1])], -1).unsqueeze(-2)
        with torch.no_grad():
            out, moved = model(torch.cat([x, changed]))
        flat_out, flat_moved = out.reshape(-1, *out.shape[-2:]), moved.reshape(-1, *moved.shape[-2:])
        still = [f"frame {t}, channel {c}" for t in range(out.shape[-2]) for c in range(out.shape[-1])
                 if (flat_moved[:, t, c] - flat_out[:, t, c]).abs().max() <= 1e-12 * out.abs().max()]
        assert not still, f"{self.family}: output {still[0]} does not respond to the input ({len(still)} such outputs)"

    #: parameters (regular expressions over their names) that may get no gradient from one batch, each with why
    no_gradient: dict[str, str] = {}

    def test_every_trainable_parameter_gets_a_gradient(self):
        """A random linear loss on the output of a batch of two, at weights moved a little off their initialization
        (a zero-initialized gate would otherwise stop every gradient behind it): every trainable parameter gets a
        non-zero gradient, except those :attr:`no_gradient` names."""
        import torch

        model, x = self.probe()
        g = torch.Generator().manual_seed(3)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1e-2 * torch.randn(p.shape, generator=g, dtype=p.dtype))
        xs = torch.cat([x, x + torch.stack([self.field(x, 200 + c) for c in range(x.shape[-1])], -1).unsqueeze(-2)])
        out = model(xs)
        (out * torch.randn(out.shape, generator=g, dtype=out.dtype)).sum().backward()
        dead = [n for n, p in model.named_parameters() if p.requires_grad and (p.grad is None or not p.grad.any())
                and not any(re.fullmatch(pattern, n) for pattern in self.no_gradient)]
        assert not dead, (f"{self.family}: parameter {dead[0]} gets no gradient from a loss on the output ({len(dead)} "
                          "such parameters): the layer is not on the output's path")

    # ---- memory and parameter-efficient fine-tuning (issue 69) ---------------------------------------------------
    def test_a_checkpointed_step_has_the_gradients_of_an_unchecked_one(self):
        """Gradient checkpointing (the family's blocks through :meth:`opzoo.Backbone.checkpointed`) gives the same
        loss, gradients and buffers (batch norms' running statistics) as the step without it, bit for bit."""
        import torch

        model, x = self.probe()
        x = torch.cat([x, x + torch.stack([self.field(x, 400 + c) for c in range(x.shape[-1])], -1).unsqueeze(-2)])
        model.train()  # a batch of two: a batch norm in training needs more than one value per channel
        assert model.supports_grad_checkpointing, f"{self.family}: its backbone does not run its blocks checkpointed"
        before = {k: v.clone() for k, v in model.state_dict().items()}

        def step():
            torch.manual_seed(7)  # routers with noise draw the same in both steps
            out = model(x)
            loss = (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)).sum()
            params = [p for p in model.parameters() if p.requires_grad]
            return loss, torch.autograd.grad(loss, params, allow_unused=True), {
                k: v.clone() for k, v in model.state_dict().items()}

        plain = step()
        model.load_state_dict(before)
        model.set_grad_checkpointing(True)
        checkpointed = step()
        assert torch.equal(plain[0], checkpointed[0]), f"{self.family}: a checkpointed step has another loss"
        names = [n for n, p in model.named_parameters() if p.requires_grad]
        for name, a, b in zip(names, plain[1], checkpointed[1]):
            assert (a is None and b is None) or torch.equal(a, b), \
                f"{self.family}: parameter {name} gets another gradient with gradient checkpointing"
        for k, v in plain[2].items():
            assert torch.equal(v, checkpointed[2][k]), \
                f"{self.family}: buffer {k} differs after a checkpointed step (a recompute counted a batch twice?)"

    def test_lora_adapters_change_the_output_and_merge_into_plain_weights(self):
        """``--tune lora``: the family declares LoRA targets (:meth:`opzoo.Backbone.lora_targets`); with its adapters
        moved off zero, the output changes, each adapter is on the output's path, and the merged model (plain weights,
        no peft) computes what the adapted one does. ``--tune head`` trains something, and less than everything."""
        import torch

        from .training.tuning import apply_tuning, merged_model, parse_tune

        pytest.importorskip("peft", reason="--tune lora needs peft (pip install 'opzoo[lora]')")
        model, x = self.probe()
        with torch.no_grad():
            base = model(x)
        try:
            tuning = apply_tuning(model, parse_tune("lora:2"))
        except OpzooError as e:  # a family that refuses LoRA says why, and points at another mode
            assert "--tune head" in str(e), f"{self.family}: a refusal of --tune lora that names no other mode: {e}"
            pytest.skip(f"{self.family} refuses --tune lora: {e}")
        assert 0 < tuning.trainable < tuning.total, f"{self.family}: LoRA trains {tuning.trainable} of {tuning.total}"
        g = torch.Generator().manual_seed(5)
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.copy_(0.05 * torch.randn(p.shape, generator=g, dtype=p.dtype))
            adapted = model(x)
        assert not torch.allclose(adapted, base, rtol=0, atol=1e-9 * float(base.abs().max())), \
            f"{self.family}: LoRA adapters with non-zero weights do not change the output"
        plain = merged_model(model)
        assert not any("lora_" in n for n, _ in plain.named_parameters())
        with torch.no_grad():
            merged = plain(x)
        torch.testing.assert_close(merged, adapted, rtol=1e-9, atol=1e-9 * float(adapted.abs().max()),
                                   msg=lambda m: f"{self.family}: the merged model differs from the adapted one "
                                                 f"(a LoRA target whose weight is read without calling it?): {m}")
        head_model, _ = self.probe()
        head = apply_tuning(head_model, parse_tune("head"))
        assert 0 < head.trainable < head.total, f"{self.family}: --tune head trains {head.trainable} of {head.total}"

    def test_a_sample_does_not_depend_on_the_others_in_its_batch_and_runs_the_same_twice(self):
        import torch

        model, x = self.probe()
        other = x + torch.stack([self.field(x, 300 + c) for c in range(x.shape[-1])], -1).unsqueeze(-2)
        with torch.no_grad():
            alone, together, again = model(x), model(torch.cat([x, other, 2 * other])), model(x)
        assert torch.equal(alone, again), f"{self.family}: the same input gives another output the second time"
        torch.testing.assert_close(together[:1], alone, rtol=1e-10, atol=1e-12,
                                   msg=lambda m: f"{self.family}: a sample's output depends on its batch: {m}")

    def test_the_converter_reads_the_upstream_file_back_exactly(self, tmp_path):
        import torch

        from .model_io.loading import load

        model, path = self.upstream_file(tmp_path)
        converted = load(self.table().variants[0].name, checkpoint_path=path, **self.tiny)
        assert not converted.training, "a model loaded with its weights must be in eval mode"
        want, got = model.state_dict(), converted.state_dict()
        assert sorted(got) == sorted(want)
        for name in want:
            assert torch.equal(got[name], want[name]), f"{name} changed on the way through upstream's format"

    def test_damaged_files_are_refused_in_one_line(self, tmp_path):
        import torch

        def damage(kind: str) -> Callable[[dict], None]:
            def edit(state: dict) -> None:
                name = max((k for k, v in state.items() if v.is_floating_point() and v.ndim >= 2),
                           key=lambda k: state[k].numel())
                if kind == "nan":
                    state[name] = state[name].clone()
                    state[name].view(-1)[0] = math.nan
                elif kind == "missing":
                    del state[name]
                elif kind == "extra":
                    state[name + "_extra"] = torch.zeros(3)
                else:
                    state[name] = state[name][..., :-1].clone()
            return edit

        for kind in DAMAGES:
            _, path = self.upstream_file(tmp_path / kind, edit=damage(kind))
            self.assert_refused(path, f"a {kind} tensor")

    def test_another_size_and_a_file_of_no_family_are_refused_in_one_line(self, tmp_path):
        import pytest
        import torch

        if not self.other:
            pytest.skip(f"{type(self).__name__} names no other size (other)")
        _, path = self.upstream_file(tmp_path / "other", model=self.tiny_model(**self.other))
        message = self.assert_refused(path, "another size")
        assert "another" in message, f"another size is refused without saying so: {message}"
        foreign = tmp_path / "foreign.pth"
        torch.save({"state_dict": {"encoder.weight": torch.zeros(2, 2)}}, foreign)
        self.assert_refused(foreign, "a file of no family")

    @pytest.mark.slow
    def test_a_saved_tiny_model_fine_tunes_two_steps_on_a_file(self, tmp_path):
        """``opzoo finetune`` from the tiny model saved as a repo, on a file of its grid and channel count (the fit,
        the run, the evaluation and the saved model, end to end)."""
        import numpy as np

        from .cli import main
        from .data import write_canonical
        from .model_io.loading import load

        model = self.tiny_model()
        model.save_pretrained(tmp_path / "repo")
        c, x = model.config, self.example_input(model)
        frames = c.in_timesteps + 4
        rng = np.random.default_rng(0)
        base = rng.standard_normal((4, *x.shape[1:-2], 1, c.in_channels)).astype(np.float32)
        data = np.concatenate([np.roll(base, t, axis=1) for t in range(frames)], axis=-2)  # advected: it moves
        named = list(model.pretrained_cfg.get("fields") or [])  # the model's own names, where its weights name them
        fields = named if len(named) == c.in_channels else [f"c{i}" for i in range(c.in_channels)]
        write_canonical(tmp_path / "data.h5", data, fields, pde="conformance")
        code = main(["finetune", str(tmp_path / "repo"), "--data", str(tmp_path / "data.h5"), "--out",
                     str(tmp_path / "run"), "--steps", "2", "--batch-size", "2"])
        assert code == 0, f"{self.family}: opzoo finetune failed (exit {code})"
        tuned = load(str(tmp_path / "run" / "model"))
        assert not tuned.training and type(tuned) is type(model)

    def assert_refused(self, path: Path, what: str) -> str:
        from .model_io.loading import load

        try:
            load(self.table().variants[0].name, checkpoint_path=path, **self.tiny)
        except OpzooError as e:
            message = str(e)
            assert "\n" not in message.strip(), f"{what}: the refusal is not one line:\n{message}"
            assert "published weights" not in message, f"{what}: the user's file is called the published weights"
            return message
        raise AssertionError(f"{what}: {path} loaded into {self.table().variants[0].name} without a word")


__all__ = ["DAMAGES", "FamilyConformance"]
