from ..training.conftest import datasets  # noqa: F401  (the generated multi-PDE data fixture)
