"""The HTTP libraries the transports run on: httpx, and httpx2 (openai 3.x's own).

httpx2/httpcore2 are a fork of httpx/httpcore with the same transport API
and the same shapes, but classes of their own: an httpx2 client asserts that
a response body is an ``httpx2.SyncByteStream``, and maps only httpcore2's
exceptions. A ``Flavor`` names one library's modules and the few things that
differ; the shells look every library name up through it, so the logic
exists once. The pure parts (scanner, watchdog, guard) never see a flavor.

The flavors themselves live in ``_flavors`` (one module per library), which
also knows how to find them; httpx2 is optional and imported only when its
flavor is asked for.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal, TypeVar

from .errors import StreamStalled

__all__ = [
    "FLAVOR_NAMES",
    "Flavor",
    "FlavorName",
    "concrete",
    "import_helpers",
    "library_of",
    "runs_on",
]

FlavorName = Literal["httpx", "httpx2"]
FLAVOR_NAMES: tuple[FlavorName, ...] = ("httpx", "httpx2")
_T = TypeVar("_T")


@dataclass(frozen=True, eq=False)
class Flavor:
    """One HTTP library: its modules and the classes that differ between libraries.

    ``http`` is the httpx-like module (``httpx`` or ``httpx2``), ``core`` the
    httpcore-like one. ``stalled`` is the ``StreamStalled`` raised on this
    flavor: a subclass of its ``ReadTimeout`` and ``RemoteProtocolError``.
    ``sync_stream`` is the core's own sync network stream class, which the
    guarded connect and TLS handshake build (``None``: not found, so those
    two are left to the core). ``environment_proxies`` reads proxy variables
    as the library itself would (``None``: not found).
    """

    name: FlavorName
    http: Any
    core: Any
    stalled: type[StreamStalled]
    sync_stream: type[Any] | None
    environment_proxies: Callable[[], Mapping[str, str | None]] | None

    @classmethod
    def of(
        cls, name: FlavorName, http: ModuleType, core: ModuleType, stalled: type[StreamStalled]
    ) -> Flavor:
        """A flavor from its two modules, with the private helpers looked up leniently."""
        sync_backends = getattr(getattr(core, "_backends", None), "sync", None)
        http_utils = getattr(http, "_utils", None)
        return cls(
            name=name,
            http=http,
            core=core,
            stalled=stalled,
            sync_stream=getattr(sync_backends, "SyncStream", None),
            environment_proxies=getattr(http_utils, "get_environment_proxies", None),
        )

    def __repr__(self) -> str:
        return f"<Flavor {self.name}>"


def import_helpers(*modules: str) -> None:
    """Import the private submodules ``Flavor.of`` looks in (the packages do not import
    them); one that another release moved is simply not found there."""
    for module in modules:
        with contextlib.suppress(ImportError):
            importlib.import_module(module)


def library_of(transport: object) -> FlavorName | None:
    """Which HTTP library's transport ``transport`` is, if it is one of theirs.

    Told by the libraries' own classes, looked up under each library's real
    name: under ``httpx2.alias_httpx()`` the module imported as ``httpx`` is
    httpx2 itself (and class ``__module__`` names cannot be trusted: openai
    3.x rewrites httpx2's).
    """
    for name in FLAVOR_NAMES:
        module = sys.modules.get(name)  # a library never imported made no transport
        if module is None or module.__name__ != name:  # an alias of the other one
            continue
        if isinstance(transport, _transport_classes(module)):
            return name
    return None


def runs_on(transport: object, flavor: Flavor) -> bool:
    """Whether ``transport`` is a transport of ``flavor``'s own library (sync or async)."""
    return isinstance(transport, _transport_classes(flavor.http))


def _transport_classes(http: Any) -> tuple[type, ...]:
    """The library's transport base classes, as its module holds them now: only classes,
    since a caller's test may have patched one with a mock (google-genai's own tests do)."""
    found = (getattr(http, "BaseTransport", None), getattr(http, "AsyncBaseTransport", None))
    return tuple(cls for cls in found if isinstance(cls, type))


@functools.cache
def concrete(mixin: type[_T], base: type[Any]) -> type[_T]:
    """``mixin`` also made a ``base``: a flavor's own class that its client checks for."""
    attrs = {"__module__": mixin.__module__, "__qualname__": mixin.__qualname__, "__slots__": ()}
    return type(mixin.__name__, (mixin, base), attrs)
