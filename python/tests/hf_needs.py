"""The first lines of the tests of coda.torch's Hugging Face patches: the
test module is skipped where PyTorch or transformers is not installed, or
where transformers lacks the family's model class. Imports only pytest, so
that a test module can call it before anything that needs torch."""

import pytest


def torch_and_transformers(model_class):
    """(torch, transformers); the calling test module skipped where either
    is missing or transformers has no model_class."""
    torch = pytest.importorskip(
        "torch", reason="PyTorch is not installed (scripts/install-deps.sh installs it with CODA_PYTHON_TORCH=1)")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    if not hasattr(transformers, model_class):
        pytest.skip("this transformers has no %s" % model_class, allow_module_level=True)
    return torch, transformers
