"""opzoo-moe: top-k routers, sparse mixture-of-experts layers, NESTOR and the AOT + MoE hybrid.

Public API::

    ImageRouter, TokenRouter, TopKRouter, balance_loss   # routers (NESTOR eqs. 5-7, 12, 14)
    dispatch                                             # sparse expert dispatch (sort, split, index_add)
    SparseMoEFeedForward                                 # feed-forward component ``moe``
    NestorBlock, AttentionExpert, SharedExpert           # block layout ``nestor``
"""

from .dispatch import dispatch
from .feedforward import SparseMoEFeedForward
from .nestor import AttentionExpert, NestorBlock, SelfAttention, SharedExpert
from .routers import ImageRouter, TokenRouter, TopKRouter, balance_loss

__all__ = ["ImageRouter", "TokenRouter", "TopKRouter", "balance_loss", "dispatch", "SparseMoEFeedForward",
           "NestorBlock", "AttentionExpert", "SharedExpert", "SelfAttention"]
