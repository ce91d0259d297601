import pytest

from testbed.config.units import format_bytes, format_seconds, parse_bytes, parse_seconds


@pytest.mark.parametrize("text,expected", [
    ("64KiB", 65536), ("2GB", 2_000_000_000), ("4096", 4096), (4096, 4096), ("1.5KiB", 1536),
    ("16 MiB", 16 * 2**20), ("1gib", 2**30), ("3k", 3000), ("0", 0),
])
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("bad", ["1XB", "abc", "1.3B", "", True, "KiB"])
def test_parse_bytes_rejects(bad):
    with pytest.raises(ValueError):
        parse_bytes(bad)


@pytest.mark.parametrize("text,expected", [
    ("50ms", 0.05), ("2s", 2.0), (0.1, 0.1), ("250us", 250e-6), ("1min", 60.0), ("3", 3.0), ("10ns", 1e-8),
])
def test_parse_seconds(text, expected):
    assert parse_seconds(text) == pytest.approx(expected)


@pytest.mark.parametrize("bad", ["5 parsecs", "fast", "inf", False])
def test_parse_seconds_rejects(bad):
    with pytest.raises(ValueError):
        parse_seconds(bad)


def test_format():
    assert format_bytes(65536) == "64 KiB"
    assert format_bytes(100) == "100 B"
    assert format_seconds(0.0123) == "12.3 ms"
    assert format_seconds(2.5) == "2.5 s"
