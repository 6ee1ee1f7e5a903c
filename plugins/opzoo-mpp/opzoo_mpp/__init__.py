"""opzoo-mpp: Multiple Physics Pretraining (McCabe et al., NeurIPS 2024, PolymathicAI/multiple_physics_pretraining) in
opzoo: its AViT as the ``mpp-avit`` backbone (physical fields in and out, each channel one of its named state slots),
presets ``mpp-avit-ti/s/b/l`` for the four pretrained files (downloaded by hand from the Google Drive folder upstream's
README links: ``opzoo.load("mpp-avit-b", checkpoint_path=FILE)``) and the ``mpp`` converter."""

from .backbone import STATE_NAMES, MppAViT, MppConfig
from .converter import convert_mpp
from .network import AViTNet

__all__ = ["AViTNet", "MppAViT", "MppConfig", "STATE_NAMES", "convert_mpp"]
