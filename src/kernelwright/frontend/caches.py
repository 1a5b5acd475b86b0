"""transformers' KV caches as pytree nodes: what a forward with `use_cache=True` takes and
returns (a `DynamicCache`, a `StaticCache`) flattened into tensors and rebuilt.

torch.export, the trace capture and a compiled call flatten a module's arguments and
outputs with torch's pytree; a cache object is none of its known types. `register` makes
`DynamicCache` and `StaticCache` (and their subclasses defined when it runs) pytree nodes:
the tensor attributes of the cache and of each of its layers (a layer's keys and values,
a sliding layer's window tensor, a linear attention layer's (Mamba's) conv and recurrent
states, held in dicts by state index) are the leaves, and the rest of their attributes
(layer classes, `is_initialized`, a sliding or static layer's token count, the device,
a dict's other entries) the node's context, compared by value: a cache of other lengths
is another structure. The
context saves with a plan (`to_dumpable`: JSON, classes by their name in
transformers.cache_utils alone, never imported from a path a file names).

Registering is global to the process: `register` does it once, where transformers is
imported and for a class not registered already (a registration of the user's own
wins, and kernelwright then never treats that class as a cache: `is_cache`). kernelwright
calls it on import and before each capture and compiled call; it is public
(`kernelwright.register_cache_pytrees`) for a process that loads a saved plan with a
cache and imported kernelwright before transformers.
"""

from __future__ import annotations

import json
import sys

import torch
from torch.utils import _pytree as pytree

# the cache classes kernelwright registers (with their subclasses), by name in
# transformers.cache_utils
CACHES = ("DynamicCache", "StaticCache")
_OURS: set[type] = set()  # the classes registered with kernelwright's flatten


def register() -> None:
    """Register kernelwright's flatten for transformers' cache classes (CACHES and their
    subclasses) not registered yet, where transformers has been imported."""
    if "transformers" not in sys.modules:
        return
    from transformers import cache_utils  # imported already: only a lookup

    for name in CACHES:
        base = getattr(cache_utils, name, None)
        for cls in [base, *_subclasses(base)] if base is not None else []:
            if cls in pytree.SUPPORTED_NODES:
                continue
            pytree.register_pytree_node(
                cls, _flatten, _unflatten, serialized_type_name=f"kernelwright.{cls.__name__}",
                to_dumpable_context=_to_dumpable, from_dumpable_context=_from_dumpable,
                flatten_with_keys_fn=_flatten_with_keys)
            _OURS.add(cls)


def is_cache(x) -> bool:
    """Whether `x` is a cache object flattened by kernelwright's registration."""
    return type(x) in _OURS


def _subclasses(cls: type) -> list[type]:
    return [c for s in cls.__subclasses__() for c in (s, *_subclasses(s))]


# An attribute is a tensor (a leaf), a plain value (context) or a dict of them (a linear
# attention layer's conv and recurrent states by index, its flags by index)
_PLAIN = (type(None), bool, int, float, str, torch.device, torch.dtype)


class _Dict(tuple):
    """A dict attribute in a context: its (key, value) pairs in order, a tensor's value
    `LEAF` (the tensor is a leaf, named (attribute, key))."""


LEAF = "kernelwright.leaf"


def _plain(v) -> bool:
    return isinstance(v, _PLAIN) or (isinstance(v, type) and _known(v.__name__) is v)


def _split(obj, skip: tuple[str, ...] = ()) -> tuple[list, tuple, tuple]:
    """An object's tensor attributes (values, names: an attribute's name, or (name, key) for
    a tensor in a dict attribute) and its other attributes as (name, value) pairs (a dict
    as a `_Dict`); an attribute of another kind is a TypeError naming it."""
    tensors, names, plain = [], [], []

    def refuse(k, v):
        raise TypeError(f"kernelwright cannot flatten {type(obj).__name__}.{k} "
                        f"({type(v).__name__}): a cache's attributes must be tensors, "
                        "numbers, strings, devices, cache classes or dicts of them")

    for k, v in vars(obj).items():
        if k in skip:
            continue
        if isinstance(v, torch.Tensor):
            tensors.append(v)
            names.append(k)
        elif _plain(v):
            plain.append((k, v))
        elif type(v) is dict:
            pairs = []
            for key, x in v.items():
                if type(key) not in (int, str):
                    refuse(k, v)
                if isinstance(x, torch.Tensor):
                    tensors.append(x)
                    names.append((k, key))
                    pairs.append((key, LEAF))
                elif _plain(x):
                    pairs.append((key, x))
                else:
                    refuse(k, v)
            plain.append((k, _Dict(pairs)))
        else:
            refuse(k, v)
    return tensors, tuple(names), tuple(plain)


def _flatten(cache) -> tuple[list[torch.Tensor], tuple]:
    """The leaves: the cache's tensors, then each layer's; the context: (class, its
    tensors' names, its other attributes, per layer (class, tensors' names, others))."""
    leaves, names, plain = _split(cache, skip=("layers",))
    layers = []
    for layer in cache.layers:
        tensors, lnames, lplain = _split(layer)
        leaves += tensors
        layers.append((type(layer), lnames, lplain))
    return leaves, (type(cache), names, plain, tuple(layers))


def _flatten_with_keys(cache) -> tuple[list, tuple]:
    """_flatten's leaves, each with its attribute's name (`layers_1_keys`: torch.export
    names the graph's inputs after them)."""
    leaves, context = _flatten(cache)
    _, names, _, layers = context
    keys = [_key(n) for n in names] + [f"layers_{i}_{_key(n)}"
                                      for i, (_, lnames, _) in enumerate(layers) for n in lnames]
    return [(pytree.GetAttrKey(k), v) for k, v in zip(keys, leaves)], context


def _key(name) -> str:
    return name if isinstance(name, str) else f"{name[0]}_{name[1]}"


def _unflatten(leaves, context):
    cls, names, plain, layers = context
    leaves = iter(leaves)

    def build(c, tensor_names, attrs):
        obj = c.__new__(c)
        obj.__dict__.update({k: dict(v) if isinstance(v, _Dict) else v for k, v in attrs})
        for name in tensor_names:
            if isinstance(name, str):
                obj.__dict__[name] = next(leaves)
            else:  # a dict's entry, in its place among the dict's keys
                obj.__dict__[name[0]][name[1]] = next(leaves)
        return obj

    cache = build(cls, names, plain)
    cache.layers = [build(*layer) for layer in layers]
    return cache


def _known(name: str) -> type | None:
    """A cache or cache layer class of transformers.cache_utils by name (None: not one)."""
    from transformers import cache_utils  # a saved plan's context: transformers is needed

    cls = getattr(cache_utils, name, None)
    bases = tuple(getattr(cache_utils, b) for b in ("Cache", "CacheLayerMixin",
                                                    "LinearAttentionCacheLayerMixin")
                  if hasattr(cache_utils, b))
    ok = isinstance(cls, type) and issubclass(cls, bases)
    return cls if ok else None


def _dump(v):
    if isinstance(v, _Dict):
        return {"dict": [[k, _dump(x)] for k, x in v]}
    if isinstance(v, torch.device):
        return {"device": str(v)}
    if isinstance(v, torch.dtype):
        return {"dtype": str(v).replace("torch.", "")}
    if isinstance(v, type):
        return {"class": v.__name__}
    return v


def _load(v):
    if not isinstance(v, dict):
        return v
    if "dict" in v:
        return _Dict((k, _load(x)) for k, x in v["dict"])
    if "device" in v:
        return torch.device(v["device"])
    if "dtype" in v:
        return getattr(torch, v["dtype"])
    cls = _known(v.get("class", ""))
    if cls is None:
        raise ValueError(f"{v!r} names no cache class of transformers.cache_utils")
    return cls


def _to_dumpable(context) -> str:
    cls, names, plain, layers = context

    def part(c, n, p):
        return [c.__name__, list(n), [[k, _dump(v)] for k, v in p]]

    return json.dumps([part(cls, names, plain), [part(*layer) for layer in layers]])


def _from_dumpable(text: str) -> tuple:
    head, layers = json.loads(text)

    def part(c, n, p):
        cls = _known(c)
        if cls is None:
            raise ValueError(f"{c!r} is no cache class of transformers.cache_utils")
        names = tuple(k if isinstance(k, str) else tuple(k) for k in n)
        return cls, names, tuple((str(k), _load(v)) for k, v in p)

    return (*part(*head), tuple(part(*layer) for layer in layers))


def found(tree) -> list:
    """The cache objects (`is_cache`) in a pytree of arguments or outputs, in order."""
    return [x for x in pytree.tree_leaves(tree, is_leaf=is_cache) if is_cache(x)]


def into_given(args, result, written: list):
    """`result` (a compiled call's outputs) with each cache it returns replaced by the
    cache passed in at the same place among `args` (the n-th returned for the n-th given,
    where both hold as many of the same classes), that object updated to hold the
    returned one's keys, values, states and lengths: as eager's update appends to the
    cache it is given and returns it. A tensor of the given cache among `written` (the
    call wrote its new value back into it: a StaticCache's, a Mamba layer's states,
    changed in place) stays that tensor, as eager's does. Else `result` as it is."""
    given, returned = found(args), found(result)
    if not returned or len(given) != len(returned) \
            or any(type(g) is not type(r) for g, r in zip(given, returned)):
        return result
    kept = {id(t) for t in written}

    def take(old, new, skip=()):
        for k, v in vars(new).items():
            mine = vars(old).get(k)
            if k in skip or id(mine) in kept:
                continue
            if type(v) is dict and type(mine) is dict:  # a dict of states: the given dict
                mine.update({key: x for key, x in v.items() if id(mine.get(key)) not in kept})
            else:
                setattr(old, k, v)

    for g, r in zip(given, returned):
        take(g, r, skip=("layers",))
        if len(g.layers) == len(r.layers) and all(
                type(a) is type(b) for a, b in zip(g.layers, r.layers)):
            for a, b in zip(g.layers, r.layers):  # the given layer objects, as eager keeps
                take(a, b)
        else:
            g.layers = r.layers
    swap = {id(r): g for g, r in zip(given, returned)}
    return pytree.tree_map(lambda x: swap.get(id(x), x), result, is_leaf=is_cache)


def is_cache_spec(spec: pytree.TreeSpec) -> bool:
    """Whether a pytree spec's node is a cache flattened by kernelwright's registration."""
    return spec.type in _OURS


def describe(context) -> str:
    """A cache's context in words: its class and each layer's class with its counts (a
    static or sliding layer's `cumulative_length`, ...)."""
    cls, _, _, layers = context
    parts = [f"{lcls.__name__}({', '.join(f'{k}={v}' for k, v in plain if type(v) is int)})"
             for lcls, _, plain in layers]
    return f"{cls.__name__}[{', '.join(parts)}]"
