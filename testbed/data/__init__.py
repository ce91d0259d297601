"""The data set on disk, direct (page-cache-bypassing) reads, and the fio wrapper.
Imports ``testbed.config`` and ``testbed.records``.
"""
