"""What the emulated actors compute: a worker's per step (compute: sleep, spin, matmul;
gradients; initial parameters) and a shard's update kernel (``apply``). Plain numpy;
imports only ``testbed.config``.
"""
