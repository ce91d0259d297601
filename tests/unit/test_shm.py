"""actors.shm: finding the object store's mappings in /proc/<pid>/maps text."""

from actors.shm import object_store_mappings

MAPS = """\
7f8957e00000-7f8957e2b000 r--p 00000000 fe:00 68884   /usr/lib/python3.11/numpy/_multiarray_umath.so
7f895a0bb000-7f898a0bb000 rw-s 00000000 00:1b 290     /dev/shm/plasmaDUQgYe (deleted)
7f89a0000000-7f89a0001000 rw-p 00000000 00:00 0
7f89b0000000-7f89b0100000 rw-p 00000000 00:1b 291     /dev/shm/plasmaPrivate
"""


def test_only_shared_plasma_mappings_are_found():
    assert object_store_mappings(MAPS) == [(0x7f895a0bb000, 0x7f898a0bb000)]


def test_no_store_no_mappings():
    assert object_store_mappings("") == []
