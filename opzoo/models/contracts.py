"""The data contracts of the core's backbones (docs/data-contract.md): the POT backbone (DPOT's network, AOT-POT,
NESTOR and the micro presets) and the simple operator."""

from __future__ import annotations

from ..registry.contract import DataContract, Normalization

DPOT = "thu-ml/DPOT"
DPOT_COMMIT = "dcd2f9a"

POT = DataContract(
    name="pot",
    fields=None,
    units="as the data: DPOT pretrained on its datasets' own values (no normalization)",
    normalization=Normalization(
        "none", "the model takes the fields as given, as DPOT pretrained (normalize: 0)",
        source=f"{DPOT} configs/pretrain_*.yaml @ {DPOT_COMMIT}", switch="normalize",
        by_config={"True": "per-sample"},
        alternatives={"per-sample": "each sample's channels standardized by their own mean and std over the input "
                                    "window inside the model, and the prediction brought back (normalize=True)"},
        breaks="fields far from the scale of the pretraining data"),
    pad_value=1.0,
    pad_source=f"as DPOT's mixture pads (utils/griddataset.py pad_data, 'use 1 for void padding' @ {DPOT_COMMIT})",
    other_fields="pad",
    other_fields_source="more channels adapt the input and output layers when fine-tuning (what matches copied)",
    rollout_note=(f"DPOT's training windows held ones there (T_ar 1, configs/pretrain_*.yaml @ {DPOT_COMMIT}); its test "
                  "loop feeds its prediction back instead (train_temporal.py)"),
    grid="its positional embedding's grid; another by --resolution (the embedding resized)",
    resample="bilinear",
    resample_source=f"as DPOT's data pipeline (utils/griddataset.py pad_data: F.interpolate bilinear @ {DPOT_COMMIT})",
    boundary="periodic where its mixer is spectral (DPOT's Fourier attention: an FFT over the patch grid); the core's "
             "pointwise mixer assumes none",
    spatial_dims=(1, 2, 3),
)

SIMPLE = DataContract(
    name="simple",
    normalization=Normalization("none", "the model takes the fields as given"),
    pad_value=1.0,
    pad_source="opzoo's, as DPOT's",
    other_fields="refuse",
    other_fields_source="its layers read a fixed channel count and it has no io_layout: build it for more channels "
                        "(--no-pretrained --set model.args.in_channels=N)",
    grid="any grid (pointwise layers)",
    boundary="none (no spatial coupling)",
    spatial_dims=(1, 2, 3),
)
