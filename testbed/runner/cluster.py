"""Connecting to Ray: a local instance sized for this machine, or an existing cluster.

The only module besides ``testbed.runner.run`` that calls ``ray.init``. An address where
nothing answers fails fast with a ``UserError`` instead of Ray's long retry loop.

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
from typing import Iterator, Optional

from testbed.config.errors import UserError

__all__ = ["ray_session", "check_address", "runtime_env", "DEFAULT_OBJECT_STORE_BYTES"]

DEFAULT_OBJECT_STORE_BYTES = 512 * 2**20
_MIN_OBJECT_STORE_BYTES = 128 * 2**20


def check_address(address: str, timeout_s: float = 3.0) -> None:
    """Fail fast when nothing listens at ``host:port`` (``auto`` and ``ray://`` are left to Ray)."""
    if address == "auto" or "://" in address:
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise UserError(f"--address {address!r}: expected HOST:PORT (e.g. 10.0.0.1:6379) or 'auto'")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as err:
        raise UserError(
            f"no Ray cluster answers at {address} ({err.strerror or err}); start one with `ray start --head` "
            f"on that host, or leave out --address to run on local Ray") from None


def runtime_env(environ: Optional[dict[str, str]] = None) -> Optional[dict]:
    """The runtime environment a cluster driver asks for: the local packages, unless the
    process is the entrypoint of ``ray job submit`` (whose runtime env then applies)."""
    environ = os.environ if environ is None else environ
    if environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR"):  # set by Ray's job supervisor for the entrypoint
        return None
    import actors
    import testbed
    return {"py_modules": [testbed, actors], "excludes": ["__pycache__", "*.pyc"]}


@contextlib.contextmanager
def ray_session(address: Optional[str] = None, *, num_cpus: Optional[int] = None,
                object_store_bytes: Optional[int] = None) -> Iterator[None]:
    """Use Ray for the body: reuse an already initialised Ray (tests), connect to ``address``,
    or start a local instance with the machine's cores and a bounded object store."""
    import ray

    if ray.is_initialized():
        yield
        return
    kwargs = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING,
                  configure_logging=True)
    if address:
        check_address(address)
        try:
            ray.init(address=address, runtime_env=runtime_env(), **kwargs)
        except ConnectionError as err:
            raise UserError(f"no Ray cluster answers at {address!r} ({err}); start one with `ray start --head`, "
                            f"or leave out --address to run on local Ray") from None
    else:
        store = max(_MIN_OBJECT_STORE_BYTES, object_store_bytes or DEFAULT_OBJECT_STORE_BYTES)
        # address="local" always starts a new instance: a bare ray.init() would silently attach
        # to a cluster someone started on this machine with `ray start`.
        ray.init(address="local", num_cpus=num_cpus or os.cpu_count() or 1, object_store_memory=store, **kwargs)
    try:
        yield
    finally:
        ray.shutdown()
