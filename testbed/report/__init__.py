"""A run folder's report: sections that return content (``sections``, ``comparison``), plots
that return figures (``plots``), one markdown renderer (``markdown``), the profile's rows
(``profile_rows``, also printed by ``testbed calibrate``), and one writer that puts them on
disk (``writer.write_report``).
"""
