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


@pytest.mark.parametrize("text, bits", [
    ("10Gbit", 1e10), ("1Gbit", 1e9), ("100Mbit", 1e8), ("100Mbit/s", 1e8), ("100Mbps", 1e8), ("2.5 Gbit/s", 2.5e9),
    ("1Gb/s", 1e9), ("1e9", 1e9), (1e9, 1e9), (100, 100.0), ("125MB/s", 1e9), ("1GiB/s", 8 * 2**30),
])
def test_link_rates_in_bits_per_second(text, bits):
    from testbed.config.units import parse_bits_per_s
    assert parse_bits_per_s(text) == pytest.approx(bits)


@pytest.mark.parametrize("text, needle", [
    ("1GB", "unknown rate unit 'GB'"), ("10Gbyte", "unknown rate unit"), ("0", "positive"), ("-1Gbit", "positive"),
    ("fast", "not a rate"), (True, "not a boolean"),
])
def test_bad_link_rates_are_refused(text, needle):
    from testbed.config.units import parse_bits_per_s
    with pytest.raises(ValueError, match=needle):
        parse_bits_per_s(text)


def test_link_rates_format_with_decimal_prefixes():
    from testbed.config.units import format_bits_per_s
    assert format_bits_per_s(1e10) == "10 Gbit/s" and format_bits_per_s(1e8) == "100 Mbit/s"
