"""Measuring the hardware profile the model is fed: actor calls, transfers, the apply,
per-call CPU, start-up, FLOPs, the disk (reader and fio).
"""
