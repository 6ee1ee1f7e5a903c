"""FLeRM: function-space learning rate matching (Milsom et al. 2025, docs/models.md §6) for every opzoo model."""

from .estimator import (
    KroneckerEMA,
    MonteCarloEstimate,
    exact_function_space_lr,
    finite_difference_fslr,
    fslr_from_statistics,
    z_sample,
    z_statistics,
)
from .hook import FlermHook
from .plot import add_commands, plot_record
from .record import FslrRecord, map_base_values


def register_components(registry) -> None:
    registry.register_optimizer_hook("flerm", FlermHook)


__all__ = ["FlermHook", "FslrRecord", "KroneckerEMA", "MonteCarloEstimate", "exact_function_space_lr",
           "finite_difference_fslr", "fslr_from_statistics", "z_sample", "z_statistics", "map_base_values",
           "plot_record", "register_components", "add_commands"]
