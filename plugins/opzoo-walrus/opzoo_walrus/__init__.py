"""opzoo-walrus: Walrus (McCabe et al., arXiv 2511.15684), Polymathic AI's cross-domain foundation model for continuum
dynamics, on opzoo's family kit: the ``walrus`` backbone, the ``walrus`` preset of the published checkpoint
(Hugging Face polymathic-ai/walrus), and the ``walrus`` converter."""

from .backbone import Walrus, WalrusConfig
from .converter import convert_walrus
from .fields import FIELD_INDEX_MAP

__all__ = ["FIELD_INDEX_MAP", "Walrus", "WalrusConfig", "convert_walrus"]
