"""What a worker emulates per step: compute (sleep, spin, matmul), gradients, initial
parameters. Plain numpy; imports only ``testbed.config``.
"""
