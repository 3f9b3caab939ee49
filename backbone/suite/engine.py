"""Where the work runs: this process ("local", the default) or a Ray cluster ("ray").

One switch for every application: a Python argument `engine="ray"` and a CLI flag `--ray [ADDRESS]`.
Local execution never imports ray. With `engine="ray"` the work runs on the Ray instance this process
is already connected to, else on the one `RAY_ADDRESS` names, else on a local instance started for
the call (and stopped after it). An address that does not answer is a named error within seconds,
not a hang.

Install with `pip install "frozenvit[ray]"`.
"""
from __future__ import annotations

import argparse
import contextlib
import contextvars
import os
import socket
from typing import Any, Iterator

from .cli import number
from .errors import FrozenVitError, UsageError

ENGINES = ("local", "ray")
CONNECT_TIMEOUT_S = 5.0


class EngineUnavailable(FrozenVitError, ImportError):
    """engine="ray" was asked for and ray is not installed."""


class ClusterUnreachable(FrozenVitError, ConnectionError):
    """The Ray address given (argument, --ray or RAY_ADDRESS) does not answer."""


def check_engine(engine: Any) -> str:
    """`engine` checked: "local" or "ray" (UsageError otherwise)."""
    if engine not in ENGINES:
        raise UsageError(f"engine must be one of {ENGINES}, got {engine!r}")
    return engine


_ENGINE: contextvars.ContextVar[tuple[str, int | None]] = contextvars.ContextVar("frozenvit_engine",
                                                                                  default=("local", None))


@contextlib.contextmanager
def use_engine(engine: str, workers: int | None = None) -> Iterator[None]:
    """Within the block, `current_engine()` is (engine, workers). A job that fans out deep inside (e.g. the
    per-series fits of a backtest's statistical models) reads it there, so the engine, a setting of where
    work runs rather than of what is computed, need not travel through every model's signature."""
    token = _ENGINE.set((check_engine(engine), workers))
    try:
        yield
    finally:
        _ENGINE.reset(token)


def current_engine() -> tuple[str, int | None]:
    """(engine, workers) set by the innermost `use_engine`, else ("local", None)."""
    return _ENGINE.get()


def import_ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise EngineUnavailable(f"engine='ray' needs the ray package ({e}); install it with "
                                "`pip install \"frozenvit[ray]\"`, or leave engine='local'") from e
    return ray


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a GCS or client address ('HOST:PORT', 'ray://HOST:PORT'); None for 'auto'/'local'."""
    a = address.split("://", 1)[-1].strip().rstrip("/")
    if a in ("", "auto", "local") or ":" not in a:
        return None
    host, _, port = a.rpartition(":")
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        return None


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Raise ClusterUnreachable unless a TCP connection to `address` opens within `timeout` seconds."""
    hp = _host_port(address)
    if hp is None:
        return
    try:
        with socket.create_connection(hp, timeout=timeout):
            pass
    except OSError as e:
        raise ClusterUnreachable(f"no Ray cluster answers at {address} ({e}); start one (`ray start --head`), "
                                 "fix the address (--ray ADDRESS or RAY_ADDRESS), or run without --ray") from None


@contextlib.contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None) -> Iterator[Any]:
    """The ray module, connected: the instance already initialised, else `address` / RAY_ADDRESS, else a
    local instance with `num_cpus` CPUs started here and shut down on exit."""
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        check_reachable(address)
    kwargs: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
    if address:
        kwargs["address"] = address
    else:
        kwargs["num_cpus"] = num_cpus or os.cpu_count() or 1
    try:
        ray.init(**kwargs)
    except ConnectionError as e:
        raise ClusterUnreachable(f"could not join the Ray cluster at {address}: {e}; check the address or run "
                                 "without --ray") from None
    try:
        yield ray
    finally:
        ray.shutdown()


def cluster_cpus(ray: Any) -> int:
    """CPUs the connected Ray cluster offers (at least 1)."""
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def add_engine_args(parser: argparse.ArgumentParser) -> None:
    """--ray [ADDRESS] and --workers N."""
    parser.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                        help="run on Ray (pip install \"frozenvit[ray]\"): on the cluster at ADDRESS, else at "
                             "RAY_ADDRESS, else on a local instance started with --workers CPUs")
    parser.add_argument("--workers", type=number(int, min=1), default=None,
                        help="Ray workers (actors or tasks in flight) with --ray; when not given: one per CPU of "
                             "the cluster")


def engine_from_args(args: argparse.Namespace) -> str:
    """'ray' when --ray was given, else 'local'; --workers without --ray is refused."""
    if getattr(args, "ray", None) is None:
        if getattr(args, "workers", None) is not None:
            raise UsageError("--workers counts Ray workers: add --ray [ADDRESS], or drop --workers")
        return "local"
    return "ray"


@contextlib.contextmanager
def engine_session(args: argparse.Namespace) -> Iterator[str]:
    """For a command: yields the engine name, with Ray connected for the command's duration when --ray."""
    engine = engine_from_args(args)
    if engine == "local":
        yield engine
        return
    with ray_session(args.ray or None, num_cpus=args.workers):
        yield engine
