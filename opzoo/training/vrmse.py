"""Moved to :mod:`opzoo.evaluation.vrmse` (a model's scores live in ``opzoo.evaluation``); this path warns for a
release."""

from .._deprecation import moved_module

__getattr__ = moved_module("opzoo.training.vrmse", "opzoo.evaluation.vrmse")
