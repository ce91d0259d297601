"""Starting or joining Ray: the one place that calls ``ray.init`` (the CLI, the run, the
calibration, the benchmarks and the tests' fixtures all come through ``ray_session``).

Where a session goes, as Ray's own tools decide it: ``--address`` when given; else
``RAY_ADDRESS`` when it is set (inside ``ray job submit`` Ray sets it to the job's cluster);
else a fresh local instance (``address="local"`` asks for one whatever the environment says).
An address where nothing answers fails fast with a ``UserError`` instead of Ray's long retry
loop.

A local instance is sized for this machine (its cores, a bounded object store) and bound to
the loopback interface: on Linux Ray replaces a loopback ``_node_ip_address`` with the
machine's routable address unless its "local only" switch (the one it uses on macOS and
Windows, ``ray_constants.ENABLE_RAY_CLUSTER``) is off, so the switch is turned off while the
instance starts; the GCS, the raylet, the agents and the workers then listen on 127.0.0.1
only. Token authentication (on by default in Ray 2.60, which says so as it starts) stays on. docs/cluster.md lists the
ports and what stays open where loopback is not possible (a cluster).

Code on every node: when connecting to a cluster, the driver ships its own copy of
the ``testbed`` and ``actors`` packages as the job's runtime environment
(``py_modules``), so nodes where the package is not installed, or is installed at
another version, run exactly the driver's code. Inside ``ray job submit`` the job's
own runtime environment (``--working-dir .``) already does that and is left alone.
The third-party dependencies (numpy, pydantic, ...) must be installed on every node;
Ray's images and ``pip install ddnn-testbed`` both provide them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from typing import Any, Iterator, Optional

from testbed.config.errors import UserError

__all__ = ["ray_session", "resolve_address", "check_address", "runtime_env", "local_init_options",
           "DEFAULT_OBJECT_STORE_BYTES", "LOOPBACK"]

DEFAULT_OBJECT_STORE_BYTES = 512 * 2**20
_MIN_OBJECT_STORE_BYTES = 128 * 2**20
LOOPBACK = "127.0.0.1"
LOCAL = "local"


def resolve_address(address: Optional[str], environ: Optional[dict[str, str]] = None) -> Optional[str]:
    """The cluster a session joins: ``address``; else ``RAY_ADDRESS``; else None (local Ray).
    ``"local"`` always means a fresh local instance."""
    if address == LOCAL:
        return None
    if address:
        return address
    environ = os.environ if environ is None else environ
    env = environ.get("RAY_ADDRESS", "").strip()
    if not env or env == LOCAL:
        return None
    if env.startswith(("http://", "https://")):
        raise UserError(f"RAY_ADDRESS={env!r} is a dashboard address (what `ray job submit` talks to); a driver "
                        f"joins a cluster at HOST:PORT (the head's port, 6379 by default) or 'auto': set "
                        f"RAY_ADDRESS to that, pass --address, or unset RAY_ADDRESS to run on local Ray")
    return env


def _source(address: str, environ: Optional[dict[str, str]] = None) -> tuple[str, str]:
    """(what named the address, how to run locally instead), for the error lines."""
    environ = os.environ if environ is None else environ
    if environ.get("RAY_ADDRESS", "").strip() == address:
        return "RAY_ADDRESS", "unset RAY_ADDRESS"
    return "--address", "leave out --address"


def check_address(address: str, timeout_s: float = 3.0) -> None:
    """Fail fast when nothing listens at ``host:port`` (``auto`` and ``ray://`` are left to Ray)."""
    if address == "auto" or "://" in address:
        return
    named, local = _source(address)
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise UserError(f"{named} {address!r}: expected HOST:PORT (e.g. 10.0.0.1:6379) or 'auto'")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as err:
        raise UserError(
            f"no Ray cluster answers at {address} ({err.strerror or err}); start one with `ray start --head` "
            f"on that host, or {local} to run on local Ray") from None


def runtime_env(environ: Optional[dict[str, str]] = None) -> Optional[dict]:
    """The runtime environment a cluster driver asks for: the local packages, unless the
    process is the entrypoint of ``ray job submit`` (whose runtime env then applies)."""
    environ = os.environ if environ is None else environ
    if environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR"):  # set by Ray's job supervisor for the entrypoint
        return None
    import actors
    import testbed
    return {"py_modules": [testbed, actors], "excludes": ["__pycache__", "*.pyc"]}


def _join_error(address: str, err: Exception, environ: Optional[dict[str, str]] = None) -> UserError:
    """The one line for a cluster that was reached (``check_address`` passed) but not joined.
    The usual cause with Ray 2.60: a cluster started by ``ray start`` checks a token, and a
    driver sends it only with ``RAY_AUTH_MODE=token``; Ray then reports a failed connection."""
    environ = os.environ if environ is None else environ
    if environ.get("RAY_AUTH_MODE", "").strip().lower() != "token" and address != "auto" and "://" not in address:
        return UserError(f"Ray at {address} did not let this driver join ({err}); a cluster started with `ray start` "
                         f"checks a token: export RAY_AUTH_MODE=token (the token is read from ~/.ray/auth_token, or "
                         f"RAY_AUTH_TOKEN) and run again")
    _, local = _source(address, environ)
    return UserError(f"no Ray cluster answers at {address!r} ({err}); start one with `ray start --head`, "
                     f"or {local} to run on local Ray")


def local_init_options(num_cpus: Optional[int] = None, object_store_bytes: Optional[int] = None) -> dict[str, Any]:
    """``ray.init`` arguments for a fresh local instance: a new one (``address="local"``: a
    bare ``ray.init()`` would silently attach to a cluster someone started on this machine),
    the machine's cores, a bounded object store, no dashboard (Ray still starts its minimal
    API server and the per-node agents: ray.init has no switch for them), on loopback."""
    store = max(_MIN_OBJECT_STORE_BYTES, object_store_bytes or DEFAULT_OBJECT_STORE_BYTES)
    return dict(address=LOCAL, num_cpus=num_cpus or os.cpu_count() or 1, object_store_memory=store,
                include_dashboard=False, _node_ip_address=LOOPBACK)


@contextlib.contextmanager
def _loopback_allowed() -> Iterator[None]:
    """Let Ray keep a loopback node address while a local instance starts (see the module
    docstring); without the switch (another Ray version) the instance starts on the routable
    address, as Ray's default is."""
    from ray._private import ray_constants
    if not hasattr(ray_constants, "ENABLE_RAY_CLUSTER"):
        yield
        return
    old = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = old


@contextlib.contextmanager
def ray_session(address: Optional[str] = None, *, num_cpus: Optional[int] = None,
                object_store_bytes: Optional[int] = None, fresh: bool = False, ship_code: Optional[bool] = None,
                logging_level: int = logging.WARNING) -> Iterator[Any]:
    """Use Ray for the body and yield the ``ray`` module.

    An already initialised Ray is reused (a test's module-wide instance), unless ``fresh``
    (a benchmark figure, a test module: shut it down and start anew). Otherwise: join the
    cluster ``resolve_address`` names, or start a local instance with ``num_cpus`` cores and
    an object store of ``object_store_bytes`` (``local_init_options``). ``ship_code``: send
    the local packages with a cluster session (default: yes, except inside ``ray job submit``).
    A session this call started is shut down at the end."""
    import ray

    if ray.is_initialized():
        if not fresh:
            yield ray
            return
        ray.shutdown()
    target = resolve_address(address)
    common = dict(log_to_driver=False, logging_level=logging_level, configure_logging=True)
    if target:
        check_address(target)
        env = runtime_env() if ship_code is None or ship_code else None
        try:
            ray.init(address=target, runtime_env=env, **common)
        except ConnectionError as err:
            raise _join_error(target, err) from None
    else:
        with _loopback_allowed():
            ray.init(**local_init_options(num_cpus, object_store_bytes), **common)
    try:
        yield ray
    finally:
        ray.shutdown()
