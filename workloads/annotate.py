"""NVTX convention for the whole suite: one domain, ranges named ``workload/variant/phase``.

Each phase has a fixed colour and a fixed NVTX category so that timelines of
different workloads read the same way in Nsight Systems. With no profiler
attached, ``nvtx`` hands out a disabled domain and every push, pop and mark
returns after one identity check, which is why ranges can stay in timed code.

Three more tools live here:

* :func:`mark`: an instantaneous NVTX event in the suite's domain.
* :func:`annotate_functions` / :func:`unannotate_functions` /
  :func:`annotate_from_environment`: NVTX ranges around third-party functions
  (``"cupy.mean"``, ``"cupy.random.Generator.random"``) without editing them,
  in the domain :data:`THIRDPARTY_DOMAIN`, each range named by the dotted path.
* :func:`name_current_thread`: the OS thread name that Nsight Systems shows
  instead of "Thread 0".

``COOKBOOK_NVTX=0`` in the environment turns the suite's annotation off
entirely, so that its cost can be measured: :func:`phase` returns a shared
no-op context manager, :func:`mark` returns at once and
:func:`annotate_functions` checks its paths but wraps nothing. The variable is
read once, when this module is imported.
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import importlib
import inspect
import os
import sys
import threading
from typing import Callable, Iterable, Sequence

import nvtx

from workloads import settings
from workloads.contract import WorkloadError

DOMAIN = "cookbook"
#: ranges around third-party functions wrapped by :func:`annotate_functions`
THIRDPARTY_DOMAIN = "cookbook.thirdparty"

#: ARGB colours, stable per phase (the analysis reads phases back by name, not colour)
PHASE_COLORS = {
    "setup": 0xFF1F77B4,     # blue
    "warmup": 0xFF7F7F7F,    # grey
    "compute": 0xFF2CA02C,   # green
    "transfer": 0xFFFF7F0E,  # orange
    "check": 0xFF9467BD,     # purple
    "measure": 0xFF8C564B,   # brown: ceiling measurements
}
PHASES = tuple(PHASE_COLORS)

#: NVTX category ids in the suite's domain: one per phase, then one for marks. Fixed numbers so
#: that a filter on a category means the same thing in every capture.
CATEGORIES = {name: i for i, name in enumerate((*PHASES, "mark"), start=1)}
MARK_COLOR = 0xFFD62728      # red: instants stand out against the phase colours
THIRDPARTY_COLOR = 0xFF17BECF  # cyan: other people's code

#: environment variables this module reads
ENV_SWITCH = "COOKBOOK_NVTX"
ENV_FUNCTIONS = "COOKBOOK_NVTX_FUNCTIONS"

#: Linux limits thread names to 16 bytes including the terminating NUL
THREAD_NAME_MAX_BYTES = 15


class AnnotationError(WorkloadError, ValueError):
    """An annotation was asked for something that does not exist or cannot be done.

    A :class:`WorkloadError`, so the workload runner reports it as one line; a ``ValueError``
    because most causes are bad arguments (an unknown phase, a dotted path that names nothing)."""


def _switch_from_environment() -> bool:
    try:
        return settings.flag(ENV_SWITCH)
    except settings.SettingError:
        raise AnnotationError(f"{ENV_SWITCH}={settings.raw(ENV_SWITCH)!r}: use 1 (annotate, the default) "
                              "or 0 (no NVTX)") from None


#: read once: the switch must not cost a dictionary lookup per range
ENABLED: bool = _switch_from_environment()


def range_name(workload: str, variant: str, phase: str) -> str:
    return f"{workload}/{variant}/{phase}"


def parse_range_name(name: str) -> tuple[str, str, str] | None:
    """Inverse of :func:`range_name`; None for ranges that are not the suite's."""
    parts = name.split("/")
    if len(parts) != 3 or parts[2] not in PHASE_COLORS:
        return None
    return parts[0], parts[1], parts[2]


# --- the suite's own ranges and marks -------------------------------------------------------


class _Channel:
    """One NVTX domain as this process uses it, looked up once.

    ``active`` is False when no profiler is attached (nvtx then hands out a disabled domain):
    ranges are skipped before anything is built, which keeps them near free in timed code.
    Event attributes without a payload are built once per message and reused, as nvtx's own
    ``annotate`` does. Tests replace a channel in :data:`_channels` to observe what is pushed."""

    __slots__ = ("domain", "active", "categories", "_attributes")

    def __init__(self, domain, active: bool, categories: dict[str, int]) -> None:
        self.domain = domain
        self.active = active
        self.categories = categories
        self._attributes: dict[tuple, object] = {}

    def attributes(self, message: str, color: int, category: int | None, payload=None):
        if payload is not None:
            return self.domain.get_event_attributes(message, color, category, payload)
        key = (message, color, category)
        attrs = self._attributes.get(key)
        if attrs is None:
            attrs = self._attributes[key] = self.domain.get_event_attributes(message, color, category)
        return attrs


#: domain name -> its channel, made on first use (the profiler, if any, is attached by then)
_channels: dict[str, _Channel] = {}


def _channel(name: str) -> _Channel:
    ch = _channels.get(name)
    if ch is None:
        domain = nvtx.get_domain(name)
        # the disabled stand-in is not an nvtx.Domain; NVTX_DISABLE (nvtx's own switch) is honoured too
        active = nvtx.enabled() and isinstance(domain, nvtx.Domain)
        categories = dict(CATEGORIES) if name == DOMAIN else {}
        if active and name == DOMAIN:
            # nvtx numbers named categories in the order it first sees them: naming them all now,
            # before any range, gives every process the same numbers. Should something have named
            # a category in this domain first, nvtx's numbers win (names stay right).
            for cat in CATEGORIES:
                categories[cat] = domain.get_category_id(cat)
        ch = _channels[name] = _Channel(domain, active, categories)
    return ch


class _Range:
    """One push/pop pair; the cheapest context manager Python offers (no generator frame)."""

    __slots__ = ("_domain", "_attributes")

    def __init__(self, domain, attributes) -> None:
        self._domain = domain
        self._attributes = attributes

    def __enter__(self) -> None:
        self._domain.push_range(self._attributes)

    def __exit__(self, *exc) -> bool:
        self._domain.pop_range()
        return False


#: what :func:`phase` returns when nothing is recorded; nullcontext is reusable and reentrant
_NO_RANGE = contextlib.nullcontext()


def phase(workload: str, variant: str, phase_name: str, payload: int | None = None):
    """A context manager: an NVTX range for one phase of a variant (``payload``: e.g. the call index).

    A no-op when ``COOKBOOK_NVTX=0`` or no profiler is attached; an unknown phase raises
    :class:`AnnotationError` either way."""
    color = PHASE_COLORS.get(phase_name)
    if color is None:
        raise AnnotationError(f"unknown phase {phase_name!r}; phases are {', '.join(PHASES)}")
    if not ENABLED:
        return _NO_RANGE
    ch = _channels.get(DOMAIN) or _channel(DOMAIN)
    if not ch.active:
        return _NO_RANGE
    return _Range(ch.domain, ch.attributes(range_name(workload, variant, phase_name), color,
                                           ch.categories[phase_name], payload))


def mark(message: str, payload: int | float | None = None) -> None:
    """An instantaneous NVTX event in the suite's domain (category ``mark``); nothing when off."""
    if not ENABLED:
        return
    ch = _channels.get(DOMAIN) or _channel(DOMAIN)
    if ch.active:
        ch.domain.mark(ch.attributes(message, MARK_COLOR, ch.categories["mark"], payload))


# --- third-party functions ------------------------------------------------------------------

#: set on every wrapper, so that a wrapper is never wrapped again
_WRAPPER_MARK = "__cookbook_nvtx_path__"


@dataclasses.dataclass(frozen=True)
class Wrapped:
    """One function replaced by :func:`annotate_functions`: enough to put it back."""

    path: str
    owner: object          # the module or class the attribute was replaced on
    attribute: str
    original: object       # the attribute as it was in owner.__dict__ (a staticmethod stays one)
    owned: bool            # False: the attribute was inherited, undoing deletes the override
    wrapper: object


_wrapped: dict[str, Wrapped] = {}
_wrapped_lock = threading.Lock()


def _import_longest_prefix(path: str, parts: list[str]) -> tuple[object, int]:
    """Import the longest importable module prefix of ``parts``; return it and how many parts it used."""
    for n in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:n])
        try:
            return importlib.import_module(name), n
        except ModuleNotFoundError as e:
            # only "this prefix is not a module" means try a shorter one; a module that exists
            # but cannot import one of its own dependencies is an error worth showing
            if e.name is not None and not (name == e.name or name.startswith(e.name + ".")):
                raise AnnotationError(f"{path}: importing {name!r} failed: {e}") from None
            continue
        except Exception as e:  # a module that raises while importing (no GPU, bad build)
            raise AnnotationError(f"{path}: importing {name!r} failed: {type(e).__name__}: {e}") from None
    raise AnnotationError(f"{path}: no importable module in this path (tried {parts[0]!r} and longer prefixes)")


def resolve(path: str) -> tuple[object, str, object]:
    """The owner (module or class), attribute name and current value that ``path`` names.

    ``path`` is ``module.function``, ``package.module.function`` or ``module.Class.method``:
    the longest prefix that imports as a module is imported and the rest is looked up with
    getattr. Raises :class:`AnnotationError` naming the path and what is missing."""
    if not isinstance(path, str):
        raise AnnotationError(f"{path!r}: a dotted path must be a string")
    parts = path.strip().split(".")
    if len(parts) < 2 or not all(p.isidentifier() for p in parts):
        raise AnnotationError(f"{path!r}: not a dotted path to a function (e.g. 'json.dumps', 'pkg.Class.method')")
    owner, n = _import_longest_prefix(path, parts)
    for i in range(n, len(parts) - 1):
        try:
            owner = getattr(owner, parts[i])
        except AttributeError:
            raise AnnotationError(f"{path}: {'.'.join(parts[:i])!r} has no attribute {parts[i]!r}") from None
    name = parts[-1]
    try:
        value = getattr(owner, name)
    except AttributeError:
        raise AnnotationError(f"{path}: {'.'.join(parts[:-1])!r} has no attribute {name!r}") from None
    if inspect.isclass(value):
        raise AnnotationError(f"{path}: is a class; annotate its methods instead (e.g. '{path}.__init__')")
    if not callable(value):
        raise AnnotationError(f"{path}: is a {type(value).__name__}, not a function")
    return owner, name, value


def _make_wrapper(path: str, func: Callable) -> Callable:
    """A function that calls ``func`` inside an NVTX range named ``path``, and looks like it."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        ch = _channels.get(THIRDPARTY_DOMAIN) or _channel(THIRDPARTY_DOMAIN)
        if not ch.active:
            return func(*args, **kwargs)
        ch.domain.push_range(ch.attributes(path, THIRDPARTY_COLOR, None))
        try:
            return func(*args, **kwargs)
        finally:
            # popped even when func raises, or the timeline nests everything after under it
            ch.domain.pop_range()

    setattr(wrapper, _WRAPPER_MARK, path)
    return wrapper


def _wrap_one(path: str) -> Wrapped | None:
    owner, name, value = resolve(path)
    try:
        # the stored attribute, not what getattr hands out: a staticmethod must stay one
        raw = inspect.getattr_static(owner, name)
    except AttributeError:  # made on demand by a module's __getattr__ (lazy attributes)
        raw = value
    # a class may inherit the method: then the wrapper overrides it and undoing deletes that
    owned = not inspect.isclass(owner) or name in vars(owner)
    # staticmethod/classmethod: wrap the function inside and keep the descriptor kind
    kind = type(raw) if isinstance(raw, (staticmethod, classmethod)) else None
    func = raw.__func__ if kind else raw
    if getattr(func, _WRAPPER_MARK, None) is not None:
        return None  # already wrapped, through this path or another name for the same object
    wrapper = _make_wrapper(path, func)
    replacement = kind(wrapper) if kind else wrapper
    try:
        setattr(owner, name, replacement)
    except (TypeError, AttributeError) as e:
        # built-in and extension types (collections.OrderedDict, numpy.random.Generator) are immutable
        raise AnnotationError(f"{path}: cannot replace {name!r} on {owner!r} ({e}); "
                              "annotate a Python-level function that calls it instead") from None
    return Wrapped(path, owner, name, raw, owned, replacement)


def annotate_functions(paths: Iterable[str]) -> list[Wrapped]:
    """Wrap each function named by a dotted path in an NVTX range of :data:`THIRDPARTY_DOMAIN`.

    The range is named by the path (``"cupy.mean"``). The wrapper keeps the original's name,
    docstring and signature (``functools.wraps``). Returns the functions wrapped by this call,
    for :func:`unannotate_functions`; a path already wrapped (here or before) is skipped, so
    wrapping twice wraps once. All paths are resolved before anything is replaced: a bad path
    raises :class:`AnnotationError` and leaves every function as it was.

    Callers that bound the function before this call (``from cupy import mean``) keep the
    original; call this before importing such code, or look functions up through their module.
    With ``COOKBOOK_NVTX=0`` the paths are still checked but nothing is wrapped.
    """
    if isinstance(paths, str):
        raise AnnotationError(f"{paths!r}: pass a list of dotted paths, not one string")
    unique = list(dict.fromkeys(p.strip() if isinstance(p, str) else p for p in paths))
    for p in unique:
        resolve(p)
    if not ENABLED:
        return []
    done: list[Wrapped] = []
    with _wrapped_lock:
        try:
            for p in unique:
                if p in _wrapped:
                    continue
                w = _wrap_one(p)
                if w is not None:
                    _wrapped[p] = w
                    done.append(w)
        except AnnotationError:
            _undo(done)  # all or nothing
            raise
    return done


def _undo(records: Sequence[Wrapped]) -> None:
    for w in reversed(records):
        if w.owned:
            setattr(w.owner, w.attribute, w.original)
        else:
            delattr(w.owner, w.attribute)  # uncovers the inherited attribute again
        _wrapped.pop(w.path, None)


def unannotate_functions(wrapped: Iterable[Wrapped | str] | None = None) -> list[str]:
    """Put back what :func:`annotate_functions` replaced: the given records or paths, or everything.

    Returns the paths restored. A path that was not wrapped raises :class:`AnnotationError`."""
    with _wrapped_lock:
        if wrapped is None:
            records = list(_wrapped.values())
        else:
            records = []
            for item in wrapped:
                path = item.path if isinstance(item, Wrapped) else item
                if path not in _wrapped:
                    raise AnnotationError(f"{path}: not wrapped by annotate_functions, nothing to restore")
                records.append(_wrapped[path])
        _undo(records)
    return [w.path for w in records]


def annotated_paths() -> list[str]:
    """The dotted paths currently wrapped, in the order they were wrapped."""
    return list(_wrapped)


def functions_from_environment(environ: dict | None = None) -> list[str]:
    """The dotted paths listed in ``COOKBOOK_NVTX_FUNCTIONS`` (comma-separated; blanks ignored)."""
    raw = settings.text(ENV_FUNCTIONS, environ)
    return [p.strip() for p in raw.split(",") if p.strip()]


def annotate_from_environment(environ: dict | None = None) -> list[Wrapped]:
    """:func:`annotate_functions` on the paths in ``COOKBOOK_NVTX_FUNCTIONS``; workloads call
    this once at start, before their first GPU call. Nothing to do when the variable is unset."""
    paths = functions_from_environment(environ)
    return annotate_functions(paths) if paths else []


# --- thread names -----------------------------------------------------------------------------


def _truncate_utf8(text: str, max_bytes: int) -> bytes:
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return data
    # cut on a character boundary: a half character would show as garbage
    return data[:max_bytes].decode("utf-8", errors="ignore").encode("utf-8")


@functools.lru_cache(maxsize=1)
def _pthread_functions():
    libc = ctypes.CDLL(None, use_errno=True)  # the running process's C library
    self_ = libc.pthread_self
    self_.restype = ctypes.c_ulong  # pthread_t is an unsigned long on Linux
    self_.argtypes = []
    setname = libc.pthread_setname_np
    setname.restype = ctypes.c_int
    setname.argtypes = [ctypes.c_ulong, ctypes.c_char_p]
    return self_, setname


def name_current_thread(role: str) -> str:
    """Name the calling thread ``role``, for Nsight Systems' timeline and for Python.

    Sets ``threading.current_thread().name`` to ``role`` and, on Linux, the OS thread name
    through ``pthread_setname_np(pthread_self(), name)``: that is what Nsight Systems (and
    ``top -H``, ``/proc/<pid>/task/<tid>/comm``) shows. Linux keeps at most 15 bytes of a
    thread name, so the OS name is ``role`` cut to its first 15 bytes of UTF-8 (on a
    character boundary); the Python name keeps all of it. On other systems only the Python
    name is set. Returns the name the OS got (the Python name elsewhere). Not affected by
    ``COOKBOOK_NVTX``: naming a thread costs nothing per call.
    """
    if not isinstance(role, str) or not role.strip() or "\x00" in role:
        raise AnnotationError(f"thread name {role!r}: needs a non-empty string without NUL characters")
    threading.current_thread().name = role
    if not sys.platform.startswith("linux"):
        return role
    os_name = _truncate_utf8(role, THREAD_NAME_MAX_BYTES)
    self_, setname = _pthread_functions()
    rc = setname(self_(), os_name)
    if rc != 0:  # pthread functions return the error number instead of setting errno
        raise AnnotationError(f"thread name {role!r}: pthread_setname_np failed: {os.strerror(rc)}")
    return os_name.decode("utf-8")
