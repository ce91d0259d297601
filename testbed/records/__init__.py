"""What a run leaves behind: timing events, the run folder, summaries derived from events,
the Chrome trace. Imports only ``testbed.config``.
"""
