"""Running an experiment on Ray: sessions, placement, nodes, the resource guard, deadlines
and the run itself. Imports the layers below and ``actors``.
"""
