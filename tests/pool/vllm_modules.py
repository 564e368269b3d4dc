"""vLLM's own event classes and block-hash functions, from the wheel scripts/setup.sh installs
(--no-deps) into .venv-vllm/<release>/ (release: scripts/vllm-release.txt), without torch.

Importing vllm.distributed.kv_events or vllm.v1.core.kv_cache_utils the normal way runs vllm/__init__.py and
vllm/config, which need torch and most of vLLM's dependencies. So:

- kv_events.py is executed from the wheel as it is, with three of its imports stood in for, because only the
  publisher (ZMQ sockets, its config) uses them: vllm.config.kv_events.KVEventsConfig,
  vllm.utils.network_utils (socket helpers) and vllm.v1.core.kv_cache_utils.ExternalBlockHash, which is
  `bytes | int` as in vLLM's source (checked below against the wheel's text). msgspec, zmq and vllm.logger are
  the real ones.
- the block-hash functions (hash_block_tokens, generate_block_hash_extra_keys and its helpers,
  init_none_hash, get_request_block_hasher) are vLLM's function definitions, taken from the wheel's
  kv_cache_utils.py by name and executed unchanged in a namespace holding what they use: vllm.utils.hashing
  (the real module: sha256_cbor), vLLM's own get_mm_features_in_window and token_slice (taken the same way),
  and os, hashlib, the logger.

`available()` says whether the folder is there; `skip_reason()` why not.
"""
import ast
import os
import sys
import types

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def release():
    with open(os.path.join(REPO, "scripts", "vllm-release.txt")) as f:
        return f.read().strip()


def folder():
    return os.path.join(REPO, ".venv-vllm", release())


def available():
    return os.path.isfile(os.path.join(folder(), "vllm", "distributed", "kv_events.py"))


def skip_reason():
    return "vLLM %s is not installed in %s (scripts/setup.sh installs it: install_vllm_wheel)" % (release(), folder())


_cache = {}


def _package_stub():
    """`vllm` as a bare package over the wheel's folder, so its light submodules import without vllm/__init__."""
    if folder() not in sys.path:
        sys.path.append(folder())  # last: it never shadows what the environment itself has
    if "vllm" not in sys.modules or getattr(sys.modules["vllm"], "__kvcache_stub__", False):
        pkg = types.ModuleType("vllm")
        pkg.__path__ = [os.path.join(folder(), "vllm")]
        pkg.__kvcache_stub__ = True
        sys.modules["vllm"] = pkg


def _stand_in(name, **attrs):
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod


def _source(relpath):
    path = os.path.join(folder(), "vllm", relpath)
    with open(path) as f:
        return path, f.read()


def kv_events():
    """vllm.distributed.kv_events, executed from the wheel."""
    if "kv_events" in _cache:
        return _cache["kv_events"]
    _package_stub()
    _, utils_src = _source("v1/core/kv_cache_utils.py")
    if "ExternalBlockHash: TypeAlias = bytes | int" not in utils_src:
        raise RuntimeError("vLLM's ExternalBlockHash is no longer `bytes | int`; update tests/pool/vllm_modules.py")

    def unused(*_a, **_k):
        raise RuntimeError("the publisher's socket helpers are not loaded")

    saved = {k: sys.modules.get(k) for k in ("vllm.config", "vllm.config.kv_events", "vllm.utils.network_utils",
                                             "vllm.v1", "vllm.v1.core", "vllm.v1.core.kv_cache_utils")}
    _stand_in("vllm.config")
    _stand_in("vllm.config.kv_events", KVEventsConfig=object)
    _stand_in("vllm.utils.network_utils", get_ip=unused, get_tcp_uri=unused, is_valid_ipv6_address=unused,
              split_zmq_path=unused)
    _stand_in("vllm.v1")
    _stand_in("vllm.v1.core")
    _stand_in("vllm.v1.core.kv_cache_utils", ExternalBlockHash=bytes | int)
    try:
        path, src = _source("distributed/kv_events.py")
        mod = types.ModuleType("vllm.distributed.kv_events")
        mod.__file__ = path
        sys.modules[mod.__name__] = mod  # msgspec resolves the classes' annotations through it
        exec(compile(src, path, "exec"), mod.__dict__)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    _cache["kv_events"] = mod
    return mod


def _definitions(relpath, names, namespace):
    """Executes the top-level definitions `names` of a wheel file, unchanged, in `namespace`."""
    path, src = _source(relpath)
    tree = ast.parse(src, path)
    found = {}
    for node in tree.body:
        name = getattr(node, "name", None)
        if name is None and isinstance(node, (ast.Assign, ast.AnnAssign)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            name = getattr(target, "id", None)
        if name in names:
            found[name] = node
    missing = set(names) - set(found)
    if missing:
        raise RuntimeError("%s has no %s; update tests/pool/vllm_modules.py" % (path, ", ".join(sorted(missing))))
    module = ast.Module(body=[found[n] for n in names], type_ignores=[])
    exec(compile(module, path, "exec"), namespace)


def hashing():
    """A namespace with vLLM's block-hash functions and vllm.utils.hashing's algorithms."""
    if "hashing" in _cache:
        return _cache["hashing"]
    _package_stub()
    import bisect
    import hashlib
    import logging
    import typing
    from collections.abc import Callable, Iterable, Sequence

    import vllm.utils.hashing as vh

    ns = {"__name__": "vllm_block_hash", "os": os, "hashlib": hashlib, "bisect": bisect,
          "logger": logging.getLogger("vllm_block_hash"), "xxhash": vh.xxhash, "xxhash_cbor": vh.xxhash_cbor,
          "Any": typing.Any, "NewType": typing.NewType, "Callable": Callable, "Iterable": Iterable,
          "Sequence": Sequence, "Request": object, "MultiModalFeatureSpec": object, "TYPE_CHECKING": False,
          "tensor_data": None, "envs": None, "array": __import__("array").array}
    _definitions("multimodal/utils.py", ["get_mm_features_in_window"], ns)
    _definitions("v1/token_buffer.py", ["token_slice"], ns)
    _definitions("v1/core/kv_cache_utils.py",
                 ["BlockHash", "DEFAULT_NONE_HASH_SEED", "_NON_CRYPTO_HASH_FUNCTIONS", "resolve_none_hash_seed",
                  "init_none_hash", "_gen_mm_extra_hash_keys", "_gen_lora_extra_hash_keys",
                  "_gen_prompt_embeds_extra_hash_keys", "generate_block_hash_extra_keys", "hash_block_tokens",
                  "get_request_block_hasher"], ns)
    ns["sha256_cbor"] = vh.sha256_cbor
    ns["get_hash_fn_by_name"] = vh.get_hash_fn_by_name
    _cache["hashing"] = ns
    return ns


def init_none_hash(ns, seed=""):
    """vLLM's init_none_hash with sha256_cbor as a process whose PYTHONHASHSEED is `seed` (empty: unset) runs it;
    the environment is restored afterwards."""
    saved = os.environ.get("PYTHONHASHSEED")
    if seed:
        os.environ["PYTHONHASHSEED"] = seed
    else:
        os.environ.pop("PYTHONHASHSEED", None)
    try:
        ns["init_none_hash"](ns["sha256_cbor"])
    finally:
        if saved is None:
            os.environ.pop("PYTHONHASHSEED", None)
        else:
            os.environ["PYTHONHASHSEED"] = saved
    return ns["NONE_HASH"]


def request(tokens, cache_salt=None, lora=None, items=()):
    """The attributes of vllm.v1.request.Request that the block hasher reads: `lora` a (name, path) pair, `items`
    (offset, length, identifier) triples, all text."""
    r = types.SimpleNamespace()
    r.block_hashes = []
    r.all_token_ids = list(tokens)
    r._all_token_ids = list(tokens)
    r.num_tokens = len(r.all_token_ids)
    r.cache_salt = cache_salt or None
    r.lora_request = types.SimpleNamespace(lora_name=lora[0], lora_path=lora[1]) if lora else None
    r.mm_features = [types.SimpleNamespace(identifier=i, mm_position=types.SimpleNamespace(offset=o, length=n))
                     for o, n, i in items]
    r.prompt_embeds = None
    r._prompt_embeds_per_block_hashes = {}
    return r


def block_hashes(ns, block_size, tokens, **keys):
    """vLLM's block hashes (get_request_block_hasher with sha256_cbor) of a request of `tokens` with `keys`
    (request()'s), under the NONE_HASH init_none_hash set last."""
    return ns["get_request_block_hasher"](block_size, ns["sha256_cbor"])(request(tokens, **keys))
