"""Parsing and formatting of sizes (``64KiB``, ``2GB``), durations (``50ms``) and link
rates (``10Gbit``).

Pure functions; used by the spec validators and by the reports.
"""

from __future__ import annotations

import math
import re

__all__ = ["parse_bytes", "parse_seconds", "parse_bits_per_s", "format_bytes", "format_seconds", "format_bits_per_s",
           "not_a_boolean"]

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000, "kb": 1000, "ki": 1024, "kib": 1024,
    "m": 1000**2, "mb": 1000**2, "mi": 1024**2, "mib": 1024**2,
    "g": 1000**3, "gb": 1000**3, "gi": 1024**3, "gib": 1024**3,
    "t": 1000**4, "tb": 1000**4, "ti": 1024**4, "tib": 1024**4,
}
_TIME_UNITS = {
    "": 1.0, "s": 1.0, "sec": 1.0,
    "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9,
    "m": 60.0, "min": 60.0, "h": 3600.0,
}
# Link rates are decimal, as network vendors state them (1 Gbit/s = 10**9 bits a second).
_RATE_PREFIXES = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_NUMBER = re.compile(r"^\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-zµ]*)\s*$")
_RATE = re.compile(r"^\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z/]*)\s*$")


def _split(text: str) -> tuple[float, str]:
    match = _NUMBER.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a number with an optional unit")
    return float(match.group(1)), match.group(2)


def not_a_boolean(value: object) -> object:
    """Refuse a boolean where a number belongs: YAML reads yes/no/true/false as booleans, and
    pydantic would take those for 1 and 0 (``workers: true``)."""
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    return value


def parse_bytes(value: int | float | str) -> int:
    """``64KiB`` -> 65536, ``2GB`` -> 2_000_000_000, ``4096`` -> 4096.

    Binary (KiB, MiB, GiB, TiB) and decimal (KB, MB, GB, TB) units, case-insensitive.
    The result must be a whole number of bytes.
    """
    if isinstance(value, bool):
        raise ValueError("a size must be a number of bytes or a string like '64KiB', not a boolean")
    if isinstance(value, (int, float)):
        number, unit = float(value), ""
    else:
        number, unit = _split(str(value))
    factor = _SIZE_UNITS.get(unit.lower())
    if factor is None:
        allowed = "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"
        raise ValueError(f"unknown size unit {unit!r} in {value!r}; use one of {allowed}")
    total = number * factor
    if not math.isfinite(total) or total != int(total):
        raise ValueError(f"{value!r} is not a whole number of bytes")
    return int(total)


def parse_seconds(value: int | float | str) -> float:
    """``50ms`` -> 0.05, ``2s`` -> 2.0, ``0.1`` -> 0.1 (plain numbers are seconds)."""
    if isinstance(value, bool):
        raise ValueError("a duration must be a number of seconds or a string like '50ms', not a boolean")
    if isinstance(value, (int, float)):
        number, unit = float(value), ""
    else:
        number, unit = _split(str(value))
    factor = _TIME_UNITS.get(unit.lower() if unit != "µs" else unit)
    if factor is None:
        raise ValueError(f"unknown time unit {unit!r} in {value!r}; use one of ns, us, ms, s, min, h")
    total = number * factor
    if not math.isfinite(total):
        raise ValueError(f"{value!r} is not a finite duration")
    return total


def parse_bits_per_s(value: int | float | str) -> float:
    """A link's rate in bits a second: ``10Gbit`` -> 1e10, ``100Mbit/s`` and ``100Mbps`` -> 1e8,
    ``1e9`` -> 1e9 (plain numbers are bits a second). A rate in bytes needs ``/s``
    (``125MB/s`` -> 1e9, ``1GiB/s`` -> 8 * 2**30), so ``1GB`` (a size) is refused."""
    if isinstance(value, bool):
        raise ValueError("a link rate must be a number of bits a second or a string like '10Gbit', not a boolean")
    if isinstance(value, (int, float)):
        total = float(value)
    else:
        match = _RATE.match(str(value))
        if not match:
            raise ValueError(f"{value!r} is not a rate such as '10Gbit', '100Mbit/s' or '125MB/s'")
        number, unit = float(match.group(1)), match.group(2)
        total = number * _rate_factor(unit, value)
    if not math.isfinite(total) or total <= 0:
        raise ValueError(f"{value!r}: a link rate must be a positive, finite number of bits a second")
    return total


def _rate_factor(unit: str, value: object) -> float:
    low = unit.lower()
    for suffix in ("bit/s", "bits/s", "bit", "bits", "bps", "b/s"):
        # 'b/s' alone is bits; a capital B before '/s' is bytes (handled below).
        if low.endswith(suffix) and not (suffix == "b/s" and unit[-3] == "B"):
            prefix = low[: -len(suffix)]
            if prefix in _RATE_PREFIXES:
                return _RATE_PREFIXES[prefix]
    if unit.endswith("/s") and unit[:-2] and unit[:-2].lower() in _SIZE_UNITS:
        return 8.0 * _SIZE_UNITS[unit[:-2].lower()]
    if unit == "":
        return 1.0
    raise ValueError(f"unknown rate unit {unit!r} in {value!r}; use bits a second (bit, Kbit, Mbit, Gbit, Tbit, "
                     f"with or without '/s', or bps, Mbps, Gbps) or bytes a second (MB/s, GiB/s)")


def format_bits_per_s(bits_per_s: float) -> str:
    """1e10 -> '10 Gbit/s'; decimal prefixes, at most three significant digits."""
    for prefix, factor in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(bits_per_s) >= factor:
            return f"{bits_per_s / factor:.3g} {prefix}bit/s"
    return f"{bits_per_s:.3g} bit/s"


def format_bytes(n: float) -> str:
    """65536 -> '64 KiB'; binary units, at most three significant digits."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def format_seconds(s: float) -> str:
    """0.0123 -> '12.3 ms'."""
    if s != s:  # NaN
        return "nan"
    a = abs(s)
    if a >= 1 or a == 0:
        return f"{s:.3g} s"
    if a >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    if a >= 1e-6:
        return f"{s * 1e6:.3g} us"
    return f"{s * 1e9:.3g} ns"
