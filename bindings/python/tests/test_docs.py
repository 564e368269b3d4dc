"""The examples in the package's docstrings run and show what they say."""
from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["kvcache", "kvcache._cache", "kvcache._errors", "kvcache._types", "kvcache._block_hash", "kvcache.pool",
           "kvcache.persist", "kvcache.allocator", "kvcache._host_memory"]


@pytest.mark.parametrize("name", MODULES + ["kvcache.transformers"])
def test_docstring_examples(name):
    if name == "kvcache.transformers":
        pytest.importorskip("transformers", reason="SKIPPED: kvcache.transformers needs transformers")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    if name != "kvcache._errors" or result.attempted:
        assert result.attempted > 0
