import pytest
import torch


@pytest.fixture(autouse=True)
def single_torch_thread():
    """The data tests use tiny tensors; one thread avoids OpenMP spin contention on small CI boxes."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
