"""What an experiment is: the spec and its units, faults and the one user-error class.

The lowest layer: imports nothing else of the testbed. Import the modules themselves
(``testbed.config.spec``); this package imports nothing, so that the model can use
``testbed.config.errors`` without pulling in pydantic.
"""
