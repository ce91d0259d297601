"""The Ray actors: parameter-server shards, workers, the I/O gate, the node monitor.

Each module holds a plain class that tests drive without Ray and a thin wrapper
that ``testbed.runner.run`` makes remote with ``ray.remote`` when it launches a config.
No module here imports Ray at import time.
"""
