"""Adapting a model's input and output layers to new data: :mod:`opzoo.adapt` (the core does it at
load time too, ``opzoo.load(name, pretrained=True, in_channels=...)``); kept here for the trainer."""

from ..adapt import SHAPE_FIELDS, adapt_model

__all__ = ["SHAPE_FIELDS", "adapt_model"]
